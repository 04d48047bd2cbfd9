// hot_path_test.cpp — loan, publish, try_read and release make no system call when no reader
// sleeps. The check runs in a child process under a seccomp filter that kills the process on any
// system call other than exit, exit_group, write (for doctest in the child: unused) and
// clock_gettime (served by the vDSO; it is a real system call only on clock sources without vDSO
// support, and then it is still not a system call of ours).
#include <doctest/doctest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cstddef>

#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "test_util.hpp"

using namespace ipcring;
using test::ScopedChannel;
using test::spawn;
using test::wait_exit;

namespace {

[[maybe_unused]] bool install_no_syscall_filter() {
  // Allow a few system calls; kill the process on any other.
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 4, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_write, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clock_gettime, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

}  // namespace

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IPCRING_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define IPCRING_TEST_SANITIZED 1
#endif
#endif

TEST_CASE("loan/publish/try_read/release make no system call when no reader sleeps") {
#if defined(IPCRING_TEST_SANITIZED)
  // The sanitizer runtimes make system calls of their own (shadow memory, quarantine); the
  // property is checked by the uninstrumented builds.
  MESSAGE("skipped: sanitizer build");
  return;
#elif !defined(__x86_64__)
  // The seccomp program above uses x86-64 system call numbers without an arch check.
  MESSAGE("skipped: seccomp check written for x86-64");
  return;
#else
  ScopedChannel ch("syscall");
  const pid_t pid = spawn([&] {
    ChannelConfig cfg{.slots = 6, .max_readers = 2, .max_held = 2, .frame_bytes = 4096};
    auto p = Producer::create(ch.name(), cfg);
    auto latest = Reader::attach(ch.name());
    auto sequential = Reader::attach(ch.name(), {.policy = ReadPolicy::sequential});
    // An observer's copy and re-check too (its buffer was allocated at attach).
    auto observer = Reader::attach(ch.name(), {.observer = true});
    // Warm up: first touches of every page (page faults are not system calls, but keep the
    // measured loop about the protocol), the periodic reap included.
    for (int i = 0; i < 64; ++i) {
      auto l = p.loan();
      if (!l) return 10;
      l->data()[0] = std::byte{1};
      p.publish(std::move(*l), 64);
      auto f = latest.try_read();
      auto g = sequential.try_read();
      auto o = observer.try_read();
    }
    if (!install_no_syscall_filter()) return 77;
    for (int i = 0; i < 20000; ++i) {
      auto l = p.loan();
      if (!l) return 11;
      l->data()[0] = std::byte{2};
      p.publish(std::move(*l), 64);
      auto f = latest.try_read();
      if (!f) return 12;
      auto g = sequential.try_read();
      if (!g) return 13;
      auto o = observer.try_read();
      if (!o) return 14;
      f->release();
      g->release();
      o->release();
    }
    _exit(0);  // skip the destructors: closing makes system calls, and the filter is still on
  });
  const int code = wait_exit(pid);
  if (code == 77) {
    MESSAGE("skipped: seccomp is not available here");
    return;
  }
  CHECK_MESSAGE(code == 0, "child ended with ", code,
                code == 128 + SIGSYS ? " (killed by seccomp: a system call on the hot path)" : "");
#endif
}
