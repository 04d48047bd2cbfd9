// process_util.hpp — running test code in forked child processes.
#pragma once

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <new>
#include <thread>
#include <type_traits>

namespace ipcring::test {

// Forks; the child runs `fn` and _exits with its return value (99 if it threw). Never returns in
// the child, so the child never runs the rest of the test framework.
template <class Fn>
pid_t spawn(Fn&& fn) {
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that failed or was killed
    int code = 99;
    try {
      if constexpr (std::is_void_v<decltype(fn())>) {
        fn();
        code = 0;
      } else {
        code = fn();
      }
    } catch (...) {
      code = 98;
    }
    _exit(code);
  }
  return pid;
}

// Waits for `pid`; returns its exit code, 128+signal if killed, or -1 after `timeout`.
inline int wait_exit(pid_t pid, std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
      return -2;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// An object of type T in anonymous shared memory, visible to forked children.
template <class T>
class Shared {
 public:
  Shared() {
    void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    value_ = new (p) T{};
  }
  ~Shared() {
    value_->~T();
    munmap(value_, sizeof(T));
  }
  Shared(const Shared&) = delete;
  Shared& operator=(const Shared&) = delete;
  T* operator->() const { return value_; }
  T& operator*() const { return *value_; }

 private:
  T* value_;
};

// Polls `pred` until it is true or `timeout` passes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace ipcring::test
