// trust_test.cpp — who may produce into a name, who receives a channel's memory, and what they can
// do with it, with real processes of different users (docs/protocol.md, "Trust"). The users are
// uids of their own (no passwd entry is needed: the kernel knows them by number); the test runs
// as root, as CI does, and each role drops to its uid in a forked child. Without root it says so
// and checks nothing.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "channel/handout.hpp"
#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::eventually;
using test::Shared;
using test::spawn;
using test::wait_exit;

namespace {

const ChannelConfig kConfig{.slots = 6, .max_readers = 2, .max_held = 1, .frame_bytes = 4096};

// The users of these tests: a victim (whose channels they are), an attacker, a reader the victim
// allows, and a third user whose private directory the attacker made first.
constexpr uid_t kVictim = 64101;
constexpr uid_t kAttacker = 64102;
constexpr uid_t kAllowed = 64104;
constexpr uid_t kThird = 64103;
constexpr gid_t kGroup = 64150;  // a group the allowed reader and the attacker are in

bool root() {
  if (geteuid() == 0) return true;
  MESSAGE("skipped: needs root to run processes as other users");
  return false;
}

// In a forked child: become `uid` (primary group = uid, supplementary `groups`), for good.
void become(uid_t uid, std::vector<gid_t> groups = {}) {
  if (setgroups(groups.size(), groups.data()) != 0 || setgid(uid) != 0 || setuid(uid) != 0) {
    _exit(97);
  }
}

std::string private_dir(uid_t uid) {
  return "/dev/shm/ipcring-" + std::to_string(uid);
}

// Removes what the test users left under /dev/shm.
void clean(uid_t uid) {
  std::error_code ec;
  std::filesystem::remove_all(private_dir(uid), ec);
}

std::string unique(const char* stem) {
  return std::string(stem) + "-" + std::to_string(getpid());
}

std::uint64_t publish(Producer& p, std::uint64_t tag) {
  auto l = p.loan(1s);
  if (!l) return 0;
  test::fill_pattern(l->data(), kConfig.frame_bytes, l->sequence() + tag);
  return p.publish(std::move(*l), kConfig.frame_bytes);
}

// The victim's producer in a child: publishes frames whose pattern is shifted by `tag` until
// `stop` is set. `ready` is set once it runs.
pid_t victim_producer(const std::string& name, std::uint64_t tag, Shared<std::atomic<int>>& ready,
                      Shared<std::atomic<int>>& stop, ChannelConfig config = kConfig) {
  return spawn([&, name, tag, config] {
    become(kVictim);
    auto p = Producer::create(name, config);
    ready->store(1);
    while (stop->load() == 0) {
      publish(p, tag);
      std::this_thread::sleep_for(1ms);
    }
    return 0;
  });
}

int open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

}  // namespace

