// messages.cpp — CDR of sensor_msgs/msg/Image and ipcring/msg/Frame (see messages.hpp).
//
// CDR as ROS 2 writes it (XCDR1, little-endian): a 4-byte encapsulation header 00 01 00 00, then
// each primitive aligned to its size (8-byte ones to 8) counted from the end of that header;
// strings are a uint32 length that counts a terminating NUL, then the bytes and the NUL;
// sequences are a uint32 element count, then the elements.
#include "ringdump/messages.hpp"

#include <cstring>

namespace ringdump::messages {

const char* const kImageSchema =
    "# This message contains an uncompressed image\n"
    "std_msgs/Header header\n"
    "uint32 height\n"
    "uint32 width\n"
    "string encoding\n"
    "uint8 is_bigendian\n"
    "uint32 step\n"
    "uint8[] data\n"
    "\n"
    "================================================================================\n"
    "MSG: std_msgs/Header\n"
    "builtin_interfaces/Time stamp\n"
    "string frame_id\n"
    "\n"
    "================================================================================\n"
    "MSG: builtin_interfaces/Time\n"
    "int32 sec\n"
    "uint32 nanosec\n";

const char* const kFrameSchema =
    "# An ipcring frame as it was published: its header, its tensor descriptor (DLPack's\n"
    "# vocabulary, strides in elements) and its bytes.\n"
    "uint64 sequence          # the producer's sequence number\n"
    "uint64 timestamp_ns      # publish time, CLOCK_MONOTONIC of the recording machine\n"
    "uint64 capture_time_ns   # Loan::set_capture_time_ns; 0 when none was set\n"
    "uint64 byte_offset       # of element [0, ..., 0] from the start of data\n"
    "bool has_tensor          # false: plain bytes (dtype, shape and strides are empty)\n"
    "uint8 dtype_code         # DLPack type code: 0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 "
    "bool\n"
    "uint8 dtype_bits\n"
    "int64[] shape\n"
    "int64[] strides          # in elements; all zero: contiguous (C order)\n"
    "uint8[] metadata         # Loan::set_metadata\n"
    "uint8[] data\n";

namespace {

class CdrWriter {
 public:
  explicit CdrWriter(Buffer& out) : out_(out), origin_(out.size() + 4) {
    const std::byte header[4] = {std::byte{0}, std::byte{1}, std::byte{0}, std::byte{0}};
    out_.insert(out_.end(), header, header + 4);
  }
  void align(std::size_t n) {
    while ((out_.size() - origin_) % n != 0) out_.push_back(std::byte{0});
  }
  template <typename T>
  void put(T v) {
    align(sizeof(T));
    std::byte b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
    out_.insert(out_.end(), b, b + sizeof(T));
  }
  void string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size() + 1));
    bytes_raw(reinterpret_cast<const std::byte*>(s.data()), s.size());
    out_.push_back(std::byte{0});
  }
  void bytes(std::span<const std::byte> b) {
    put(static_cast<std::uint32_t>(b.size()));
    bytes_raw(b.data(), b.size());
  }
  void bytes_raw(const std::byte* p, std::size_t n) {
    const std::size_t at = out_.size();
    out_.resize(at + n);  // resize + memcpy: no per-byte growth for a frame's payload
    if (n != 0) std::memcpy(out_.data() + at, p, n);
  }

 private:
  Buffer& out_;
  std::size_t origin_;
};

