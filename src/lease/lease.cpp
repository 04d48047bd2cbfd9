#include "lease/lease.hpp"
#include "common/errno_text.hpp"

#include <sys/mman.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <thread>

#include "common/clock.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

// ---- fork detection --------------------------------------------------------------------------

namespace {
std::atomic<std::uint64_t> g_fork_generation{0};

class LeaseKeeper;
std::atomic<LeaseKeeper*> g_keeper{nullptr};
std::once_flag g_atfork_once;

void on_fork_child() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  // The keeper thread did not survive fork, and its mutex may have been copied locked. Abandon it
  // (deliberately leaked: destroying it would touch that state); a fresh one starts on demand.
  g_keeper.store(nullptr, std::memory_order_relaxed);
}

void install_atfork() {
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, &on_fork_child); });
}

// Installed at load time so that objects made before any lease is taken still see forks.
[[maybe_unused]] const bool g_atfork_installed = [] {
  install_atfork();
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

// ---- robust mutexes --------------------------------------------------------------------------

int init_robust_mutex(MutexStorage& storage) noexcept {
  std::memset(storage.bytes, 0, sizeof storage.bytes);
  pthread_mutexattr_t attr;
  int rc = pthread_mutexattr_init(&attr);
  if (rc != 0) return rc;
  // NORMAL type, robust, process-shared, no priority inheritance (PI futexes interact badly with
  // owner death across PID namespaces and cost a system call on every lock).
  if ((rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_NORMAL)) == 0 &&
      (rc = pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED)) == 0 &&
      (rc = pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST)) == 0 &&
      (rc = pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_NONE)) == 0) {
    rc = pthread_mutex_init(as_mutex(storage), &attr);
  }
  pthread_mutexattr_destroy(&attr);
  return rc;
}

int lease_mutex_kind(const MutexStorage& storage) noexcept {
  int kind = 0;
#if defined(__GLIBC__)
  // glibc's pthread_mutex_t: the kind (type | robust | pshared | protocol bits) is immutable after
  // pthread_mutex_init. Copied bytewise: the storage is shared memory another process may scribble.
  std::memcpy(&kind, storage.bytes + offsetof(pthread_mutex_t, __data.__kind), sizeof kind);
#else
  (void)storage;
#endif
  return kind;
}

bool lease_mutex_plausible(const MutexStorage& storage) noexcept {
#if defined(__GLIBC__)
  static const int expected = [] {
    MutexStorage reference{};
    if (init_robust_mutex(reference) != 0) return -1;
    const int kind = lease_mutex_kind(reference);
    pthread_mutex_destroy(as_mutex(reference));
    return kind;
  }();
  return expected != -1 && lease_mutex_kind(storage) == expected;
#else
  (void)storage;
  return true;
#endif
}

namespace {

TakeResult trylock_here(MutexStorage& storage) noexcept {
  // Never hand glibc a mutex whose immutable kind bits are not the ones init_robust_mutex sets:
  // on hostile bytes (a priority-protect kind, say) pthread_mutex_trylock can abort the process.
  if (!lease_mutex_plausible(storage)) return TakeResult::error;
  pthread_mutex_t* m = as_mutex(storage);
  const int rc = pthread_mutex_trylock(m);
  switch (rc) {
    case 0:
      return TakeResult::taken;
    case EBUSY:
      return TakeResult::busy;
    case EOWNERDEAD:
      // We own it now; make it usable again. consistent() must run on the owning thread.
      pthread_mutex_consistent(m);
      return TakeResult::owner_died;
    case ENOTRECOVERABLE:
      // A previous owner-dead holder unlocked without making it consistent. Nobody can ever lock
      // it again, so re-initialising it cannot race with a holder.
      init_robust_mutex(storage);
      return TakeResult::unrecoverable;
    default:
      return TakeResult::error;
  }
}

// The lease keeper: one thread per process that takes and gives back long-lived leases, so that
// a lease does not die with the user thread that happened to create it. Requests are rare (attach,
// detach, producer create and close), so a mutex and a condition variable are enough.
class LeaseKeeper {
 public:
  LeaseKeeper() {
    std::thread([this] { run(); }).detach();
  }

