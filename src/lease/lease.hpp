// lease.hpp — liveness: robust-mutex leases, their read-only probe, the repair lock, reaping,
// taking an entry, and the producer lease. Producer, Reader, inspect and the CUDA backend (through
// the segment-level hook reader_fences_reaped) call this module; none of them touches a lease mutex
// itself.
//
// The lease. A reader entry's (or the producer block's) process-shared robust mutex, locked for
// the owner's whole life by the owner's lease keeper thread. When the owner dies, the kernel walks
// the keeper's robust list and marks the mutex's lock word FUTEX_OWNER_DIED. That mark, read with
// a plain atomic load, is the only evidence of death this module accepts.
//
// Who mutates what (docs/protocol.md, "Liveness", gives the argument):
//   * The lock word of a lease is written only by its owner's keeper (lock at take, unlock at give
//     back) and by the kernel (OWNER_DIED at the owner's death). Nobody else locks, trylocks or
//     unlocks a lease mutex: a probe is a load. So no prober's robust list or list_op_pending ever
//     points at a lock that a live owner may hold, and a prober killed at any instruction, whatever
//     its thread id in whatever PID namespace, cannot make the kernel mark a live owner dead.
//   * A keeper locks a lease mutex only while its process holds the channel's repair lock (an
//     exclusive flock on a fresh open file description of the channel's object) and only when the
//     lock word shows no owner (0) or a dead one (OWNER_DIED). The repair lock makes that locker
//     the only thread anywhere with that mutex on its list_op_pending. The kernel releases a flock
//     of a dead process only after it processed the dead threads' robust lists (do_exit: exit_mm
//     before exit_files), so the next holder of the repair lock sees the dead locker's final lock
//     word.
//   * Lease words (free / active / closed, with a generation) are changed only under the repair
//     lock, so a reaper, an attacher, a detacher and a takeover never interleave on one entry, and
//     one that dies half-way leaves a state that the next holder of the repair lock completes.
//
// Robust mutexes belong to threads, so long-lived leases are locked and unlocked by one library-
// owned thread per process, the lease keeper, which never exits. After fork() the child has no
// keeper (threads do not survive fork) and owns none of the parent's leases.
#pragma once

#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string_view>

#include "ipcring/config.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

inline pthread_mutex_t* as_mutex(MutexStorage& storage) noexcept {
  return reinterpret_cast<pthread_mutex_t*>(storage.bytes);
}

// Initialises a process-shared robust mutex in `storage`. Returns 0 or an errno value.
int init_robust_mutex(MutexStorage& storage) noexcept;

// The immutable kind bits of a lease mutex (glibc), and whether they are exactly those
// init_robust_mutex sets. A value read from shared memory is never trusted: the keeper refuses to
// lock an implausible mutex instead of letting glibc act on hostile bytes.
int lease_mutex_kind(const MutexStorage& storage) noexcept;
bool lease_mutex_plausible(const MutexStorage& storage) noexcept;

// ---- the read-only probe -----------------------------------------------------------------------

// What a lease's lock word says. Read with one atomic load; nothing is written.
enum class LeaseProbe {
  unowned,  // lock word 0: nobody holds it
  held,     // a thread id and no OWNER_DIED: a live owner (or the kernel has not finished yet)
  dead,     // FUTEX_OWNER_DIED: the kernel declared the owner dead
};
std::uint32_t lease_lock_word(const MutexStorage& storage) noexcept;
LeaseProbe probe_lease(const MutexStorage& storage) noexcept;

// ---- the repair lock ---------------------------------------------------------------------------

// Exclusive flock on a fresh open file description of the object `object_fd` refers to (so that
// a fork child sharing our descriptors does not share the lock), plus a process-local mutex of
// that channel's (two threads of one process; another channel's lock never delays this one).
// Released by the destructor, and by the kernel when the process dies.
class RepairLock {
 public:
  RepairLock() = default;
  ~RepairLock();
  RepairLock(const RepairLock&) = delete;
  RepairLock& operator=(const RepairLock&) = delete;
  RepairLock(RepairLock&& other) noexcept;
  RepairLock& operator=(RepairLock&&) = delete;

