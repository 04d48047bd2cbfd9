// tensor_test.cpp — tensor descriptors, capture time, sized metadata and the delay telemetry:
// what a producer sets arrives with the frame, and a descriptor that does not describe the frame
// (too large, hostile, stale) never reaches a reader as a tensor.
#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipcring/ipcring.hpp"
#include "segment/layout.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {

ChannelConfig config(std::size_t frame_bytes = 1 << 16, std::uint32_t metadata_bytes = 256) {
  ChannelConfig c;
  c.slots = 4;
  c.max_readers = 2;
  c.frame_bytes = frame_bytes;
  c.metadata_bytes = metadata_bytes;
  return c;
}

TensorDesc strided(DType code, std::uint8_t bits, std::initializer_list<std::int64_t> shape,
                   std::initializer_list<std::int64_t> strides, std::uint64_t offset = 0) {
  TensorDesc t = TensorDesc::contiguous(code, bits, shape);
  std::uint8_t d = 0;
  for (const std::int64_t s : strides) t.strides[d++] = s;
  t.byte_offset = offset;
  return t;
}

// A second mapping of a channel's control segment, to scribble on it as a hostile process could.
class SegmentScribbler {
 public:
  explicit SegmentScribbler(const std::string& channel) {
    fd_ = test::control_fd_of(channel);
    REQUIRE(fd_ >= 0);
    struct stat st {};
    REQUIRE(fstat(fd_, &st) == 0);
    size_ = static_cast<std::size_t>(st.st_size);
    base_ = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    REQUIRE(base_ != MAP_FAILED);
  }
  ~SegmentScribbler() {
    munmap(base_, size_);
    close(fd_);
  }
  SegmentScribbler(const SegmentScribbler&) = delete;
  SegmentScribbler& operator=(const SegmentScribbler&) = delete;
  detail::FrameHeader& frame_header(std::uint32_t slot) const {
    auto* seg = static_cast<unsigned char*>(base_);
    const auto& h = *reinterpret_cast<const detail::SegmentHeader*>(seg);
    return *reinterpret_cast<detail::FrameHeader*>(seg + h.frame_header_offset +
                                                   slot * h.frame_header_stride);
  }
  detail::Slot& slot(std::uint32_t i) const {
    auto* seg = static_cast<unsigned char*>(base_);
    const auto& h = *reinterpret_cast<const detail::SegmentHeader*>(seg);
    // The slot table ends where the publication log begins.
    return reinterpret_cast<detail::Slot*>(seg +
                                           h.log_offset)[static_cast<std::ptrdiff_t>(i) - h.slots];
  }

