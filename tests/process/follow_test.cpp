// follow_test.cpp — readers follow their channel by name (clean restart, removal and re-creation),
// and a running producer defends its name (restored after removal; a second producer refused
// while the name is missing).
#include <doctest/doctest.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <string>

#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::eventually;
using test::ScopedChannel;
using test::Shared;
using test::spawn;
using test::wait_exit;

namespace {

struct Control {
  std::atomic<int> stop{0};
  std::atomic<std::uint64_t> published{0};
};

// A producer child: publishes frames whose first byte is `mark` (and the sequence after it) every
// millisecond until told to stop, then closes cleanly (or is killed by the test).
pid_t spawn_producer(const std::string& name, ChannelConfig cfg, char mark, Control& ctl) {
  return spawn([&, name, cfg, mark] {
    auto p = Producer::create(name, cfg);
    while (ctl.stop.load() == 0) {
      auto l = p.loan();
      if (l) {
        l->data()[0] = static_cast<std::byte>(mark);
        const std::uint64_t seq = l->sequence();
        std::memcpy(l->data() + 8, &seq, sizeof seq);
        p.publish(std::move(*l), 16);
        ctl.published.fetch_add(1);
      }
      std::this_thread::sleep_for(1ms);
    }
    return 0;
  });
}

// The inode of the channel's socket (0: none), which a producer makes anew when it restores it.
ino_t inode_of(const std::string& channel) {
  struct stat st {};
  return lstat(socket_path(channel).c_str(), &st) == 0 ? st.st_ino : 0;
}

// Removes the channel's names, as `ringdump rm --force`, RemoveIPC or a cleanup script would.
bool remove_names(const std::string& channel) {
  const bool sock = unlink(socket_path(channel).c_str()) == 0;
  const bool lock = unlink(lock_path(channel).c_str()) == 0;
  return sock && lock;
}

struct Tally {
  int a = 0, b = 0, gone = 0, other = 0;
};

// Reads for at most `limit` until `done` says so, counting frames by mark and producer_gone.
template <class Done>
Tally read_until(Reader& r, bool blocking, Done done, std::chrono::milliseconds limit = 15s) {
  Tally t;
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end && !done(t)) {
    Result<Frame> f = blocking ? r.read(50ms) : r.try_read();
    if (f) {
      const char m = static_cast<char>(f->data()[0]);
      if (m == 'A')
        ++t.a;
      else if (m == 'B')
        ++t.b;
      else
        ++t.other;
      continue;
    }
    if (f.status() == Status::producer_gone)
      ++t.gone;
    else if (f.status() != Status::no_frame && f.status() != Status::timeout)
      ++t.other;
    if (!blocking) std::this_thread::sleep_for(1ms);
  }
  return t;
}

void clean_restart(bool blocking) {
  ScopedChannel ch(blocking ? "follow-read" : "follow-try");
  Shared<Control> a, b;
  ChannelConfig first{.slots = 6, .max_readers = 2, .max_held = 2, .frame_bytes = 4096};
  const pid_t pa = spawn_producer(ch.name(), first, 'A', *a);
  Reader r = Reader::attach(ch.name(), {.wait_for_channel = 10s});
  // Hold one frame of the first producer across the restart: it must stay readable.
  Result<Frame> held = Status::no_frame;
  REQUIRE(eventually([&] { return static_cast<bool>(held = r.try_read()); }));
  CHECK(static_cast<char>(held->data()[0]) == 'A');
  Tally t1 = read_until(r, blocking, [](const Tally& t) { return t.a >= 5; });
  CHECK(t1.a >= 5);
  a->stop.store(1);
  CHECK(wait_exit(pa) == 0);  // a clean close: its object's name is unlinked
  // Another geometry: the reader must take the new one.
  ChannelConfig second{.slots = 8, .max_readers = 3, .max_held = 2, .frame_bytes = 65536};
  const pid_t pb = spawn_producer(ch.name(), second, 'B', *b);
  Tally t2 = read_until(r, blocking, [](const Tally& t) { return t.b >= 5; });
  b->stop.store(1);
  CHECK(wait_exit(pb) == 0);
  CHECK(t2.b >= 5);
  CHECK(t1.gone + t2.gone == 1);  // exactly once for the ended producer
  CHECK(t2.other == 0);
  CHECK(r.frame_bytes() == 65536);
  CHECK(static_cast<char>(held->data()[0]) == 'A');  // the old mapping is still ours
  held->release();
}

}  // namespace

