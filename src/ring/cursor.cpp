// cursor.cpp — a reader's half of the ring (see cursor.hpp). The tags (R1)...(R5) are ring.hpp's
// and docs/protocol.md's.
#include "ring/cursor.hpp"

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "common/clock.hpp"
#include "ring/ablate.hpp"
#include "ring/claim_clock.hpp"
#include "ring/ring.hpp"

namespace ipcring::detail {

namespace {

// PREFETCHW (0F 0D /1): a NOP on x86-64 CPUs without it; nothing elsewhere.
inline void prefetch_for_write(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("prefetchw %0" ::"m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

}  // namespace

// ---- the claim clock (claim_clock.hpp) ---------------------------------------------------------

bool tsc_clock_usable() noexcept {
#if defined(__x86_64__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_max(0x80000000U, nullptr) < 0x80000007U) return false;
    __cpuid(0x80000007U, a, b, c, d);
    if ((d & (1U << 8)) == 0) return false;  // no invariant TSC
    std::FILE* f =
        std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
    if (f == nullptr) return false;
    char source[32] = {};
    const bool read = std::fgets(source, sizeof source, f) != nullptr;
    std::fclose(f);
    return read && std::strcmp(source, "tsc\n") == 0;
  }();
  return usable;
#else
  return false;
#endif
}

std::uint64_t ClaimClock::anchor() noexcept {
#if defined(__x86_64__)
  const std::uint64_t t0 = __builtin_ia32_rdtsc();
  const std::uint64_t ns = monotonic_ns();
  const std::uint64_t t1 = __builtin_ia32_rdtsc();
  const std::uint64_t t = t0 + (t1 - t0) / 2;
  if (anchor_tsc_ == 0 || t <= anchor_tsc_ || ns <= anchor_ns_) {
    anchor_tsc_ = t;  // the first anchor (or a counter that went backwards: start again)
    anchor_ns_ = ns;
    mult_ = 0;
  } else if (ns - anchor_ns_ >= kAnchorNs / 2) {
    // The rate over the interval since the last anchor, when that is short enough for the
    // fixed-point division (dns < 2^31 ns, about 2 s; a longer one only moves the anchor) and
    // plausible (0.1 to 20 GHz): kept. An implausible rate turns the TSC off for this cursor.
    const std::uint64_t dt = t - anchor_tsc_, dns = ns - anchor_ns_;
    if (dns < (std::uint64_t{1} << 31)) {
      const std::uint64_t mult = (dns << 32) / dt;
      if (mult < (std::uint64_t{1} << 32) / 20 || mult > (std::uint64_t{10} << 32)) {
        use_tsc_ = false;
        mult_ = 0;
      } else {
        mult_ = mult;
        span_ticks_ = (kAnchorNs << 32) / mult;
      }
    }
    anchor_tsc_ = t;
    anchor_ns_ = ns;
  }
  // The clock read now, never below a value returned before.
  if (ns > last_ns_) last_ns_ = ns;
  return last_ns_;
#else
  return monotonic_ns();
#endif
}

bool reader_evicted(const SegmentView& view, const CursorState& state) noexcept {
  // (L4) acquire, pairs with the reaper's (L3): a reader that still sees its own generation active
  // has not been reaped.
  return view.reader(state.index).lease_word.load(std::memory_order_acquire) !=
         LeaseWord::make(state.entry_generation, LeaseState::active);
}

// Runs after the claim (R3) synchronised with the publication (P2), so relaxed loads see the
// producer's writes; every value is copied once and validated on the copy (a hostile producer may
// change the segment at any time, but never the copy): the metadata size against the segment's
// metadata_bytes, the tensor against the published size. The sequence is loaded first and compared
// last, after the copies, so a header being rewritten under us (only a broken producer does that
// while our bit is set) is not taken either.
void read_frame_header(const SegmentView& view, std::uint32_t i, std::uint64_t seq,
                       FrameFields& f) noexcept {
  const FrameHeader& fh = view.frame_header(i);
  if (fh.sequence.load(std::memory_order_relaxed) != seq) return;
  const std::uint64_t capture = fh.capture_time_ns.load(std::memory_order_relaxed);
  const std::uint32_t mb = fh.metadata_bytes.load(std::memory_order_relaxed);
  const std::uint64_t tw = fh.tensor_word.load(std::memory_order_relaxed);
  TensorDesc t;
  bool has_tensor = false;
  bool invalid = false;
  if (TensorWord::present(tw)) {
    t.dtype_code = TensorWord::code(tw);
    t.dtype_bits = TensorWord::bits(tw);
    t.ndim = TensorWord::ndim(tw);
    t.byte_offset = fh.byte_offset.load(std::memory_order_relaxed);
    static_assert(kTensorDims == kMaxTensorDims, "the frame header holds every dimension");
    if (t.ndim <= kMaxTensorDims) {
      for (std::uint8_t d = 0; d < t.ndim; ++d) {
        t.shape[d] = fh.shape[d].load(std::memory_order_relaxed);
        t.strides[d] = fh.strides[d].load(std::memory_order_relaxed);
      }
      has_tensor = tensor_fits(t, f.size);
    }
    invalid = !has_tensor;
  }
  if (fh.sequence.load(std::memory_order_relaxed) != seq) return;
  f.capture_time_ns = capture;
  if (mb <= view.geo.metadata_bytes) {
    f.metadata_bytes = mb;
    f.metadata = reinterpret_cast<const std::byte*>(view.frame_metadata(i));
  }
  f.has_tensor = has_tensor;
  f.tensor_invalid = invalid;
  if (has_tensor) f.tensor = t;
}

Status claim_frame(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                   std::uint64_t target, std::uint64_t head, bool& lost, FrameFields& f) noexcept {
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
  std::uint64_t generation = 0;
  // Ask for the slot's line for writing at once: the claim's load and its CAS then wait for one
  // transfer of the line, not for a shared copy and then an ownership upgrade (a second round trip
  // to the producer's core on the AMD guest where this was measured: docs/benchmarks.md). A hint
  // like the prefetch below: it loads no value and orders nothing.
  if constexpr (!ablated(Ablate::prefetchw)) prefetch_for_write(&slot);
  // Host frames: start fetching the payload's first line now, so that its transfer overlaps the
  // claim's instead of following it (a prefetch is a hint, not an access: it loads no value,
  // cannot fault, and a failed claim only wasted it). Not for CUDA: buffer() may import a handle
  // there, and the bytes are device memory.
  if constexpr (!ablated(Ablate::prefetch)) {
    if (view.geo.backend != kBackendCuda) __builtin_prefetch(pool.buffer(i, state.epoch, 0));
  }
  if constexpr (ablated(Ablate::claim_rmw)) {
    const std::uint64_t s = slot.state.load(std::memory_order_acquire);
    if (SlotWord::writing(s)) return Status::no_frame;
    generation = SlotWord::generation(s);
  } else {
    const ClaimResult c = claim_for_read(slot, state.bit, generation);  // (R3)
    if (c != ClaimResult::claimed) return Status::no_frame;
  }
  // The claim synchronised with the publication (P2) of generation `generation`: relaxed loads
  // of the descriptor see what was written before it, and it cannot change while our bit is set.
  // (R4) re-check: the claim may have landed on a later publication of the slot.
  const std::uint64_t seq = slot.sequence.load(std::memory_order_relaxed);
  const std::uint64_t frame_epoch = slot.epoch.load(std::memory_order_relaxed);
  const std::uint64_t bytes = slot.bytes.load(std::memory_order_relaxed);
  const std::uint32_t buffer = slot.buffer_index.load(std::memory_order_relaxed);
  const std::uint32_t flags = slot.flags.load(std::memory_order_relaxed);
  if (seq != target || frame_epoch != state.epoch || bytes > view.geo.frame_bytes || buffer != i) {
    release_read(slot, state.bit, generation);  // (R5)
    return Status::no_frame;
  }
  // A takeover may have completed since try_read read the epoch: a frame of an ended epoch is
  // never returned once the new epoch is visible (the model's epoch-recheck-removed case). The
  // producer's lease line is read-mostly, so this load costs little.
  if (!ablated(Ablate::epoch_recheck) && LeaseWord::generation(view.producer().lease_word.load(
                                             std::memory_order_acquire)) != state.epoch) {
    release_read(slot, state.bit, generation);
    return Status::no_frame;  // the next try_read reports producer_gone
  }
  const std::byte* data =
      pool.buffer(i, state.epoch, view.producer().instance_id.load(std::memory_order_relaxed));
  if (data == nullptr) {
    release_read(slot, state.bit, generation);
    lost = false;
    return Status::backend_error;
  }
  lost = false;
  f.data = data;
  f.size = bytes;
  f.sequence = seq;
  f.epoch = frame_epoch;
  f.timestamp_ns = slot.timestamp_ns.load(std::memory_order_relaxed);
  f.generation = generation;
  f.slot = i;
  // The frame header's line only when the producer wrote one for this frame: a plain frame
  // (no capture time, tensor or metadata) costs no transfer for it.
  if ((flags & DescriptorFlags::kHeader) != 0) read_frame_header(view, i, seq, f);
  return Status::ok;
}

Status follow_epoch(const SegmentView& view, CursorState& state) noexcept {
  const std::uint64_t pw = view.producer().lease_word.load(std::memory_order_acquire);
  if (LeaseWord::generation(pw) != state.epoch) {
    // A new producer took the channel over: report the end of the old epoch once (unless the
    // probe or the closed state reported it already). Frames of the old epoch are never returned
    // again (the descriptor's epoch is checked at every claim).
    const bool reported = state.gone_reported;
    state.epoch = LeaseWord::generation(pw);
    state.gone_reported = false;
    if (!reported) return Status::producer_gone;
  }
  if (LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed)) {
    if (!state.gone_reported) {
      state.gone_reported = true;
      return Status::producer_gone;
    }
    return Status::no_frame;
  }
  return Status::ok;
}

namespace {

// A claimed frame: the cursor moves to it, the frame is counted, the reader's telemetry updated.
void count_claim(const SegmentView& view, CursorState& state, std::atomic<std::uint32_t>& held,
                 std::uint64_t target, FrameFields& f) noexcept {
  ReaderEntry& entry = view.reader(state.index);
  const std::uint64_t skipped = target - state.last_sequence - 1;
  f.skipped = state.last_sequence == 0 ? 0 : skipped;
  if (state.policy == ReadPolicy::sequential && state.last_sequence != 0) {
    state.overruns += skipped;
    entry.overruns.store(state.overruns, std::memory_order_relaxed);
  }
  state.last_sequence = target;
  if constexpr (ablated(Ablate::held_rmw)) {
    held.store(held.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  } else {
    held.fetch_add(1, std::memory_order_relaxed);
  }
  // The claim clock: CLOCK_MONOTONIC from the TSC where it can be (claim_clock.hpp).
  const std::uint64_t now = ablated(Ablate::clock)       ? f.timestamp_ns
                            : ablated(Ablate::tsc_clock) ? monotonic_ns()
                                                         : state.clock.now_ns();
  f.acquired_ns = now;
  if constexpr (ablated(Ablate::telemetry)) return;
  // Delay publish -> claim: the publish time is the producer's monotonic_ns() (same clock,
  // same machine); a timestamp in the future (hostile, or another boot) counts as 0.
  const std::uint64_t published_ns = f.timestamp_ns;
  // Only this reader writes the histogram: a relaxed load and store, no locked RMW.
  std::atomic<std::uint64_t>& bucket =
      entry.delay_histogram[DelayBucket::of(now > published_ns ? now - published_ns : 0)];
  bucket.store(bucket.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Telemetry: only this reader writes these (relaxed; read as estimates by inspect).
  entry.frames_read.store(entry.frames_read.load(std::memory_order_relaxed) + 1,
                          std::memory_order_relaxed);
  entry.last_sequence.store(target, std::memory_order_relaxed);
  entry.last_read_ns.store(now, std::memory_order_relaxed);
  entry.held.store(frames_held(held.load(std::memory_order_relaxed)), std::memory_order_relaxed);
}

}  // namespace

Status next_frame(const SegmentView& view, ReaderPool& pool, CursorState& state,
                  std::atomic<std::uint32_t>& held, FrameFields& f) noexcept {
  if (!ablated(Ablate::evicted) && reader_evicted(view, state)) return Status::evicted;
  if constexpr (!ablated(Ablate::epoch)) {
    if (const Status st = follow_epoch(view, state); st != Status::ok) return st;
  }
  ProducerBlock& p = view.producer();
  if (frames_held(held.load(std::memory_order_relaxed)) >= view.geo.max_held) {
    return Status::max_held;
  }
  ReaderEntry& entry = view.reader(state.index);
  // Latest: a bounded number of tries (head moves while we claim). Sequential: walk forward from
  // the next sequence, counting frames that are gone as overruns; at most log_size steps.
  for (int attempt = 0; attempt < 8; ++attempt) {
    // (R1) acquire, pairs with (P4): the slot of `head` is published and the log entries up to
    // it are visible.
    const std::uint64_t head_word = p.head.load(std::memory_order_acquire);
    const std::uint64_t head = LogWord::sequence(head_word);
    if (head <= state.last_sequence) return Status::no_frame;
    std::uint64_t target = walk_start(view, state, head);
    // Counted, so that no value of head (read from shared memory) can make this loop long.
    for (std::uint64_t left = head - target + 1; left-- > 0; ++target) {
      bool lost = false;
      const Status r = claim_frame(view, pool, state, target, head_word, lost, f);
      if (r == Status::ok) {
        count_claim(view, state, held, target, f);
        return r;
      }
      if (!lost) return r;                            // backend error
      if (state.policy == ReadPolicy::latest) break;  // re-read head
    }
    if (state.policy == ReadPolicy::sequential) {
      // Everything up to head was gone: count it and wait for the next publication.
      const std::uint64_t skipped = head - state.last_sequence;
      if (state.last_sequence != 0) {
        state.overruns += skipped;
        entry.overruns.store(state.overruns, std::memory_order_relaxed);
      }
      state.last_sequence = head;
      return Status::no_frame;
    }
  }
  return Status::no_frame;
}

std::uint32_t release_frame(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                            std::atomic<std::uint32_t>& held, const FrameFields& f,
                            CudaStream stream) noexcept {
  pool.release_fence(f.slot, state.index, stream);
  if (!reader_evicted(view, state)) {
    release_read(view.slot(f.slot), state.bit, f.generation);  // (R5)
  }
  ReaderEntry& entry = view.reader(state.index);
  // Telemetry before the decrement: once `held` drops, the owner may unmap the segment (the last
  // frame of a reader whose handle is gone). Only this reader's frames change `held`, so the value
  // stored is exact unless another of its frames is released at the same moment (an estimate).
  entry.held.store(frames_held(held.load(std::memory_order_relaxed)) - 1,
                   std::memory_order_relaxed);
  const std::uint64_t hold = monotonic_ns() - f.acquired_ns;
  const unsigned bucket =
      hold == 0 ? 0
                : static_cast<unsigned>(std::min<std::uint64_t>(
                      kHoldBuckets - 1, static_cast<std::uint64_t>(std::bit_width(hold)) - 1));
  entry.hold_histogram[bucket].fetch_add(1, std::memory_order_relaxed);
  // acq_rel: our uses of the segment happen-before the teardown of whoever sees the count reach
  // zero (ReaderCore: the handle's destructor, or this caller when it was the last frame).
  return held.fetch_sub(1, std::memory_order_acq_rel);
}

}  // namespace ipcring::detail
