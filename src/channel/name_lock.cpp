#include "channel/name_lock.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <utility>

#include "channel/directory.hpp"
#include "common/errno_text.hpp"
#include "common/naming.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

namespace {

struct flock whole_lock(short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  fl.l_pid = 0;  // required for OFD locks
  return fl;
}

std::string read_holder(int fd) {
  char text[96] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  std::string s(text, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  for (char& c : s) {
    if (c < 0x20 || c > 0x7e) c = '?';  // a value from a file: shown, never interpreted
  }
  return s.empty() ? "unknown" : s;
}

}  // namespace

NameLock::~NameLock() {
  if (fd_ < 0 || fork_gen_ != fork_generation()) return;  // a fork child closed its copy
  forget_in_fork_child(fd_);
  close(fd_);
}

NameLock::NameLock(NameLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      dev_(other.dev_),
      ino_(other.ino_),
      fork_gen_(other.fork_gen_),
      previous_epoch_(other.previous_epoch_) {}

NameLock& NameLock::operator=(NameLock&& other) noexcept {
  if (this != &other) {
    NameLock gone(std::move(*this));
    fd_ = std::exchange(other.fd_, -1);
    dev_ = other.dev_;
    ino_ = other.ino_;
    fork_gen_ = other.fork_gen_;
    previous_epoch_ = other.previous_epoch_;
  }
  return *this;
}

NameLock NameLock::take(const ChannelDirectory& dir, std::string_view channel, unsigned mode) {
  const std::string& file = dir.lock_file();
  const std::string shown = dir.shown_path(kLockSuffix);
  for (int attempt = 0; attempt < 16; ++attempt) {
    int fd = openat(dir.fd(), file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    mode & 0666);
    if (fd >= 0) {
      fchmod(fd, mode & 0666);  // the umask must not narrow it
    } else if (errno == EEXIST) {
      fd = openat(dir.fd(), file.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;  // removed meanwhile: make it again
    }
    if (fd < 0) {
      const int err = errno;
      throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system_error,
                  channel_prefix(channel) + "cannot open its lock file " + shown + ": " +
                      errno_detail(err));
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      throw Error(Errc::corrupt_segment,
                  channel_prefix(channel) + shown +
                      " is not a regular file; remove it (ringdump gc) before starting the "
                      "producer");
    }
    struct flock fl = whole_lock(F_WRLCK);
    // A few tries 10 ms apart: `ringdump rm`/`gc` hold a stale name's lock for the moment they
    // remove it, and a producer starting then must not be refused for that.
    int busy = 0;
    while (fcntl(fd, F_OFD_SETLK, &fl) != 0 && (errno == EAGAIN || errno == EACCES) && busy < 5) {
      ++busy;
      timespec pause{0, 10'000'000};
      nanosleep(&pause, nullptr);
      fl = whole_lock(F_WRLCK);
    }
    if (fcntl(fd, F_OFD_SETLK, &fl) != 0) {
      const int err = errno;
      const std::string holder = read_holder(fd);
      close(fd);
      if (err == EAGAIN || err == EACCES) {
        throw Error(Errc::producer_exists,
                    channel_prefix(channel) + "already has a live producer (" + holder +
                        ", holding " + shown + "); only one producer may publish into a channel");
      }
      throw Error(Errc::system_error,
                  channel_prefix(channel) + "cannot lock " + shown + ": " + errno_detail(err));
    }
    // Locked: still the file the name refers to? (A gc may have removed a stale one meanwhile.)
    struct stat named {};
    if (fstatat(dir.fd(), file.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0 ||
        named.st_dev != st.st_dev || named.st_ino != st.st_ino) {
      close(fd);
      continue;
    }
    NameLock lock;
    // The previous holder's epoch, if it recorded one ("... epoch E"): the channel's epochs go on.
    const std::string before = read_holder(fd);
    if (const auto at = before.find("epoch "); at != std::string::npos) {
      lock.previous_epoch_ = std::strtoull(before.c_str() + at + 6, nullptr, 10);
    }
    const std::string text =
        "pid " + std::to_string(getpid()) + " uid " + std::to_string(geteuid()) + "\n";
    if (ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t n = pwrite(fd, text.data(), text.size(), 0);
    }
    lock.fd_ = fd;
    lock.dev_ = st.st_dev;
    lock.ino_ = st.st_ino;
    lock.fork_gen_ = fork_generation();
    close_in_fork_child(fd);
    return lock;
  }
  throw Error(Errc::system_error,
              channel_prefix(channel) + shown + " kept changing while the producer locked it");
}

void NameLock::record_epoch(std::uint64_t epoch) noexcept {
  if (fd_ < 0) return;
  const std::string text = "pid " + std::to_string(getpid()) + " uid " + std::to_string(geteuid()) +
                           " epoch " + std::to_string(epoch) + "\n";
  if (ftruncate(fd_, 0) == 0) {
    [[maybe_unused]] const ssize_t n = pwrite(fd_, text.data(), text.size(), 0);
  }
}

bool NameLock::still_named(const ChannelDirectory& dir) const noexcept {
  const std::string& file = dir.lock_file();
  struct stat st {};
  return fstatat(dir.fd(), file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_dev == dev_ &&
         st.st_ino == ino_;
}

void NameLock::remove_name(const ChannelDirectory& dir) noexcept {
  // Only our own file: a removal and a new producer's lock file may have replaced it.
  if (fd_ >= 0 && still_named(dir)) {
    unlinkat(dir.fd(), dir.lock_file().c_str(), 0);
  }
}

NameLockState probe_name_lock(int dir_fd, const std::string& leaf, std::string* holder) {
  const std::string file = leaf + std::string(kLockSuffix);
  struct stat named {};
  if (fstatat(dir_fd, file.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? NameLockState::missing : NameLockState::not_a_lock;
  }
  if (!S_ISREG(named.st_mode)) return NameLockState::not_a_lock;
  // O_NONBLOCK: should it turn into a FIFO meanwhile, the open does not wait for a writer.
  const int fd = openat(dir_fd, file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NameLockState::missing : NameLockState::not_a_lock;
  struct stat st {};
  NameLockState state = NameLockState::not_a_lock;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    struct flock fl = whole_lock(F_WRLCK);
    if (fcntl(fd, F_OFD_GETLK, &fl) == 0) {
      state = fl.l_type == F_UNLCK ? NameLockState::free : NameLockState::held;
      if (state == NameLockState::held && holder != nullptr) *holder = read_holder(fd);
    }
  }
  close(fd);
  return state;
}

}  // namespace ipcring::detail
