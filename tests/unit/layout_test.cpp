// layout_test.cpp — pins the shared-memory layout to its version. Changing any size or offset of
// layout.hpp without bumping kLayoutVersion (and recording the new fingerprint here) fails.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "segment/layout.hpp"
#include "segment/segment.hpp"

using namespace ipcring::detail;

namespace {

// FNV-1a over every (size, offset) that openers rely on.
std::uint64_t layout_fingerprint() {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&](std::uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 0x100000001b3ULL;
    }
  };
#define PIN(type, field) mix(offsetof(type, field))
  mix(sizeof(SegmentHeader));
  PIN(SegmentHeader, magic);
  PIN(SegmentHeader, layout_version);
  PIN(SegmentHeader, endian_mark);
  PIN(SegmentHeader, header_bytes);
  PIN(SegmentHeader, libc_id);
  PIN(SegmentHeader, slots);
  PIN(SegmentHeader, max_readers);
  PIN(SegmentHeader, max_held);
  PIN(SegmentHeader, log_size);
  PIN(SegmentHeader, backend);
  PIN(SegmentHeader, mode);
  PIN(SegmentHeader, frame_bytes);
  PIN(SegmentHeader, segment_bytes);
  PIN(SegmentHeader, log_offset);
  PIN(SegmentHeader, cuda_offset);
  PIN(SegmentHeader, cuda_uuid);
  PIN(SegmentHeader, name);
  PIN(SegmentHeader, metadata_bytes);
  PIN(SegmentHeader, frames_offset);
  PIN(SegmentHeader, object_bytes);
  PIN(SegmentHeader, frame_header_offset);
  PIN(SegmentHeader, frame_header_stride);
  mix(sizeof(ProducerBlock));
  PIN(ProducerBlock, lease);
  PIN(ProducerBlock, lease_word);
  PIN(ProducerBlock, instance_id);
  PIN(ProducerBlock, pid);
  PIN(ProducerBlock, head);
  PIN(ProducerBlock, wake);
  PIN(ProducerBlock, published);
  PIN(ProducerBlock, waiting);
  mix(sizeof(ReaderEntry));
  PIN(ReaderEntry, lease);
  PIN(ReaderEntry, lease_word);
  PIN(ReaderEntry, instance_id);
  PIN(ReaderEntry, pid);
  PIN(ReaderEntry, frames_read);
  PIN(ReaderEntry, held);
  PIN(ReaderEntry, hold_histogram);
  PIN(ReaderEntry, delay_histogram);
  mix(sizeof(Slot));
  PIN(Slot, state);
  PIN(Slot, sequence);
  PIN(Slot, epoch);
  PIN(Slot, bytes);
  PIN(Slot, timestamp_ns);
  PIN(Slot, buffer_index);
  PIN(Slot, flags);
  PIN(Slot, reserved0);
  PIN(Slot, reserved1);
  mix(sizeof(FrameHeader));
  PIN(FrameHeader, sequence);
  PIN(FrameHeader, capture_time_ns);
  PIN(FrameHeader, tensor_word);
  PIN(FrameHeader, byte_offset);
  PIN(FrameHeader, metadata_bytes);
  PIN(FrameHeader, shape);
  PIN(FrameHeader, strides);
  mix(sizeof(CudaSlot));
  PIN(CudaSlot, memory_handle);
  PIN(CudaSlot, write_done_handle);
  PIN(CudaSlot, memory_generation);
  PIN(CudaSlot, release_recorded);
  PIN(CudaSlot, fence_epoch);
  PIN(CudaSlot, fence_generation);
  PIN(CudaSlot, release_fence);
#undef PIN
  // The packing of the shared words is part of the layout too.
  mix(SlotWord::kGenShift);
  mix(SlotWord::kWriting);
  mix(SlotWord::kMaskBits);
  mix(LogWord::kSlotBits);
  mix(kMaxReaders);
  mix(kMaxSlots);
  mix(kLine);
  mix(kMutexBytes);
  mix(TensorWord::make(0x12, 0x34, 0x56));
  mix(kTensorDims);
  mix(kDelayBuckets);
  mix(DelayBucket::lower(kDelayBuckets - 1));
  return h;
}

}  // namespace

