// writer.cpp — the producer's half of the ring (see writer.hpp). The tags (P1)...(P6) are
// ring.hpp's and docs/protocol.md's.
#include "ring/writer.hpp"

#include "common/cacheline.hpp"
#include "common/clock.hpp"
#include "ring/ablate.hpp"
#include "ring/ring.hpp"
#include "wait/futex.hpp"

namespace ipcring::detail {

std::uint32_t find_free(const SegmentView& view, std::uint32_t cursor, std::uint32_t newest_slot,
                        bool allow_newest, std::uint64_t* observed) noexcept {
  // Round-robin from the slot after the last one claimed: the oldest frames go first, and the
  // newest frame stays readable for latest-policy readers as long as another slot is free.
  const std::uint32_t n = view.geo.slots;
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (std::uint32_t k = 1; k <= n; ++k) {
    const std::uint32_t i = (cursor + k) % n;
    if (i == newest_slot && !allow_newest) continue;
    if (claim_for_write(view.slot(i))) return i;  // (P1)
    if (observed != nullptr) {
      // A hash of the busy words this pass saw (relaxed: only compared with the next pass).
      h = (h ^ (view.slot(i).state.load(std::memory_order_relaxed) + i)) * 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 31;
    }
  }
  if (observed != nullptr) *observed = h;
  return kNoSlot;
}

std::uint32_t claim_free_slot(const SegmentView& view, WriterState& state,
                              const ReapHook& reap) noexcept {
  std::uint32_t i = find_free(view, state.cursor, state.newest_slot, false);
  if (i == kNoSlot) {
    reap();
    i = find_free(view, state.cursor, state.newest_slot, false);
    // A scan is not atomic: readers can release a slot behind it and claim one ahead of it, so
    // a pass can see every slot busy although one was free at every instant (the model finds
    // this with three readers; model/ipcring.pml, case loan-three-scans-three-readers). Each
    // further failing pass needs a reader to claim (perhaps only transiently) a frame it had not
    // read; without new publications a reader walks at most the publication log, so there are at
    // most max_readers * (log_size + 1) such claims: scanning that many more times keeps the sizing
    // rule's promise. Normally the first pass succeeds.
    // Where the sizing rule does not hold (no promise is made), a pass that sees exactly the
    // words of the previous one ends the search, so an undersized channel fails fast. Not where
    // it holds: a scan is no snapshot, and a lagging reader can make two passes see the same
    // words (the model refutes that early end: docs/model.md, finding 1).
    const bool sizing_holds = std::uint64_t{view.geo.slots} >=
                              std::uint64_t{view.geo.max_readers} * view.geo.max_held + 2;
    const std::uint64_t passes =
        std::uint64_t{view.geo.max_readers} * (std::uint64_t{view.geo.log_size} + 1) + 1;
    std::uint64_t previous = 0;
    for (std::uint64_t pass = 0; i == kNoSlot && pass < passes; ++pass) {
      std::uint64_t seen = 0;
      i = find_free(view, state.cursor, state.newest_slot, true, &seen);
      if (i == kNoSlot && !sizing_holds && pass > 0 && seen == previous) break;
      previous = seen;
    }
  }
  ProducerBlock& p = view.producer();
  if (i == kNoSlot) {
    ++state.loan_failures;
    p.loan_failures.store(state.loan_failures, std::memory_order_relaxed);
    return kNoSlot;
  }
  state.cursor = i;
  return i;
}

Status prepare_slot(const SegmentView& view, ProducerPool& pool, WriterState& state,
                    std::uint32_t i, CudaStream stream) noexcept {
  Slot& slot = view.slot(i);
  // Before the descriptor is touched: a slot refused here (CUDA: a reader's GPU work may still
  // read it) keeps its published frame.
  if (const Status st = pool.prepare_write(i, stream); st != Status::ok) {
    unclaim(slot);
    return st;
  }
  // The slot is ours (W): nobody reads the descriptor until we publish. Zero the sequence so a
  // dropped loan leaves an empty slot.
  slot.sequence.store(0, std::memory_order_relaxed);
  // The frame header starts empty: no tensor, no capture time, no metadata (relaxed: ordered
  // before readers by (P2), like the descriptor).
  FrameHeader& fh = view.frame_header(i);
  fh.sequence.store(0, std::memory_order_relaxed);
  fh.capture_time_ns.store(0, std::memory_order_relaxed);
  fh.tensor_word.store(0, std::memory_order_relaxed);
  fh.metadata_bytes.store(0, std::memory_order_relaxed);
  if (state.newest_slot == i) state.newest_slot = kNoSlot;
  return Status::ok;
}

Status publish_frame(const SegmentView& view, ProducerPool& pool, WriterState& state,
                     std::uint32_t i, std::uint64_t bytes, CudaStream stream,
                     std::uint64_t& sequence) noexcept {
  const std::uint64_t seq = state.next_sequence;
  if (const Status st = pool.before_publish(i, stream, seq); st != Status::ok) return st;
  ++state.next_sequence;
  Slot& slot = view.slot(i);
  // Descriptor: relaxed stores, made visible by the release store (P2) that follows.
  slot.sequence.store(seq, std::memory_order_relaxed);
  slot.epoch.store(state.epoch, std::memory_order_relaxed);
  slot.bytes.store(bytes, std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  slot.timestamp_ns.store(now, std::memory_order_relaxed);
  slot.buffer_index.store(i, std::memory_order_relaxed);
  // The frame header names the publication it belongs to; readers take it only on a match, and
  // read its line only if the descriptor says it was written (our own recent stores: no transfer).
  FrameHeader& fh = view.frame_header(i);
  const bool header = fh.capture_time_ns.load(std::memory_order_relaxed) != 0 ||
                      fh.tensor_word.load(std::memory_order_relaxed) != 0 ||
                      fh.metadata_bytes.load(std::memory_order_relaxed) != 0;
  slot.flags.store(header ? DescriptorFlags::kHeader : 0, std::memory_order_relaxed);
  fh.sequence.store(seq, std::memory_order_relaxed);
  publish_slot(slot);  // (P2) release, pairs with (R3)
  ProducerBlock& p = view.producer();
  // (P3) release, pairs with (R2): a reader that finds this log entry finds the slot published.
  view.log(seq).store(LogWord::make(seq, i), std::memory_order_release);
  // (P4) release, pairs with (R1): a reader that sees head = (seq, i) finds the slot published
  // (P2) and the log entry (P3).
  p.head.store(LogWord::make(seq, i), std::memory_order_release);
  ++state.published;
  p.published.store(state.published, std::memory_order_relaxed);  // telemetry; only we write it
  p.last_publish_ns.store(now, std::memory_order_relaxed);
  // (P5) seq_cst RMW, then (P6) seq_cst load: with the reader's (W1) seq_cst setting of its bit
  // in `waiting` before its (W2) load of `wake`, either the reader sees the new wake value (and
  // does not sleep) or we see waiters > 0 (and wake it). No system call when nobody sleeps.
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  if (p.waiting.load(std::memory_order_seq_cst) != 0) futex_wake_all(p.wake);
  // The line a reader's claim reads next (the state word and the descriptor) goes to the shared
  // cache, so the claim needs no transfer from this core (common/cacheline.hpp). Last, after the
  // locked RMW above: a locked instruction waits for an earlier demote to complete, which would
  // put that wait on every publish.
  if constexpr (!ablated(Ablate::demote)) demote_line(&slot);
  state.newest_slot = i;
  sequence = seq;
  return Status::ok;
}

}  // namespace ipcring::detail
