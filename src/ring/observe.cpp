// observe.cpp — an observer's read (see observe.hpp). The tags (O1)...(O3) are observe.hpp's, the
// others ring.hpp's.
#include "ring/observe.hpp"

#include <atomic>
#include <cstring>

#include "common/clock.hpp"

namespace ipcring::detail {

Status observe_copy(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                    std::uint64_t target, std::uint64_t head, const ObserverBuffer& buffer,
                    bool& lost, Observation& seen, FrameFields& f) noexcept {
  lost = true;
  // The newest frame's slot travels in head itself; older ones are found in the log.
  std::uint64_t e = head;
  if (LogWord::sequence(head) != target) {
    // (R2) acquire, pairs with (P3).
    e = view.log(target).load(std::memory_order_acquire);
    if (LogWord::sequence(e) != target) return Status::no_frame;  // overwritten in the log
  }
  const std::uint32_t i = LogWord::slot(e);
  if (i >= view.geo.slots) return Status::no_frame;  // corrupt entry: never index with it
  Slot& slot = view.slot(i);
  // (O1) acquire, pairs with (P2).
  const std::uint64_t word = slot.state.load(std::memory_order_acquire);
  if (SlotWord::writing(word)) return Status::no_frame;  // being rewritten: the frame is gone
  const std::uint64_t seq = slot.sequence.load(std::memory_order_relaxed);
  const std::uint64_t frame_epoch = slot.epoch.load(std::memory_order_relaxed);
  const std::uint64_t bytes = slot.bytes.load(std::memory_order_relaxed);
  const std::uint32_t buffer_index = slot.buffer_index.load(std::memory_order_relaxed);
  const std::uint32_t flags = slot.flags.load(std::memory_order_relaxed);
  // Validated before anything is copied: the size bounds the copy into our buffer.
  if (seq != target || frame_epoch != state.epoch || bytes > view.geo.frame_bytes ||
      bytes > buffer.frame_bytes || buffer_index != i) {
    return Status::no_frame;
  }
  const std::byte* data =
      pool.buffer(i, state.epoch, view.producer().instance_id.load(std::memory_order_relaxed));
  if (data == nullptr) {
    lost = false;
    return Status::backend_error;
  }
  // (O2) the copy: plain loads of bytes the producer may be rewriting (observe.hpp).
  std::memcpy(buffer.bytes, data, bytes);
  f.size = bytes;
  if ((flags & DescriptorFlags::kHeader) != 0) read_frame_header(view, i, seq, f);
  if (f.metadata != nullptr) {
    // read_frame_header bounded metadata_bytes by the segment's metadata_bytes, our capacity.
    if (f.metadata_bytes > buffer.metadata_bytes) return Status::no_frame;
    std::memcpy(buffer.bytes + buffer.frame_bytes, f.metadata, f.metadata_bytes);
    f.metadata = buffer.bytes + buffer.frame_bytes;
  }
  lost = false;
  f.data = buffer.bytes;
  f.sequence = seq;
  f.epoch = frame_epoch;
  f.timestamp_ns = slot.timestamp_ns.load(std::memory_order_relaxed);
  f.generation = SlotWord::generation(word);
  f.slot = i;
  seen.slot = i;
  seen.generation = SlotWord::generation(word);
  seen.sequence = seq;
  seen.epoch = frame_epoch;
  return Status::ok;
}

bool observe_confirm(const SegmentView& view, const CursorState& state,
                     const Observation& seen) noexcept {
  if (seen.slot >= view.geo.slots) return false;
  Slot& slot = view.slot(seen.slot);
  // (O3) acquire fence, pairs with (P1o): a copy that read any write made after the producer's
  // next claim of this slot sees that claim (or later) in the load below.
#if !defined(__SANITIZE_THREAD__)
  std::atomic_thread_fence(std::memory_order_acquire);
#endif  // ThreadSanitizer models no fences (GCC refuses them, -Wtsan); its build runs no observer
  // acquire: pairs with unclaim's release (a dropped loan keeps the generation; the sequence it
  // zeroed is then visible below).
  const std::uint64_t word = slot.state.load(std::memory_order_acquire);
  if (SlotWord::writing(word) || SlotWord::generation(word) != seen.generation) return false;
  if (slot.sequence.load(std::memory_order_relaxed) != seen.sequence) return false;
  if (slot.epoch.load(std::memory_order_relaxed) != seen.epoch) return false;
  // A takeover since the copy: a frame of an ended epoch is never returned once the new epoch is
  // visible (as claim_frame).
  return LeaseWord::generation(view.producer().lease_word.load(std::memory_order_acquire)) ==
         state.epoch;
}

namespace {

// A confirmed copy: the cursor moves to it (no entry, so no telemetry in shared memory).
void count_observed(CursorState& state, std::uint64_t target, FrameFields& f) noexcept {
  const std::uint64_t skipped = target - state.last_sequence - 1;
  f.skipped = state.last_sequence == 0 ? 0 : skipped;
  if (state.policy == ReadPolicy::sequential && state.last_sequence != 0) {
    state.overruns += skipped;
  }
  state.last_sequence = target;
  f.acquired_ns = monotonic_ns();
}

}  // namespace

Status next_observed(const SegmentView& view, ReaderPool& pool, CursorState& state,
                     const ObserverBuffer& buffer, FrameFields& f) noexcept {
  if (const Status st = follow_epoch(view, state); st != Status::ok) return st;
  ProducerBlock& p = view.producer();
  for (int attempt = 0; attempt < 8; ++attempt) {
    // (R1) acquire, pairs with (P4).
    const std::uint64_t head_word = p.head.load(std::memory_order_acquire);
    const std::uint64_t head = LogWord::sequence(head_word);
    if (head <= state.last_sequence) return Status::no_frame;
    std::uint64_t target = walk_start(view, state, head);
    // Counted, so that no value of head (read from shared memory) can make this loop long.
    for (std::uint64_t left = head - target + 1; left-- > 0; ++target) {
      bool lost = false;
      Observation seen;
      FrameFields copy;
      const Status r = observe_copy(view, pool, state, target, head_word, buffer, lost, seen, copy);
      if (r == Status::ok) {
        if (observe_confirm(view, state, seen)) {
          f = copy;
          count_observed(state, target, f);
          return r;
        }
        ++state.observer_dropped;  // overwritten while we copied: dropped, counted
      } else if (!lost) {
        return r;  // backend error
      }
      if (state.policy == ReadPolicy::latest) break;  // re-read head
    }
    if (state.policy == ReadPolicy::sequential) {
      // Everything up to head was gone: count it and wait for the next publication.
      if (state.last_sequence != 0) state.overruns += head - state.last_sequence;
      state.last_sequence = head;
      return Status::no_frame;
    }
  }
  return Status::no_frame;
}

}  // namespace ipcring::detail
