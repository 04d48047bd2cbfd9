// cuda_fence.hpp — the CUDA backend's release fences: two 64-bit words per (slot, reader entry) in
// the control segment (CudaSlot::release_fence), which the producer can always complete by itself.
//
// A FenceWord packs a recorder epoch (high 16 bits) with a frame sequence (low 48 bits):
//
//   63            48 47                                                   0
//   +---------------+------------------------------------------------------+
//   | recorder epoch|                 frame sequence                       |
//   +---------------+------------------------------------------------------+
//
// and is compared as cuStreamWaitValue64's CU_STREAM_WAIT_VALUE_GEQ compares: `word` satisfies
// `target` when (int64_t)(word - target) >= 0 (a cyclic comparison: both fields may wrap, so the
// two values compared must lie within 2^15 epochs of each other).
//
// The recorder epoch. fence_epoch[r] of a slot counts the incarnations of entry r that recorded a
// fence in that slot (not its lease generation, which moves on every attach, detach and reap): an
// incarnation that records in the slot for the first time takes epoch fence_epoch + 1; its later
// releases of the slot keep it. It picks the word: epoch e writes release_fence[e & 1][r]. So
//  * the word an incarnation writes was last written by the recorder two epochs before it, whose
//    values are 2 epochs below any target of ours: it reads "not reached" for us, however many
//    attach/detach cycles the entry went through without recording here (no generation wrap);
//  * a dead incarnation's write that lands late (its context still had it queued when its lease
//    was reaped and handed over) goes to its own word, not its successor's: the successor's value
//    is never lowered by it. Only a third incarnation (epoch e + 2) writes that word again.
//
// Roles (docs/cuda.md, "The release fence"):
//  * reader entry r of lease generation g releases frame q of slot s: it takes its epoch e
//    (next_epoch), its stream writes make(e, q) into release_fence[e & 1][r] after its kernels
//    (cuStreamWriteValue64); its CPU then stores e in fence_epoch[r] and g in fence_generation[r]
//    and (F1) sets bit r of release_recorded, then clears its bit in the slot word (R5);
//  * the producer, claiming slot s again (P1, after every R5), sees the bits (F2 pairs with F1) and
//    targets make(e, q) on word e & 1 for each (recorded_target), q being the slot's last
//    sequence; it polls the word (plain loan) or makes its stream wait for it (loan(stream):
//    cuStreamWaitValue64). The epoch comes from the recorder itself, so a reader that detached
//    with its kernels still running is waited for under its own epoch, not its successor's;
//  * whoever reaps entry r of generation g (the producer, an attaching reader, ringdump reap) calls
//    reader_fences_reaped() before the entry changes hands: in each slot whose last recorder is
//    that incarnation it writes make(e, kSequenceMask), which satisfies every target of epoch e
//    (so no wait queued on a dead reader's fence lasts) and none of a later epoch's.
// Everything here is plain CPU code on the segment (no CUDA call), so any process can reap.
#pragma once

#include <atomic>
#include <cstdint>

#include "segment/layout.hpp"

