// fake_producer.hpp — a channel's socket served by the test itself, handing out whatever
// descriptors and message it is given: a hostile or broken producer, as seen by readers and
// tools (wrong sizes, missing seals, a FIFO, writable frames, a corrupt control segment, a
// refusal, silence).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "channel/directory.hpp"
#include "channel/handout.hpp"
#include "channel/name_lock.hpp"
#include "common/naming.hpp"
#include "segment/layout.hpp"

namespace ipcring::test {

// A memfd holding `bytes`, with `seals` added (F_SEAL_* bits), optionally reopened read-only.
inline int memfd_with(const void* bytes, std::size_t size, unsigned seals, bool read_only = false) {
  const int fd = memfd_create("ipcring-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      (size != 0 && bytes != nullptr && pwrite(fd, bytes, size, 0) != static_cast<ssize_t>(size)) ||
      posix_fallocate(fd, 0, static_cast<off_t>(size)) != 0) {
    close(fd);
    return -1;
  }
  if (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) {
    close(fd);
    return -1;
  }
  if (!read_only) return fd;
  const std::string proc = "/proc/self/fd/" + std::to_string(fd);
  const int ro = open(proc.c_str(), O_RDONLY | O_CLOEXEC);
  close(fd);
  return ro;
}

class FakeProducer {
 public:
  // Takes the channel's name (directory, lock, socket) and serves it on a thread.
  explicit FakeProducer(const std::string& name, unsigned mode = 0600)
      : dir_(detail::ChannelDirectory::open(name, {}, true)),
        lock_(detail::NameLock::take(dir_, name, mode)) {
    const std::string file = dir_.socket_file();
    unlinkat(dir_.fd(), file.c_str(), 0);
    listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string path = dir_.proc_path(detail::kSocketSuffix);
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        listen(listen_fd_, 16) != 0) {
      close(listen_fd_);
      throw std::runtime_error("FakeProducer: cannot listen on " + path);
    }
    fchmodat(dir_.fd(), file.c_str(), mode, 0);
    thread_ = std::thread([this] { run(); });
  }
  ~FakeProducer() {
    stop_ = true;
    thread_.join();
    close(listen_fd_);
    unlinkat(dir_.fd(), (dir_.socket_file()).c_str(), 0);
    lock_.remove_name(dir_);
    set({}, {});
  }
  FakeProducer(const FakeProducer&) = delete;
  FakeProducer& operator=(const FakeProducer&) = delete;

  // What every following connection gets: `message` (its magic, version and layout version are
  // filled in when magic is 0; its descriptor count unless `keep_count`) and the descriptors
  // `fds` (owned from now on).
  void set(detail::HandoutMessage message, std::vector<int> fds, bool keep_count = false) {
    if (message.magic == 0) {
      message.magic = detail::kHandoutMagic;
      message.version = detail::kHandoutVersion;
      message.layout_version = detail::kLayoutVersion;
    }
    if (!keep_count) message.descriptors = static_cast<std::uint32_t>(fds.size());
    std::lock_guard g(mutex_);
    for (const int fd : fds_) close(fd);
    fds_ = std::move(fds);
    message_ = message;
  }
  // Accept connections and never answer (a stalled producer).
  void set_silent(bool silent) { silent_ = silent; }
  std::uint64_t served() const { return served_.load(); }

 private:
  void run() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      if (silent_) {
        held_.push_back(c);  // never answered, closed at the end
        continue;
      }
      std::lock_guard g(mutex_);
      iovec iov{&message_, sizeof message_};
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)] = {};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      if (!fds_.empty()) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds_.size());
        cmsghdr* h = CMSG_FIRSTHDR(&msg);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * fds_.size());
        std::memcpy(CMSG_DATA(h), fds_.data(), sizeof(int) * fds_.size());
      }
      sendmsg(c, &msg, MSG_NOSIGNAL);
      served_.fetch_add(1);
      close(c);
    }
    for (const int c : held_) close(c);
  }

  detail::ChannelDirectory dir_;
  detail::NameLock lock_;
  int listen_fd_ = -1;
  std::mutex mutex_;
  detail::HandoutMessage message_{};
  std::vector<int> fds_;
  std::vector<int> held_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> silent_{false};
  std::atomic<std::uint64_t> served_{0};
  std::thread thread_;
};

}  // namespace ipcring::test
