// lease.hpp — robust-mutex leases.
//
// A lease is a process-shared robust mutex (PTHREAD_MUTEX_NORMAL type, PTHREAD_MUTEX_ROBUST, no
// priority inheritance) in the control segment, locked for the whole life of its owner. When the
// owning process dies, the kernel walks the robust list of each of its threads and marks the
// mutexes they held owner-dead: the next trylock returns EOWNERDEAD. That is how the producer
// learns, without any daemon or PID polling, that a reader died.
//
// Robust mutexes belong to threads, not processes: if the user thread that called attach() exited
// while holding the lease, the reader would look dead. So long-lived leases are locked and unlocked
// by one library-owned thread per process, the lease keeper, which never exits. Momentary probes
// (reap, inspect) lock and unlock on the calling thread.
//
// After fork() the child has no lease keeper (threads do not survive fork) and owns none of the
// parent's leases; a fresh keeper is started on first use in the child.
#pragma once

#include <pthread.h>

#include <cstdint>

#include "segment/layout.hpp"

namespace ipcring::detail {

inline pthread_mutex_t* as_mutex(MutexStorage& storage) noexcept {
  return reinterpret_cast<pthread_mutex_t*>(storage.bytes);
}

// Initialises a process-shared robust mutex in `storage`. Returns 0 or an errno value.
int init_robust_mutex(MutexStorage& storage) noexcept;

// The immutable kind bits of a lease mutex (glibc), and whether they are exactly those
// init_robust_mutex sets. A value read from shared memory is never trusted: trylock refuses an
// implausible mutex (TakeResult::error) instead of letting glibc act on hostile bytes.
int lease_mutex_kind(const MutexStorage& storage) noexcept;
bool lease_mutex_plausible(const MutexStorage& storage) noexcept;

// Result of taking a lease mutex.
enum class TakeResult {
  busy,           // EBUSY: held by someone else (a live owner, or a prober for a moment)
  taken,          // 0: we hold it; the previous holder unlocked it
  owner_died,     // EOWNERDEAD: we hold it; it was made consistent; the previous holder died
  unrecoverable,  // ENOTRECOVERABLE: re-initialised; call again
  error,          // another error (EINVAL: not a mutex — corrupt segment)
};

// Long-lived leases, held by the lease keeper thread.
TakeResult keeper_trylock(MutexStorage& storage);
void keeper_unlock(MutexStorage& storage);

// Momentary probe on the calling thread: trylock; on success (taken or owner_died, made
// consistent) the caller must call probe_unlock() on the same thread.
TakeResult probe_trylock(MutexStorage& storage) noexcept;
void probe_unlock(MutexStorage& storage) noexcept;

// Liveness of a lease for inspection: true when some thread holds the mutex (EBUSY). Leaves the
// lease word untouched; a dead owner's mutex is made consistent and unlocked again, so the next
// reap still finds the entry active and unowned ("owner gone").
bool probe_alive(MutexStorage& storage) noexcept;

// Checks once per process that robust mutexes work here: a forked child locks one in shared
// memory and exits; the parent must then see EOWNERDEAD. Throws Error(unsupported) otherwise.
void self_test_robust_mutexes();

}  // namespace ipcring::detail
