// bridge_util.hpp — long-running tool processes for the bridge tests: started with their stdout
// and stderr in files, watched for a line, stopped with SIGTERM (their exit status checked) or
// killed. Children get the test's environment without CYCLONEDDS_URI, so ringbridge uses its own
// configuration (restricted to loopback with --interface lo).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;  // NOLINT(readability-redundant-declaration)

namespace ipcring::test {

// Value of "key=N" in `text` (the last occurrence); UINT64_MAX when absent.
inline std::uint64_t field(const std::string& text, const std::string& key) {
  const std::string k = " " + key + "=";
  const auto pos = text.rfind(k);
  if (pos == std::string::npos) return UINT64_MAX;
  return std::strtoull(text.c_str() + pos + k.size(), nullptr, 10);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Polls `pred` every 20 ms until it holds or `timeout` passes.
inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

class Proc {
 public:
  // `extra_env`: "NAME=value" entries added to the child's environment.
  Proc(const std::vector<std::string>& argv, const std::string& log_prefix,
       const std::vector<std::string>& extra_env = {})
      : out_path_(log_prefix + ".out"), err_path_(log_prefix + ".err"), what_(argv.at(0)) {
    for (std::size_t i = 1; i < argv.size(); ++i) what_ += " " + argv[i];
    // Everything the child needs is prepared before fork (the child only calls async-signal-safe
    // functions).
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "CYCLONEDDS_URI=", 15) != 0) env.emplace_back(*e);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (out < 0 || err < 0) throw std::runtime_error("cannot open " + out_path_);
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      dup2(out, STDOUT_FILENO);
      dup2(err, STDERR_FILENO);
      execve(args[0], args.data(), envp.data());
      _exit(127);
    }
    close(out);
    close(err);
  }
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;
  ~Proc() { kill9(); }

  std::string out() const { return read_text(out_path_); }
  std::string err() const { return read_text(err_path_); }
  bool running() const { return pid_ > 0; }

  // Everything about it, for failure messages.
  std::string describe() const {
    return what_ + " (exit " + std::to_string(status_) + ")\n--- stdout\n" + out() +
           "--- stderr\n" + err();
  }

  bool wait_for_output(const std::string& text, bool on_stderr, std::chrono::milliseconds timeout) {
    return wait_until([&] { return (on_stderr ? err() : out()).find(text) != std::string::npos; },
                      timeout);
  }

  // True once it has exited (does not wait, never kills).
  bool exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    if (waitpid(pid_, &st, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    pid_ = -1;
    return true;
  }

  // Waits for the exit; its status (or -signal, or -1000 when it had to be killed).
  int wait_exit(std::chrono::milliseconds timeout) {
    if (pid_ <= 0) return status_;
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int st = 0;
      const pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
        pid_ = -1;
        return status_;
      }
      if (std::chrono::steady_clock::now() > end) {
        kill9();
        status_ = -1000;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // SIGTERM, then the exit status.
  int terminate(std::chrono::milliseconds timeout = std::chrono::seconds(15)) {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    return wait_exit(timeout);
  }

  void kill9() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    status_ = -SIGKILL;
    pid_ = -1;
  }

 private:
  std::string out_path_;
  std::string err_path_;
  std::string what_;
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace ipcring::test
