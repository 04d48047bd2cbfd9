#include "wait/futex.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace ipcring::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));

int futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
               std::uint64_t timeout_ns) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout_ns / 1'000'000'000ULL);
  ts.tv_nsec = static_cast<long>(timeout_ns % 1'000'000'000ULL);
  // The kernel reads the word itself; std::atomic<uint32_t> has the layout of uint32_t.
  const long rc = syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected,
                          &ts, nullptr, 0);
  if (rc == 0) return 0;
  if (errno == EAGAIN) return 0;  // the value had changed: a publication happened
  return errno;
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr,
          0);
}

}  // namespace ipcring::detail