class CdrReader {
 public:
  CdrReader(std::span<const std::byte> in, std::string& error) : in_(in), error_(error) {
    if (in.size() < 4) {
      fail("the message has " + std::to_string(in.size()) + " bytes, fewer than CDR's header");
      return;
    }
    if (in[1] != std::byte{1} || in[0] != std::byte{0}) {
      fail("not little-endian CDR (encapsulation " + std::to_string(int(in[0])) + "," +
           std::to_string(int(in[1])) + ")");
      return;
    }
    at_ = 4;
  }
  bool ok() const { return ok_; }
  template <typename T>
  T get(const char* field) {
    T v{};
    if (!ok_) return v;
    align(sizeof(T));
    if (in_.size() - at_ < sizeof(T)) {
      fail(std::string(field) + ": the message ends at byte " + std::to_string(in_.size()));
      return v;
    }
    std::memcpy(&v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  std::string string(const char* field) {
    const auto n = get<std::uint32_t>(field);
    if (!ok_) return {};
    if (n == 0 || n > in_.size() - at_) {
      fail(std::string(field) + ": string length " + std::to_string(n) + " with " +
           std::to_string(in_.size() - at_) + " bytes left");
      return {};
    }
    std::string s(reinterpret_cast<const char*>(in_.data() + at_), n - 1);
    at_ += n;
    return s;
  }
  std::span<const std::byte> bytes(const char* field, std::size_t element = 1) {
    const auto n = get<std::uint32_t>(field);
    if (!ok_) return {};
    if (element > 1) align(element);
    if (static_cast<std::uint64_t>(n) * element > in_.size() - at_) {
      fail(std::string(field) + ": " + std::to_string(n) + " elements of " +
           std::to_string(element) + " bytes with " + std::to_string(in_.size() - at_) +
           " bytes left");
      return {};
    }
    auto s = in_.subspan(at_, std::size_t{n} * element);
    at_ += std::size_t{n} * element;
    return s;
  }

 private:
  void align(std::size_t n) {
    const std::size_t rel = at_ - 4;
    const std::size_t pad = (n - rel % n) % n;
    if (in_.size() - at_ < pad) {
      fail("the message ends inside padding");
      return;
    }
    at_ += pad;
  }
  void fail(std::string what) {
    if (ok_) error_ = std::move(what);
    ok_ = false;
  }
  std::span<const std::byte> in_;
  std::string& error_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

}  // namespace

std::optional<std::uint32_t> bytes_per_pixel(std::string_view encoding) noexcept {
  if (encoding == "mono8") return 1;
  if (encoding == "rgb8" || encoding == "bgr8") return 3;
  if (encoding == "rgba8" || encoding == "bgra8") return 4;
  return std::nullopt;
}

std::optional<std::string> image_encoding(const ipcring::TensorDesc& t,
                                          std::string_view requested) {
  if (t.dtype_code != static_cast<std::uint8_t>(ipcring::DType::uint) || t.dtype_bits != 8) {
    return std::nullopt;
  }
  if ((t.ndim != 2 && t.ndim != 3) || !t.is_contiguous()) return std::nullopt;
  if (t.shape[0] <= 0 || t.shape[1] <= 0) return std::nullopt;
  const std::int64_t c = t.ndim == 3 ? t.shape[2] : 1;
  if (!requested.empty()) {
    const auto bpp = bytes_per_pixel(requested);
    if (!bpp || *bpp != c) return std::nullopt;
    return std::string(requested);
  }
  if (c == 1) return std::string("mono8");
  if (c == 3) return std::string("rgb8");
  if (c == 4) return std::string("rgba8");
  return std::nullopt;
}

void encode_image(Buffer& out, std::uint64_t stamp_ns, std::string_view frame_id,
                  std::uint32_t height, std::uint32_t width, std::string_view encoding,
                  std::span<const std::byte> pixels) {
  CdrWriter w(out);
  w.put(static_cast<std::int32_t>(stamp_ns / 1000000000ULL));
  w.put(static_cast<std::uint32_t>(stamp_ns % 1000000000ULL));
  w.string(frame_id);
  w.put(height);
  w.put(width);
  w.string(encoding);
  w.put(std::uint8_t{0});                                                         // is_bigendian
  w.put(static_cast<std::uint32_t>(pixels.size() / (height == 0 ? 1 : height)));  // step
  w.bytes(pixels);
}

void encode_frame(Buffer& out, const FrameFields& f) {
  CdrWriter w(out);
  w.put(f.sequence);
  w.put(f.timestamp_ns);
  w.put(f.capture_time_ns);
  w.put(f.tensor ? f.tensor->byte_offset : std::uint64_t{0});
  w.put(std::uint8_t{f.tensor ? std::uint8_t{1} : std::uint8_t{0}});
  w.put(f.tensor ? f.tensor->dtype_code : std::uint8_t{0});
  w.put(f.tensor ? f.tensor->dtype_bits : std::uint8_t{0});
  const std::uint8_t ndim = f.tensor ? f.tensor->ndim : 0;
  w.put(static_cast<std::uint32_t>(ndim));
  for (std::uint8_t d = 0; d < ndim; ++d) w.put(f.tensor->shape[d]);
  w.put(static_cast<std::uint32_t>(ndim));
  for (std::uint8_t d = 0; d < ndim; ++d) w.put(f.tensor->strides[d]);
  w.bytes(f.metadata);
  w.bytes(f.data);
}

std::optional<std::string> encode(Buffer& out, const ipcring::Frame& f, std::string_view topic,
                                  std::string_view requested, std::uint64_t stamp_ns,
                                  const std::byte* payload) {
  const std::byte* data = payload != nullptr ? payload : f.data();
  const auto tensor = f.tensor();
  std::optional<std::string> encoding;
  if (tensor) encoding = image_encoding(*tensor, requested);
  if (encoding) {
    const auto height = static_cast<std::uint32_t>(tensor->shape[0]);
    const auto width = static_cast<std::uint32_t>(tensor->shape[1]);
    const std::size_t pixels = std::size_t{height} * width * *bytes_per_pixel(*encoding);
    encode_image(out, stamp_ns, topic, height, width, *encoding,
                 {data + tensor->byte_offset, pixels});
    return encoding;
  }
  FrameFields fields;
  fields.sequence = f.sequence();
  fields.timestamp_ns = f.timestamp_ns();
  fields.capture_time_ns = f.capture_time_ns();
  fields.tensor = tensor;
  fields.metadata = f.metadata();
  fields.data = {data, f.size()};
  encode_frame(out, fields);
  return std::nullopt;
}

std::optional<FrameFields> decode_image(std::span<const std::byte> cdr, std::string& error) {
  CdrReader r(cdr, error);
  FrameFields f;
  const auto sec = r.get<std::int32_t>("header.stamp.sec");
  const auto nsec = r.get<std::uint32_t>("header.stamp.nanosec");
  (void)r.string("header.frame_id");
  const auto height = r.get<std::uint32_t>("height");
  const auto width = r.get<std::uint32_t>("width");
  f.encoding = r.string("encoding");
  const auto big_endian = r.get<std::uint8_t>("is_bigendian");
  const auto step = r.get<std::uint32_t>("step");
  f.data = r.bytes("data");
  if (!r.ok()) return std::nullopt;
  (void)big_endian;  // 8-bit encodings only: byte order does not matter
  const auto bpp = bytes_per_pixel(f.encoding);
  if (!bpp) {
    error = "image encoding \"" + f.encoding + "\" is not one of mono8, rgb8, bgr8, rgba8, bgra8";
    return std::nullopt;
  }
  const std::uint64_t row = std::uint64_t{width} * *bpp;
  if (height == 0 || width == 0 || step < row ||
      std::uint64_t{step} * (height - 1) + row > f.data.size()) {
    error = "image " + std::to_string(width) + "x" + std::to_string(height) + " " + f.encoding +
            " with step " + std::to_string(step) + " does not fit its " +
            std::to_string(f.data.size()) + " bytes of data";
    return std::nullopt;
  }
  if (sec >= 0) f.capture_time_ns = static_cast<std::uint64_t>(sec) * 1000000000ULL + nsec;
  ipcring::TensorDesc t =
      ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {height, width, *bpp});
  if (step != row) {
    t.strides[0] = step;
    t.strides[1] = *bpp;
    t.strides[2] = 1;
  }
  f.tensor = t;
  return f;
}

std::optional<FrameFields> decode_frame(std::span<const std::byte> cdr, std::string& error) {
  CdrReader r(cdr, error);
  FrameFields f;
  f.sequence = r.get<std::uint64_t>("sequence");
  f.timestamp_ns = r.get<std::uint64_t>("timestamp_ns");
  f.capture_time_ns = r.get<std::uint64_t>("capture_time_ns");
  ipcring::TensorDesc t;
  t.byte_offset = r.get<std::uint64_t>("byte_offset");
  const bool has_tensor = r.get<std::uint8_t>("has_tensor") != 0;
  t.dtype_code = r.get<std::uint8_t>("dtype_code");
  t.dtype_bits = r.get<std::uint8_t>("dtype_bits");
  const auto shape = r.bytes("shape", 8);
  const auto strides = r.bytes("strides", 8);
  f.metadata = r.bytes("metadata");
  f.data = r.bytes("data");
  if (!r.ok()) return std::nullopt;
  if (!has_tensor) return f;
  const std::size_t ndim = shape.size() / 8;
  if (ndim > ipcring::kMaxTensorDims || strides.size() != shape.size()) {
    error = "tensor with " + std::to_string(ndim) + " dimensions and " +
            std::to_string(strides.size() / 8) + " strides (at most " +
            std::to_string(ipcring::kMaxTensorDims) + ", one stride each)";
    return std::nullopt;
  }
  t.ndim = static_cast<std::uint8_t>(ndim);
  std::memcpy(t.shape, shape.data(), shape.size());
  std::memcpy(t.strides, strides.data(), strides.size());
  if (!ipcring::tensor_fits(t, f.data.size())) {
    error = "tensor " + t.dtype_name() + " " + t.shape_text() + " does not fit its " +
            std::to_string(f.data.size()) + " bytes of data";
    return std::nullopt;
  }
  f.tensor = t;
  return f;
}

}  // namespace ringdump::messages
