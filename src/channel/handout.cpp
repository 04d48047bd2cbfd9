#include "channel/handout.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <utility>

#include "common/errno_text.hpp"
#include "common/naming.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

namespace ipcring::detail {

namespace {

constexpr int kMaxDescriptors = 4;

bool listed(const std::vector<std::uint32_t>& ids, std::uint32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

std::string list_text(const std::vector<std::uint32_t>& ids) {
  std::string s;
  for (const auto id : ids) {
    // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "," + to_string().
    if (!s.empty()) s += ',';
    s += std::to_string(id);
  }
  return s;
}

sockaddr_un address_of(const std::string& path, socklen_t& len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  // validate_name bounds the leaf, so "/proc/self/fd/N/<leaf>.sock" always fits.
  std::memcpy(sa.sun_path, path.data(), std::min(path.size(), sizeof sa.sun_path - 1));
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return sa;
}

void close_all(const int* fds, int n) noexcept {
  for (int i = 0; i < n; ++i) {
    if (fds[i] >= 0) close(fds[i]);
  }
}

}  // namespace

PeerCredentials peer_credentials(int socket_fd) {
  PeerCredentials peer;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    throw Error(Errc::system_error, "ipcring: SO_PEERCRED: " + std::string(errno_text(errno)));
  }
  peer.pid = cred.pid;
  peer.uid = cred.uid;
  peer.gid = cred.gid;
  gid_t groups[256];
  socklen_t glen = sizeof groups;
  if (getsockopt(socket_fd, SOL_SOCKET, SO_PEERGROUPS, groups, &glen) == 0) {
    peer.groups.assign(groups, groups + glen / sizeof(gid_t));
  }
  return peer;
}

bool AccessPolicy::allows(const PeerCredentials& peer) const {
  if (peer.uid == producer_uid || peer.uid == 0 || listed(uids, peer.uid)) return true;
  if (listed(gids, peer.gid)) return true;
  for (const gid_t g : peer.groups) {
    if (listed(gids, g)) return true;
  }
  return directory.trusts_groups(peer.gid, peer.groups);
}

std::string AccessPolicy::describe() const {
  std::string s = "uid " + std::to_string(producer_uid) + " and root";
  if (!uids.empty()) s += ", uids " + list_text(uids);
  if (!gids.empty()) s += ", members of gids " + list_text(gids);
  if (directory.group_shared)
    s += ", members of the directory's gid " + std::to_string(directory.group);
  return s;
}

// ---- the producer's side --------------------------------------------------------------------

ChannelServer::ChannelServer(std::string channel, ChannelDirectory dir, NameLock lock,
                             unsigned mode, AccessPolicy policy, Memory memory,
                             std::chrono::nanoseconds defend_period)
    : channel_(std::move(channel)),
      dir_(std::move(dir)),
      lock_(std::move(lock)),
      mode_(mode),
      policy_(std::move(policy)),
      memory_(memory),
      period_(defend_period),
      fork_gen_(fork_generation()) {
  // The buffers' descriptors become ours (duplicates): the pool that exported them may close its
  // own before we stop sending (the producer's close frees its pool first).
  for (int& fd : memory_.device_fds) {
    const int ours = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (ours < 0) {
      const int err = errno;
      for (int& done : memory_.device_fds) {
        if (&done == &fd) break;
        close(done);
      }
      if (memory_.frames_fd >= 0) close(memory_.frames_fd);
      throw Error(
          Errc::system_error,
          channel_prefix(channel_) + "duplicating a frame buffer descriptor: " + errno_detail(err));
    }
    fd = ours;
  }
  try {
    stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) {
      throw Error(Errc::system_error,
                  channel_prefix(channel_) + "eventfd: " + std::string(errno_text(errno)));
    }
    bind_socket();
    thread_ = std::thread([this] { run(); });
  } catch (...) {
    if (listen_fd_ >= 0) {
      forget_in_fork_child(listen_fd_);
      close(listen_fd_);
      unlinkat(dir_.fd(), dir_.socket_file().c_str(), 0);
    }
    if (stop_fd_ >= 0) close(stop_fd_);
    if (memory_.frames_fd >= 0) close(memory_.frames_fd);
    for (const int fd : memory_.device_fds) close(fd);
    throw;
  }
}

