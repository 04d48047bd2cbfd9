// name_token.hpp — a running producer's claim on its channel's name that removal of /dev/shm
// entries cannot take away.
//
// The token is an abstract unix-domain socket address, bound by the producer for its whole life:
// "ipcring/<device of /dev/shm, hex>/<channel>" (a long channel name is replaced by a hash of it,
// so that the address fits sun_path). bind() of an address that is bound fails with EADDRINUSE,
// and the kernel unbinds it when the last descriptor of the socket is closed, at the latest when
// the process dies: "a producer lives" is a kernel fact, like a lease, and it holds while the
// channel's object has no name at all (ringdump rm, a cleanup script, systemd's RemoveIPC), which
// the lease (a mutex inside the object) cannot say.
//
// Limits (docs/protocol.md, "Names"): abstract addresses belong to a network namespace. Producers
// that share /dev/shm but not the network namespace (Docker's --ipc=host or a shared /dev/shm
// volume without --network=host) cannot see each other's tokens; there the lease still refuses a
// second producer while the name exists, and a producer whose name was taken by such a producer
// reports it (Producer::name_taken) instead of fighting over it. The device of /dev/shm in the
// address keeps channels of different /dev/shm mounts that share a network namespace apart. Any
// local user of the namespace can bind any abstract address (no permissions), so a hostile local
// user can keep a channel name from being created; the message names the address.
//
// fork(): the child's copy of the socket descriptor is closed in the child (pthread_atfork, in the
// child's first instructions after fork returns), so a fork child never keeps its parent's name
// alive; exec closes it too (SOCK_CLOEXEC).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include <cstdint>
#include <string>
#include <string_view>

namespace ipcring::detail {

class NameToken {
 public:
  NameToken() = default;
  ~NameToken();
  NameToken(NameToken&& other) noexcept;
  NameToken& operator=(NameToken&& other) noexcept;
  NameToken(const NameToken&) = delete;
  NameToken& operator=(const NameToken&) = delete;

  // Binds the channel's token. Throws Error(producer_exists) naming the channel and the address
  // when another live process holds it. Where no unix socket can be made at all (a seccomp
  // sandbox), returns an empty token: the lease alone then guards the name.
  static NameToken claim(std::string_view channel);
  bool held() const noexcept { return fd_ >= 0; }

 private:
  void release() noexcept;
  int fd_ = -1;
  bool tracked_ = false;  // in the table that a fork child's atfork handler closes
  std::uint64_t fork_gen_ = 0;
};

// The token's address as ringdump and messages show it ("@ipcring/<dev>/<channel>").
std::string name_token_address(std::string_view channel);

// What the watcher thread knows about one producer's name. `changed` is set by the watcher
// (release) and read by the producer's loan (relaxed: the producer re-checks the name itself;
// producer/name_defence.hpp).
struct NameWatch {
  std::string path;  // /dev/shm/ipcring.<channel>
  dev_t device = 0;
  ino_t inode = 0;
  std::uint64_t period_ns = 0;
  std::atomic<bool> changed{false};
  std::uint64_t next_check_ns = 0;  // the watcher's own (under its mutex)
};

}  // namespace ipcring::detail