 private:
  int fd_ = -1;
  void* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace

TEST_CASE("tensor_span: contiguous, strided, offset and empty tensors") {
  CHECK(tensor_span(TensorDesc::contiguous(DType::uint, 8, {480, 640, 3})) == 480 * 640 * 3);
  CHECK(tensor_span(TensorDesc::contiguous(DType::float_, 32, {3, 64, 64})) == 3 * 64 * 64 * 4);
  CHECK(tensor_span(TensorDesc::contiguous(DType::float_, 64, {})) == 8);  // a scalar
  // A transposed 4x3 view of a 3x4 float32 matrix: the last element is at index 11.
  CHECK(tensor_span(strided(DType::float_, 32, {4, 3}, {1, 4})) == 48);
  // Every other column of a 2x8 uint16 matrix, starting at byte 16.
  CHECK(tensor_span(strided(DType::uint, 16, {2, 4}, {8, 2}, 16)) == 16 + (8 + 6 + 1) * 2);
  // Negative strides are fine as long as no element lies before the frame.
  CHECK(tensor_span(strided(DType::int_, 32, {4}, {-1}, 12)) == 16);
  CHECK_FALSE(tensor_span(strided(DType::int_, 32, {4}, {-1}, 8)));
  // A zero dimension addresses nothing.
  CHECK(tensor_span(TensorDesc::contiguous(DType::uint, 8, {0, 1000000})) == 0);
  CHECK(TensorDesc::contiguous(DType::uint, 8, {2, 3}).stride(0) == 3);
  CHECK(strided(DType::float_, 32, {4, 3}, {1, 4}).is_contiguous() == false);
  CHECK(strided(DType::float_, 32, {4, 3}, {3, 1}).is_contiguous());
  CHECK(TensorDesc::contiguous(DType::float_, 32, {3, 64, 64}).dtype_name() == "float32");
  CHECK(TensorDesc::contiguous(DType::uint, 8, {7}).shape_text() == "(7,)");
}

TEST_CASE("tensor_span refuses what no frame can hold") {
  TensorDesc t = TensorDesc::contiguous(DType::uint, 8, {4});
  t.ndim = 9;
  CHECK_FALSE(tensor_span(t));
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(DType::float_, 8, {4})));           // no float8
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(DType::uint, 12, {4})));            // not bytes
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(static_cast<DType>(3), 64, {4})));  // handle
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(DType::uint, 8, {-1})));
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(DType::uint, 8, {-1, 0})));  // checked anyway
  // Products and sums that overflow 64 bits when multiplied naively.
  CHECK_FALSE(tensor_span(TensorDesc::contiguous(DType::uint, 64, {1LL << 32, 1LL << 32})));
  CHECK_FALSE(tensor_span(strided(DType::uint, 8, {1LL << 40, 2}, {INT64_MAX, 1})));
  CHECK_FALSE(tensor_span(strided(DType::uint, 8, {3, 3}, {INT64_MIN, 1}, 1ULL << 39)));
  TensorDesc far = TensorDesc::contiguous(DType::uint, 8, {1});
  far.byte_offset = UINT64_MAX;
  CHECK_FALSE(tensor_span(far));
}

TEST_CASE("a tensor descriptor, capture time and metadata travel with the frame") {
  ScopedChannel ch("tensor");
  auto p = Producer::create(ch, config(1 << 20));
  auto r = Reader::attach(ch);
  const TensorDesc image = TensorDesc::contiguous(DType::uint, 8, {480, 640, 3});
  auto loan = p.loan();
  REQUIRE(loan);
  CHECK(loan->metadata_capacity() == 256);
  CHECK(loan->set_tensor(image));
  loan->set_capture_time_ns(123456789);
  const std::string meta(200, 'm');  // beyond the 64 bytes of earlier layouts
  CHECK(loan->set_metadata(std::as_bytes(std::span(meta.data(), meta.size()))));
  p.publish(std::move(*loan), std::size_t{480} * 640 * 3);
  auto f = r.try_read();
  REQUIRE(f);
  REQUIRE(f->tensor());
  CHECK(*f->tensor() == image);
  CHECK_FALSE(f->tensor_invalid());
  CHECK(f->capture_time_ns() == 123456789);
  CHECK(f->timestamp_ns() != 0);
  REQUIRE(f->metadata().size() == meta.size());
  CHECK(std::memcmp(f->metadata().data(), meta.data(), meta.size()) == 0);

  const Snapshot s = inspect(ch);
  CHECK(s.metadata_bytes == 256);
  const SlotInfo& si = s.slots[f->slot()];
  CHECK(si.has_tensor);
  CHECK(si.tensor == image);
  CHECK(si.capture_time_ns == 123456789);
  CHECK(si.metadata_bytes == 200);
}

