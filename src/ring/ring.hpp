// ring.hpp — the slot protocol: claim for writing, publish, claim for reading, release, and the
// reaper's bit clearing. docs/protocol.md is the prose version; the tags (P1)...(R6) here are the
// same as there, and model/ipcring.pml checks the protocol with readers dying at every step.
//
// Roles. One producer (it holds the producer lease) claims free slots, fills them and publishes
// them. Readers (up to 32, one bit each) claim published slots by setting their bit in the slot's
// state word, and release by clearing it. A reaper (the producer, an attaching reader, or
// `ringdump reap`) clears the bits of a reader whose lease it found dead.
//
// Guarantees.
//  * The producer claims a slot only with a CAS that expects mask == 0 and W clear, so it never
//    writes a buffer any reader holds (invariant 2). A reader's release (R5, release ordering)
//    pairs with that claim (P1, acquire): the reader's payload reads happen-before the producer's
//    next writes.
//  * A reader sets its bit only with a CAS that expects the exact word it loaded; a W slot is never
//    claimed. After the claim it re-checks the 64-bit sequence and the epoch in the descriptor, so
//    a claim that landed on a later publication of the same slot (generation wrap, ABA) is undone.
//    The claim (R3, acquire) reads the value stored by the publication (P2, release) or a later
//    RMW in its release sequence (other readers' claims and releases), so the descriptor and
//    payload written before P2 are visible (invariant 3).
//  * A release can never clear another reader's bit: it clears only its own bit, and only while the
//    generation is the one it claimed.
// Observers (ring/observe.hpp, docs/observers.md) set no bit: they copy a frame and re-check its
// slot afterwards, relying on the producer's (P1o) fence after each claim.
// Estimates. head and the telemetry counters are exact only when nobody is publishing; readers use
// head as a hint and always confirm through the log entry and the descriptor.
#pragma once

#include <atomic>
#include <cstdint>

#include "segment/layout.hpp"

namespace ipcring::detail {

// (P1) Producer: claims slot `index` for writing if no reader holds it. acquire on success pairs
// with every reader's (R5) release of its bit, so their reads of the old payload happen-before our
// writes. Relaxed on failure: nothing is read through a failed claim.
inline bool claim_for_write(Slot& slot) noexcept {
  std::uint64_t s = slot.state.load(std::memory_order_relaxed);
  // Case analysis: W set -> we already own it (cannot happen: one loan at a time) or a dead
  // producer left it (reset at takeover); mask != 0 -> readers hold it; otherwise try the CAS,
  // which fails only if a reader claimed or released concurrently (then re-evaluate).
  while (!SlotWord::writing(s) && SlotWord::mask(s) == 0) {
    if (slot.state.compare_exchange_weak(s, SlotWord::make(SlotWord::generation(s), true, 0),
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
      // (P1o) release fence, pairs with the observer's (O3) acquire fence (observe.hpp): every
      // write to the slot's descriptor, header and payload from now on is ordered after W became
      // visible, so an observer whose copy read any of them sees W (or a later generation) in its
      // re-check. A compiler barrier on x86; it orders nothing the readers' bits need.
#if !defined(__SANITIZE_THREAD__)
      std::atomic_thread_fence(std::memory_order_release);
#endif  // ThreadSanitizer models no fences (GCC refuses them, -Wtsan); its build runs no observer
      return true;
    }
  }
  return false;
}

// Producer: gives back a claimed slot without publishing (a dropped loan). The descriptor's
// sequence was zeroed at the claim, so the slot is empty. Release: our (possible) payload writes
// must not be reordered after the slot becomes claimable again.
inline void unclaim(Slot& slot) noexcept {
  const std::uint64_t s = slot.state.load(std::memory_order_relaxed);  // W set: only we write it
  slot.state.store(SlotWord::make(SlotWord::generation(s), false, 0), std::memory_order_release);
}

// (P2) Producer: publishes a claimed slot under a new generation. release pairs with (R3): the
// payload and descriptor written while W was set are visible to a reader whose claim reads this
// value (or a later RMW of the release sequence).
inline void publish_slot(Slot& slot) noexcept {
  const std::uint64_t s = slot.state.load(std::memory_order_relaxed);  // W set: only we write it
  slot.state.store(SlotWord::make(SlotWord::generation(s) + 1, false, 0),
                   std::memory_order_release);
}

enum class ClaimResult { claimed, lost, already_held };

// (R3) Reader `bit`: sets its bit in `slot` if the slot is published (not W). On success returns
// the generation claimed in `generation`. acquire pairs with (P2).
inline ClaimResult claim_for_read(Slot& slot, std::uint64_t bit,
                                  std::uint64_t& generation) noexcept {
  std::uint64_t s = slot.state.load(std::memory_order_acquire);
  for (;;) {
    // Case analysis: W set -> the producer is rewriting the slot, the frame we wanted is gone;
    // our bit already set -> we hold this slot with an older frame, so the wanted one is not here;
    // otherwise CAS exactly the word we saw (generation included). A failed CAS means a
    // concurrent claim, release, reap or producer claim: re-evaluate with the fresh word.
    if (SlotWord::writing(s)) return ClaimResult::lost;
    if ((SlotWord::mask(s) & bit) != 0) return ClaimResult::already_held;
    if (slot.state.compare_exchange_weak(s, s | bit, std::memory_order_acquire,
                                         std::memory_order_acquire)) {
      generation = SlotWord::generation(s);
      return ClaimResult::claimed;
    }
  }
}

// (R5) Reader `bit`: clears its bit if it still holds `slot` under `generation`. release pairs with
// (P1). Returns false when the bit was already cleared (by a reaper) — nothing is changed then.
inline bool release_read(Slot& slot, std::uint64_t bit, std::uint64_t generation) noexcept {
  std::uint64_t s = slot.state.load(std::memory_order_relaxed);
  for (;;) {
    // Case analysis: another generation, or our bit is clear -> a reaper already released it for
    // us (and the slot may since have been reused): touch nothing. Otherwise clear only our bit.
    if (SlotWord::generation(s) != generation || (SlotWord::mask(s) & bit) == 0) return false;
    if (slot.state.compare_exchange_weak(s, s & ~bit, std::memory_order_release,
                                         std::memory_order_relaxed)) {
      return true;
    }
  }
}

// (R6) Reaper: clears reader `reader`'s bit in every slot; returns how many slots it held.
// Relaxed is enough for the RMW itself: the dead reader reads nothing more, and the producer's
// claim (P1) of a slot freed here needs no happens-before with the dead process.
// Every caller clears before it changes the entry's lease word (L3 or a new owner's L1, both
// release); for CUDA channels it also runs the backend's hook (reader_fences_reaped,
// backend/cuda/cuda_fence.hpp) there, which completes the dead reader's release fences.
inline std::uint32_t clear_reader_bits(const SegmentView& view, std::uint32_t reader) noexcept {
  const std::uint64_t bit = SlotWord::bit(reader);
  std::uint32_t cleared = 0;
  for (std::uint32_t i = 0; i < view.geo.slots; ++i) {
    Slot& slot = view.slot(i);
    std::uint64_t s = slot.state.load(std::memory_order_relaxed);
    while ((SlotWord::mask(s) & bit) != 0) {
      if (slot.state.compare_exchange_weak(s, s & ~bit, std::memory_order_relaxed,
                                           std::memory_order_relaxed)) {
        ++cleared;
        break;
      }
    }
  }
  return cleared;
}

}  // namespace ipcring::detail