ChannelServer::~ChannelServer() {
  if (fork_gen_ != fork_generation()) {
    // A fork child: the thread does not exist here and nothing of the name is ours (the child
    // closed its copies of the listening socket and the lock at fork).
    new std::thread(std::move(thread_));  // NOLINT: never joined nor destroyed
    // Our copies of the capabilities and of the stop descriptor: nothing to keep in a child.
    for (const int fd : memory_.device_fds) close(fd);
    if (memory_.frames_fd >= 0) close(memory_.frames_fd);
    close(stop_fd_);
    return;
  }
  const std::uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  if (owns_name()) {
    // Clean exit: the socket's name first (no new reader finds us), then the lock's.
    if (socket_named()) unlinkat(dir_.fd(), dir_.socket_file().c_str(), 0);
    lock_.remove_name(dir_);
  }
  if (listen_fd_ >= 0) {
    forget_in_fork_child(listen_fd_);
    close(listen_fd_);
  }
  close(stop_fd_);
  if (memory_.frames_fd >= 0) close(memory_.frames_fd);
  for (const int fd : memory_.device_fds) close(fd);
}

bool ChannelServer::socket_named() const noexcept {
  struct stat st {};
  const std::string& file = dir_.socket_file();
  return fstatat(dir_.fd(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
         st.st_dev == socket_dev_ && st.st_ino == socket_ino_;
}

void ChannelServer::bind_socket() {
  const std::string& file = dir_.socket_file();
  const std::string shown = dir_.shown_path(kSocketSuffix);
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    throw Error(Errc::system_error,
                channel_prefix(channel_) + "socket: " + std::string(errno_text(errno)));
  }
  // We hold the name's lock: whatever has the socket's name now is a stale one (or a squatter's
  // from inside the directory's trust) and is replaced.
  unlinkat(dir_.fd(), file.c_str(), 0);
  socklen_t len = 0;
  const sockaddr_un sa = address_of(dir_.proc_path(kSocketSuffix), len);
  if (bind(fd, reinterpret_cast<const sockaddr*>(&sa), len) != 0 || listen(fd, 64) != 0) {
    const int err = errno;
    close(fd);
    throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system_error,
                channel_prefix(channel_) + "cannot listen on " + shown + ": " + errno_text(err) +
                    " (errno " + std::to_string(err) + ")");
  }
  fchmodat(dir_.fd(), file.c_str(), mode_ & 0666, 0);  // connecting needs write permission
  struct stat st {};
  if (fstatat(dir_.fd(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    socket_dev_ = st.st_dev;
    socket_ino_ = st.st_ino;
  }
  if (listen_fd_ >= 0) {
    forget_in_fork_child(listen_fd_);
    close(listen_fd_);
  }
  listen_fd_ = fd;
  close_in_fork_child(fd);
}

void ChannelServer::run() noexcept {
  const int period_ms =
      static_cast<int>(std::clamp<std::int64_t>(period_.count() / 1'000'000, 1, 1000));
  for (;;) {
    pollfd fds[2] = {{stop_fd_, POLLIN, 0}, {listen_fd_, POLLIN, 0}};
    const int n = poll(fds, listen_fd_ >= 0 ? 2 : 1, period_ms);
    if (n < 0 && errno != EINTR) return;
    if ((fds[0].revents & POLLIN) != 0) return;
    if (n > 0 && listen_fd_ >= 0 && (fds[1].revents & POLLIN) != 0) {
      // Bounded: a flood of connections is served a batch at a time between the name checks.
      for (int i = 0; i < 64; ++i) {
        const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) break;
        serve(c);
        close(c);
      }
    }
    defend();
  }
}

void ChannelServer::serve(int connection) noexcept {
  HandoutMessage m{};
  m.magic = kHandoutMagic;
  m.version = kHandoutVersion;
  m.layout_version = kLayoutVersion;
  m.instance_id = memory_.instance_id;
  m.pid = static_cast<std::uint32_t>(getpid());
  int fds[2 + kMaxDeviceDescriptors] = {memory_.control_fd, memory_.frames_fd};
  int count = memory_.frames_fd >= 0 ? 2 : 1;
  const int devices = std::min(static_cast<int>(memory_.device_fds.size()), kMaxDeviceDescriptors);
  for (int i = 0; i < devices; ++i)
    fds[count + i] = memory_.device_fds[static_cast<std::size_t>(i)];
  count += devices;
  m.device_descriptors = static_cast<std::uint32_t>(devices);
  try {
    const PeerCredentials peer = peer_credentials(connection);
    if (!policy_.allows(peer)) {
      m.refused = 1;
      const std::string why = "the producer (pid " + std::to_string(getpid()) + ", uid " +
                              std::to_string(geteuid()) + ") refuses uid " +
                              std::to_string(peer.uid) + " (gid " + std::to_string(peer.gid) +
                              "): its channel is handed to " + policy_.describe();
      std::strncpy(m.text, why.c_str(), sizeof m.text - 1);
      count = 0;
      m.device_descriptors = 0;
    }
  } catch (...) {
    return;  // no credentials: nothing is sent
  }
  m.descriptors = static_cast<std::uint32_t>(count);
  m.control_bytes = memory_.control_bytes;
  m.frames_bytes = memory_.frames_bytes;
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * (2 + kMaxDeviceDescriptors))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (count > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * static_cast<std::size_t>(count));
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * static_cast<std::size_t>(count));
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * static_cast<std::size_t>(count));
  }
  // Non-blocking on a fresh connection: the message fits its empty buffer, and a client that
  // does not read delays nobody.
  [[maybe_unused]] const ssize_t sent = sendmsg(connection, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void ChannelServer::defend() noexcept {
  if (!owns_name()) return;
  try {
    if (!dir_.still_there()) {
      // The directory was removed (RemoveIPC, a cleanup of /dev/shm): make it again.
      ChannelDirectory fresh = ChannelDirectory::open(channel_, dir_.base_path(), true);
      dir_ = std::move(fresh);
    }
    bool restored = false;
    if (!lock_.still_named(dir_)) {
      // Still holding the old lock, no producer could start unless its file's name was gone; a
      // new lock file nobody holds is ours. One another producer holds means the name was taken
      // in the window: say so, and leave it to that producer.
      try {
        NameLock fresh = NameLock::take(dir_, channel_, mode_);
        lock_ = std::move(fresh);
        restored = true;
      } catch (const Error& e) {
        if (e.code() == Errc::producer_exists) {
          owns_name_.store(false, std::memory_order_relaxed);
          if (listen_fd_ >= 0) {
            forget_in_fork_child(listen_fd_);
            close(listen_fd_);
            listen_fd_ = -1;
          }
          return;
        }
        throw;
      }
    }
    if (!socket_named()) {
      bind_socket();
      restored = true;
    }
    if (restored) restores_.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    // Not possible now (no space for a file, the directory refused): try again next period.
  }
}

// ---- the reader's side ----------------------------------------------------------------------

Handout::~Handout() {
  if (control_fd >= 0) close(control_fd);
  if (frames_fd >= 0) close(frames_fd);
  for (const int fd : device_fds) {
    if (fd >= 0) close(fd);
  }
}

Handout::Handout(Handout&& other) noexcept
    : control_fd(std::exchange(other.control_fd, -1)),
      frames_fd(std::exchange(other.frames_fd, -1)),
      device_fds(std::exchange(other.device_fds, {})),
      message(other.message),
      producer(std::move(other.producer)),
      socket(std::move(other.socket)) {}

Handout fetch_handout(std::string_view channel, const ChannelDirectory& dir,
                      const std::vector<std::uint32_t>& trust_uids,
                      std::chrono::milliseconds timeout) {
  const std::string ch = channel_prefix(channel);
  Handout h;
  h.socket = dir.shown_path(kSocketSuffix);
  const std::string& file = dir.socket_file();
  struct stat st {};
  if (fstatat(dir.fd(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    throw Error(Errc::not_found, ch + "no such channel (" + h.socket +
                                     " does not exist); is its producer running, with the same "
                                     "directory (IPCRING_DIR, --dir)?");
  }
  if (!S_ISSOCK(st.st_mode)) {
    throw Error(Errc::corrupt_segment, ch + h.socket + " is not a socket; remove it (ringdump gc)");
  }
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(Errc::system_error, ch + "socket: " + std::string(errno_text(errno)));
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const auto ms = std::max<std::int64_t>(1, timeout.count());
  timeval tv{static_cast<time_t>(ms / 1000), static_cast<suseconds_t>((ms % 1000) * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  socklen_t len = 0;
  const sockaddr_un sa = address_of(dir.proc_path(kSocketSuffix), len);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), len) != 0) {
    const int err = errno;
    if (err == ECONNREFUSED || err == ENOENT) {
      throw Error(Errc::not_found, ch + "no producer serves it (" + h.socket +
                                       " is a stale name: nobody listens); is its producer "
                                       "running?");
    }
    if (err == EAGAIN || err == EINPROGRESS) {
      throw Error(Errc::channel_busy, ch + "its producer did not accept the connection to " +
                                          h.socket + " within " + std::to_string(ms) +
                                          " ms (stalled or flooded)");
    }
    throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system_error,
                ch + "cannot connect to " + h.socket + ": " + errno_text(err) + " (errno " +
                    std::to_string(err) + ")" +
                    (err == EACCES ? "; its mode or the directory's keeps this user out" : ""));
  }
  h.producer = peer_credentials(fd);
  const PeerCredentials& p = h.producer;
  const bool trusted = p.uid == geteuid() || dir.trust().trusts_uid(p.uid) ||
                       listed(trust_uids, p.uid) || dir.trust().trusts_groups(p.gid, p.groups);
  if (!trusted) {
    throw Error(
        Errc::permission_denied,
        ch + "the producer answering on " + h.socket + " runs as uid " + std::to_string(p.uid) +
            " (pid " + std::to_string(p.pid) + "), which this reader (uid " +
            std::to_string(geteuid()) + ") does not trust: it trusts itself and the directory's " +
            dir.trust().describe() + (trust_uids.empty() ? "" : ", uids " + list_text(trust_uids)) +
            "; if that producer is meant to be read, add its uid to "
            "ReaderOptions::trust_uids (--trust-uid)");
  }
  constexpr int kMaxReceived = kMaxDescriptors + kMaxDeviceDescriptors;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceived)] = {};
  iovec iov{&h.message, sizeof h.message};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got = -1;
  do {
    got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  const int err = errno;
  // Whatever came, its descriptors are ours to close unless they are exactly what we expect.
  int fds[kMaxReceived];
  std::fill(std::begin(fds), std::end(fds), -1);
  int count = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < n; ++i) {
      int v = -1;
      std::memcpy(&v, CMSG_DATA(c) + i * sizeof(int), sizeof v);
      if (count < kMaxReceived) {
        fds[count++] = v;
      } else if (v >= 0) {
        close(v);
      }
    }
  }
  auto fail = [&](Errc code, const std::string& what) {
    close_all(fds, count);
    throw Error(code, ch + what);
  };
  if (got < 0 && (err == ECONNRESET || err == EPIPE)) {
    fail(Errc::not_found, "its producer ended while answering on " + h.socket);
  }
  if (got < 0) {
    if (err == EAGAIN || err == EWOULDBLOCK) {
      fail(Errc::channel_busy, "its producer did not answer on " + h.socket + " within " +
                                   std::to_string(ms) + " ms (stalled?)");
    }
    fail(Errc::system_error, "recvmsg on " + h.socket + ": " + errno_text(err));
  }
  if (got == 0) {
    // Connected, then closed with no answer: the producer ended (or was killed) while answering.
    fail(Errc::not_found, "its producer ended while answering on " + h.socket);
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0 ||
      static_cast<std::size_t>(got) != sizeof h.message || h.message.magic != kHandoutMagic) {
    fail(Errc::corrupt_segment, "the answer on " + h.socket + " is not an ipcring producer's (" +
                                    std::to_string(got) + " bytes)");
  }
  if (h.message.version != kHandoutVersion || h.message.layout_version != kLayoutVersion) {
    fail(Errc::version_mismatch, "its producer speaks handout version " +
                                     std::to_string(h.message.version) + " and layout version " +
                                     std::to_string(h.message.layout_version) +
                                     "; this build speaks " + std::to_string(kHandoutVersion) +
                                     " and " + std::to_string(kLayoutVersion));
  }
  h.message.text[sizeof h.message.text - 1] = '\0';
  if (h.message.refused != 0) {
    std::string why(h.message.text);
    for (char& c : why) {
      if (c < 0x20 || c > 0x7e) c = '?';
    }
    fail(Errc::permission_denied, why +
                                      " (ChannelConfig::allow_uids/allow_gids, --allow-uid/"
                                      "--allow-gid on ringpub)");
  }
  const int memory = h.message.frames_bytes != 0 ? 2 : 1;
  if (h.message.device_descriptors > static_cast<std::uint32_t>(kMaxDeviceDescriptors)) {
    fail(Errc::corrupt_segment, "its producer announced " +
                                    std::to_string(h.message.device_descriptors) +
                                    " frame buffer descriptors; at most " +
                                    std::to_string(kMaxDeviceDescriptors) + " are allowed");
  }
  const int want = memory + static_cast<int>(h.message.device_descriptors);
  if (count != want || static_cast<int>(h.message.descriptors) != want) {
    fail(Errc::corrupt_segment, "its producer sent " + std::to_string(count) +
                                    " descriptor(s) where " + std::to_string(want) +
                                    " were announced");
  }
  h.control_fd = fds[0];
  h.frames_fd = memory == 2 ? fds[1] : -1;
  h.device_fds.assign(fds + memory, fds + want);
  return h;
}

