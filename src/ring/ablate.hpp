// ablate.hpp — the benchmark-only switch that removes one step of the read path (or the
// producer's slot-line demote) to measure what it costs: docs/benchmarks.md, "Where a read's time
// goes". A removed step breaks a documented guarantee (telemetry, eviction or epoch reporting, the
// reader's claim itself), so such a build is for ringbench only: IPCRING_ABLATE is set by the
// CMake cache variable RINGBENCH_ABLATE (bench/CMakeLists.txt), which warns at configure time, and
// ringbench prints the mask in its context. The shipped library compiles with IPCRING_ABLATE
// undefined, i.e. 0: every `if constexpr (!ablated(...))` below is then the plain code.
#pragma once

#include <cstdint>

#ifndef IPCRING_ABLATE
#define IPCRING_ABLATE 0
#endif

namespace ipcring::detail {

enum class Ablate : std::uint32_t {
  clock = 1U << 0,          // count_claim's clock read (acquired_ns = the publish time)
  telemetry = 1U << 1,      // count_claim's delay histogram and entry counters
  held_rmw = 1U << 2,       // the locked add on `held` at the claim (a load and a store instead)
  evicted = 1U << 3,        // next_frame's reader_evicted check (L4)
  epoch = 1U << 4,          // next_frame's follow_epoch (the producer's lease word)
  epoch_recheck = 1U << 5,  // claim_frame's second load of the producer's lease word
  prefetch = 1U << 6,       // claim_frame's prefetch of the payload's first line
  claim_rmw = 1U << 7,      // the claim's CAS (R3): the slot word is only loaded, no bit is set
  demote = 1U << 8,         // the producer's demote of the slot line after publishing (CLDEMOTE)
  tsc_clock = 1U << 9,      // the claim clock from the TSC (claim_clock.hpp): clock_gettime instead
  prefetchw = 1U << 10,     // claim_frame's prefetch-for-write of the slot line
};

inline constexpr std::uint32_t kAblateMask = IPCRING_ABLATE;

constexpr bool ablated(Ablate step) noexcept {
  return (kAblateMask & static_cast<std::uint32_t>(step)) != 0;
}

}  // namespace ipcring::detail