TEST_CASE("a reader follows a clean producer restart (try_read)") {
  clean_restart(false);
}

TEST_CASE("a reader follows a clean producer restart (read with a timeout)") {
  clean_restart(true);
}

TEST_CASE(
    "frames of the old object outlive the Reader that followed; each core ends with its last") {
  ScopedChannel ch("follow-outlive");
  Shared<Control> a, b;
  ChannelConfig cfg{.slots = 6, .max_readers = 2, .max_held = 2, .frame_bytes = 4096};
  const pid_t pa = spawn_producer(ch.name(), cfg, 'A', *a);
  std::optional<Reader> r(Reader::attach(ch.name(), {.wait_for_channel = 10s}));
  Result<Frame> old_frame = Status::no_frame;
  REQUIRE(eventually([&] { return static_cast<bool>(old_frame = r->try_read()); }));
  a->stop.store(1);
  CHECK(wait_exit(pa) == 0);
  const pid_t pb = spawn_producer(ch.name(), cfg, 'B', *b);
  Result<Frame> new_frame = Status::no_frame;
  int gone = 0;
  REQUIRE(eventually([&] {
    new_frame = r->try_read();
    if (!new_frame && new_frame.status() == Status::producer_gone) ++gone;
    return new_frame && static_cast<char>(new_frame->data()[0]) == 'B';
  }));
  CHECK(gone == 1);
  CHECK(r->held() == 1);  // of the object it reads now; the old frame is counted by its own core
  r.reset();              // the Reader goes first; both frames keep their cores
  CHECK(static_cast<char>(old_frame->data()[0]) == 'A');
  CHECK(static_cast<char>(new_frame->data()[0]) == 'B');
  CHECK(inspect(ch.name()).readers.size() == 1);  // the new core's entry, held by its frame
  old_frame->release();
  new_frame->release();  // the last frame of the new core: its entry is given back
  CHECK(inspect(ch.name()).readers.empty());
  b->stop.store(1);
  CHECK(wait_exit(pb) == 0);
}

TEST_CASE("a reader follows a crash, a removal of the names it left and a new producer") {
  ScopedChannel ch("follow-recreate");
  Shared<Control> a, b;
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  const pid_t pa = spawn_producer(ch.name(), cfg, 'A', *a);
  Reader r = Reader::attach(ch.name(), {.wait_for_channel = 10s});
  Tally t1 = read_until(r, false, [](const Tally& t) { return t.a >= 3; });
  CHECK(t1.a >= 3);
  // The producer crashes and a cleanup removes the names it left (as gc or RemoveIPC would).
  kill(pa, SIGKILL);
  CHECK(wait_exit(pa) == 128 + SIGKILL);
  REQUIRE(remove_names(ch.name()));
  const pid_t pb = spawn_producer(ch.name(), cfg, 'B', *b);
  Tally t2 = read_until(r, false, [](const Tally& t) { return t.b >= 3; });
  b->stop.store(1);
  CHECK(wait_exit(pb) == 0);
  CHECK(t2.b >= 3);
  CHECK(t1.gone + t2.gone == 1);
}