TEST_CASE("another user can neither name, squat nor hijack a channel, nor be followed to") {
  if (!root()) return;
  clean(kVictim);
  clean(kAttacker);
  clean(kThird);
  const std::string name = unique("cam");
  Shared<std::atomic<int>> ready;
  Shared<std::atomic<int>> stop;
  const pid_t producer = victim_producer(name, 0, ready, stop);
  REQUIRE(eventually([&] { return ready->load() == 1; }));

  // The attacker: in the victim's directory it can make nothing and read nothing.
  const pid_t attacker = spawn([&] {
    become(kAttacker);
    try {
      auto p =
          Producer::create(name, {.slots = 6, .frame_bytes = 4096, .dir = private_dir(kVictim)});
      return 10;  // it named a channel there
    } catch (const Error& e) {
      if (e.code() != Errc::permission_denied) return 11;
    }
    try {
      auto r = Reader::attach(name, {.dir = private_dir(kVictim)});
      return 12;
    } catch (const Error& e) {
      if (e.code() != Errc::permission_denied) return 13;
    }
    // Squatting: it makes the third user's private directory before that user ever ran.
    if (mkdir(private_dir(kThird).c_str(), 0755) != 0) return 14;
    // And a channel of the same name in its own directory, for a victim to be pointed at.
    auto own = Producer::create(name, kConfig);
    publish(own, 7);
    while (stop->load() == 0) std::this_thread::sleep_for(5ms);
    return 0;
  });
  REQUIRE(eventually([&] {
    return std::filesystem::exists(private_dir(kThird)) &&
           std::filesystem::exists(private_dir(kAttacker) + "/" + name + ".sock");
  }));

  // The third user is refused, with the fix, and never reads the attacker's frames.
  const pid_t third = spawn([&] {
    become(kThird);
    try {
      auto p = Producer::create(name, kConfig);
      return 20;
    } catch (const Error& e) {
      const std::string m = e.what();
      if (e.code() != Errc::permission_denied) return 21;
      if (m.find("uid " + std::to_string(kAttacker)) == std::string::npos) return 22;
      if (m.find("Remove it") == std::string::npos) return 23;
    }
    try {
      auto r = Reader::attach(name);
      return 24;
    } catch (const Error& e) {
      if (e.code() != Errc::permission_denied) return 25;
    }
    return 0;
  });
  CHECK(wait_exit(third) == 0);

  // The victim's reader, pointed at the attacker's directory, refuses it, naming the uids.
  Shared<std::array<char, 512>> why;
  const pid_t misled = spawn([&] {
    become(kVictim);
    try {
      auto r = Reader::attach(name, {.dir = private_dir(kAttacker)});
      return 30;
    } catch (const Error& e) {
      std::snprintf(why->data(), why->size(), "%s", e.what());
      return e.code() == Errc::permission_denied ? 0 : 31;
    }
  });
  CHECK(wait_exit(misled) == 0);
  INFO(why->data());
  CHECK(std::string(why->data()).find("belongs to uid " + std::to_string(kAttacker)) !=
        std::string::npos);

  // The victim's reader follows its own producer's restart, and only that: every frame it reads
  // has the victim's pattern (tag 0 before the restart, 1000 after).
  Shared<std::atomic<int>> reader_state;  // 1 attached, 2 saw gone, 3 read the new producer
  Shared<std::atomic<int>> wrong;
  const pid_t reader = spawn([&] {
    become(kVictim);
    auto r = Reader::attach(name, {.producer_probe = 5ms});
    reader_state->store(1);
    for (int i = 0; i < 4000 && reader_state->load() != 3; ++i) {
      auto f = r.read(10ms);
      if (f.status() == Status::producer_gone) reader_state->store(2);
      if (!f) continue;
      const bool before = test::check_pattern(f->data(), f->size(), f->sequence());
      const bool after = test::check_pattern(f->data(), f->size(), f->sequence() + 1000);
      if (!before && !after) wrong->fetch_add(1);
      if (after && reader_state->load() == 2) reader_state->store(3);
    }
    return 0;
  });
  REQUIRE(eventually([&] { return reader_state->load() == 1; }));
  stop->store(1);
  CHECK(wait_exit(producer) == 0);
  REQUIRE(eventually([&] { return reader_state->load() == 2; }));
  Shared<std::atomic<int>> ready2;
  Shared<std::atomic<int>> stop2;
  const pid_t restarted = victim_producer(name, 1000, ready2, stop2);
  CHECK(eventually([&] { return reader_state->load() == 3; }));
  stop2->store(1);
  CHECK(wait_exit(restarted) == 0);
  CHECK(wait_exit(reader) == 0);
  CHECK(wrong->load() == 0);
  CHECK(wait_exit(attacker) == 0);
  clean(kVictim);
  clean(kAttacker);
  clean(kThird);
}