TEST_CASE("moving frames keeps each frame's own tensor, also over a frame that had one") {
  // Frame's move copies the tensor descriptor only when the source has one: a plain frame moved
  // into a Frame that held a tensor frame must not show the old tensor.
  ScopedChannel ch("tensormove");
  ChannelConfig c = config(4096);
  c.max_held = 2;
  auto p = Producer::create(ch, c);
  ReaderOptions o;
  o.policy = ReadPolicy::sequential;
  auto r = Reader::attach(ch, o);
  const TensorDesc t = TensorDesc::contiguous(DType::float_, 32, {2, 3});
  {
    auto loan = p.loan();
    REQUIRE(loan);
    CHECK(loan->set_tensor(t));
    loan->set_capture_time_ns(42);
    p.publish(std::move(*loan), 24);
  }
  {
    auto loan = p.loan();
    REQUIRE(loan);
    p.publish(std::move(*loan), 16);
  }
  Frame held;
  {
    auto first = r.try_read();
    REQUIRE(first);
    held = std::move(*first);
  }
  REQUIRE(held.tensor());
  CHECK(*held.tensor() == t);
  CHECK(held.capture_time_ns() == 42);
  Frame moved(std::move(held));  // the move constructor, from a frame with a tensor
  REQUIRE(moved.tensor());
  CHECK(*moved.tensor() == t);
  CHECK(moved.size() == 24);
  // NOLINTNEXTLINE(bugprone-use-after-move): a moved-from Frame is empty, which is checked here
  CHECK_FALSE(held.held());
  auto second = r.try_read();
  REQUIRE(second);
  moved = std::move(*second);  // releases the first frame, takes the plain one
  CHECK_FALSE(moved.tensor());
  CHECK_FALSE(moved.tensor_invalid());
  CHECK(moved.capture_time_ns() == 0);
  CHECK(moved.size() == 16);
  CHECK(moved.sequence() == 2);
  CHECK(r.held() == 1);
}

TEST_CASE("set_tensor refuses a tensor beyond the capacity; a short publish drops the tensor") {
  ScopedChannel ch("tensorcap");
  auto p = Producer::create(ch, config(4096));
  auto r = Reader::attach(ch);
  auto loan = p.loan();
  REQUIRE(loan);
  CHECK_FALSE(loan->set_tensor(TensorDesc::contiguous(DType::float_, 32, {1025})));
  CHECK(loan->set_tensor(TensorDesc::contiguous(DType::float_, 32, {1024})));
  p.publish(std::move(*loan), 100);  // shorter than the tensor it describes
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->size() == 100);
  CHECK_FALSE(f->tensor());
  CHECK(f->tensor_invalid());
}

TEST_CASE("a frame carries only its own loan's header: a dropped loan's tensor is not inherited") {
  ScopedChannel ch("tensorstale");
  ChannelConfig c = config(4096);
  c.slots = 1;  // every loan gets the same slot
  c.max_readers = 1;
  auto p = Producer::create(ch, c);
  auto r = Reader::attach(ch);
  {
    auto loan = p.loan();
    REQUIRE(loan);
    CHECK(loan->set_tensor(TensorDesc::contiguous(DType::uint, 8, {16})));
    loan->set_capture_time_ns(7);
    CHECK(loan->set_metadata(std::as_bytes(std::span("old", 3))));
  }  // dropped
  auto loan = p.loan();
  REQUIRE(loan);
  p.publish(std::move(*loan), 16);
  auto f = r.try_read();
  REQUIRE(f);
  CHECK_FALSE(f->tensor());
  CHECK_FALSE(f->tensor_invalid());
  CHECK(f->capture_time_ns() == 0);
  CHECK(f->metadata().empty());
}

TEST_CASE("hostile frame headers are refused by the reader and reported by inspect") {
  ScopedChannel ch("tensorhostile");
  auto p = Producer::create(ch, config(4096, 64));
  auto r = Reader::attach(ch);
  SegmentScribbler seg(ch.name());
  auto publish = [&] {
    auto loan = p.loan();
    REQUIRE(loan);
    REQUIRE(loan->set_tensor(TensorDesc::contiguous(DType::uint, 8, {64, 64})));
    REQUIRE(loan->set_metadata(std::as_bytes(std::span("abc", 3))));
    const std::uint32_t slot = loan->slot();
    p.publish(std::move(*loan), 4096);
    return slot;
  };
  SUBCASE("a shape beyond the frame") {
    seg.frame_header(publish()).shape[0].store(65);
  }
  SUBCASE("strides reaching beyond the frame") {
    auto& fh = seg.frame_header(publish());
    fh.strides[0].store(1LL << 40);
    fh.strides[1].store(1);
  }
  SUBCASE("ndim beyond 8") {
    auto& fh = seg.frame_header(publish());
    fh.tensor_word.store(detail::TensorWord::make(1, 8, 200));
  }
  SUBCASE("an unknown element type") {
    auto& fh = seg.frame_header(publish());
    fh.tensor_word.store(detail::TensorWord::make(9, 8, 2));
  }
  SUBCASE("metadata larger than the channel's metadata area") {
    auto& fh = seg.frame_header(publish());
    fh.metadata_bytes.store(65);
    auto f = r.try_read();
    REQUIRE(f);
    CHECK(f->metadata().empty());
    CHECK(f->tensor());  // the rest of the header is fine
    bool reported = false;
    for (const auto& problem : inspect(ch).problems) {
      reported = reported || problem.find("metadata bytes") != std::string::npos;
    }
    CHECK(reported);
    return;
  }
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->size() == 4096);
  CHECK_FALSE(f->tensor());
  CHECK(f->tensor_invalid());
  CHECK(f->metadata().size() == 3);
  bool reported = false;
  for (const auto& problem : inspect(ch).problems) {
    reported = reported || problem.find("invalid tensor descriptor") != std::string::npos;
  }
  CHECK(reported);
}