  // Waits at most `wait` (0: one try). Returns false when the lock stayed busy or the object
  // cannot be locked. object_fd < 0 (an in-memory segment image): succeeds without locking.
  bool acquire(int object_fd, std::chrono::milliseconds wait) noexcept;
  bool held() const noexcept { return held_; }

 private:
  void release() noexcept;
  int fd_ = -1;
  std::recursive_mutex* local_ = nullptr;  // this channel's process-local half, while held
  bool held_ = false;
};

// ---- the lease keeper --------------------------------------------------------------------------

enum class TakeResult {
  taken,       // we hold it; it was unowned
  owner_died,  // we hold it; its previous owner died (made consistent)
  refused,     // not plausible, or the lock word shows a live owner: not touched
  error,       // pthread_mutex_trylock failed otherwise (corrupt segment)
};
// Locks the lease on the keeper thread. Precondition: the caller holds the repair lock of the
// segment (or the segment is not reachable by anyone else yet).
TakeResult keeper_take(MutexStorage& storage);
// Unlocks the lease on the keeper thread, unless its robust-list links do not point into the
// keeper's own robust list (hostile bytes): then it is abandoned, still locked (glibc would follow
// those links), and false is returned; the caller must then never unmap the segment.
bool keeper_give(MutexStorage& storage);

// ---- reader entries ----------------------------------------------------------------------------

// Reaps dead readers: an ACTIVE entry whose lock word says dead (or unowned: its owner died
// between unlocking and freeing the entry) has its slot bits and waiting bit cleared, its CUDA
// release fences completed (reader_fences_reaped), and is freed. Probes without writing; takes the
// repair lock only when there is something to reap (never waits for it). Returns the number reaped.
std::size_t reap_dead_readers(const SegmentView& view) noexcept;
// The same for a caller that holds the repair lock already (takeover).
std::size_t reap_dead_readers_locked(const SegmentView& view) noexcept;

// Attach: under the repair lock, takes the first entry that is free or whose owner is dead, with
// `instance_id` as its identity. Returns the entry index and its new generation, or nullopt when
// every entry has a live owner. Throws Error(channel_busy) when the repair lock stays busy.
struct TakenEntry {
  std::uint32_t index = 0;
  std::uint64_t generation = 0;
};
std::optional<TakenEntry> take_reader_entry(const SegmentView& view, std::string_view channel,
                                            std::uint64_t instance_id, ReadPolicy policy);

// Detach: clears the entry's bits, gives the lease back, frees the entry (unless it was no longer
// ours). Returns false when the lease had to be abandoned (keep the mapping forever).
bool give_back_reader_entry(const SegmentView& view, std::uint32_t index,
                            std::uint64_t generation) noexcept;

// ---- the producer lease ------------------------------------------------------------------------

// Producer liveness as a reader or inspector sees it: ACTIVE and held.
bool producer_lease_alive(const SegmentView& view) noexcept;
// The producer of `epoch` is gone for good: another epoch owns the lease word, or the kernel
// declared the lease's owner dead (OWNER_DIED) while the word says active or closed (a producer
// whose close left GPU work running keeps its lease until its process ends, so that end shows
// here too). A clean close that gave the lease back reads unowned: not dead. The word is read
// again after the probe, so a producer that was closing in between is not taken for dead.
bool producer_lease_dead(const SegmentView& view, std::uint64_t epoch) noexcept;

// Resets what a dead producer may have left mid-operation (its loans). Caller holds the producer
// lease.
void recover_after_producer_death(const SegmentView& view) noexcept;

// ---- fault injection (test builds)
// ---------------------------------------------------------------

// With IPCRING_FAULT_INJECTION compiled in and the environment variable IPCRING_FAULT set to
// "<point>:<n>", the process SIGKILLs itself the n-th time it reaches <point> (n >= 1; point "*":
// any point), with "<point>:<n>:stop" it SIGSTOPs itself (a stalled process). The points are the
// steps of the liveness protocols (create.*, attach.*, detach.*, reap.*, takeover.*, close.*).
void fault_point(const char* point) noexcept;

// Checks once per process that robust mutexes work here: a forked child locks one in shared
// memory and exits; its lock word must then carry OWNER_DIED. Throws Error(unsupported) otherwise.
void self_test_robust_mutexes();

}  // namespace ipcring::detail