TEST_CASE(
    "memory reaches only allowed readers, and nobody but the producer can resize or write it") {
  if (!root()) return;
  // A directory of the victim's that others may enter but not write (trust: the victim alone),
  // setgid to a group whose members may connect to the socket (mode 0660).
  char tmpl[] = "/tmp/ipcring-trust-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  REQUIRE(chown(dir.c_str(), kVictim, kGroup) == 0);
  REQUIRE(chmod(dir.c_str(), 02755) == 0);
  const std::string name = "frames";
  for (const bool allowed : {false, true}) {
    CAPTURE(allowed);
    ChannelConfig config = kConfig;
    config.dir = dir;
    config.mode = 0660;
    if (allowed) config.allow_uids = {kAllowed};
    Shared<std::atomic<int>> ready;
    Shared<std::atomic<int>> stop;
    const pid_t producer = victim_producer(name, 0, ready, stop, config);
    REQUIRE(eventually([&] { return ready->load() == 1; }));
    Shared<std::array<char, 512>> message;
    const pid_t reader = spawn([&] {
      become(kAllowed, {kGroup});
      const int fds_before = open_fds();
      try {
        const auto d = detail::ChannelDirectory::open(name, dir, false, {kVictim});
        auto h = detail::fetch_handout(name, d, {kVictim}, 2000ms);
        if (!allowed) return 40;  // descriptors for a reader the policy does not allow
        // The control segment: shared bookkeeping, never resizable.
        if (ftruncate(h.control_fd, 0) == 0 || errno != EPERM) return 41;
        if (ftruncate(h.control_fd, 1 << 30) == 0 || errno != EPERM) return 42;
        // The frame pool: read-only, and sealed against writes through any descriptor.
        if (write(h.frames_fd, "x", 1) >= 0) return 43;
        if (mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, h.frames_fd, 0) != MAP_FAILED) {
          return 44;
        }
        const std::string proc = "/proc/self/fd/" + std::to_string(h.frames_fd);
        const int rw = open(proc.c_str(), O_RDWR);
        if (rw >= 0) {
          if (ftruncate(rw, 0) == 0) return 45;
          if (pwrite(rw, "x", 1, 0) >= 0) return 46;
          if (fallocate(rw, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096) == 0) return 47;
          if (mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0) != MAP_FAILED) {
            return 48;
          }
          close(rw);
        }
        // A private copy-on-write view is allowed (what the Python module uses); it changes
        // nothing anyone else sees.
        void* cow = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, h.frames_fd, 0);
        if (cow == MAP_FAILED) return 49;
        std::memset(cow, 0x5a, 4096);
        munmap(cow, 4096);
      } catch (const Error& e) {
        std::snprintf(message->data(), message->size(), "%s", e.what());
        if (allowed) return 50;
        if (e.code() != Errc::permission_denied) return 51;
      }
      // Nothing received stays open after a refusal.
      if (open_fds() != fds_before) return 52;
      if (!allowed) return 0;
      // And it reads the producer's frames intact.
      auto r = Reader::attach(name, {.dir = dir, .trust_uids = {kVictim}});
      int good = 0;
      for (int i = 0; i < 200 && good < 20; ++i) {
        auto f = r.read(20ms);
        if (f && test::check_pattern(f->data(), f->size(), f->sequence())) ++good;
      }
      return good >= 20 ? 0 : 53;
    });
    const int rc = wait_exit(reader);
    INFO(message->data());
    CHECK(rc == 0);
    if (!allowed) {
      const std::string m = message->data();
      CHECK(m.find("refuses uid " + std::to_string(kAllowed)) != std::string::npos);
    }
    stop->store(1);
    CHECK(wait_exit(producer) == 0);
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("a removal raced by another user in its own user and network namespace diverts nobody") {
  if (!root()) return;
  clean(kVictim);
  const std::string name = unique("race");
  Shared<std::atomic<int>> ready;
  Shared<std::atomic<int>> stop;
  const pid_t producer = victim_producer(name, 0, ready, stop);
  REQUIRE(eventually([&] { return ready->load() == 1; }));
  Shared<std::atomic<int>> attempts;
  Shared<std::atomic<int>> named;
  const pid_t attacker = spawn([&] {
    become(kAttacker);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) return 77;
    while (stop->load() == 0) {
      attempts->fetch_add(1);
      try {
        auto p =
            Producer::create(name, {.slots = 6, .frame_bytes = 4096, .dir = private_dir(kVictim)});
        named->fetch_add(1);
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(200us);
    }
    return 0;
  });
  // Remove the names under the running producer again and again (RemoveIPC, a cleanup script):
  // every reader attaching afterwards reads the victim's frames.
  int checked = 0;
  for (int round = 0; round < 10; ++round) {
    const pid_t remover = spawn([&] {
      become(kVictim);
      return remove_channel(name, true) ? 0 : 60;
    });
    CHECK(wait_exit(remover) == 0);
    const pid_t reader = spawn([&] {
      become(kVictim);
      auto r = Reader::attach(name, {.wait_for_channel = 5s});
      for (int i = 0; i < 100; ++i) {
        auto f = r.read(20ms);
        if (!f) continue;
        return test::check_pattern(f->data(), f->size(), f->sequence()) &&
                       inspect(name).producer.pid == static_cast<std::uint32_t>(producer)
                   ? 0
                   : 61;
      }
      return 62;
    });
    CHECK(wait_exit(reader) == 0);
    ++checked;
  }
  stop->store(1);
  const int rc = wait_exit(attacker);
  if (rc == 77) MESSAGE("user namespaces are not available: the attacker ran in none");
  CHECK((rc == 0 || rc == 77));
  CHECK(wait_exit(producer) == 0);
  CHECK(checked == 10);
  CHECK(attempts->load() > 0);
  CHECK(named->load() == 0);
  clean(kVictim);
  clean(kAttacker);
}

