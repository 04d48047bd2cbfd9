// cacheline.hpp — hints about where a cache line should live. A hint changes no value and cannot
// fault; where the instruction does not exist it is a no-op.
#pragma once

namespace ipcring::detail {

// Asks the core to move the line holding `p` out of its private caches into the shared last-level
// cache, where another core's next read finds it without a transfer from this core's L1/L2
// (x86 CLDEMOTE). The producer demotes the lines a reader reads right after it sees `head`: on a
// CPU with CLDEMOTE that read is served by the shared cache instead of a snoop of the producer's
// core (ringbench: the one-way latency drops by about a third of a floor on this project's Xeon
// machines). CLDEMOTE's encoding lies in the hint-NOP space (0F 1C /0), so CPUs without it execute
// a NOP: no CPUID check is needed. Other architectures: nothing.
inline void demote_line(const void* p) noexcept {
#if defined(__x86_64__)
  asm volatile("cldemote %0" ::"m"(*static_cast<const char*>(p)));
#else
  (void)p;
#endif
}

}  // namespace ipcring::detail
