// handout.hpp — the producer hands its channel out over the channel's socket (the Wayland/PipeWire
// model, docs/protocol.md "Trust").
//
// The producer listens on DIR/NAME.sock (a SOCK_SEQPACKET unix socket) on a thread of its own,
// off the hot path. For each connection it reads the peer's credentials from the kernel
// (SO_PEERCRED, SO_PEERGROUPS), checks them against the channel's policy and sends one message:
// either a refusal that names the peer's uid and the policy, with no descriptor, or the channel's
// descriptors with SCM_RIGHTS: the control segment (a sealed memfd, read-write: readers take their
// lease and set their bits in it) and, for host channels, the frame pool (a read-only open file
// description of a memfd sealed against writes, shrinking and growing). Then it closes the
// connection. Every send is non-blocking, so a client that never reads delays nobody. The same
// thread defends the name: when the socket's or the lock's name is removed or replaced (RemoveIPC,
// a cleanup script), it binds a new socket or takes a new lock file (it still holds the old lock,
// so no other producer can have started meanwhile unless it lost the name; then it says so).
//
// The reader connects (bounded by a timeout), checks the producer's credentials against its own
// trust (its uid, the directory's owner and group, ReaderOptions::trust_uids), receives the
// message with MSG_CMSG_CLOEXEC, closes anything unexpected, and gives the descriptors to the
// segment module, which validates them (type, size, seals, header) before mapping anything.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "channel/directory.hpp"
#include "channel/name_lock.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

inline constexpr std::uint64_t kHandoutMagic = 0x31746f64676e6972ULL;  // "ringdot1"
inline constexpr std::uint32_t kHandoutVersion = 1;

// The one message of a connection (SOCK_SEQPACKET keeps its boundaries).
struct HandoutMessage {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t layout_version;  // the producer's kLayoutVersion
  std::uint32_t refused;         // 1: no descriptors; `text` says why
  std::uint32_t descriptors;     // how many come with it: 1 (CUDA) or 2 (host), and the device's
  std::uint64_t control_bytes;   // size of the control segment's memfd
  std::uint64_t frames_bytes;    // size of the frame pool's memfd (0: none)
  std::uint64_t instance_id;     // the producer's instance id
  std::uint32_t pid;             // the producer's pid in its own namespace (display only)
  // Of `descriptors`, how many are frame buffers exported as file descriptors (CUDA VMM), sent
  // after the control segment's; 0 otherwise (then the field is the former zero padding, so
  // handout version 1 is unchanged for every other channel).
  std::uint32_t device_descriptors;
  char text[256];  // NUL-terminated; the refusal's reason
};

// A process's credentials as the kernel gives them for a socket's peer.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (SO_PEERGROUPS), when the kernel says
};
PeerCredentials peer_credentials(int socket_fd);

// Who a producer hands its channel to (ChannelConfig's policy).
struct AccessPolicy {
  uid_t producer_uid = 0;
  std::vector<std::uint32_t> uids;
  std::vector<std::uint32_t> gids;
  DirectoryTrust directory;
  bool allows(const PeerCredentials& peer) const;
  std::string describe() const;
};

class ChannelServer {
 public:
  struct Memory {
    int control_fd = -1;  // not owned: the producer's mapping owns it
    int frames_fd = -1;   // a read-only description; owned by the server (-1: none)
    std::uint64_t control_bytes = 0;
    std::uint64_t frames_bytes = 0;
    std::uint64_t instance_id = 0;
    // The frame buffers exported as descriptors (CUDA VMM, backend/cuda/cuda_vmm.hpp), one per
    // buffer, at most kMaxDeviceDescriptors; sent after the control segment's, to the peers the
    // policy allows and to nobody else. The server duplicates them (its own, closed when it
    // stops): the caller keeps its descriptors.
    std::vector<int> device_fds;
  };
  // Binds the socket (replacing a stale one: the caller holds the name's lock) and starts the
  // thread. Throws Error naming the socket's path.
  ChannelServer(std::string channel, ChannelDirectory dir, NameLock lock, unsigned mode,
                AccessPolicy policy, Memory memory, std::chrono::nanoseconds defend_period);
  // Stops the thread, then removes the socket's and the lock's names if they are still ours.
  ~ChannelServer();
  ChannelServer(const ChannelServer&) = delete;
  ChannelServer& operator=(const ChannelServer&) = delete;

  bool owns_name() const noexcept { return owns_name_.load(std::memory_order_relaxed); }
  std::uint64_t restores() const noexcept { return restores_.load(std::memory_order_relaxed); }

 private:
  void bind_socket();
  void run() noexcept;
  void serve(int connection) noexcept;
  void defend() noexcept;
  bool socket_named() const noexcept;

  std::string channel_;
  ChannelDirectory dir_;
  NameLock lock_;
  unsigned mode_;
  AccessPolicy policy_;
  Memory memory_;
  std::chrono::nanoseconds period_;
  int listen_fd_ = -1;
  dev_t socket_dev_ = 0;
  ino_t socket_ino_ = 0;
  int stop_fd_ = -1;
  std::uint64_t fork_gen_ = 0;
  std::atomic<bool> owns_name_{true};
  std::atomic<std::uint64_t> restores_{0};
  std::thread thread_;
};

// The most frame buffer descriptors one handout carries (SCM_RIGHTS allows 253 per message).
inline constexpr int kMaxDeviceDescriptors = 64;

// What a reader received: descriptors it owns (close them, or give them to open_received).
struct Handout {
  int control_fd = -1;
  int frames_fd = -1;
  std::vector<int> device_fds;  // HandoutMessage::device_descriptors of them, in buffer order
  HandoutMessage message{};
  PeerCredentials producer;
  std::string socket;  // the socket's path, for messages
  Handout() = default;
  ~Handout();
  Handout(Handout&& other) noexcept;
  Handout& operator=(Handout&&) = delete;
  Handout(const Handout&) = delete;
  Handout& operator=(const Handout&) = delete;
};

// Connects to the channel's socket and receives its descriptors, within `timeout`. Throws Error:
// not_found (no socket, or nobody listening: no producer runs), permission_denied (the producer
// refused us, naming our uid; or we do not trust it, naming its uid), channel_busy (it did not
// answer in time), corrupt_segment (a malformed message or unexpected descriptors).
Handout fetch_handout(std::string_view channel, const ChannelDirectory& dir,
                      const std::vector<std::uint32_t>& trust_uids,
                      std::chrono::milliseconds timeout);

// The reader's way in: the channel's directory (checked, never made), the handout from its
// producer (trusted as fetch_handout says), the descriptors validated and the control segment
// mapped (segment.hpp, open_received). The result's owner_uid is the producer's uid and mode the
// socket's permission bits. Throws what those throw.
// `inspecting` (inspect(), reap from a tool): when the producer holds the name but does not answer
// in time (stopped, stalled: the 3 a.m. case), reach its memory the way a debugger would, through
// the producer's own descriptors (/proc/PID/fd of the pid in its lock file): possible for the
// same user or root, in the same PID namespace; the memory is validated as if it were received.
OpenedSegment open_channel(std::string_view channel, std::string_view dir,
                           const std::vector<std::uint32_t>& trust_uids,
                           std::chrono::milliseconds timeout = std::chrono::milliseconds(2000),
                           bool inspecting = false);

}  // namespace ipcring::detail
