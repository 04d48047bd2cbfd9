// directory.hpp — the channel directory: where names live, and whom it trusts.
//
// A name is only as safe as the directory it is in: whoever may create files there may create a
// channel's lock and socket first. So a channel directory must be a real directory (no symbolic
// link) that nobody outside its trust can write: its owner (this user, or root), and, when it is
// group-writable, the members of its group. Its ancestors must not let anyone else rename it away
// (writable only by their owner, or sticky like /dev/shm and /tmp). Anything else is refused with
// an error that says what to fix. A name's leading components ("camera/front" of
// "camera/front/image_raw") are subdirectories, checked (and made by a producer) the same way.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ipcring::detail {

struct DirectoryTrust {
  uid_t owner = 0;
  gid_t group = 0;
  bool group_shared = false;  // group-writable: its group's members are trusted too
  bool trusts_uid(uid_t uid) const noexcept { return uid == owner || uid == 0; }
  bool trusts_groups(gid_t primary, const std::vector<gid_t>& groups) const noexcept;
  std::string describe() const;  // "uid 1000" or "uid 0 and the members of gid 27"
};

// An open, checked channel directory and the subdirectory that holds one channel's files.
class ChannelDirectory {
 public:
  // Opens (creating it and the name's subdirectories when `create`) the directory of `channel`
  // (channel_directory(dir_option)). Its owner must be this process's uid, root, one of
  // `trusted_owners` (a reader's ReaderOptions::trust_uids), or, for a group-writable directory,
  // a group this process is in. Throws Error: not_found (no such directory, when not creating),
  // permission_denied (not trusted, with the fix), invalid_name.
  static ChannelDirectory open(std::string_view channel, std::string_view dir_option, bool create,
                               const std::vector<std::uint32_t>& trusted_owners = {});

  ChannelDirectory() = default;
  ~ChannelDirectory();
  ChannelDirectory(ChannelDirectory&& other) noexcept;
  ChannelDirectory& operator=(ChannelDirectory&& other) noexcept;
  ChannelDirectory(const ChannelDirectory&) = delete;
  ChannelDirectory& operator=(const ChannelDirectory&) = delete;

  // The descriptor of the directory that holds the channel's files (the base, or the name's
  // subdirectory), and the channel's last component.
  int fd() const noexcept { return fd_; }
  const std::string& leaf() const noexcept { return leaf_; }
  // "<leaf>.lock" and "<leaf>.sock", relative to fd() (made once: the name's defence, which runs
  // on the producer's socket thread every period, allocates nothing).
  const std::string& lock_file() const noexcept { return lock_file_; }
  const std::string& socket_file() const noexcept { return socket_file_; }
  const std::string& base_path() const noexcept { return base_; }
  const DirectoryTrust& trust() const noexcept { return trust_; }
  // "/proc/self/fd/<fd>/<leaf><suffix>": a path to one of the channel's files that is short
  // enough for a socket address whatever the directory's own path.
  std::string proc_path(std::string_view suffix) const;
  // "<base>/<channel><suffix>", for messages.
  std::string shown_path(std::string_view suffix) const;
  // True when the base path still names the directory this was opened as.
  bool still_there() const noexcept;

 private:
  int fd_ = -1;
  std::string leaf_;
  std::string lock_file_;
  std::string socket_file_;
  std::string base_;
  std::string channel_;
  DirectoryTrust trust_;
  dev_t base_dev_ = 0;
  ino_t base_ino_ = 0;
};

// This process's supplementary groups and effective gid.
std::vector<gid_t> own_groups();

}  // namespace ipcring::detail
