// futex.hpp — process-shared futex wait/wake on a 32-bit word in shared memory.
// Not FUTEX_PRIVATE: waiter and waker are different processes.
#pragma once

#include <atomic>
#include <cstdint>

namespace ipcring::detail {

// Sleeps while *word == expected, at most timeout_ns. Returns 0 when woken or the value differed,
// ETIMEDOUT, or EINTR.
int futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::uint64_t timeout_ns) noexcept;
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;

}  // namespace ipcring::detail
