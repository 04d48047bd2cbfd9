// name_lock.hpp — the producer's hold on a channel's name: an exclusive open-file-description
// lock (fcntl F_OFD_SETLK) on DIR/NAME.lock, taken before anything else of the channel exists and
// held until the producer closes or dies.
//
// The kernel drops the lock when the last descriptor of its open file description closes: at the
// producer's death, in whatever PID, network or user namespace it runs (the file is what is
// shared, not an address). So "a producer holds the name" is a kernel fact, and a second producer
// is refused while the first lives. An OFD lock rather than flock(2): both belong to the open
// file description, but an OFD lock can be asked about without taking it (F_OFD_GETLK), so
// `ringdump list`, `gc` and `doctor` look at a name without ever making a starting producer fail.
// A fork child would inherit the description and keep the lock after the producer died: the
// child closes its copy at once (common/process.hpp, close_in_fork_child).
//
// Lock files are made with O_EXCL|O_NOFOLLOW in a checked directory (channel/directory.hpp), and
// one found there is used only when it is a regular file: a FIFO, a device or a link cannot make
// the producer or a tool block or open something else. After locking, the path must still name
// the locked file (a concurrent gc may have removed it): else the producer locks again.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace ipcring::detail {

class ChannelDirectory;

class NameLock {
 public:
  // Takes the lock of `dir`'s channel, making the file with `mode` if it is missing. Writes
  // "pid P uid U\n" into it (record_epoch adds the epoch). Throws Error: producer_exists (naming
  // the holder's pid), permission_denied, corrupt_segment (not a regular file).
  static NameLock take(const ChannelDirectory& dir, std::string_view channel, unsigned mode);

  NameLock() = default;
  ~NameLock();
  NameLock(NameLock&& other) noexcept;
  NameLock& operator=(NameLock&& other) noexcept;
  NameLock(const NameLock&) = delete;
  NameLock& operator=(const NameLock&) = delete;

  bool held() const noexcept { return fd_ >= 0; }
  // The epoch the file's previous holder recorded (0: none; a new file, or one without it), and
  // this holder's, written into the file with its pid and uid ("pid P uid U epoch E").
  std::uint64_t previous_epoch() const noexcept { return previous_epoch_; }
  void record_epoch(std::uint64_t epoch) noexcept;
  // True when `dir`'s lock path names the file we lock.
  bool still_named(const ChannelDirectory& dir) const noexcept;
  // Removes the lock path if it names our file (a producer's clean exit). Precondition: held.
  void remove_name(const ChannelDirectory& dir) noexcept;

 private:
  int fd_ = -1;
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::uint64_t fork_gen_ = 0;
  std::uint64_t previous_epoch_ = 0;
};

enum class NameLockState {
  missing,     // no lock file
  free,        // a lock file nobody holds: a stale name (its producer ended)
  held,        // a live producer holds it
  not_a_lock,  // something else is there (not a regular file, unreadable)
};
// Asks about the lock of `leaf` in the directory `dir_fd` without taking it. `holder` gets the
// file's text ("pid P uid U") when it is held.
NameLockState probe_name_lock(int dir_fd, const std::string& leaf, std::string* holder = nullptr);

}  // namespace ipcring::detail
