// process.cpp — the fork generation and the instance id (see process.hpp).
#include "common/process.hpp"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>

#include "common/clock.hpp"

namespace ipcring::detail {

namespace {

std::atomic<std::uint64_t> g_fork_generation{0};

void on_fork_child() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
}

// Installed at load time so that objects made before anything else runs still see forks.
[[maybe_unused]] const bool g_atfork_installed = [] {
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  return true;
}();

}  // namespace

std::uint64_t fork_generation() noexcept {
  return g_fork_generation.load(std::memory_order_relaxed);
}

std::uint64_t random_instance_id() {
  std::uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
      // getrandom cannot fail for 8 bytes once the pool is initialised; fall back to mixing.
      id = monotonic_ns() * 0x9e3779b97f4a7c15ULL ^ static_cast<std::uint64_t>(getpid());
    }
  }
  return id;
}

}  // namespace ipcring::detail
