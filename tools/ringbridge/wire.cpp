// wire.cpp — sample filling and checking (see wire.hpp).
#include "wire.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>

#include "ipcring/frame.hpp"

namespace ipcring::bridge {

static_assert(ipcring_bridge_kMaxMetadataBytes == kMaxMetadataBytes,
              "the wire type carries as much metadata as a frame can");
static_assert(ipcring_bridge_kMaxDims == kMaxTensorDims,
              "the wire type carries as many dimensions as a tensor description");

const char* to_string(Verdict v) noexcept {
  switch (v) {
    case Verdict::ok:
      return "ok";
    case Verdict::too_large:
      return "too_large";
    case Verdict::bad_metadata:
      return "bad_metadata";
    case Verdict::bad_tensor:
      return "bad_tensor";
    case Verdict::bad_shape:
      return "bad_shape";
    case Verdict::not_image:
      return "not_image";
    case Verdict::bad_encoding:
      return "bad_encoding";
  }
  return "unknown";
}

std::optional<std::uint32_t> bytes_per_pixel(std::string_view e) noexcept {
  if (e == "mono8" || e == "8UC1" || e == "bayer_rggb8" || e == "bayer_bggr8" ||
      e == "bayer_gbrg8" || e == "bayer_grbg8") {
    return 1;
  }
  if (e == "8UC2") return 2;
  if (e == "rgb8" || e == "bgr8" || e == "8UC3") return 3;
  if (e == "rgba8" || e == "bgra8" || e == "8UC4") return 4;
  return std::nullopt;
}

namespace {
// A sequence that borrows `bytes` (the sample never frees it: _release = false).
void borrow(dds_sequence_octet& seq, std::span<const std::byte> bytes) noexcept {
  seq._maximum = static_cast<std::uint32_t>(bytes.size());
  seq._length = static_cast<std::uint32_t>(bytes.size());
  // The DDS type has a non-const buffer; dds_write only reads it.
  seq._buffer = const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(bytes.data()));
  seq._release = false;
}
}  // namespace

void fill_frame_sample(ipcring_bridge_Frame& s, const FrameView& f, std::string_view channel,
                       std::uint64_t send_realtime_ns) noexcept {
  const std::size_t n = std::min(channel.size(), sizeof s.channel - 1);
  std::memcpy(s.channel, channel.data(), n);
  s.channel[n] = '\0';
  s.producer_epoch = f.epoch;
  s.sequence_number = f.sequence;
  s.publish_time_ns = f.publish_time_ns;
  s.send_realtime_ns = send_realtime_ns;
  s.capture_time_ns = f.capture_time_ns;
  s.has_tensor = f.tensor.has_value();
  s.tensor = ipcring_bridge_TensorDesc{};
  if (f.tensor) {
    s.tensor.dtype_code = f.tensor->dtype_code;
    s.tensor.dtype_bits = f.tensor->dtype_bits;
    s.tensor.ndim = std::min<std::uint8_t>(f.tensor->ndim, ipcring_bridge_kMaxDims);
    for (std::size_t i = 0; i < kMaxTensorDims; ++i) {
      s.tensor.shape[i] = f.tensor->shape[i];
      s.tensor.strides[i] = f.tensor->strides[i];
    }
    s.tensor.byte_offset = f.tensor->byte_offset;
  }
  borrow(s.metadata, f.metadata.subspan(0, std::min(f.metadata.size(), kMaxMetadataBytes)));
  borrow(s.data, f.data);
}

std::optional<TensorDesc> sample_tensor(const ipcring_bridge_Frame& s) noexcept {
  if (!s.has_tensor || s.tensor.ndim > ipcring_bridge_kMaxDims) return std::nullopt;
  TensorDesc t;
  t.dtype_code = s.tensor.dtype_code;
  t.dtype_bits = s.tensor.dtype_bits;
  t.ndim = s.tensor.ndim;
  for (std::size_t i = 0; i < kMaxTensorDims; ++i) {
    t.shape[i] = s.tensor.shape[i];
    t.strides[i] = s.tensor.strides[i];
  }
  t.byte_offset = s.tensor.byte_offset;
  return t;
}

