// cursor.hpp — a reader's half of the ring, apart from object lifetime: which frame to read next
// (latest or sequential policy), the log lookup, the claim (R3) with its re-check (R4), overruns,
// the frame header, and the release (R5).
//
// Roles. One reader (the holder of reader entry `index`) moves its CursorState on one thread at a
// time; release_frame may run on any thread (it touches only the slot word, `held` and telemetry
// counters of the entry). Everything in shared memory is read through the SegmentView and is
// validated before use: a hostile producer may write any value at any time (descriptor_fuzz).
// Guarantees. A frame handed out has slot < slots, size <= frame_bytes, its own slot's buffer and
// the cursor's epoch; a frame of an ended epoch is never handed out once the new epoch is visible.
// next_frame runs a bounded number of steps whatever head says. Nothing here allocates, locks,
// throws or makes a system call (the pool's CUDA calls aside).
#pragma once

#include <atomic>
#include <cstdint>

#include "backend/pool.hpp"
#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"
#include "ring/claim_clock.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// A reader's position in the channel. Only the reader's thread reads or writes it.
struct CursorState {
  ReadPolicy policy = ReadPolicy::latest;
  std::uint32_t index = 0;             // entry in the reader table
  std::uint64_t bit = 0;               // SlotWord::bit(index)
  std::uint64_t entry_generation = 0;  // the entry's lease generation while we hold it
  std::uint64_t last_sequence = 0;     // newest sequence read (0: none yet)
  std::uint64_t epoch = 0;             // producer epoch last seen
  bool gone_reported = false;          // producer_gone already returned for this epoch's end
  std::uint64_t overruns = 0;
  std::uint64_t observer_dropped = 0;  // observers: copies refused by the re-check (observe.hpp)
  ClaimClock clock;                    // the claim's clock (acquired_ns, the delay histogram)
};

// `held` counts the frames a reader holds in its low bits; the owner may keep flags above
// kHeldFramesMask (ReaderCore keeps its handle bit there), which the cursor ignores.
inline constexpr std::uint32_t kHeldFramesMask = 0x7fffffffU;
inline std::uint32_t frames_held(std::uint32_t held_word) noexcept {
  return held_word & kHeldFramesMask;
}

// The producer's epoch and state as this cursor last saw them: producer_gone once per ended
// epoch, no_frame once closed, ok to read on. Reads the producer's lease word only.
Status follow_epoch(const SegmentView& view, CursorState& state) noexcept;

// The first sequence a read walks to, given `head`: the newest (latest) or the next one
// (sequential), never older than the publication log holds.
inline std::uint64_t walk_start(const SegmentView& view, const CursorState& state,
                                std::uint64_t head) noexcept {
  std::uint64_t target = state.policy == ReadPolicy::latest ? head : state.last_sequence + 1;
  if (state.policy == ReadPolicy::sequential && head - target >= view.geo.log_size) {
    target = head - view.geo.log_size + 1;  // older entries are certainly overwritten
  }
  return target;
}

// True when entry `state.index` no longer carries our lease generation (we were reaped).
bool reader_evicted(const SegmentView& view, const CursorState& state) noexcept;

// Takes slot i's frame header into `f` if it belongs to publication `seq` (f.size must be set).
void read_frame_header(const SegmentView& view, std::uint32_t i, std::uint64_t seq,
                       FrameFields& f) noexcept;

// Claims the frame of sequence `target` (found in `head` or the log) and fills `f`, which must be
// default-initialised (a failed claim writes nothing into it: several may precede one success).
// Status::ok, or no_frame with lost = true (the frame is gone: overwritten, being rewritten, of
// another epoch), or backend_error with lost = false (the pool could not map the buffer).
Status claim_frame(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                   std::uint64_t target, std::uint64_t head, bool& lost, FrameFields& f) noexcept;

// try_read's work: the epoch and close reporting, max_held, then the policy's walk. On Status::ok
// `f` (default-initialised by the caller) is a claimed frame and `held` was incremented; the
// entry's telemetry is updated.
Status next_frame(const SegmentView& view, ReaderPool& pool, CursorState& state,
                  std::atomic<std::uint32_t>& held, FrameFields& f) noexcept;

// Gives frame `f` back: the pool's release fence, (R5) unless evicted, the entry's telemetry, and
// last the decrement of `held` (acq_rel), whose previous value is returned: after it the caller
// may no longer rely on the segment being mapped unless it still owns a reference.
std::uint32_t release_frame(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                            std::atomic<std::uint32_t>& held, const FrameFields& f,
                            CudaStream stream) noexcept;

}  // namespace ipcring::detail