  TakeResult trylock(MutexStorage& storage) { return call(Op::trylock, storage); }
  void unlock(MutexStorage& storage) { call(Op::unlock, storage); }

 private:
  enum class Op { none, trylock, unlock };

  TakeResult call(Op op, MutexStorage& storage) {
    std::lock_guard serial(call_mutex_);  // one request in flight
    std::unique_lock lock(mutex_);
    op_ = op;
    storage_ = &storage;
    done_ = false;
    request_.notify_one();
    done_cv_.wait(lock, [this] { return done_; });
    return result_;
  }

  [[noreturn]] void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      request_.wait(lock, [this] { return op_ != Op::none; });
      if (op_ == Op::trylock) {
        result_ = trylock_here(*storage_);
      } else {
        pthread_mutex_unlock(as_mutex(*storage_));
        result_ = TakeResult::taken;
      }
      op_ = Op::none;
      done_ = true;
      done_cv_.notify_one();
    }
  }

  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable request_;
  std::condition_variable done_cv_;
  Op op_ = Op::none;
  MutexStorage* storage_ = nullptr;
  TakeResult result_ = TakeResult::error;
  bool done_ = false;
};

std::mutex g_keeper_create;

LeaseKeeper& keeper() {
  LeaseKeeper* k = g_keeper.load(std::memory_order_acquire);
  if (k != nullptr) return *k;
  std::lock_guard lock(g_keeper_create);
  k = g_keeper.load(std::memory_order_acquire);
  if (k == nullptr) {
    k = new LeaseKeeper();  // never deleted: the thread runs until the process ends
    g_keeper.store(k, std::memory_order_release);
  }
  return *k;
}

}  // namespace

TakeResult keeper_trylock(MutexStorage& storage) {
  return keeper().trylock(storage);
}
void keeper_unlock(MutexStorage& storage) {
  keeper().unlock(storage);
}

TakeResult probe_trylock(MutexStorage& storage) noexcept {
  return trylock_here(storage);
}
void probe_unlock(MutexStorage& storage) noexcept {
  pthread_mutex_unlock(as_mutex(storage));
}

bool probe_alive(MutexStorage& storage) noexcept {
  switch (trylock_here(storage)) {
    case TakeResult::busy:
      return true;
    case TakeResult::taken:
    case TakeResult::owner_died:
      probe_unlock(storage);
      return false;
    case TakeResult::unrecoverable:
    case TakeResult::error:
      return false;
  }
  return false;
}

void self_test_robust_mutexes() {
  static std::once_flag once;
  static bool ok = false;
  static std::string why;
  std::call_once(once, [] {
    void* mem = mmap(nullptr, sizeof(MutexStorage), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
      why = std::string("mmap: ") + errno_text(errno);
      return;
    }
    auto* storage = new (mem) MutexStorage{};
    if (int rc = init_robust_mutex(*storage); rc != 0) {
      why = std::string("pthread_mutex_init: ") + errno_text(rc);
    } else {
      const pid_t child = fork();
      if (child == 0) {
        pthread_mutex_lock(as_mutex(*storage));
        _exit(0);  // dies holding the mutex
      }
      if (child < 0) {
        why = std::string("fork: ") + errno_text(errno);
      } else {
        int status = 0;
        while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
        }
        const int probe = pthread_mutex_trylock(as_mutex(*storage));
        if (probe == EOWNERDEAD) {
          pthread_mutex_consistent(as_mutex(*storage));
          pthread_mutex_unlock(as_mutex(*storage));
          ok = true;
        } else {
          why = std::string("a mutex whose owner died gave ") + errno_text(probe) +
                " instead of EOWNERDEAD";
          if (probe == 0) pthread_mutex_unlock(as_mutex(*storage));
        }
      }
      pthread_mutex_destroy(as_mutex(*storage));
    }
    munmap(mem, sizeof(MutexStorage));
  });
  if (!ok) {
    throw Error(Errc::unsupported,
                "ipcring: robust process-shared mutexes do not work on this system (" + why +
                    "); dead readers could not be detected");
  }
}

}  // namespace ipcring::detail