namespace {
const char* encoding_for_channels(std::int64_t channels) noexcept {
  switch (channels) {
    case 1:
      return "mono8";
    case 2:
      return "8UC2";
    case 3:
      return "rgb8";
    case 4:
      return "rgba8";
    default:
      return nullptr;
  }
}
}  // namespace

std::optional<ImageFormat> image_format_of(const ImageFormat& flags,
                                           const std::optional<TensorDesc>& tensor) noexcept {
  ImageFormat f = flags;
  f.step = 0;
  f.byte_offset = 0;
  const bool image_tensor = tensor &&
                            tensor->dtype_code == static_cast<std::uint8_t>(DType::uint) &&
                            tensor->dtype_bits == 8 && (tensor->ndim == 2 || tensor->ndim == 3) &&
                            tensor_span(*tensor).has_value();
  if (image_tensor) {
    const TensorDesc& t = *tensor;
    const std::int64_t h = t.shape[0];
    const std::int64_t w = t.shape[1];
    const std::int64_t c = t.ndim == 3 ? t.shape[2] : 1;
    const bool rows_of_pixels = h > 0 && w > 0 && h <= UINT32_MAX && w <= UINT32_MAX &&
                                encoding_for_channels(c) && (t.ndim == 2 || t.stride(2) == 1) &&
                                t.stride(1) == c && t.stride(0) >= w * c &&
                                t.stride(0) <= UINT32_MAX;
    if (rows_of_pixels) {
      if (f.encoding.empty()) f.encoding = encoding_for_channels(c);
      const auto bpp = bytes_per_pixel(f.encoding);
      if (!bpp || *bpp != static_cast<std::uint64_t>(c)) return std::nullopt;
      if (f.width == 0) f.width = static_cast<std::uint32_t>(w);
      if (f.height == 0) f.height = static_cast<std::uint32_t>(h);
      // The tensor's row layout applies to the tensor's own shape only.
      if (f.width == static_cast<std::uint64_t>(w) && f.height == static_cast<std::uint64_t>(h)) {
        f.step = static_cast<std::uint32_t>(t.stride(0));
        f.byte_offset = t.byte_offset;
      }
    }
  }
  if (f.encoding.empty()) f.encoding = "mono8";
  if (f.width == 0 || f.height == 0 || !bytes_per_pixel(f.encoding)) return std::nullopt;
  return f;
}

