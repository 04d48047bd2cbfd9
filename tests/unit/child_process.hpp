// child_process.hpp — test helpers for checks that run in other processes and namespaces: the
// number of open descriptors, a body run in a forked child (optionally the first process of a new
// PID namespace), and a write of a /proc file (uid_map and the like).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace ipcring::test {

inline int open_descriptors() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  while (const dirent* e = readdir(d)) {  // NOLINT(concurrency-mt-unsafe): one thread
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

// Runs `body` in a child process (after `setup`, which may unshare namespaces: for a new PID
// namespace the body runs in a grandchild, its first process). Returns its exit status: 90 when
// `setup` failed, 91-94 when the PID namespace could not be made, 100 + N for a signal N.
template <class Setup, class Body>
int in_child(Setup setup, Body body, bool new_pid_namespace) {
  const pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (!setup()) _exit(90);
    if (!new_pid_namespace) _exit(body());
    if (unshare(CLONE_NEWPID) != 0) _exit(91);
    const pid_t inner = fork();
    if (inner < 0) _exit(92);
    if (inner == 0) {
      if (getpid() != 1) _exit(93);
      _exit(body());
    }
    int status = 0;
    waitpid(inner, &status, 0);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 94);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 100 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

inline bool write_file(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// For a child's setup: enters a user namespace of its own in which this uid and gid map to
// themselves (so the directory's and the socket's owners read the same). False when refused.
inline bool enter_own_user_namespace() {
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER) != 0) return false;
  return write_file("/proc/self/setgroups", "deny") &&
         write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") &&
         write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1");
}

}  // namespace ipcring::test