namespace {

// The producer's own descriptor of its memfd labelled `label`, reopened through /proc, or -1.
int reopen_producer_memory(const std::string& pid, const std::string& label, int flags) {
  const std::string want = "/memfd:" + label + " (deleted)";
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/" + pid + "/fd", ec)) {
    const std::string link = entry.path().string();
    char target[512];
    const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    if (n <= 0 || std::string_view(target, static_cast<std::size_t>(n)) != want) continue;
    // O_NONBLOCK: should the descriptor be replaced by a FIFO meanwhile, the open does not wait.
    const int fd = ::open(link.c_str(), flags | O_CLOEXEC | O_NONBLOCK);
    if (fd >= 0) return fd;
  }
  return -1;
}

OpenedSegment open_through_proc(std::string_view channel, const ChannelDirectory& d,
                                const Error& why) {
  std::string holder;
  if (probe_name_lock(d.fd(), d.leaf(), &holder) != NameLockState::held) throw why;
  const auto at = holder.find("pid ");
  if (at == std::string::npos) throw why;
  const std::string pid = std::to_string(std::strtoul(holder.c_str() + at + 4, nullptr, 10));
  int control = reopen_producer_memory(pid, memory_label(channel, "control segment"), O_RDWR);
  if (control < 0) throw why;  // another user's, another PID namespace's, or not there
  int frames = reopen_producer_memory(pid, memory_label(channel, "frame pool"), O_RDONLY);
  struct stat cs {};
  struct stat fs {};
  fstat(control, &cs);
  if (frames >= 0) fstat(frames, &fs);
  try {
    OpenedSegment opened =
        open_received(channel, control, frames, static_cast<std::uint64_t>(cs.st_size),
                      static_cast<std::uint64_t>(fs.st_size));
    opened.owner_uid = cs.st_uid;
    return opened;
  } catch (...) {
    if (control >= 0) close(control);
    if (frames >= 0) close(frames);
    throw;
  }
}

}  // namespace