TEST_CASE("loan never waits on another process's lock; one stalled channel stalls no other") {
  test::ScopedChannel a("stall-a");
  test::ScopedChannel b("stall-b");
  auto pa = Producer::create(a.name(), kConfig);
  auto pb = Producer::create(b.name(), kConfig);
  // Another process attaches to A, holds a frame and A's repair lock (an exclusive flock on its
  // own description of the control segment), and stops.
  Shared<std::atomic<int>> holding;
  publish(pa, 0);
  const pid_t holder = spawn([&] {
    auto r = Reader::attach(a.name());
    holding->store(1);
    auto f = r.read(5s);
    holding->store(2);
    const int fd = test::control_fd_of(a.name());
    holding->store(3);
    const std::string proc = "/proc/self/fd/" + std::to_string(fd);
    const int own = open(proc.c_str(), O_RDONLY);
    if (!f || own < 0 || flock(own, LOCK_EX) != 0) return 70;
    holding->store(10);
    raise(SIGSTOP);
    return 0;
  });
  struct Reaped {
    pid_t pid;
    ~Reaped() {
      kill(pid, SIGKILL);
      wait_exit(pid);
    }
  } reaped{holder};
  const bool held = eventually([&] { return holding->load() == 10; }, 30s);
  INFO("the holder reached step " << holding->load() << " (1 attached, 2 read, 3 fetched)");
  REQUIRE(held);

  // A's producer: every loan is quick (p99 under a millisecond) and none fails.
  std::vector<std::uint64_t> ns;
  ns.reserve(20000);
  int failed = 0;
  for (int i = 0; i < 20000; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto l = pa.loan();
    ns.push_back(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count()));
    if (!l) {
      ++failed;
      continue;
    }
    pa.publish(std::move(*l), 64);
  }
  std::sort(ns.begin(), ns.end());
  const std::uint64_t p99 = ns[ns.size() * 99 / 100];
  MESSAGE("loan p50 " << ns[ns.size() / 2] << " ns, p99 " << p99 << " ns, max " << ns.back()
                      << " ns with another process holding A's repair lock and a frame");
  CHECK(failed == 0);
  CHECK(p99 < 1'000'000);

  // In this process: an attach to A waits for A's repair lock (bounded), while B's attach, read
  // and detach cycles go on beside it, each far quicker than that wait.
  std::atomic<int> a_result{0};
  std::thread waiter([&] {
    try {
      auto r = Reader::attach(a.name());
      a_result = 1;
    } catch (const Error& e) {
      a_result = e.code() == Errc::channel_busy ? 2 : 3;
    }
  });
  std::this_thread::sleep_for(50ms);  // the waiter is inside A's repair-lock wait now
  int cycles = 0;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < 1500ms) {
    auto r = Reader::attach(b.name());
    publish(pb, 0);
    auto f = r.read(100ms);
    REQUIRE(f);
    ++cycles;
  }
  waiter.join();
  MESSAGE(cycles << " attach/read/detach cycles of B while A's repair lock was held elsewhere");
  CHECK(cycles > 20);
  CHECK(a_result.load() == 2);  // refused after its bounded wait, naming the lock
}

TEST_CASE("destroy a Reader, release its last frame, attach again: never refused") {
  test::ScopedChannel ch("reattach");
  auto p = Producer::create(ch.name(),
                            {.slots = 4, .max_readers = 1, .max_held = 1, .frame_bytes = 4096});
  int refused = 0;
  for (int round = 0; round < 200; ++round) {
    std::optional<Frame> held;
    {
      auto r = Reader::attach(ch.name());
      publish(p, 0);
      auto f = r.read(1s);
      REQUIRE(f);
      held.emplace(std::move(*f));
    }                 // the Reader is gone; its frame keeps its core (and entry) until released
    held->release();  // the core's end is handed to the retirement thread
    try {
      auto again = Reader::attach(ch.name());
    } catch (const Error& e) {
      INFO(e.what());
      ++refused;
    }
  }
  CHECK(refused == 0);
}