TEST_CASE("metadata_bytes is sized at create: 0 to 4096") {
  {
    ScopedChannel ch("meta0");
    auto p = Producer::create(ch, config(4096, 0));
    auto loan = p.loan();
    REQUIRE(loan);
    CHECK(loan->metadata_capacity() == 0);
    CHECK(loan->set_metadata({}));
    CHECK_FALSE(loan->set_metadata(std::as_bytes(std::span("x", 1))));
  }
  {
    ScopedChannel ch("meta4096");
    auto p = Producer::create(ch, config(4096, 4096));
    auto r = Reader::attach(ch);
    auto loan = p.loan();
    REQUIRE(loan);
    std::vector<std::byte> big(4096, std::byte{0x5a});
    CHECK(loan->set_metadata(big));
    big.push_back(std::byte{0});
    CHECK_FALSE(loan->set_metadata(big));
    p.publish(std::move(*loan), 1);
    auto f = r.try_read();
    REQUIRE(f);
    REQUIRE(f->metadata().size() == 4096);
    CHECK(f->metadata()[4095] == std::byte{0x5a});
  }
  ScopedChannel ch("meta4097");
  try {
    (void)Producer::create(ch, config(4096, 4097));
    FAIL("metadata_bytes = 4097 was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_config);
    CHECK(std::string(e.what()).find("metadata_bytes = 4097") != std::string::npos);
    CHECK(std::string(e.what()).find(ch.name()) != std::string::npos);
  }
}

TEST_CASE("readers record their publish-to-claim delay in the segment") {
  ScopedChannel ch("delay");
  auto p = Producer::create(ch, config(4096));
  auto r = Reader::attach(ch);
  auto loan = p.loan();
  REQUIRE(loan);
  p.publish(std::move(*loan), 1);
  std::this_thread::sleep_for(20ms);  // the delay is at least this long
  {
    auto f = r.try_read();
    REQUIRE(f);
  }
  Snapshot s = inspect(ch);
  REQUIRE(s.readers.size() == 1);
  CHECK(s.readers[0].delay_count == 1);
  CHECK(s.readers[0].delay_p50_ns >= 20'000'000);
  CHECK(s.readers[0].delay_p99_ns >= s.readers[0].delay_p50_ns);
  // The bucket that holds it starts no later than the delay itself.
  std::size_t bucket = 0;
  for (std::size_t b = 0; b < s.readers[0].delay_histogram.size(); ++b) {
    if (s.readers[0].delay_histogram[b] != 0) bucket = b;
  }
  CHECK(delay_bucket_lower_ns(bucket) <= s.readers[0].delay_p50_ns);
  CHECK(delay_bucket_lower_ns(bucket + 1) == s.readers[0].delay_p50_ns);
}

TEST_CASE("delay buckets are half-octaves") {
  using detail::DelayBucket;
  CHECK(DelayBucket::of(0) == 0);
  CHECK(DelayBucket::of(1) == 0);
  CHECK(DelayBucket::of(2) == 2);
  CHECK(DelayBucket::of(3) == 3);
  CHECK(DelayBucket::of(1000) == 19);  // [768, 1024)
  CHECK(DelayBucket::lower(19) == 768);
  CHECK(DelayBucket::lower(20) == 1024);
  CHECK(DelayBucket::of(UINT64_MAX) == detail::kDelayBuckets - 1);
  for (std::uint64_t ns : {5ULL, 77ULL, 123456ULL, 999999999ULL}) {
    const std::size_t b = DelayBucket::of(ns);
    CHECK(DelayBucket::lower(b) <= ns);
    CHECK(ns < DelayBucket::lower(b + 1));
  }
  CHECK(delay_quantile_ns({}, 0.5) == 0);
}

TEST_CASE("a copy-on-write reader may write into a frame: its own copy, discarded at release") {
  ScopedChannel ch("cow");
  ChannelConfig c = config(8192);
  c.slots = 1;  // every frame uses the same buffer
  c.max_readers = 2;
  auto p = Producer::create(ch, c);
  ReaderOptions cow;
  cow.copy_on_write = true;
  auto writer = Reader::attach(ch, cow);
  auto plain = Reader::attach(ch);
  auto publish = [&](unsigned char value) {
    auto loan = p.loan();
    REQUIRE(loan);
    std::memset(loan->data(), value, 8192);
    p.publish(std::move(*loan), 8192);
  };
  publish(1);
  {
    auto f = writer.try_read();
    REQUIRE(f);
    auto* bytes = const_cast<std::byte*>(f->data());  // what an in-place tensor op does
    bytes[0] = std::byte{42};
    bytes[5000] = std::byte{43};  // the second page too
    CHECK(f->data()[0] == std::byte{42});
    auto g = plain.try_read();  // the shared buffer is untouched
    REQUIRE(g);
    CHECK(g->data()[0] == std::byte{1});
    CHECK(g->data()[5000] == std::byte{1});
  }
  publish(2);  // the same buffer, rewritten by the producer
  auto f = writer.try_read();
  REQUIRE(f);
  CHECK(f->data()[0] == std::byte{2});  // not the private copy of the previous frame
  CHECK(f->data()[5000] == std::byte{2});
  CHECK(f->data()[8191] == std::byte{2});
}

TEST_CASE("the descriptor says whether a frame has a header; a plain frame's header is not read") {
  ScopedChannel ch("headerflag");
  auto p = Producer::create(ch, config(4096, 64));
  auto r = Reader::attach(ch);
  SegmentScribbler seg(ch.name());
  // Each of capture time, tensor and metadata alone marks the header in the descriptor, and
  // arrives with the frame.
  for (int what = 0; what < 3; ++what) {
    CAPTURE(what);
    auto loan = p.loan();
    REQUIRE(loan);
    if (what == 0) loan->set_capture_time_ns(1234);
    if (what == 1) REQUIRE(loan->set_tensor(TensorDesc::contiguous(DType::uint, 8, {16})));
    if (what == 2) REQUIRE(loan->set_metadata(std::as_bytes(std::span("xy", 2))));
    const std::uint32_t slot = loan->slot();
    p.publish(std::move(*loan), 4096);
    CHECK(seg.slot(slot).flags.load() == detail::DescriptorFlags::kHeader);
    auto f = r.try_read();
    REQUIRE(f);
    CHECK(f->capture_time_ns() == (what == 0 ? 1234U : 0U));
    CHECK(f->tensor().has_value() == (what == 1));
    CHECK(f->metadata().size() == (what == 2 ? 2U : 0U));
  }
  // A plain frame: flags clear. A header scribbled for it afterwards (its sequence, a capture
  // time, a valid tensor) is not attributed to it: the reader does not read the header's line.
  auto loan = p.loan();
  REQUIRE(loan);
  const std::uint32_t slot = loan->slot();
  const std::uint64_t seq = p.publish(std::move(*loan), 4096);
  CHECK(seg.slot(slot).flags.load() == 0);
  auto& fh = seg.frame_header(slot);
  fh.capture_time_ns.store(99);
  fh.tensor_word.store(detail::TensorWord::make(1, 8, 1));
  fh.shape[0].store(16);
  fh.sequence.store(seq);
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->sequence() == seq);
  CHECK(f->capture_time_ns() == 0);
  CHECK_FALSE(f->tensor());
  CHECK_FALSE(f->tensor_invalid());
  CHECK(f->metadata().empty());
}
