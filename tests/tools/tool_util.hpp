// tool_util.hpp — running ringdump as a subprocess, and producer/reader child processes made by
// fork() that use the public API, for the ringdump and hostile-segment tests.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "common/naming.hpp"
#include "ipcring/ipcring.hpp"

namespace ipcring::test {

// ---- running a tool ---------------------------------------------------------------------------

struct ToolResult {
  int rc = -1;     // exit status; -1 when killed by a signal
  int signal = 0;  // the signal that ended it, if any
  bool timed_out = false;
  bool interrupted = false;  // run_on_terminal typed Ctrl-C
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] is the program path) with stdout and stderr captured, killing it after
// `timeout`. Never throws for the child's behaviour; the caller checks the result.
inline ToolResult run_tool(const std::vector<std::string>& argv,
                           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  ToolResult r;
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2 failed");
  }
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n > 0) {
        (k == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

inline std::string errno_text() {
  return std::error_code(errno, std::generic_category()).message();
}

// Why no pseudo-terminal can be had here (no /dev/ptmx, no devpts mounted, ...), or nullopt when
// one can. Tests of terminal-only behaviour report themselves skipped with this reason.
inline std::optional<std::string> no_terminal_reason() {
  const int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) return std::string("posix_openpt: ") + errno_text();
  std::optional<std::string> reason;
  char slave_name[128];
  if (grantpt(master) != 0 || unlockpt(master) != 0 ||
      ptsname_r(master, slave_name, sizeof slave_name) != 0) {
    reason = std::string("grantpt/unlockpt/ptsname: ") + errno_text();
  } else {
    const int slave = open(slave_name, O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (slave < 0) {
      reason = std::string("open ") + slave_name + ": " + errno_text();
    } else {
      close(slave);
    }
  }
  close(master);
  return reason;
}

// Runs `argv` on a pseudo-terminal (stdout and stderr both), with `env` added to the environment
// ("NAME=value"), and returns what it wrote. For checks of terminal-only behaviour (colour,
// redrawing in place). TERM is xterm unless `env` sets it: the caller's TERM (dumb under CI, or
// none) says nothing about the terminal made here. Throws when no pseudo-terminal can be had
// (check no_terminal_reason() first).
// `interrupt_when`: once the output holds this text, Ctrl-C is typed on the terminal (the
// terminal sends SIGINT to the program, as a user's Ctrl-C does); empty: never.
inline ToolResult run_on_terminal(const std::vector<std::string>& argv,
                                  const std::vector<std::string>& env = {},
                                  std::chrono::milliseconds timeout = std::chrono::seconds(20),
                                  const std::string& interrupt_when = {}) {
  ToolResult r;
  int master = -1;
  const pid_t pid = forkpty(&master, nullptr, nullptr, nullptr);
  if (pid < 0) throw std::runtime_error(std::string("forkpty failed: ") + errno_text());
  if (pid == 0) {
    // The forked child is single-threaded: the environment is ours to change.
    // NOLINTBEGIN(concurrency-mt-unsafe)
    setenv("TERM", "xterm", 1);
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    // NOLINTEND(concurrency-mt-unsafe)
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{master, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) break;
    char buf[4096];
    const ssize_t n = read(master, buf, sizeof buf);
    if (n <= 0) break;  // EIO once the child closed the terminal
    r.out.append(buf, static_cast<std::size_t>(n));
    if (!interrupt_when.empty() && !r.interrupted &&
        r.out.find(interrupt_when) != std::string::npos) {
      const char ctrl_c = 0x03;
      r.interrupted = write(master, &ctrl_c, 1) == 1;
    }
  }
  close(master);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) r.rc = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

// ---- child processes --------------------------------------------------------------------------

// A forked child running `body(report_fd)`: the body reports readiness by writing to report_fd.
// The child dies with the test process (PR_SET_PDEATHSIG) and is SIGKILLed by the destructor.
class Child {
 public:
  Child() = default;
  explicit Child(const std::function<void(int)>& body) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      close(fds[0]);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      try {
        body(fds[1]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", static_cast<int>(getpid()), e.what());
        _exit(2);
      }
      _exit(0);
    }
    close(fds[1]);
    fd_ = fds[0];
  }
  Child(Child&& o) noexcept : pid_(o.pid_), fd_(o.fd_) {
    o.pid_ = -1;
    o.fd_ = -1;
  }
  Child& operator=(Child&& o) noexcept {
    if (this != &o) {
      kill_now();
      pid_ = o.pid_;
      fd_ = o.fd_;
      o.pid_ = -1;
      o.fd_ = -1;
    }
    return *this;
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { kill_now(); }

  pid_t pid() const { return pid_; }

  // Reads the next value the child reported, waiting up to `timeout`. Throws on timeout or EOF.
  std::uint32_t wait_report(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::uint32_t v = 0;
    std::size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got < sizeof v) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) == 0) {
        throw std::runtime_error("child " + std::to_string(pid_) + " did not report in time");
      }
      const ssize_t n = read(fd_, reinterpret_cast<char*>(&v) + got, sizeof v - got);
      if (n <= 0) throw std::runtime_error("child " + std::to_string(pid_) + " exited early");
      got += static_cast<std::size_t>(n);
    }
    return v;
  }

  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // SIGKILL and reap.
  void kill_now() {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);  // a stopped child still dies on SIGKILL, but be explicit
      ::kill(pid_, SIGKILL);
      int status = 0;
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
      pid_ = -1;
    }
    if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
};

