// process.hpp — this process's identity as the library sees it: a random instance id, and the
// fork generation that tells an object made before fork() from one made in this process.
#pragma once

#include <cstdint>

namespace ipcring::detail {

// A random non-zero 64-bit identity (getrandom). Slow path only.
std::uint64_t random_instance_id();

// Incremented in the child after every fork() (pthread_atfork). Objects record the value when made
// and refuse to act on shared state when it differs: the child inherited them.
std::uint64_t fork_generation() noexcept;

}  // namespace ipcring::detail
