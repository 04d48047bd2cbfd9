#include "channel/directory.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "common/errno_text.hpp"
#include "common/naming.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

bool DirectoryTrust::trusts_groups(gid_t primary, const std::vector<gid_t>& groups) const noexcept {
  if (!group_shared) return false;
  return primary == group || std::find(groups.begin(), groups.end(), group) != groups.end();
}

std::string DirectoryTrust::describe() const {
  std::string s = "uid " + std::to_string(owner);
  if (owner != 0) s += " (and root)";
  if (group_shared) s += " and the members of gid " + std::to_string(group);
  return s;
}

std::vector<gid_t> own_groups() {
  std::vector<gid_t> groups;
  const int n = getgroups(0, nullptr);
  if (n > 0) {
    groups.resize(static_cast<std::size_t>(n));
    const int got = getgroups(n, groups.data());
    groups.resize(got > 0 ? static_cast<std::size_t>(got) : 0);
  }
  groups.push_back(getegid());
  return groups;
}

namespace {

[[noreturn]] void refuse(std::string_view channel, const std::string& what) {
  throw Error(Errc::permission_denied, channel_prefix(channel) + what);
}

// Who may write `st` (a directory): nobody outside {owner, root, group if group-writable}; never
// others. The caller must be inside that trust.
DirectoryTrust check_directory(std::string_view channel, const std::string& path,
                               const struct stat& st,
                               const std::vector<std::uint32_t>& trusted_owners) {
  if (!S_ISDIR(st.st_mode)) {
    refuse(channel, "the channel directory " + path + " is not a directory");
  }
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 0002) != 0) {
    refuse(channel, "the channel directory " + path + " is writable by everyone (mode " +
                        format_mode(mode) +
                        "), so anyone could create or replace channel names in it; run "
                        "'chmod o-w " +
                        path + "' or choose another directory (IPCRING_DIR, --dir)");
  }
  DirectoryTrust t;
  t.owner = st.st_uid;
  t.group = st.st_gid;
  t.group_shared = (mode & 0020) != 0;
  const uid_t self = geteuid();
  const bool member = t.trusts_groups(getegid(), own_groups());
  const bool named_owner =
      std::find(trusted_owners.begin(), trusted_owners.end(), st.st_uid) != trusted_owners.end();
  if (st.st_uid != self && st.st_uid != 0 && !member && !named_owner) {
    refuse(channel,
           "the channel directory " + path + " belongs to uid " + std::to_string(st.st_uid) +
               " (mode " + format_mode(mode) + "), not to this process's uid " +
               std::to_string(self) +
               (t.group_shared ? " nor to a group it is in (gid " + std::to_string(st.st_gid) + ")"
                               : "") +
               "; another user may have made it to take your channels' names. Remove "
               "it (as that user or root) or choose another directory (IPCRING_DIR, "
               "--dir)");
  }
  return t;
}

// Every ancestor of the absolute `path` must keep others from renaming what is below it.
void check_ancestors(std::string_view channel, const std::string& path) {
  std::string prefix;
  std::size_t pos = 0;
  while ((pos = path.find('/', pos + 1)) != std::string::npos) {
    prefix = path.substr(0, pos);
    struct stat st {};
    if (lstat(prefix.c_str(), &st) != 0) return;  // the open below reports it
    if (S_ISLNK(st.st_mode)) continue;            // followed: its target is checked by path
    const unsigned mode = st.st_mode & 07777;
    const bool others_can_rename = (mode & 0002) != 0 && (mode & 01000) == 0;
    if (others_can_rename ||
        (st.st_uid != 0 && st.st_uid != geteuid() && (mode & 0022) != 0 && (mode & 01000) == 0)) {
      refuse(channel, "the channel directory " + path + " is inside " + prefix + " (mode " +
                          format_mode(mode) + ", uid " + std::to_string(st.st_uid) +
                          "), where others could rename it away; choose a directory whose "
                          "parents only root or you can write (IPCRING_DIR, --dir)");
    }
  }
}

// Opens `name` under `parent_fd` as a directory (no symbolic link), making it with `mode` first
// when `create`. -1 with errno ENOENT when it does not exist and may not be made.
int open_subdirectory(int parent_fd, const std::string& name, bool create, unsigned mode) {
  int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    if (mkdirat(parent_fd, name.c_str(), mode & 07777) != 0 && errno != EEXIST) return -1;
    fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    // The umask must not narrow it (a group-shared directory's subdirectories stay shared). Only
    // the owner can change it; a subdirectory another member made keeps the mode it has.
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == geteuid()) fchmod(fd, mode & 07777);
  }
  return fd;
}

}  // namespace

ChannelDirectory::~ChannelDirectory() {
  if (fd_ >= 0) close(fd_);
}

ChannelDirectory::ChannelDirectory(ChannelDirectory&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      leaf_(std::move(other.leaf_)),
      lock_file_(std::move(other.lock_file_)),
      socket_file_(std::move(other.socket_file_)),
      base_(std::move(other.base_)),
      channel_(std::move(other.channel_)),
      trust_(other.trust_),
      base_dev_(other.base_dev_),
      base_ino_(other.base_ino_) {}

ChannelDirectory& ChannelDirectory::operator=(ChannelDirectory&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    leaf_ = std::move(other.leaf_);
    lock_file_ = std::move(other.lock_file_);
    socket_file_ = std::move(other.socket_file_);
    base_ = std::move(other.base_);
    channel_ = std::move(other.channel_);
    trust_ = other.trust_;
    base_dev_ = other.base_dev_;
    base_ino_ = other.base_ino_;
  }
  return *this;
}

