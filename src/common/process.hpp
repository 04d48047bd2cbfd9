// process.hpp — this process's identity as the library sees it: a random instance id, and the
// fork generation that tells an object made before fork() from one made in this process.
#pragma once

#include <cstdint>
#include <memory>

namespace ipcring::detail {

// A random non-zero 64-bit identity (getrandom). Slow path only.
std::uint64_t random_instance_id();

// Incremented in the child after every fork() (pthread_atfork). Objects record the value when made
// and refuse to act on shared state when it differs: the child inherited them.
std::uint64_t fork_generation() noexcept;

// Descriptors that must not outlive their owner in a fork child (a name lock, which would keep a
// dead producer's name held; a listening socket): the child closes them right after fork(). False
// when the table is full (the descriptor then stays open in a child until it execs: CLOEXEC).
bool close_in_fork_child(int fd) noexcept;
// Forgets `fd` before its owner closes it (in the process that tracked it, not in a child).
void forget_in_fork_child(int fd) noexcept;

// Keeps `object` alive until the process exits: memory that GPU work or other processes may still
// use after its owner is gone (a mapping whose lease was kept, buffers a queued kernel writes).
// Held in a process-wide list, so leak checkers see it as reachable rather than lost.
void keep_until_exit(std::shared_ptr<const void> object) noexcept;

}  // namespace ipcring::detail