TEST_CASE("the shared-memory layout matches its version") {
  const std::uint64_t fp = layout_fingerprint();
  INFO("layout fingerprint is 0x"
       << std::hex << fp
       << ": if you changed the layout on purpose, bump kLayoutVersion and record it here");
  CHECK(kLayoutVersion == 6);  // 6: sealed memfds handed out; two CUDA fence words per entry
  CHECK(fp == 0xb8f88f30926356dcULL);
}

TEST_CASE("geometry places every block on its own lines, within the segment") {
  for (std::uint32_t slots : {1u, 8u, 1024u}) {
    for (std::uint32_t readers : {1u, 32u}) {
      for (std::uint32_t backend : {1u, 2u}) {
        const Geometry g = compute_geometry(slots, readers, 1, 1 << 20, backend, 4096);
        CHECK(g.producer_offset % kLine == 0);
        CHECK(g.reader_table_offset % kLine == 0);
        CHECK(g.slot_table_offset % kLine == 0);
        CHECK(g.log_offset % kLine == 0);
        CHECK(g.segment_bytes % 4096 == 0);
        CHECK((g.log_size & (g.log_size - 1)) == 0);
        CHECK(g.log_size >= 2 * slots);
        CHECK(g.log_offset + std::uint64_t{g.log_size} * 8 <= g.segment_bytes);
        CHECK(g.frame_header_offset % kLine == 0);
        CHECK(g.frame_header_stride % kLine == 0);
        CHECK(g.frame_header_stride == sizeof(FrameHeader) + 256);
        CHECK(g.frame_header_offset >= g.log_offset + std::uint64_t{g.log_size} * 8);
        CHECK(g.frame_header_offset + std::uint64_t{slots} * g.frame_header_stride <=
              g.segment_bytes);
        if (backend == 2) {
          CHECK(g.cuda_offset >= g.log_offset + std::uint64_t{g.log_size} * 8);
          CHECK(g.frame_header_offset >= g.cuda_offset + std::uint64_t{slots} * sizeof(CudaSlot));
          CHECK(g.cuda_offset + std::uint64_t{slots} * sizeof(CudaSlot) <= g.segment_bytes);
          CHECK(g.frames_segment_bytes == 0);
        } else {
          CHECK(g.frame_stride % 4096 == 0);
          CHECK(g.frames_segment_bytes == g.frame_stride * slots);
        }
        // One object: the frame pool follows the control segment, page-aligned.
        CHECK(g.frames_offset == g.segment_bytes);
        CHECK(g.frame_header_offset + std::uint64_t{slots} * g.frame_header_stride <=
              g.frames_offset);  // the frame headers are in the control part
        CHECK(g.frames_offset % 4096 == 0);
        CHECK(g.object_bytes == g.frames_offset + g.frames_segment_bytes);
      }
    }
  }
}

TEST_CASE("state word packing round-trips") {
  const std::uint64_t w = SlotWord::make(SlotWord::kGenMask, true, 0x80000001ULL);
  CHECK(SlotWord::generation(w) == SlotWord::kGenMask);
  CHECK(SlotWord::writing(w));
  CHECK(SlotWord::mask(w) == 0x80000001ULL);
  CHECK(SlotWord::generation(SlotWord::make(SlotWord::kGenMask + 1, false, 0)) == 0);  // wraps
  CHECK(LogWord::sequence(LogWord::make(0xffffffffffffULL, 1023)) == 0xffffffffffffULL);
  CHECK(LogWord::slot(LogWord::make(77, 1023)) == 1023);
  CHECK(LeaseWord::generation(LeaseWord::make(5, LeaseState::closed)) == 5);
  CHECK(LeaseWord::state(LeaseWord::make(5, LeaseState::closed)) == 2);
}