ChannelDirectory ChannelDirectory::open(std::string_view channel, std::string_view dir_option,
                                        bool create,
                                        const std::vector<std::uint32_t>& trusted_owners) {
  validate_name(channel);
  ChannelDirectory d;
  d.base_ = channel_directory(dir_option);
  d.channel_ = std::string(channel);
  d.leaf_ = std::string(name_leaf(channel));
  d.lock_file_ = d.leaf_ + std::string(kLockSuffix);
  d.socket_file_ = d.leaf_ + std::string(kSocketSuffix);
  if (d.base_.empty() || d.base_.front() != '/') {
    throw Error(Errc::invalid_argument, channel_prefix(channel) + "the channel directory '" +
                                            d.base_ + "' is not an absolute path");
  }
  while (d.base_.size() > 1 && d.base_.back() == '/') d.base_.pop_back();
  check_ancestors(channel, d.base_);
  // Who owns it first (lstat needs no permission on the directory itself): a directory made by
  // someone else is refused as such, not as a directory we merely cannot open.
  struct stat early {};
  if (lstat(d.base_.c_str(), &early) == 0) {
    if (S_ISLNK(early.st_mode)) {
      refuse(channel, "the channel directory " + d.base_ +
                          " is a symbolic link; name the real "
                          "directory");
    }
    check_directory(channel, d.base_, early, trusted_owners);
  }
  int fd = ::open(d.base_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && create) {
    // Private to this user unless made otherwise beforehand (a group-shared directory is made by
    // whoever administers the group: docs/operations.md).
    if (mkdir(d.base_.c_str(), 0700) != 0 && errno != EEXIST) {
      const int err = errno;
      throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system_error,
                  channel_prefix(channel) + "cannot make the channel directory " + d.base_ + ": " +
                      errno_detail(err));
    }
    fd = ::open(d.base_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) {
      throw Error(Errc::not_found, channel_prefix(channel) +
                                       "no such channel: the channel "
                                       "directory " +
                                       d.base_ +
                                       " does not exist (no producer has run there); is its "
                                       "producer running, with the same directory "
                                       "(IPCRING_DIR, --dir)?");
    }
    if (err == ELOOP || err == ENOTDIR) {
      refuse(channel, "the channel directory " + d.base_ +
                          " is a symbolic link or not a directory; name the real directory");
    }
    throw Error(err == EACCES ? Errc::permission_denied : Errc::system_error,
                channel_prefix(channel) + "cannot open the channel directory " + d.base_ + ": " +
                    errno_detail(err));
  }
  d.fd_ = fd;
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    throw Error(Errc::system_error,
                channel_prefix(channel) + "fstat of " + d.base_ + ": " + errno_text(errno));
  }
  d.trust_ = check_directory(channel, d.base_, st, trusted_owners);
  d.base_dev_ = st.st_dev;
  d.base_ino_ = st.st_ino;
  const unsigned sub_mode = st.st_mode & 07770;
  // The name's leading components, one directory each.
  const std::string_view parent = name_parent(channel);
  std::string shown = d.base_;
  std::size_t start = 0;
  while (start < parent.size()) {
    const std::size_t end = std::min(parent.find('/', start), parent.size());
    const std::string part(parent.substr(start, end - start));
    shown += "/" + part;
    const int sub = open_subdirectory(d.fd_, part, create, sub_mode);
    if (sub < 0) {
      const int err = errno;
      if (err == ENOENT) {
        throw Error(Errc::not_found, channel_prefix(channel) + "no such channel (" + shown +
                                         " does not exist); is its producer running?");
      }
      if (err == ELOOP || err == ENOTDIR) {
        refuse(channel, shown + " is a symbolic link or not a directory");
      }
      throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::system_error,
                  channel_prefix(channel) + "cannot open " + shown + ": " + errno_text(err) +
                      " (errno " + std::to_string(err) + ")");
    }
    close(d.fd_);
    d.fd_ = sub;
    struct stat sub_st {};
    if (fstat(sub, &sub_st) != 0) {
      throw Error(Errc::system_error, channel_prefix(channel) + "fstat of " + shown);
    }
    const DirectoryTrust t = check_directory(channel, shown, sub_st, trusted_owners);
    const bool named_owner =
        std::find(trusted_owners.begin(), trusted_owners.end(), t.owner) != trusted_owners.end();
    if (!d.trust_.trusts_uid(t.owner) && !named_owner &&
        !(d.trust_.group_shared && t.group == d.trust_.group)) {
      refuse(channel, shown + " belongs to uid " + std::to_string(t.owner) +
                          ", outside the trust of " + d.base_ + " (" + d.trust_.describe() + ")");
    }
    start = end + 1;
  }
  return d;
}

std::string ChannelDirectory::proc_path(std::string_view suffix) const {
  return "/proc/self/fd/" + std::to_string(fd_) + "/" + leaf_ + std::string(suffix);
}

std::string ChannelDirectory::shown_path(std::string_view suffix) const {
  return base_ + "/" + channel_ + std::string(suffix);
}

bool ChannelDirectory::still_there() const noexcept {
  struct stat st {};
  if (stat(base_.c_str(), &st) != 0) return false;
  return st.st_dev == base_dev_ && st.st_ino == base_ino_;
}

}  // namespace ipcring::detail