Verdict fill_image_sample(sensor_msgs_msg_dds__Image_& s, const FrameView& f,
                          const ImageFormat& format, const std::string& frame_id,
                          std::uint64_t stamp_realtime_ns) noexcept {
  const auto bpp = bytes_per_pixel(format.encoding);
  if (!bpp || format.width == 0 || format.height == 0) return Verdict::not_image;
  const std::uint64_t packed = std::uint64_t{format.width} * *bpp;
  const std::uint64_t step = format.step == 0 ? packed : format.step;
  if (step > UINT32_MAX || step < packed) return Verdict::not_image;
  std::span<const std::byte> rows = f.data;
  if (format.step == 0) {
    if (step * format.height != f.data.size()) return Verdict::not_image;
  } else {
    // Rows from byte_offset on; the last one needs only its pixels, but Image.data holds
    // step * height bytes.
    if (format.byte_offset > f.data.size() ||
        step * format.height > f.data.size() - format.byte_offset) {
      return Verdict::not_image;
    }
    rows = f.data.subspan(format.byte_offset, step * format.height);
  }
  s.header.stamp.sec = static_cast<std::int32_t>(stamp_realtime_ns / 1'000'000'000ULL);
  s.header.stamp.nanosec = static_cast<std::uint32_t>(stamp_realtime_ns % 1'000'000'000ULL);
  s.header.frame_id = const_cast<char*>(frame_id.c_str());  // read by dds_write only
  s.height = format.height;
  s.width = format.width;
  s.encoding = const_cast<char*>(format.encoding.c_str());
  s.is_bigendian = 0;  // 8-bit channels: byte order does not apply
  s.step = static_cast<std::uint32_t>(step);
  borrow(s.data, rows);
  return Verdict::ok;
}

namespace {
// Reads one serialised sample (see wire.hpp): fields in order, bounds-checked. The first failure
// sticks (ok() false) and every later read returns zero or empty.
class CdrReader {
 public:
  explicit CdrReader(std::span<const std::byte> cdr) noexcept {
    if (cdr.size() < 4) return;
    // The encapsulation identifier, big-endian: CDR_BE 0, CDR_LE 1, PLAIN_CDR2_BE 6, _LE 7.
    const unsigned id =
        (std::to_integer<unsigned>(cdr[0]) << 8U) | std::to_integer<unsigned>(cdr[1]);
    if (id != 0 && id != 1 && id != 6 && id != 7) return;
    swap_ = ((id & 1U) != 0) != (std::endian::native == std::endian::little);
    max_align_ = id >= 6 ? 4 : 8;
    body_ = cdr.subspan(4);
    ok_ = true;
  }
  bool ok() const noexcept { return ok_; }
  // Only padding (fewer than 4 bytes) after the last field.
  bool at_end() const noexcept { return ok_ && body_.size() - off_ < 4; }

  template <class T>
  T get() noexcept {
    static_assert(std::is_integral_v<T>);
    align(sizeof(T));
    if (!need(sizeof(T))) return T{};
    T v{};
    std::memcpy(&v, body_.data() + off_, sizeof(T));
    off_ += sizeof(T);
    if (swap_) v = swapped(v);
    return v;
  }
  bool boolean() noexcept {
    const auto b = get<std::uint8_t>();
    if (b > 1) ok_ = false;
    return b == 1;
  }
  // A string of at most max_chars characters; nullptr when malformed.
  const char* string(std::size_t max_chars) noexcept {
    const auto n = get<std::uint32_t>();
    if (!ok_ || n == 0 || n - 1 > max_chars || !need(n) || body_[off_ + n - 1] != std::byte{0}) {
      ok_ = false;
      return nullptr;
    }
    const char* s = reinterpret_cast<const char*>(body_.data() + off_);
    off_ += n;
    return s;
  }
  // A sequence<octet>, borrowed into `seq`.
  void octets(dds_sequence_octet& seq) noexcept {
    const auto n = get<std::uint32_t>();
    seq = dds_sequence_octet{};
    if (!need(n)) return;
    borrow(seq, body_.subspan(off_, n));
    off_ += n;
  }

 private:
  static std::uint8_t swapped(std::uint8_t v) noexcept { return v; }
  static std::uint32_t swapped(std::uint32_t v) noexcept { return __builtin_bswap32(v); }
  static std::int32_t swapped(std::int32_t v) noexcept {
    return static_cast<std::int32_t>(__builtin_bswap32(static_cast<std::uint32_t>(v)));
  }
  static std::uint64_t swapped(std::uint64_t v) noexcept { return __builtin_bswap64(v); }
  static std::int64_t swapped(std::int64_t v) noexcept {
    return static_cast<std::int64_t>(__builtin_bswap64(static_cast<std::uint64_t>(v)));
  }
  void align(std::size_t a) noexcept {
    a = std::min(a, max_align_);
    const std::size_t pad = (a - off_ % a) % a;
    if (need(pad)) off_ += pad;
  }
  bool need(std::size_t n) noexcept {
    if (!ok_ || n > body_.size() - off_) ok_ = false;
    return ok_;
  }

  std::span<const std::byte> body_;
  std::size_t off_ = 0;
  std::size_t max_align_ = 8;
  bool swap_ = false;
  bool ok_ = false;
};
}  // namespace

Verdict decode_frame_sample(std::span<const std::byte> cdr, ipcring_bridge_Frame& s) noexcept {
  s = ipcring_bridge_Frame{};
  CdrReader r(cdr);
  const char* channel = r.string(sizeof s.channel - 1);
  if (channel != nullptr) std::strcpy(s.channel, channel);  // at most 200 characters and the NUL
  s.producer_epoch = r.get<std::uint64_t>();
  s.sequence_number = r.get<std::uint64_t>();
  s.publish_time_ns = r.get<std::uint64_t>();
  s.send_realtime_ns = r.get<std::uint64_t>();
  s.capture_time_ns = r.get<std::uint64_t>();
  s.has_tensor = r.boolean();
  s.tensor.dtype_code = r.get<std::uint8_t>();
  s.tensor.dtype_bits = r.get<std::uint8_t>();
  s.tensor.ndim = r.get<std::uint8_t>();
  for (auto& v : s.tensor.shape) v = r.get<std::int64_t>();
  for (auto& v : s.tensor.strides) v = r.get<std::int64_t>();
  s.tensor.byte_offset = r.get<std::uint64_t>();
  r.octets(s.metadata);
  r.octets(s.data);
  if (!r.at_end()) {
    s = ipcring_bridge_Frame{};
    return Verdict::bad_encoding;
  }
  return Verdict::ok;
}

Verdict decode_image_sample(std::span<const std::byte> cdr,
                            sensor_msgs_msg_dds__Image_& s) noexcept {
  s = sensor_msgs_msg_dds__Image_{};
  CdrReader r(cdr);
  constexpr std::size_t kUnbounded = UINT32_MAX;  // the .msg strings have no bound
  s.header.stamp.sec = r.get<std::int32_t>();
  s.header.stamp.nanosec = r.get<std::uint32_t>();
  // The Image type has char* strings; nothing writes through them.
  s.header.frame_id = const_cast<char*>(r.string(kUnbounded));
  s.height = r.get<std::uint32_t>();
  s.width = r.get<std::uint32_t>();
  s.encoding = const_cast<char*>(r.string(kUnbounded));
  s.is_bigendian = r.get<std::uint8_t>();
  s.step = r.get<std::uint32_t>();
  r.octets(s.data);
  if (!r.at_end()) {
    s = sensor_msgs_msg_dds__Image_{};
    return Verdict::bad_encoding;
  }
  return Verdict::ok;
}

Verdict check_frame_sample(const ipcring_bridge_Frame& s, std::size_t capacity) noexcept {
  if (s.metadata._length > kMaxMetadataBytes) return Verdict::bad_metadata;
  if (s.has_tensor && s.tensor.ndim > ipcring_bridge_kMaxDims) return Verdict::bad_tensor;
  if (s.data._length > capacity) return Verdict::too_large;
  if (s.data._length > 0 && s.data._buffer == nullptr) return Verdict::bad_shape;
  return Verdict::ok;
}

Verdict check_image_sample(const sensor_msgs_msg_dds__Image_& s, std::size_t capacity) noexcept {
  if (s.data._length > 0 && s.data._buffer == nullptr) return Verdict::bad_shape;
  if (std::uint64_t{s.step} * s.height != s.data._length) return Verdict::bad_shape;
  const auto bpp = bytes_per_pixel(s.encoding != nullptr ? s.encoding : "");
  if (bpp && std::uint64_t{s.width} * *bpp > s.step) return Verdict::bad_shape;
  if (s.data._length > capacity) return Verdict::too_large;
  return Verdict::ok;
}

std::optional<TensorDesc> image_tensor(const sensor_msgs_msg_dds__Image_& s) noexcept {
  const auto bpp = bytes_per_pixel(s.encoding != nullptr ? s.encoding : "");
  if (!bpp || s.width == 0 || s.height == 0 || std::uint64_t{s.width} * *bpp > s.step) {
    return std::nullopt;
  }
  TensorDesc t = TensorDesc::contiguous(
      DType::uint, 8, {std::int64_t{s.height}, std::int64_t{s.width}, std::int64_t{*bpp}});
  if (s.step != std::uint64_t{s.width} * *bpp) {  // padded rows: the row stride says so
    t.strides[0] = s.step;
    t.strides[1] = *bpp;
    t.strides[2] = 1;
  }
  return t;
}

std::uint64_t image_stamp_ns(const sensor_msgs_msg_dds__Image_& s) noexcept {
  if (s.header.stamp.sec < 0) return 0;
  return static_cast<std::uint64_t>(s.header.stamp.sec) * 1'000'000'000ULL + s.header.stamp.nanosec;
}

}  // namespace ipcring::bridge
