// roudi.cpp — see roudi.hpp.
#include "roudi.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "harness.hpp"

#ifndef RINGBENCH_IOX_ROUDI_PATH
#define RINGBENCH_IOX_ROUDI_PATH "iox-roudi"
#endif

namespace ringbench {
namespace {

struct State {
  bool tried = false;
  pid_t pid = -1;
  pid_t owner = -1;
  std::string failure;
  std::string log_path;
};
State& state() {
  static State s;
  return s;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last `lines` lines of `text`, on one line (" | " between them).
std::string tail(std::string text, std::size_t lines) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  std::size_t pos = text.size();
  for (std::size_t n = 0; n < lines && pos != std::string::npos && pos > 0; ++n)
    pos = text.rfind('\n', pos - 1);
  std::string t = pos == std::string::npos ? text : text.substr(pos + 1);
  std::string out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '\x1b') {  // drop ANSI colour sequences (ESC [ ... m)
      while (i < t.size() && t[i] != 'm') ++i;
      continue;
    }
    out += t[i] == '\n' ? std::string(" | ") : std::string(1, t[i]);
  }
  return out.empty() ? "(no output)" : out;
}

void give_up(const std::string& why) {
  State& s = state();
  s.failure = why;
  if (!s.log_path.empty()) unlink(s.log_path.c_str());
  throw Skip(why);
}

}  // namespace

void ensure_roudi_running() {
  State& s = state();
  if (s.tried) {
    if (!s.failure.empty()) throw Skip(s.failure);
    return;
  }
  s.tried = true;
  s.owner = getpid();
  // NOLINTNEXTLINE(concurrency-mt-unsafe): nothing in ringbench sets the environment
  const char* env = std::getenv("RINGBENCH_IOX_ROUDI");
  const std::string binary = env != nullptr && *env != '\0' ? env : RINGBENCH_IOX_ROUDI_PATH;
  s.log_path = "/tmp/ringbench-roudi-" + std::to_string(getpid()) + ".log";
  const int log = open(s.log_path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (log < 0) give_up("cannot create " + s.log_path + ": " + errno_message(errno));
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(log);
    give_up(std::string("fork: ") + errno_message(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    execlp(binary.c_str(), binary.c_str(), static_cast<char*>(nullptr));
    std::fprintf(stderr, "exec %s: %s\n", binary.c_str(), errno_message(errno).c_str());
    _exit(127);
  }
  close(log);
  s.pid = pid;
  std::atexit([] { stop_roudi(); });
  const std::uint64_t deadline = now_ns() + 10'000'000'000ULL;
  for (;;) {
    const std::string text = read_file(s.log_path);
    if (text.find("RouDi is ready for clients") != std::string::npos) return;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      s.pid = -1;
      give_up("iox-roudi (" + binary + ") exited before it was ready: " + tail(text, 3));
    }
    if (now_ns() > deadline) {
      stop_roudi();
      give_up("iox-roudi (" + binary + ") not ready within 10 s: " + tail(text, 3));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void stop_roudi() noexcept {
  State& s = state();
  if (s.pid <= 0 || getpid() != s.owner) return;  // forked children must not stop it
  kill(s.pid, SIGTERM);
  int status = 0;
  bool gone = false;
  for (int i = 0; i < 500 && !gone; ++i) {
    gone = waitpid(s.pid, &status, WNOHANG) == s.pid;
    if (!gone) usleep(10'000);
  }
  if (!gone) {
    kill(s.pid, SIGKILL);
    waitpid(s.pid, &status, 0);
  }
  s.pid = -1;
  if (!s.log_path.empty()) unlink(s.log_path.c_str());
}

}  // namespace ringbench