inline void report_value(int fd, std::uint32_t v) {
  if (write(fd, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) _exit(4);
}

// A producer child: creates `name`, reports 1, then publishes about every `period` until killed
// (or for at most two minutes).
inline Child spawn_producer(const std::string& name, const ChannelConfig& config,
                            std::chrono::microseconds period = std::chrono::milliseconds(1)) {
  return Child([=](int fd) {
    Producer p = Producer::create(name, config);
    report_value(fd, 1);
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (std::chrono::steady_clock::now() < end) {
      auto loan = p.loan();
      if (loan) {
        std::memset(loan->data(), 0x5a, 64);
        p.publish(std::move(*loan), 64);
      }
      std::this_thread::sleep_for(period);
    }
  });
}

// A reader child. hold == true: reads one frame, reports its reader index and then the frame's
// slot, and keeps the frame until killed. hold == false: reports its reader index and reads and
// releases frames until killed.
inline Child spawn_reader(const std::string& name, bool hold) {
  return Child([=](int fd) {
    Reader r = Reader::attach(name);
    report_value(fd, r.index());
    const auto end = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    std::optional<Frame> kept;
    while (std::chrono::steady_clock::now() < end) {
      if (kept) {  // holding max_held frames: read() would return max_held at once
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      auto f = r.read(std::chrono::milliseconds(50));
      if (!f) continue;
      if (hold && !kept) {
        kept.emplace(std::move(*f));
        report_value(fd, kept->slot());
      }
    }
  });
}

// Bytes of a file (a /dev/shm object); empty when it cannot be read.
inline std::vector<unsigned char> read_file_bytes(const std::string& path) {
  std::vector<unsigned char> bytes;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    bytes.resize(static_cast<std::size_t>(st.st_size));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    bytes.resize(got);
  }
  close(fd);
  return bytes;
}

// Writes `bytes` as the new file `path` with `mode` (replacing an existing one).
inline bool write_file_bytes(const std::string& path, const std::vector<unsigned char>& bytes,
                             mode_t mode = 0600) {
  unlink(path.c_str());
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) return false;
  fchmod(fd, mode);
  std::size_t put = 0;
  while (put < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + put, bytes.size() - put);
    if (n <= 0) break;
    put += static_cast<std::size_t>(n);
  }
  close(fd);
  return put == bytes.size();
}

// True when no name of channel `name` (its lock file or socket) is left.
inline bool shm_clean(const std::string& name) {
  struct stat st {};
  return lstat(lock_path(name).c_str(), &st) != 0 && lstat(socket_path(name).c_str(), &st) != 0;
}

}  // namespace ipcring::test
