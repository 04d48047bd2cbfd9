// claim_clock.hpp — the reader's clock at the claim (Frame::acquired_ns, the publish -> claim delay
// histogram): CLOCK_MONOTONIC, read from the TSC where the TSC is invariant and is the kernel's
// clocksource, so that a claim costs no clock_gettime.
//
// How. The TSC is read (rdtsc) and converted with an anchor (tsc, CLOCK_MONOTONIC ns) and a rate
// (ns per tick, 32.32 fixed point) that this clock measured itself against clock_gettime over the
// previous anchor interval. Once the current anchor is more than kAnchorNs (50 ms) old, the next
// read takes clock_gettime again: a new anchor and a new rate (measured over at least 25 ms). So
// the value follows CLOCK_MONOTONIC including NTP's slewing, which is built into the measured rate;
// what is left is the jitter of the anchors (two clock reads, tens of ns, over a 50 ms interval:
// below 1 ppm) and a change of the kernel's rate within one interval. It is never smaller than a
// value it returned before. Where the TSC cannot be used (not x86-64, no invariant TSC, another
// clocksource, or until the first 25 ms calibration interval has passed) every read is
// monotonic_ns().
//
// Roles. One ClaimClock per reader cursor, used by the reader's thread only (count_claim); no
// shared memory, no atomics. Release (any thread) keeps monotonic_ns().
#pragma once

#include <cstdint>

#include "common/clock.hpp"

namespace ipcring::detail {

// Whether this process may read CLOCK_MONOTONIC from the TSC: x86-64, CPUID's invariant TSC
// (leaf 0x80000007, EDX bit 8: constant rate, not stopped in deep C-states) and "tsc" as the
// kernel's current clocksource (the vDSO then converts the same counter). Decided once per process
// (a file read at the first attach), false where anything is unknown.
bool tsc_clock_usable() noexcept;

class ClaimClock {
 public:
  static constexpr std::uint64_t kAnchorNs = 50'000'000;  // re-anchor after 50 ms

  // Slow path (attach): decides whether the TSC is used; starts uncalibrated.
  void init(bool use_tsc) noexcept {
    *this = ClaimClock{};
    use_tsc_ = use_tsc;
  }

  std::uint64_t now_ns() noexcept {
#if defined(__x86_64__)
    if (mult_ != 0) {
      const std::uint64_t d = __builtin_ia32_rdtsc() - anchor_tsc_;
      if (d < span_ticks_) {
        // d * mult_ < span_ticks_ * mult_ <= kAnchorNs << 32 (< 2^58): no overflow.
        const std::uint64_t ns = anchor_ns_ + ((d * mult_) >> 32);
        if (ns > last_ns_) last_ns_ = ns;
        return last_ns_;
      }
    }
    if (use_tsc_) return anchor();
#endif
    return monotonic_ns();
  }

  bool calibrated() const noexcept {
    return mult_ != 0;
  }

 private:
  // A clock_gettime read with the TSC taken around it: the new anchor, and (once the previous
  // anchor is kAnchorNs old) the rate measured since then.
  std::uint64_t anchor() noexcept;

  bool use_tsc_ = false;
  std::uint64_t anchor_tsc_ = 0;
  std::uint64_t anchor_ns_ = 0;
  std::uint64_t mult_ = 0;        // ns per tick << 32; 0: not calibrated (monotonic_ns only)
  std::uint64_t span_ticks_ = 0;  // kAnchorNs in ticks
  std::uint64_t last_ns_ = 0;     // the largest value returned
};

}  // namespace ipcring::detail