OpenedSegment open_channel(std::string_view channel, std::string_view dir,
                           const std::vector<std::uint32_t>& trust_uids,
                           std::chrono::milliseconds timeout, bool inspecting) {
  const ChannelDirectory d = ChannelDirectory::open(channel, dir, false, trust_uids);
  std::optional<Handout> handout;
  try {
    handout.emplace(fetch_handout(channel, d, trust_uids, timeout));
  } catch (const Error& e) {
    if (!inspecting || e.code() != Errc::channel_busy) throw;
    return open_through_proc(channel, d, e);
  }
  Handout& h = *handout;
  OpenedSegment opened = open_received(channel, h.control_fd, h.frames_fd, h.message.control_bytes,
                                       h.message.frames_bytes);
  const Geometry& g = opened.mapping->view.geo;
  const bool vmm = g.backend == kBackendCuda && g.cuda_path == kCudaPathVmm;
  const std::size_t want = vmm ? g.slots : 0;
  if (h.device_fds.size() != want) {
    // Checked against the validated header: a VMM channel's producer sends one descriptor per
    // buffer, every other producer none (what came is closed with `h`).
    throw Error(Errc::corrupt_segment,
                channel_prefix(channel) + "its producer sent " +
                    std::to_string(h.device_fds.size()) +
                    " frame buffer descriptor(s), but the channel (" +
                    (vmm ? "CUDA VMM, " + std::to_string(g.slots) + " slots" : "no CUDA VMM") +
                    ") needs " + std::to_string(want));
  }
  if (vmm && !inspecting) {
    opened.device_fds = std::make_shared<DescriptorSet>(std::exchange(h.device_fds, {}));
  }
  opened.owner_uid = static_cast<std::uint32_t>(h.producer.uid);
  opened.producer_pid = static_cast<int>(h.producer.pid);
  struct stat st {};
  if (fstatat(d.fd(), d.socket_file().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    opened.mode = st.st_mode & 07777;
  }
  return opened;
}

}  // namespace ipcring::detail