namespace ipcring::detail {

struct FenceWord {
  static constexpr unsigned kSequenceBits = 48;
  static constexpr std::uint64_t kSequenceMask = (1ULL << kSequenceBits) - 1;
  static constexpr std::uint64_t make(std::uint64_t epoch, std::uint64_t sequence) noexcept {
    return (epoch << kSequenceBits) | (sequence & kSequenceMask);
  }
  // CU_STREAM_WAIT_VALUE_GEQ: (int64_t)(word - target) >= 0.
  static constexpr bool reached(std::uint64_t word, std::uint64_t target) noexcept {
    return static_cast<std::int64_t>(word - target) >= 0;
  }
  // What a reaper writes for a dead recorder of `epoch`: every fence it owed, complete.
  static constexpr std::uint64_t reaped(std::uint64_t epoch) noexcept {
    return make(epoch, kSequenceMask);
  }
  // The word of the pair (release_fence[index][reader]) that recorder epoch `epoch` writes.
  static constexpr unsigned index(std::uint64_t epoch) noexcept {
    return static_cast<unsigned>(epoch & 1U);
  }
};
static_assert(FenceWord::reached(FenceWord::make(5, 10), FenceWord::make(5, 10)));
static_assert(!FenceWord::reached(FenceWord::make(5, 9), FenceWord::make(5, 10)));
static_assert(!FenceWord::reached(FenceWord::make(4, 100), FenceWord::make(5, 10)));
static_assert(FenceWord::reached(FenceWord::reaped(5), FenceWord::make(5, 1ULL << 40)));
static_assert(!FenceWord::reached(FenceWord::reaped(5), FenceWord::make(7, 1)));
static_assert(FenceWord::reached(FenceWord::make(0, 1), FenceWord::reaped(0xffff)));  // epoch wraps
static_assert(!FenceWord::reached(FenceWord::reaped(0xfffe), FenceWord::make(0, 1)));
static_assert(!FenceWord::reached(0, FenceWord::make(1, 1)));  // a fresh segment completes nothing
static_assert(FenceWord::index(7) != FenceWord::index(8));     // successors write different words

// The word recorder epoch `epoch` of entry `reader` writes in `cs`.
inline std::atomic<std::uint64_t>& fence_word(CudaSlot& cs, std::uint32_t reader,
                                              std::uint64_t epoch) noexcept {
  return cs.release_fence[FenceWord::index(epoch)][reader];
}

// The epoch the incarnation of lease generation `generation` of entry `reader` records under in
// `cs`: the recorded one when it recorded there before, else the next. Only that incarnation
// writes fence_epoch[reader] and fence_generation[reader] (relaxed: its own values, or values of
// an earlier incarnation published to it by the robust mutex it took the entry with).
inline std::uint16_t next_epoch(const CudaSlot& cs, std::uint32_t reader,
                                std::uint64_t generation) noexcept {
  const std::uint16_t e = cs.fence_epoch[reader].load(std::memory_order_relaxed);
  if (cs.fence_generation[reader].load(std::memory_order_relaxed) ==
      static_cast<std::uint32_t>(generation)) {
    return e;
  }
  return static_cast<std::uint16_t>(e + 1);
}

// The producer's target for the fence entry `reader` recorded in `cs` for the frame of sequence
// `sequence`: the word and the value it must reach. Call after F2 (the acquire load of
// release_recorded that saw the bit): the recorder stored its epoch before F1.
struct FenceTarget {
  std::atomic<std::uint64_t>* word = nullptr;
  std::uint64_t value = 0;
};
inline FenceTarget recorded_target(CudaSlot& cs, std::uint32_t reader,
                                   std::uint64_t sequence) noexcept {
  const std::uint16_t e = cs.fence_epoch[reader].load(std::memory_order_relaxed);
  return {&fence_word(cs, reader, e), FenceWord::make(e, sequence)};
}

// The reaper's hook for the CUDA backend: reader entry `reader`, of lease generation
// `entry_generation`, died (or its owner vanished). In every slot where that incarnation queued the
// last fence write (fence_generation), completes its word and forgets the recorded bit, so no wait
// on it (a GPU wait queued by the producer, or its CPU check) outlasts the dead reader. A slot
// whose last fence belongs to an earlier incarnation of the entry (a reader that detached while its
// kernels still ran) is left alone: that process may be alive, and its word is its own.
// Call it while holding the entry, before its lease word changes (L3, or a successor's L1: release
// stores after which a successor's fences start). No-op for a host segment.
inline void reader_fences_reaped(const SegmentView& view, std::uint32_t reader,
                                 std::uint64_t entry_generation) noexcept {
  if (view.geo.backend != kBackendCuda || reader >= view.geo.max_readers) return;
  for (std::uint32_t i = 0; i < view.geo.slots; ++i) {
    CudaSlot& cs = view.cuda_slot(i);
    // Its mappings went with its process (whichever incarnation set the bit: the entry is ours
    // now). Release: pairs with a closing producer's acquire load in slot_quiet.
    cs.mapped.fetch_and(~(1U << reader), std::memory_order_release);
    // Relaxed: the dead reader's last stores of them were ordered before its F1 and R5, which the
    // reaper's claim of the entry follows (robust mutex); a value of another incarnation is
    // skipped.
    if (cs.fence_generation[reader].load(std::memory_order_relaxed) !=
        static_cast<std::uint32_t>(entry_generation)) {
      continue;
    }
    const std::uint16_t e = cs.fence_epoch[reader].load(std::memory_order_relaxed);
    // (F3) release, pairs with the producer's acquire loads of the word (F4).
    fence_word(cs, reader, e).store(FenceWord::reaped(e), std::memory_order_release);
    cs.release_recorded.fetch_and(~(1U << reader), std::memory_order_relaxed);
  }
}

}  // namespace ipcring::detail
