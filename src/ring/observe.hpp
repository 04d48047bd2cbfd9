// observe.hpp — an observer's read: a frame copied out of the ring without taking a reader entry
// and without setting a bit in any slot word (ReaderOptions::observer; docs/observers.md).
//
// Roles. An observer (a tool, a monitor, a recorder that must not disturb the channel) reads the
// ring like a seqlock reader: it never writes shared memory, so the producer may overwrite the slot
// while the observer copies it. Only the observer's thread moves its CursorState.
//
// The algorithm, per frame (the tags pair with ring.hpp's):
//   (O1) acquire load of the slot's state word, pairs with (P2): W clear means a publication is
//        complete, and its descriptor, header and payload (written before P2) are visible.
//   (O2) the descriptor is read (relaxed) and validated against the wanted publication (sequence,
//        epoch, size, buffer); the payload, the frame header and the metadata are copied into the
//        observer's private buffer. Plain loads: the producer may be writing them at this moment,
//        so nothing copied is interpreted before (O3) said the copy is whole.
//   (O3) acquire fence, pairs with the producer's (P1o) release fence after its claim (P1): if any
//        byte copied in (O2) came from a write after the producer's next claim of the slot, the
//        state word loaded next is that claim's word (W set) or a later one. Then an acquire load
//        of the state word (it pairs with a dropped loan's release in unclaim: the descriptor's
//        sequence zeroed by the claim is then visible), and the re-check: the same generation, W
//        clear, the descriptor's sequence and epoch unchanged, the producer's epoch unchanged.
//        Reader bits may change meanwhile (other readers claim and release): they are not compared.
//   A copy that fails (O3) is dropped and counted (CursorState::observer_dropped).
// The copy is a racy read by design, as in every seqlock: the C++ memory model calls the plain
// bytes a data race; what (P1o)/(O3) rely on is the hardware's ordering of the fences (a compiler
// barrier on x86, dmb on Arm), and the copy's bytes are never used before the re-check passed.
// Nothing here allocates, locks, throws or makes a system call; every value read from the segment
// is validated before use.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/pool.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"
#include "ring/cursor.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// The observer's private buffer, allocated at attach: frame_bytes of payload, then the channel's
// metadata_bytes.
struct ObserverBuffer {
  std::byte* bytes = nullptr;
  std::size_t frame_bytes = 0;
  std::size_t metadata_bytes = 0;
};

// What a copy was taken from: the re-check (O3) compares against it.
struct Observation {
  std::uint32_t slot = 0;
  std::uint64_t generation = 0;
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;
};

// (O1) and (O2): copies publication `target` (found in `head` or the log) into `buffer` and fills
// `f` (default-initialised) with the copy's header, `f.data` and `f.metadata` pointing into
// `buffer`. Status::ok (a copy taken, not yet confirmed: call observe_confirm), or no_frame with
// lost = true (the frame is gone or being rewritten: nothing was copied), or backend_error with
// lost = false (the pool could not map the buffer).
Status observe_copy(const SegmentView& view, ReaderPool& pool, const CursorState& state,
                    std::uint64_t target, std::uint64_t head, const ObserverBuffer& buffer,
                    bool& lost, Observation& seen, FrameFields& f) noexcept;

// (O3): true when slot `seen.slot` still holds publication `seen` after the copy, so the copy is
// that publication's content and header.
bool observe_confirm(const SegmentView& view, const CursorState& state,
                     const Observation& seen) noexcept;

// An observer's try_read: the epoch and close reporting (as next_frame), then the policy's walk
// (latest: newest published; sequential: next by the log, frames gone counted as overruns) over
// copy and re-check. A copy the re-check refuses is counted in state.observer_dropped and the walk
// goes on (latest: re-reads head, at most 8 tries; sequential: the frame is lost, the next one is
// tried). On Status::ok `f` describes the confirmed copy in `buffer`.
Status next_observed(const SegmentView& view, ReaderPool& pool, CursorState& state,
                     const ObserverBuffer& buffer, FrameFields& f) noexcept;

}  // namespace ipcring::detail