TEST_CASE("names removed under a running producer are restored; its readers read on") {
  ScopedChannel ch("follow-restore");
  Shared<Control> a;
  ChannelConfig cfg{
      .slots = 4, .max_readers = 3, .max_held = 1, .frame_bytes = 1024, .reap_period = 20ms};
  const pid_t pa = spawn_producer(ch.name(), cfg, 'A', *a);
  Reader r = Reader::attach(ch.name(), {.policy = ReadPolicy::sequential, .wait_for_channel = 10s});
  Tally t1 = read_until(r, true, [](const Tally& t) { return t.a >= 3; });
  CHECK(t1.a >= 3);
  const ino_t before = inode_of(ch.name());
  REQUIRE(before != 0);
  REQUIRE(remove_names(ch.name()));
  // Restored: a new socket and lock file; the memory is the same, so nothing moves.
  CHECK(eventually([&] { return inode_of(ch.name()) != 0; }, 10s));
  CHECK(inode_of(ch.name()) != before);
  CHECK(eventually([&] { return inspect_name(ch.name()).state == NameState::live; }, 10s));
  // The attached reader reads on, with no producer_gone (the same producer), sequences growing.
  std::uint64_t last = 0;
  int frames = 0, gone = 0, disorder = 0;
  const auto end = std::chrono::steady_clock::now() + 10s;
  while (frames < 20 && std::chrono::steady_clock::now() < end) {
    Result<Frame> f = r.read(50ms);
    if (f) {
      if (f->sequence() <= last) ++disorder;
      last = f->sequence();
      ++frames;
    } else if (f.status() == Status::producer_gone) {
      ++gone;
    }
  }
  CHECK(frames >= 20);
  CHECK(gone == 0);
  CHECK(disorder == 0);
  // A reader attaching by name now finds the producer.
  Reader late = Reader::attach(ch.name(), {.wait_for_channel = 5s});
  Tally t3 = read_until(late, true, [](const Tally& t) { return t.a >= 3; });
  CHECK(t3.a >= 3);
  CHECK(t3.gone == 0);
  a->stop.store(1);
  CHECK(wait_exit(pa) == 0);
}

TEST_CASE("a fork child does not keep its parent's name alive") {
  ScopedChannel ch("follow-fork");
  ChannelConfig cfg{.slots = 4, .max_readers = 1, .max_held = 1, .frame_bytes = 1024};
  std::optional<Producer> p;
  p.emplace(Producer::create(ch.name(), cfg));
  Shared<std::atomic<int>> release_child, child_running;
  const pid_t child = spawn([&] {
    child_running->store(1);
    while (release_child->load() == 0) std::this_thread::sleep_for(1ms);
    return 0;
  });
  // The child's copy of the token's descriptor exists from fork() until the child's atfork
  // handler closed it, in the child's first instructions: wait until the child runs.
  REQUIRE(eventually([&] { return child_running->load() == 1; }));
  p.reset();  // a clean close, while the child (with copies of our descriptors) lives
  CHECK_NOTHROW(Producer::create(ch.name(), cfg));
  release_child->store(1);
  CHECK(wait_exit(child) == 0);
}

TEST_CASE("a producer whose names another took while they were removed reports it, keeps readers") {
  ScopedChannel ch("follow-taken");
  struct State {
    std::atomic<int> stop{0};
    std::atomic<int> owns{-1};  // the first producer's owns_name() after the second came
    std::atomic<std::uint64_t> published{0};
    std::atomic<int> second{0};  // 1: created in its own network namespace, 77: cannot unshare
  };
  Shared<State> st;
  ChannelConfig cfg{
      .slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024, .reap_period = 20ms};
  const pid_t first = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    while (st->stop.load() == 0) {
      if (auto l = p.loan()) {
        l->data()[0] = std::byte{'A'};
        p.publish(std::move(*l), 16);
        st->published.fetch_add(1);
      }
      if (st->second.load() == 1) st->owns.store(p.owns_name() ? 1 : 0);
      std::this_thread::sleep_for(1ms);
    }
    return 0;
  });
  Reader r = Reader::attach(ch.name(), {.wait_for_channel = 10s});
  Tally t1 = read_until(r, true, [](const Tally& t) { return t.a >= 3; });
  REQUIRE(t1.a >= 3);
  kill(first, SIGSTOP);  // so that it cannot restore before the second producer came
  // Inside the directory's trust, removing a live producer's names opens a window in which
  // another producer can start (docs/protocol.md, "Trust": what remains).
  REQUIRE(remove_names(ch.name()));
  const pid_t second = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    st->second.store(1);
    while (st->stop.load() == 0) {
      if (auto l = p.loan()) {
        l->data()[0] = std::byte{'B'};
        p.publish(std::move(*l), 16);
      }
      std::this_thread::sleep_for(1ms);
    }
    return 0;
  });
  REQUIRE(eventually([&] { return st->second.load() != 0; }));
  kill(first, SIGCONT);
  // The first notices, is refused (a live producer holds the name), reports, does not fight.
  CHECK(eventually([&] { return st->owns.load() == 0; }, 10s));
  const std::uint64_t before = st->published.load();
  // Its reader stays with it (a live producer is never followed away from).
  Tally t2 = read_until(r, true, [](const Tally& t) { return t.a >= 20; });
  CHECK(t2.a >= 20);
  CHECK(t2.b == 0);
  CHECK(t2.gone == 0);
  CHECK(st->published.load() > before);
  st->stop.store(1);
  CHECK(wait_exit(second) == 0);
  CHECK(wait_exit(first) == 0);
}

