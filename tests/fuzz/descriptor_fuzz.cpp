// descriptor_fuzz.cpp — libFuzzer target: the reader's claim path against hostile descriptors.
//
// A reader (the cursor of ring/cursor.hpp: next_frame and release_frame, the functions behind
// ipcring::Reader::try_read and Frame::release) reads from an in-memory control segment
// whose producer-written words — head, publication log entries, slot state words and descriptors,
// the lease words — are set by the input between reads. Properties (invariant 7 of DESIGN.md):
// every frame handed out has slot < slots, size <= frame_bytes, the buffer of its own slot and the
// reader's epoch; the frame pool is never asked for a slot out of range; try_read returns in
// bounded time (libFuzzer's -timeout catches a hang). The segment's layout itself is trusted here
// (segment_fuzz covers the header).
// Frame headers (tensor descriptor, capture time, metadata size) are hostile too: a tensor that a
// frame hands out has every element inside the frame's published bytes — checked by visiting each
// element of small tensors with strides computed here, independently of tensor_span — and its
// metadata lies inside the slot's metadata area (the segment is allocated to its exact size, so
// ASan reports any byte read beyond it).
// The descriptor's flags word, which says whether the reader reads the frame header, is hostile
// too (op 6); well-formed publications (op 12) and op 21 set it.
//
// Input: byte 0 = slots - 1 (mod 16), byte 1 = flags (bit 0 sequential policy, bit 1 max_held 2),
// then 10-byte operations [op][index][8-byte little-endian value]; op % 24 selects the operation.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "backend/pool.hpp"
#include "ipcring/config.hpp"
#include "ipcring/tensor.hpp"
#include "ring/cursor.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace {

using namespace ipcring;
using namespace ipcring::detail;

constexpr std::uint64_t kFrameBytes = 256;
constexpr std::uint32_t kFuzzMetadataBytes = 64;

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "descriptor_fuzz: property violated: %s\n", why);
  std::abort();
}

