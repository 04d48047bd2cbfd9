// process.cpp — the fork generation and the instance id (see process.hpp).
#include "common/process.hpp"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "common/clock.hpp"

namespace ipcring::detail {

namespace {

std::atomic<std::uint64_t> g_fork_generation{0};

// Descriptors a fork child closes at once (close_in_fork_child). A fixed table, 0 meaning empty
// and fd + 1 a descriptor: the atfork handler may not allocate.
constexpr int kTrackedFds = 512;
std::atomic<int> g_child_closes[kTrackedFds];

void on_fork_child() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  for (auto& slot : g_child_closes) {
    const int v = slot.exchange(0, std::memory_order_relaxed);
    if (v > 0) close(v - 1);
  }
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

bool close_in_fork_child(int fd) noexcept {
  for (auto& slot : g_child_closes) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

void forget_in_fork_child(int fd) noexcept {
  for (auto& slot : g_child_closes) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return;
  }
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

void keep_until_exit(std::shared_ptr<const void> object) noexcept {
  static std::mutex mutex;
  // Never destroyed: what it keeps must outlive every static destructor too.
  static auto* kept = new (std::nothrow) std::vector<std::shared_ptr<const void>>();  // NOLINT
  try {
    std::lock_guard lock(mutex);
    if (kept != nullptr) {
      kept->push_back(std::move(object));
      return;
    }
  } catch (...) {
  }
  new (std::nothrow) std::shared_ptr<const void>(std::move(object));  // NOLINT: out of memory
}

}  // namespace ipcring::detail