TEST_CASE("a reader that cannot follow says why, naming the channel and the values, and retries") {
  ScopedChannel ch("follow-full");
  Shared<Control> a;
  ChannelConfig first{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  const pid_t pa = spawn_producer(ch.name(), first, 'A', *a);
  Reader r = Reader::attach(ch.name(), {.wait_for_channel = 10s});
  Tally t1 = read_until(r, false, [](const Tally& t) { return t.a >= 1; });
  REQUIRE(t1.a >= 1);
  a->stop.store(1);
  CHECK(wait_exit(pa) == 0);
  // The new channel has one reader entry, and another reader takes it first.
  ChannelConfig second{.slots = 3, .max_readers = 1, .max_held = 1, .frame_bytes = 1024};
  auto p = Producer::create(ch.name(), second);
  std::optional<Reader> other;
  other.emplace(Reader::attach(ch.name()));
  int gone = t1.gone, evicted = 0;
  REQUIRE(eventually([&] {
    Result<Frame> f = r.try_read();
    if (f.status() == Status::producer_gone) ++gone;
    if (f.status() == Status::evicted) ++evicted;
    return evicted > 0;
  }));
  const std::string why(r.follow_error());
  CHECK(why.find(ch.name()) != std::string::npos);
  CHECK(why.find("max_readers") != std::string::npos);
  // Once the entry is free, the reader follows by itself.
  other.reset();
  bool got = false;
  CHECK(eventually([&] {
    if (auto l = p.loan()) p.publish(std::move(*l), 8);
    Result<Frame> f = r.try_read();
    if (f.status() == Status::producer_gone) ++gone;
    got = static_cast<bool>(f);
    return got;
  }));
  CHECK(gone == 1);
  CHECK(r.max_held() == 1);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define IPCRING_FOLLOW_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define IPCRING_FOLLOW_TEST_SANITIZED 1
#endif
#endif

TEST_CASE("try_read on a live channel with no new frame makes no system call, probe periods too") {
#if defined(IPCRING_FOLLOW_TEST_SANITIZED) || !defined(__x86_64__)
  MESSAGE("skipped: sanitizer build, or not x86-64 (the filter uses x86-64 call numbers)");
  return;
#else
  ScopedChannel ch("follow-nosyscall");
  const pid_t pid = spawn([&] {
    ChannelConfig cfg{.slots = 4, .max_readers = 1, .max_held = 1, .frame_bytes = 1024};
    auto p = Producer::create(ch.name(), cfg);
    auto r = Reader::attach(ch.name(), {.producer_probe = 1ms});
    // Kills the process on any system call but exit, exit_group and clock_gettime (the vDSO's).
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit_group, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_exit, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clock_gettime, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return 77;
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return 77;
    // Many probe periods (1 ms each) of no_frame: the follow check runs, and makes no call.
    const auto end = std::chrono::steady_clock::now() + 50ms;
    std::uint64_t calls = 0;
    while (std::chrono::steady_clock::now() < end) {
      if (r.try_read().status() != Status::no_frame) _exit(10);
      ++calls;
    }
    _exit(calls > 0 ? 0 : 11);
  });
  const int code = wait_exit(pid);
  if (code == 77) {
    MESSAGE("skipped: seccomp is not available here");
    return;
  }
  CHECK_MESSAGE(code == 0, "child ended with ", code,
                code == 128 + SIGSYS ? " (killed by seccomp: a system call in try_read)" : "");
#endif
}