// Visits every element of `t` (when it has at most 4096 elements) and fails if one lies outside
// [0, size). Row-major strides are computed here, not taken from the library.
void check_elements(const TensorDesc& t, std::uint64_t size, const std::byte* data) {
  if (t.ndim > kMaxTensorDims) fail("tensor with ndim > 8");
  std::int64_t strides[kMaxTensorDims] = {};
  bool all_zero = true;
  for (std::uint8_t d = 0; d < t.ndim; ++d) all_zero = all_zero && t.strides[d] == 0;
  std::int64_t running = 1;
  std::uint64_t elements = 1;
  for (std::uint8_t d = t.ndim; d-- > 0;) {
    if (t.shape[d] < 0) fail("tensor with a negative dimension");
    strides[d] = all_zero ? running : t.strides[d];
    running *= t.shape[d] > 0 ? t.shape[d] : 1;
    if (t.shape[d] > 4096) return;  // too many elements to visit; tensor_span's bound stands
    elements *= static_cast<std::uint64_t>(t.shape[d]);
    if (elements > 4096) return;
  }
  const auto element = static_cast<std::int64_t>(t.dtype_bits / 8);
  if (element < 1 || element > 16) fail("tensor element size out of range");
  std::int64_t index[kMaxTensorDims] = {};
  unsigned sum = 0;
  for (std::uint64_t k = 0; k < elements; ++k) {
    std::int64_t at = static_cast<std::int64_t>(t.byte_offset);
    for (std::uint8_t d = 0; d < t.ndim; ++d) at += index[d] * strides[d] * element;
    if (at < 0 || static_cast<std::uint64_t>(at + element) > size) {
      fail("a tensor element lies outside the frame");
    }
    sum += static_cast<unsigned>(data[at]) + static_cast<unsigned>(data[at + element - 1]);
    for (std::uint8_t d = t.ndim; d-- > 0;) {  // next index, row-major
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  if (sum == 0xffffffffU) std::fprintf(stderr, "%u\n", sum);  // keep the reads
}

class FakePool final : public ReaderPool {
 public:
  explicit FakePool(std::uint32_t slots) : slots_(slots), memory_(slots * kFrameBytes) {}
  const std::byte* buffer(std::uint32_t slot, std::uint64_t, std::uint64_t) noexcept override {
    if (slot >= slots_) fail("the pool was asked for a slot out of range");
    return memory_.data() + slot * kFrameBytes;
  }
  const std::byte* base() const { return memory_.data(); }

 private:
  std::uint32_t slots_;
  std::vector<std::byte> memory_;
};

struct Input {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;
  bool take(std::uint8_t& op, std::uint8_t& index, std::uint64_t& value) {
    if (size - at < 10) return false;
    op = data[at];
    index = data[at + 1];
    std::memcpy(&value, data + at + 2, 8);
    at += 10;
    return true;
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  const std::uint32_t slots = 1 + data[0] % 16;
  const bool sequential = (data[1] & 1) != 0;
  const std::uint32_t max_held = (data[1] & 2) != 0 ? 2 : 1;
  const Geometry geo =
      compute_geometry(slots, 2, max_held, kFrameBytes, 1, 4096, kFuzzMetadataBytes);
  auto* base = static_cast<unsigned char*>(std::aligned_alloc(4096, geo.segment_bytes));
  std::memset(base, 0, geo.segment_bytes);
  const SegmentView view{base, geo};
  {
    ChannelConfig config;
    config.slots = slots;
    config.max_readers = 2;
    config.max_held = max_held;
    config.frame_bytes = kFrameBytes;
    config.metadata_bytes = kFuzzMetadataBytes;
    write_header(view.header(), "fuzz", geo, config);
    publish_header(view.header());
  }
  ProducerBlock& p = view.producer();
  p.lease_word.store(LeaseWord::make(1, LeaseState::active));
  ReaderEntry& entry = view.reader(0);
  entry.lease_word.store(LeaseWord::make(1, LeaseState::active));

  // The reader as attach leaves it: entry 0 of generation 1, producer epoch 1.
  FakePool pool(slots);
  const std::byte* pool_base = pool.base();
  CursorState cursor;
  cursor.policy = sequential ? ReadPolicy::sequential : ReadPolicy::latest;
  cursor.index = 0;
  cursor.bit = SlotWord::bit(0);
  cursor.entry_generation = 1;
  cursor.epoch = 1;
  std::atomic<std::uint32_t> held{0};

  std::vector<FrameFields> kept;
  auto release_kept = [&] {
    for (const FrameFields& f : kept) (void)release_frame(view, pool, cursor, held, f, nullptr);
    kept.clear();
  };
  auto read_once = [&](bool keep) {
    const std::uint64_t epoch_before = cursor.epoch;
    const bool gone_before = cursor.gone_reported;
    FrameFields f;
    if (next_frame(view, pool, cursor, held, f) != Status::ok) return;
    if (f.slot >= slots) fail("frame slot out of range");
    if (f.size > kFrameBytes) fail("frame larger than frame_bytes");
    if (f.data != pool_base + f.slot * kFrameBytes) fail("frame data is not its slot's buffer");
    const std::size_t metadata_size = f.metadata == nullptr ? 0 : f.metadata_bytes;
    if (metadata_size > kFuzzMetadataBytes) fail("metadata larger than its area");
    if (metadata_size != 0) {
      const auto* area = reinterpret_cast<const std::byte*>(view.frame_metadata(f.slot));
      if (f.metadata != area) fail("metadata outside its slot's area");
      unsigned sum = 0;
      for (std::size_t b = 0; b < metadata_size; ++b) sum += static_cast<unsigned>(f.metadata[b]);
      if (sum == 0xffffffffU) std::fprintf(stderr, "%u\n", sum);
    }
    if (f.has_tensor) {
      const auto span = tensor_span(f.tensor);
      if (!span || *span > f.size) fail("a tensor larger than its frame was handed out");
      if (f.tensor_invalid) fail("a tensor handed out as invalid");
      check_elements(f.tensor, f.size, f.data);
    }
    // A frame is always of the reader's current epoch. That epoch may move on within this read
    // only when the end of the old one was reported already (producer_gone once per ended epoch).
    if (f.epoch != cursor.epoch) fail("frame of another epoch");
    if (cursor.epoch != epoch_before && !gone_before) fail("new epoch without producer_gone");
    if (keep) {
      kept.push_back(f);
    } else {
      (void)release_frame(view, pool, cursor, held, f, nullptr);
    }
  };

  Input in{data, size, 2};
  std::uint8_t op = 0;
  std::uint8_t index = 0;
  std::uint64_t v = 0;
  while (in.take(op, index, v)) {
    Slot& slot = view.slot(index % slots);
    FrameHeader& fh = view.frame_header(index % slots);
    switch (op % 24) {
      case 0:
        p.head.store(v);
        break;  // any word: sequence and slot both hostile
      case 1:
        view.log(index).store(v);
        break;
      case 2:
        slot.state.store(v);
        break;
      case 3:
        slot.sequence.store(v);
        break;
      case 4:
        slot.epoch.store(v);
        break;
      case 5:
        slot.bytes.store(v);
        break;
      case 6:  // and the descriptor's flags word (whether the frame header is read)
        slot.buffer_index.store(static_cast<std::uint32_t>(v));
        slot.flags.store(static_cast<std::uint32_t>(v >> 32));
        break;
      case 7:  // the publish time the reader's delay histogram is measured from
        slot.timestamp_ns.store(v);
        break;
      case 8:
        p.lease_word.store(v);
        break;
      case 9:
        entry.lease_word.store(v);
        break;
      case 10:
        read_once((index & 1) != 0);
        break;
      case 11:
        release_kept();
        break;
      case 12: {
        // A well-formed publication of sequence (v & 0xffff) into the slot, as the producer would.
        const std::uint64_t seq = v & 0xffff;
        const std::uint64_t w = slot.state.load();
        slot.sequence.store(seq);
        slot.epoch.store(LeaseWord::generation(p.lease_word.load()));
        slot.bytes.store((v >> 16) % (kFrameBytes + 1));
        slot.buffer_index.store(index % slots);
        slot.flags.store(DescriptorFlags::kHeader);  // the header below is this frame's
        fh.sequence.store(seq);
        fh.metadata_bytes.store(static_cast<std::uint32_t>((v >> 40) % (kFuzzMetadataBytes + 1)));
        slot.state.store(SlotWord::make(SlotWord::generation(w) + 1, false, 0));
        view.log(seq).store(LogWord::make(seq, index % slots));
        p.head.store(LogWord::make(seq, index % slots));  // head is a LogWord too
        break;
      }
      // Frame header words, hostile.
      case 13:
        fh.sequence.store(v);
        break;
      case 14:
        fh.capture_time_ns.store(v);
        break;
      case 15:
        fh.tensor_word.store(v);
        break;
      case 16:
        fh.byte_offset.store(v);
        break;
      case 17:
        fh.metadata_bytes.store(static_cast<std::uint32_t>(v));
        break;
      case 18:
        fh.shape[(v >> 60) % kMaxTensorDims].store(static_cast<std::int64_t>(v << 4) >> 4);
        break;
      case 19:
        fh.strides[(v >> 60) % kMaxTensorDims].store(static_cast<std::int64_t>(v << 4) >> 4);
        break;
      case 20:  // a plausible descriptor: a known-looking type, up to 8 dimensions
        fh.tensor_word.store(TensorWord::make(static_cast<std::uint8_t>(v & 7),
                                              static_cast<std::uint8_t>(8U << ((v >> 3) & 3)),
                                              static_cast<std::uint8_t>((v >> 5) % 9)));
        fh.byte_offset.store((v >> 16) & 0x1ff);
        break;
      case 21:  // attach the header to the slot's current publication
        fh.sequence.store(slot.sequence.load());
        slot.flags.store(DescriptorFlags::kHeader);
        break;
      case 22:  // small dimensions, so that tensors validate and get visited
        fh.shape[(v >> 8) % kMaxTensorDims].store(static_cast<std::int8_t>(v & 0xff));
        break;
      case 23:
        fh.strides[(v >> 8) % kMaxTensorDims].store(static_cast<std::int8_t>(v & 0xff));
        break;
    }
  }
  for (int i = 0; i < 4; ++i) read_once(false);
  release_kept();
  if (frames_held(held.load()) != 0) fail("frames left held after every release");
  std::free(base);
  return 0;
}
