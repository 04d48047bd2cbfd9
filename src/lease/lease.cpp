#include "lease/lease.hpp"
#include "common/errno_text.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_fence.hpp"
#include "common/clock.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"
#include "ring/ring.hpp"

namespace ipcring::detail {

// ---- fork detection --------------------------------------------------------------------------

namespace {
class LeaseKeeper;
std::atomic<LeaseKeeper*> g_keeper{nullptr};
// The repair lock's process-local half, one per channel's control segment (device, inode): threads
// of this process (flock serialises processes). Per channel, so that a repair lock held elsewhere
// on one channel delays nothing of another. Made on first use and never freed (a channel's few
// bytes); the table's mutex is held only for the look-up.
using RepairKey = std::pair<dev_t, ino_t>;
std::mutex g_repair_table_mutex;
std::map<RepairKey, std::recursive_mutex*>* g_repair_table =
    new std::map<RepairKey, std::recursive_mutex*>();

std::recursive_mutex* repair_local_of(int object_fd) noexcept {
  struct stat st {};
  if (fstat(object_fd, &st) != 0) return nullptr;
  try {
    std::lock_guard g(g_repair_table_mutex);
    auto& m = (*g_repair_table)[{st.st_dev, st.st_ino}];
    if (m == nullptr) m = new std::recursive_mutex();  // NOLINT: lives until exit
    return m;
  } catch (...) {
    return nullptr;  // out of memory: the caller reports the lock as busy
  }
}
std::once_flag g_atfork_once;

void on_fork_child() noexcept {
  // (The fork generation itself is common/process.cpp's.)
  // The keeper thread did not survive fork, and its mutex may have been copied locked. Abandon it
  // (deliberately leaked: destroying it would touch that state); a fresh one starts on demand.
  g_keeper.store(nullptr, std::memory_order_relaxed);
  // A thread of the parent may have held a repair lock's local mutex (or the table's) at fork: the
  // child has one thread and no repair lock, so it starts with fresh, unlocked ones (the parent's
  // are leaked: they may be locked).
  new (&g_repair_table_mutex) std::mutex();
  g_repair_table = new std::map<RepairKey, std::recursive_mutex*>();  // NOLINT
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

// ---- the read-only probe
// -------------------------------------------------------------------------

std::uint32_t lease_lock_word(const MutexStorage& storage) noexcept {
  // glibc keeps the futex word of a mutex (`__lock`: owner TID | FUTEX_WAITERS | FUTEX_OWNER_DIED)
  // at offset 0 of pthread_mutex_t (asserted below). One atomic load; nothing is written.
  static_assert(offsetof(pthread_mutex_t, __data.__lock) == 0, "glibc's lock word moved");
  return static_cast<std::uint32_t>(__atomic_load_n(
      reinterpret_cast<const int*>(storage.bytes), __ATOMIC_ACQUIRE));  // (L5) pairs with the
                                                                        // kernel's OWNER_DIED store
}

LeaseProbe probe_lease(const MutexStorage& storage) noexcept {
  const std::uint32_t word = lease_lock_word(storage);
  if ((word & FUTEX_OWNER_DIED) != 0) return LeaseProbe::dead;
  if ((word & FUTEX_TID_MASK) == 0) return LeaseProbe::unowned;
  return LeaseProbe::held;
}

// ---- fault injection
// -----------------------------------------------------------------------------

void fault_point(const char* point) noexcept {
#if defined(IPCRING_FAULT_INJECTION)
  // Read at every call (the points are on slow paths only), so that a forked test child can set
  // the variable after its parent used the library. Hits are counted per process.
  const char* v = std::getenv("IPCRING_FAULT");  // NOLINT(concurrency-mt-unsafe): tests only
  if (v == nullptr) return;
  const char* colon = std::strchr(v, ':');
  if (colon == nullptr) return;
  const auto len = static_cast<std::size_t>(colon - v);
  if (!(len == 1 && v[0] == '*') &&
      (std::strlen(point) != len || std::strncmp(v, point, len) != 0)) {
    return;
  }
  char* end = nullptr;
  const long n = std::strtol(colon + 1, &end, 10);
  const bool stop = end != nullptr && std::strcmp(end, ":stop") == 0;
  static std::atomic<long> hits{0};
  static std::atomic<pid_t> hits_pid{0};
  const pid_t self = getpid();
  if (hits_pid.exchange(self, std::memory_order_relaxed) != self) {
    hits.store(0, std::memory_order_relaxed);
  }
  if (hits.fetch_add(1, std::memory_order_relaxed) + 1 == n) kill(self, stop ? SIGSTOP : SIGKILL);
#else
  (void)point;
#endif
}

// ---- the repair lock
// -----------------------------------------------------------------------------

RepairLock::~RepairLock() {
  release();
}

RepairLock::RepairLock(RepairLock&& other) noexcept
    : fd_(other.fd_), local_(other.local_), held_(other.held_) {
  other.fd_ = -1;
  other.local_ = nullptr;
  other.held_ = false;
}

void RepairLock::release() noexcept {
  if (fd_ >= 0) close(fd_);  // drops the flock
  fd_ = -1;
  if (local_ != nullptr) local_->unlock();
  local_ = nullptr;
  held_ = false;
}

bool RepairLock::acquire(int object_fd, std::chrono::milliseconds wait) noexcept {
  release();
  if (object_fd < 0) {
    held_ = true;  // an in-memory image: no other process can see it
    return true;
  }
  const std::uint64_t deadline =
      monotonic_ns() +
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, wait.count())) * 1'000'000ULL;
  std::recursive_mutex* local = repair_local_of(object_fd);
  if (local == nullptr) return false;
  // Polled (try_lock), like the flock below: a stalled holder must not make us wait forever.
  while (!local->try_lock()) {
    if (monotonic_ns() >= deadline) return false;
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  local_ = local;
  // A fresh open file description: a flock belongs to the description, so one shared with a fork
  // child (an inherited descriptor) would not exclude the child.
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", object_fd);
  fd_ = open(path, O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fd_ = fcntl(object_fd, F_DUPFD_CLOEXEC, 0);  // no /proc: threads still excluded
  if (fd_ < 0) {
    release();
    return false;
  }
  for (;;) {
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0) {
      held_ = true;
      return true;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    if (monotonic_ns() >= deadline) break;
    timespec pause{0, 1'000'000};
    nanosleep(&pause, nullptr);
  }
  release();
  return false;
}

// ---- the lease keeper
// ----------------------------------------------------------------------------

namespace {

// The lease keeper: one thread per process that takes and gives back long-lived leases, so that
// a lease does not die with the user thread that happened to create it. Requests are rare (attach,
// detach, producer create and close), so a mutex and a condition variable are enough.
class LeaseKeeper {
 public:
  LeaseKeeper() {
    std::thread([this] { run(); }).detach();
  }

  TakeResult take(MutexStorage& storage) { return call(Op::take, storage).take; }
  bool give(MutexStorage& storage) { return call(Op::give, storage).given; }

 private:
  enum class Op { none, take, give };
  struct Outcome {
    TakeResult take = TakeResult::error;
    bool given = false;
  };

  Outcome call(Op op, MutexStorage& storage) {
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
      Outcome out;
      if (op_ == Op::take) {
        out.take = take_here(*storage_);
      } else {
        out.given = give_here(*storage_);
      }
      result_ = out;
      op_ = Op::none;
      done_ = true;
      done_cv_.notify_one();
    }
  }

  TakeResult take_here(MutexStorage& storage) {
    // Never hand glibc a mutex whose immutable kind bits are not the ones init_robust_mutex sets,
    // and never try one a live owner holds: trylock puts the mutex on our list_op_pending, and a
    // kill of this thread right then would let the kernel mark a live owner with our TID dead.
    if (!lease_mutex_plausible(storage)) return TakeResult::refused;
    if (probe_lease(storage) == LeaseProbe::held) return TakeResult::refused;
    try {
      held_.reserve(held_.size() + 1);  // so that the bookkeeping below cannot fail
    } catch (...) {
      return TakeResult::error;
    }
    pthread_mutex_t* m = as_mutex(storage);
    const int rc = pthread_mutex_trylock(m);
    TakeResult r = TakeResult::error;
    if (rc == 0) {
      r = TakeResult::taken;
    } else if (rc == EOWNERDEAD) {
      pthread_mutex_consistent(m);  // on the owning thread, as required
      r = TakeResult::owner_died;
    } else {
      return rc == EBUSY ? TakeResult::refused : TakeResult::error;
    }
    held_.push_back(&storage);
    return r;
  }

  bool give_here(MutexStorage& storage) {
    auto it = std::find(held_.begin(), held_.end(), &storage);
    if (it == held_.end()) return false;  // not ours: never unlock it
    if (!links_ours(storage)) {
      // glibc's unlock would follow these links and write through them: abandon the lease. It
      // stays locked; the kernel marks it OWNER_DIED when this process exits.
      abandoned_.push_back(&storage);
      held_.erase(it);
      return false;
    }
    held_.erase(it);
    pthread_mutex_unlock(as_mutex(storage));
    return true;
  }

  // True when the robust-list links of `storage` (a mutex this thread holds) point at this
  // thread's robust list head or at another mutex this thread holds, as glibc left them.
  bool links_ours(MutexStorage& storage) const noexcept {
#if defined(__GLIBC__) && __PTHREAD_MUTEX_HAVE_PREV
    void* head = nullptr;
    std::size_t len = 0;
    if (syscall(SYS_get_robust_list, 0, &head, &len) != 0) return false;
    auto node = [](MutexStorage* s) {
      return reinterpret_cast<std::uintptr_t>(&as_mutex(*s)->__data.__list.__next);
    };
    auto known = [&](std::uintptr_t link) {
      link &= ~std::uintptr_t{1};
      if (link == reinterpret_cast<std::uintptr_t>(head)) return true;
      for (MutexStorage* h : held_) {
        if (h != &storage && node(h) == link) return true;
      }
      for (MutexStorage* h : abandoned_) {
        if (node(h) == link) return true;
      }
      return false;
    };
    std::uintptr_t next = 0;
    std::uintptr_t prev = 0;
    // Copied bytewise: shared memory that another process may scribble on.
    std::memcpy(&next, storage.bytes + offsetof(pthread_mutex_t, __data.__list.__next),
                sizeof next);
    std::memcpy(&prev, storage.bytes + offsetof(pthread_mutex_t, __data.__list.__prev),
                sizeof prev);
    return known(next) && known(prev);
#else
    (void)storage;
    return true;
#endif
  }

  std::mutex call_mutex_;
  std::mutex mutex_;
  std::condition_variable request_;
  std::condition_variable done_cv_;
  Op op_ = Op::none;
  MutexStorage* storage_ = nullptr;
  Outcome result_;
  bool done_ = false;
  // Keeper thread only.
  std::vector<MutexStorage*> held_;
  std::vector<MutexStorage*> abandoned_;
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

bool is_state(std::uint64_t w, LeaseState s) {
  return LeaseWord::state(w) == static_cast<std::uint8_t>(s);
}

// An ACTIVE entry whose owner the kernel declared dead, or that its owner left unowned while
// detaching (it died between unlocking and freeing the entry; under the repair lock nobody is
// between those steps). A mutex with implausible kind bits is never judged.
bool reapable(ReaderEntry& e, std::uint64_t& w) noexcept {
  w = e.lease_word.load(std::memory_order_acquire);
  if (!is_state(w, LeaseState::active)) return false;
  if (!lease_mutex_plausible(e.lease)) return false;
  return probe_lease(e.lease) != LeaseProbe::held;
}

std::size_t reap_locked(const SegmentView& view) noexcept {
  std::size_t reaped = 0;
  for (std::uint32_t i = 0; i < view.geo.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    std::uint64_t w = 0;
    if (!reapable(e, w)) continue;
    fault_point("reap.locked");
    clear_reader_bits(view, i);                               // (R6)
    reader_fences_reaped(view, i, LeaseWord::generation(w));  // CUDA: complete its fences
    view.producer().waiting.fetch_and(~(1U << i), std::memory_order_relaxed);
    e.held.store(0, std::memory_order_relaxed);
    e.instance_id.store(0, std::memory_order_relaxed);
    fault_point("reap.cleared");
    // (L3) release: the cleared bits are visible before the entry reads as free.
    e.lease_word.store(LeaseWord::make(LeaseWord::generation(w) + 1, LeaseState::free),
                       std::memory_order_release);
    ++reaped;
  }
  return reaped;
}

}  // namespace

TakeResult keeper_take(MutexStorage& storage) {
  return keeper().take(storage);
}
bool keeper_give(MutexStorage& storage) {
  return keeper().give(storage);
}

// ---- reader entries
// --------------------------------------------------------------------------------

std::size_t reap_dead_readers(const SegmentView& view) noexcept {
  // Read-only first: the common case (nobody died) costs loads only, no system call.
  bool any = false;
  for (std::uint32_t i = 0; i < view.geo.max_readers && !any; ++i) {
    std::uint64_t w = 0;
    any = reapable(view.reader(i), w);
  }
  if (!any) return 0;
  fault_point("reap.probed");
  RepairLock lock;
  if (!lock.acquire(view.fd, std::chrono::milliseconds(0))) return 0;  // next round
  return reap_locked(view);
}

std::size_t reap_dead_readers_locked(const SegmentView& view) noexcept {
  return reap_locked(view);
}

std::optional<TakenEntry> take_reader_entry(const SegmentView& view, std::string_view channel,
                                            std::uint64_t instance_id, ReadPolicy policy) {
  RepairLock lock;
  if (!lock.acquire(view.fd, std::chrono::milliseconds(2000))) {
    throw Error(Errc::channel_busy,
                channel_prefix(channel) +
                    "its repair lock (flock) stayed taken for 2 s; another process is "
                    "attaching, detaching or reaping and is stalled (stopped?)");
  }
  for (std::uint32_t i = 0; i < view.geo.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    const std::uint64_t w = e.lease_word.load(std::memory_order_acquire);
    const bool active = is_state(w, LeaseState::active);
    if (!active && !is_state(w, LeaseState::free)) continue;
    if (!lease_mutex_plausible(e.lease) || probe_lease(e.lease) == LeaseProbe::held) continue;
    fault_point("attach.locked");
    const TakeResult r = keeper_take(e.lease);
    if (r != TakeResult::taken && r != TakeResult::owner_died) continue;
    fault_point("attach.taken");
    if (active) {  // a dead owner's bits and fences, not reaped yet
      clear_reader_bits(view, i);
      reader_fences_reaped(view, i, LeaseWord::generation(w));
    }
    view.producer().waiting.fetch_and(~(1U << i), std::memory_order_relaxed);
    const std::uint64_t gen = LeaseWord::generation(w) + 1;
    e.instance_id.store(instance_id, std::memory_order_relaxed);
    e.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
    e.policy.store(static_cast<std::uint32_t>(policy), std::memory_order_relaxed);
    e.attached_ns.store(monotonic_ns(), std::memory_order_relaxed);
    e.frames_read.store(0, std::memory_order_relaxed);
    e.overruns.store(0, std::memory_order_relaxed);
    e.last_sequence.store(0, std::memory_order_relaxed);
    e.last_read_ns.store(0, std::memory_order_relaxed);
    e.held.store(0, std::memory_order_relaxed);
    for (auto& b : e.hold_histogram) b.store(0, std::memory_order_relaxed);
    for (auto& b : e.delay_histogram) b.store(0, std::memory_order_relaxed);
    // (L1) release: identity and telemetry reset are visible before the entry reads as active.
    e.lease_word.store(LeaseWord::make(gen, LeaseState::active), std::memory_order_release);
    return TakenEntry{i, gen};
  }
  return std::nullopt;
}

bool give_back_reader_entry(const SegmentView& view, std::uint32_t index,
                            std::uint64_t generation) noexcept {
  ReaderEntry& e = view.reader(index);
  RepairLock lock;
  const bool locked = lock.acquire(view.fd, std::chrono::milliseconds(2000));
  const std::uint64_t mine = LeaseWord::make(generation, LeaseState::active);
  const bool ours = e.lease_word.load(std::memory_order_acquire) == mine;
  if (ours) {
    // Nothing is held (every Frame kept the core alive), but clear our bits anyway.
    clear_reader_bits(view, index);
    view.producer().waiting.fetch_and(~(1U << index), std::memory_order_relaxed);
    e.instance_id.store(0, std::memory_order_relaxed);
    e.held.store(0, std::memory_order_relaxed);
  }
  fault_point("detach.cleared");
  // Without the repair lock an attacher could lock the mutex while glibc's unlock still has it on
  // our list_op_pending: keep it locked instead (the kernel frees it when this process exits).
  const bool released = locked && keeper_give(e.lease);
  fault_point("detach.unlocked");
  if (ours) {
    std::uint64_t expected = mine;
    // (L6) release: our cleared bits are visible before the entry reads as free.
    e.lease_word.compare_exchange_strong(expected,
                                         LeaseWord::make(generation + 1, LeaseState::free),
                                         std::memory_order_release, std::memory_order_relaxed);
  }
  return released;
}

// ---- the producer lease
// ----------------------------------------------------------------------------

bool producer_lease_alive(const SegmentView& view) noexcept {
  ProducerBlock& p = view.producer();
  if (!is_state(p.lease_word.load(std::memory_order_acquire), LeaseState::active)) return false;
  return lease_mutex_plausible(p.lease) && probe_lease(p.lease) == LeaseProbe::held;
}

bool producer_lease_dead(const SegmentView& view, std::uint64_t epoch) noexcept {
  ProducerBlock& p = view.producer();
  const std::uint64_t w = p.lease_word.load(std::memory_order_acquire);
  if (LeaseWord::generation(w) != epoch) return true;
  if (!is_state(w, LeaseState::active) && !is_state(w, LeaseState::closed)) return false;
  if (!lease_mutex_plausible(p.lease) || probe_lease(p.lease) != LeaseProbe::dead) return false;
  return p.lease_word.load(std::memory_order_acquire) == w;
}

void recover_after_producer_death(const SegmentView& view) noexcept {
  for (std::uint32_t i = 0; i < view.geo.slots; ++i) {
    Slot& slot = view.slot(i);
    const std::uint64_t s = slot.state.load(std::memory_order_relaxed);
    if (SlotWord::writing(s)) {
      // A loan of the dead producer: no reader can hold a W slot, so nobody reads it.
      slot.sequence.store(0, std::memory_order_relaxed);
      slot.state.store(SlotWord::make(SlotWord::generation(s) + 1, false, 0),
                       std::memory_order_release);
    }
  }
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
        // Nobody else can see this mutex, so the parent may lock it to check glibc's side too.
        const bool marked = probe_lease(*storage) == LeaseProbe::dead;
        const int probe = pthread_mutex_trylock(as_mutex(*storage));
        if (marked && probe == EOWNERDEAD) {
          pthread_mutex_consistent(as_mutex(*storage));
          pthread_mutex_unlock(as_mutex(*storage));
          ok = true;
        } else {
          why = std::string("a mutex whose owner died has lock word ") +
                std::to_string(lease_lock_word(*storage)) + " and gave " + errno_text(probe) +
                " instead of OWNER_DIED and EOWNERDEAD";
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
