// cuda_fence.hpp — the CUDA backend's release fences: one 64-bit word per (slot, reader entry) in
// the control segment (CudaSlot::release_fence), which the producer can always complete by itself.
//
// A FenceWord packs the reader entry's lease generation (low 16 bits) with a frame sequence (low 48
// bits):
//
//   63            48 47                                                   0
//   +---------------+------------------------------------------------------+
//   | entry gen     |                 frame sequence                       |
//   +---------------+------------------------------------------------------+
//
// and is compared as cuStreamWaitValue64's CU_STREAM_WAIT_VALUE_GEQ compares: `word` satisfies
// `target` when (int64_t)(word - target) >= 0 (a cyclic comparison, so both fields may wrap; values
// that are compared differ by far less than 2^63).
//
// Roles (docs/cuda.md, "The release fence"):
//  * reader entry r of generation g releases frame q of slot s: its stream writes
//    make(g, q) into release_fence[r] after its kernels (cuStreamWriteValue64); its CPU then stores
//    g in fence_generation[r] and (F1) sets bit r of release_recorded, then clears its bit in the
//    slot word (R5);
//  * the producer, claiming slot s again (P1, after every R5), sees the bits (F2 pairs with F1) and
//    targets make(fence_generation[r], q) for each, q being the slot's last sequence; it polls the
//    word (plain loan) or makes its stream wait for it (loan(stream): cuStreamWaitValue64). The
//    generation comes from the recorder itself, so a reader that detached with its kernels still
//    running is waited for under its own generation, not its successor's;
//  * whoever reaps entry r of generation g (the producer, an attaching reader, ringdump reap) calls
//    reader_fences_reaped() before the entry changes hands: it writes make(g, kSequenceMask), which
//    satisfies every target of generation g (so no wait queued on a dead reader's fence lasts) and
//    none of a later generation's (a successor's fences are its own).
// Everything here is plain CPU code on the segment (no CUDA call), so any process can reap.
#pragma once

#include <atomic>
#include <cstdint>

#include "segment/layout.hpp"

namespace ipcring::detail {

struct FenceWord {
  static constexpr unsigned kSequenceBits = 48;
  static constexpr std::uint64_t kSequenceMask = (1ULL << kSequenceBits) - 1;
  static constexpr std::uint64_t make(std::uint64_t entry_generation,
                                      std::uint64_t sequence) noexcept {
    return (entry_generation << kSequenceBits) | (sequence & kSequenceMask);
  }
  // CU_STREAM_WAIT_VALUE_GEQ: (int64_t)(word - target) >= 0.
  static constexpr bool reached(std::uint64_t word, std::uint64_t target) noexcept {
    return static_cast<std::int64_t>(word - target) >= 0;
  }
  // What a reaper writes for a dead entry of `entry_generation`: every fence it owed, complete.
  static constexpr std::uint64_t reaped(std::uint64_t entry_generation) noexcept {
    return make(entry_generation, kSequenceMask);
  }
};
static_assert(FenceWord::reached(FenceWord::make(5, 10), FenceWord::make(5, 10)));
static_assert(!FenceWord::reached(FenceWord::make(5, 9), FenceWord::make(5, 10)));
static_assert(!FenceWord::reached(FenceWord::make(4, 100), FenceWord::make(5, 10)));
static_assert(FenceWord::reached(FenceWord::reaped(5), FenceWord::make(5, 1ULL << 40)));
static_assert(!FenceWord::reached(FenceWord::reaped(5), FenceWord::make(7, 1)));
static_assert(FenceWord::reached(FenceWord::make(0, 1), FenceWord::reaped(0xffff)));  // gen wraps
static_assert(!FenceWord::reached(0, FenceWord::make(1, 1)));  // a fresh segment completes nothing

// The reaper's hook for the CUDA backend: reader entry `reader`, of lease generation
// `entry_generation`, died (or its owner vanished). In every slot where that incarnation queued the
// last fence write (fence_generation), completes the word and forgets the recorded bit, so no wait
// on it (a GPU wait queued by the producer, or its CPU check) outlasts the dead reader. A slot
// whose last fence belongs to an earlier incarnation of the entry (a reader that detached while its
// kernels still ran) is left alone: that process may be alive, and its word is its own.
// Call it while holding the entry, before its lease word changes (L3, or a successor's L1: release
// stores after which a successor's fences start). No-op for a host segment.
inline void reader_fences_reaped(const SegmentView& view, std::uint32_t reader,
                                 std::uint64_t entry_generation) noexcept {
  if (view.geo.backend != kBackendCuda || reader >= view.geo.max_readers) return;
  const std::uint64_t done = FenceWord::reaped(entry_generation);
  for (std::uint32_t i = 0; i < view.geo.slots; ++i) {
    CudaSlot& cs = view.cuda_slot(i);
    // Relaxed: the dead reader's last store of it was ordered before its F1 and R5, which the
    // reaper's claim of the entry follows (robust mutex); a value of another incarnation is
    // skipped.
    if (cs.fence_generation[reader].load(std::memory_order_relaxed) !=
        static_cast<std::uint32_t>(entry_generation)) {
      continue;
    }
    // (F3) release, pairs with the producer's acquire loads of the word (F4).
    cs.release_fence[reader].store(done, std::memory_order_release);
    cs.release_recorded.fetch_and(~(1U << reader), std::memory_order_relaxed);
  }
}

}  // namespace ipcring::detail
