// clock.hpp — time and identity helpers shared by the library.
#pragma once

#include <time.h>

#include <cstdint>

namespace ipcring::detail {

// CLOCK_MONOTONIC in nanoseconds. Served by the vDSO: no system call on the hot path.
inline std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// A random non-zero 64-bit identity (getrandom). Slow path only.
std::uint64_t random_instance_id();

// Incremented in the child after every fork() (pthread_atfork). Objects record the value when made
// and refuse to act on shared state when it differs: the child inherited them.
std::uint64_t fork_generation() noexcept;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace ipcring::detail
