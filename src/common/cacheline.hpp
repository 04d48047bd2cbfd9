// cacheline.hpp — hints about where a cache line should live. A hint changes no value and cannot
// fault; where the instruction does not exist it is a no-op.
#pragma once

namespace ipcring::detail {

// Asks the core to move the line holding `p` out of its private caches into the shared last-level
// cache, where another core's next read finds it without a snoop of this core (x86 CLDEMOTE).
// publish demotes the slot's line (state word and descriptor), which a reader's claim reads right
// after it sees `head`; docs/benchmarks.md has the measurements (the one-way latency falls by
// about 40 ns; demoting the payload's first line as well gained nothing measurable). Not free: on
// this project's Xeon VMs a locked instruction issued soon after a demote waited for it (loan +
// publish in one thread went from 73 to 165 ns with the demotes before the wake RMW, 117 ns after
// it), which is why publish demotes after its last locked RMW; and the producer's own next access
// to the line misses its L1/L2.
// CLDEMOTE's encoding (0F 1C /0) lies in the hint-NOP space, so a CPU without it executes a NOP:
// no CPUID check is needed. Other architectures: nothing.
inline void demote_line(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("cldemote %0" ::"m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

}  // namespace ipcring::detail
