// naming_test.cpp — channel names and liveness bookkeeping that must hold with real processes:
// a stalled creator, removal racing a takeover, gc racing creation, /dev/shm too small, waiters
// that die asleep, producer_gone once per ended epoch, Frames inherited by fork, and hostile bytes
// in a held lease.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

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

constexpr ChannelConfig kConfig{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 4096};

std::uint64_t publish_pattern(Producer& p, std::uint64_t offset = 0) {
  auto l = p.loan(1s);
  REQUIRE(l);
  test::fill_pattern(l->data(), kConfig.frame_bytes, l->sequence() + offset);
  return p.publish(std::move(*l), kConfig.frame_bytes);
}

std::vector<unsigned char> file_bytes(const std::string& path) {
  std::vector<unsigned char> bytes;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return bytes;
  struct stat st {};
  if (fstat(fd, &st) == 0) {
    bytes.resize(static_cast<std::size_t>(st.st_size));
    const ssize_t n = pread(fd, bytes.data(), bytes.size(), 0);
    bytes.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
  }
  close(fd);
  return bytes;
}

bool named(const std::string& ch) {
  return access(object_path(ch).c_str(), F_OK) == 0;
}

}  // namespace

TEST_CASE("a stalled creator, whenever it resumes, cannot damage the channel created after it") {
  ScopedChannel ch("stall");
  Shared<std::atomic<int>> outcome;  // 1: it created a channel anyway, 2: producer_exists, 3: other
  const pid_t stalled = spawn([&] {
    // Stops itself right after making its object, before the object is complete.
    setenv("IPCRING_FAULT", "create.made:1:stop", 1);  // NOLINT(concurrency-mt-unsafe): one thread
    try {
      auto p = Producer::create(ch.name(), kConfig);
      outcome->store(1);
      for (;;) publish_pattern(p, 1'000'000);  // frames readers of the new channel must not see
    } catch (const Error& e) {
      outcome->store(e.code() == Errc::producer_exists ? 2 : 3);
    }
    return 0;
  });
  int status = 0;
  REQUIRE(waitpid(stalled, &status, WUNTRACED) == stalled);
  REQUIRE(WIFSTOPPED(status));
  // Nothing of the stalled creator can be found; a second creator needs no guess about it.
  auto p = Producer::create(ch.name(), kConfig);
  kill(stalled, SIGCONT);
  REQUIRE(eventually([&] { return outcome->load() != 0; }));
  CHECK(outcome->load() == 2);
  auto r = Reader::attach(ch.name());
  int corrupt = 0;
  int read = 0;
  for (int i = 0; i < 200; ++i) {
    publish_pattern(p);
    auto f = r.try_read();
    if (!f) continue;
    ++read;
    if (!test::check_pattern(f->data(), f->size(), f->sequence())) ++corrupt;
  }
  CHECK(read > 100);
  CHECK(corrupt == 0);
  kill(stalled, SIGKILL);
  wait_exit(stalled);
}

TEST_CASE("removal racing a takeover never removes the live channel's name") {
  ScopedChannel ch("rmrace");
  Shared<std::atomic<int>> stop;
  Shared<std::atomic<std::uint64_t>> removed;
  int lost = 0;
  for (int round = 0; round < 40 && lost == 0; ++round) {
    // A stale channel: its producer died.
    const pid_t dead = spawn([&] {
      auto p = Producer::create(ch.name(), kConfig);
      publish_pattern(p);
      kill(getpid(), SIGKILL);
    });
    wait_exit(dead);
    stop->store(0);
    const pid_t remover = spawn([&] {
      while (stop->load() == 0) {
        try {
          if (remove_channel(ch.name(), false)) removed->fetch_add(1);
        } catch (const Error&) {
          // in use (correct while our producer lives), or not found
        }
      }
      return 0;
    });
    std::this_thread::sleep_for(std::chrono::microseconds(100 * (round % 10)));
    std::optional<Producer> p;
    while (!p) {
      try {
        p.emplace(Producer::create(ch.name(), kConfig));
      } catch (const Error& e) {
        REQUIRE(e.code() == Errc::channel_busy);  // the remover holds the repair lock
      }
    }
    // From here on the channel is live: no remover may take its name away.
    for (int i = 0; i < 20; ++i) {
      publish_pattern(*p);
      std::this_thread::sleep_for(200us);
    }
    stop->store(1);
    CHECK(wait_exit(remover) == 0);
    if (!named(ch.name())) ++lost;
    p.reset();
  }
  CHECK(lost == 0);
}

#if defined(RINGDUMP_PATH)
TEST_CASE("ringdump gc racing producers that start and stop never takes a live channel's frames") {
  ScopedChannel ch("gcrace");
  Shared<std::atomic<int>> stop;
  const pid_t gc = spawn([&] {
    while (stop->load() == 0) {
      const pid_t pid = fork();
      if (pid == 0) {
        const int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl(RINGDUMP_PATH, "ringdump", "gc", ch.name().c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      waitpid(pid, nullptr, 0);
    }
    return 0;
  });
  int failures = 0;
  int rounds = 0;
  const auto deadline = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < deadline) {
    ++rounds;
    try {
      auto p = Producer::create(ch.name(), kConfig);
      publish_pattern(p);
      auto r = Reader::attach(ch.name());
      publish_pattern(p);
      auto f = r.read(1s);
      if (!f || !test::check_pattern(f->data(), f->size(), f->sequence())) ++failures;
    } catch (const Error& e) {
      // gc may remove the channel between create and attach only if it was dead; it is not.
      INFO(e.what());
      ++failures;
    }
  }
  stop->store(1);
  wait_exit(gc);
  MESSAGE(rounds << " create/attach rounds against a gc loop");
  CHECK(failures == 0);
}
#endif

TEST_CASE("too little /dev/shm is a clear error at create, and nothing is left behind") {
  if (geteuid() != 0) {
    MESSAGE("skipped: needs root (a private mount namespace with a small tmpfs on /dev/shm)");
    return;
  }
  Shared<std::array<char, 1024>> message;
  Shared<std::atomic<int>> code;
  const pid_t child = spawn([&] {
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) return 77;
    try {
      ChannelConfig big = kConfig;
      big.frame_bytes = 1 << 20;  // 4 MiB of frames on a 1 MiB /dev/shm
      auto p = Producer::create("small-shm", big);
      return 10;
    } catch (const Error& e) {
      std::snprintf(message->data(), message->size(), "%s", e.what());
      code->store(static_cast<int>(e.code()));
    }
    // Nothing left behind, and a channel that fits still works (its pages are all there).
    const int entries = [] {
      int n = 0;
      for (const auto& name : list_channels()) n += name.size() > 0 ? 1 : 0;
      return n;
    }();
    if (entries != 0) return 11;
    auto p = Producer::create("small-shm", kConfig);
    auto r = Reader::attach("small-shm");
    publish_pattern(p);
    auto f = r.try_read();
    if (!f || !test::check_pattern(f->data(), f->size(), f->sequence())) return 12;
    return 0;
  });
  const int rc = wait_exit(child);
  if (rc == 77) {
    MESSAGE("skipped: cannot make a private mount namespace here");
    return;
  }
  CHECK(rc == 0);
  const std::string m = message->data();
  INFO(m);
  CHECK(code->load() == static_cast<int>(Errc::no_space));
  CHECK(m.find("small-shm") != std::string::npos);
  CHECK(m.find("bytes free") != std::string::npos);
  CHECK(m.find("--shm-size") != std::string::npos);
}

TEST_CASE("a reader that dies asleep in read() leaves no waiter behind once reaped") {
  ScopedChannel ch("waiter");
  auto p = Producer::create(ch.name(), kConfig);
  for (int i = 0; i < 3; ++i) {
    Shared<std::atomic<int>> attached;
    const pid_t sleeper = spawn([&] {
      auto r = Reader::attach(ch.name());
      attached->store(1);
      for (;;) (void)r.read(10s);  // asleep in the futex wait
    });
    REQUIRE(eventually([&] { return attached->load() == 1; }));
    REQUIRE(eventually([&] { return inspect(ch.name()).producer.waiters == 1; }));
    kill(sleeper, SIGKILL);
    wait_exit(sleeper);
    CHECK(eventually([&] { return p.reap_dead_readers() == 1; }));
  }
  const Snapshot s = inspect(ch.name());
  CHECK(s.readers.empty());
  CHECK(s.producer.waiters == 0);
}

TEST_CASE("producer_gone is reported once per ended epoch, however it was noticed") {
  ScopedChannel ch("goneonce");
  Shared<std::atomic<int>> phase;
  const pid_t first = spawn([&] {
    auto p = Producer::create(ch.name(), kConfig);
    publish_pattern(p);
    phase->store(1);
    for (;;) std::this_thread::sleep_for(1s);
  });
  REQUIRE(eventually([&] { return phase->load() == 1; }));
  auto r = Reader::attach(ch.name(), {.producer_probe = std::chrono::milliseconds(5)});
  (void)r.try_read();
  kill(first, SIGKILL);
  wait_exit(first);
  int gone = 0;
  // The probe notices the death while we wait.
  for (int i = 0; i < 50 && gone == 0; ++i) {
    if (r.read(100ms).status() == Status::producer_gone) ++gone;
  }
  REQUIRE(gone == 1);
  auto p2 = Producer::create(ch.name(), kConfig);  // takeover: the epoch change is the same end
  int fresh = 0;
  for (int i = 0; i < 20; ++i) {
    publish_pattern(p2);
    auto f = r.read(100ms);
    if (f.status() == Status::producer_gone) ++gone;
    if (f) ++fresh;
  }
  CHECK(gone == 1);
  CHECK(fresh > 0);
}

TEST_CASE("a Frame inherited by a fork child is not held there and shows no buffer") {
  ScopedChannel ch("forkframe");
  auto p = Producer::create(ch.name(), kConfig);
  auto r = Reader::attach(ch.name());
  publish_pattern(p);
  auto f = r.try_read();
  REQUIRE(f);
  REQUIRE(f->held());
  const pid_t child = spawn([&] {
    if (f->held()) return 10;
    if (f->data() != nullptr) return 11;
    return 0;
  });
  CHECK(wait_exit(child) == 0);
  CHECK(f->held());
  CHECK(f->data() != nullptr);
}

TEST_CASE("hostile robust-list links in a held lease: the lease is abandoned, never followed") {
  ScopedChannel ch("hostile");
  auto p = Producer::create(ch.name(), kConfig);
  const pid_t child = spawn([&] {
    {
      auto r = Reader::attach(ch.name());
      // Scribble over the entry's mutex links (bytes 24..39 of pthread_mutex_t on x86-64 and
      // aarch64 glibc: __list.__prev, __list.__next) through a second mapping of the object.
      const int fd = open(object_path(ch.name()).c_str(), O_RDWR);
      if (fd < 0) return 10;
      void* base = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) return 11;
      const std::size_t entry = 512 + 512 + 512 * r.index();  // header, producer block, entries
      std::memset(static_cast<unsigned char*>(base) + entry + 24, 0x41, 16);
      munmap(base, 1 << 16);
      close(fd);
    }  // detach: glibc would follow the links (SIGSEGV)
    return 0;
  });
  CHECK(wait_exit(child) == 0);
  // The abandoned lease was the child's; its death frees it for the next reader.
  CHECK(eventually([&] {
    (void)p.reap_dead_readers();
    return inspect(ch.name()).readers.empty();
  }));
  auto r = Reader::attach(ch.name());
  publish_pattern(p);
  CHECK(r.try_read());
}

TEST_CASE("an object that is short or not backed by memory is refused before it is touched") {
  ScopedChannel source("sparse-src");
  ChannelConfig cfg = kConfig;
  cfg.slots = 64;  // a control segment of several pages
  auto p = Producer::create(source.name(), cfg);
  const std::vector<unsigned char> real = file_bytes(object_path(source.name()));
  REQUIRE(real.size() > 8192);
  ScopedChannel target("sparse");
  const std::string path = object_path(target.name());
  std::vector<unsigned char> header(real.begin(), real.begin() + 4096);
  // The copy names itself after its new object, or the name check would refuse it first.
  char* name = reinterpret_cast<char*>(header.data()) + 208;  // SegmentHeader::name
  std::memset(name, 0, 201);
  std::memcpy(name, target.name().data(), target.name().size());
  SUBCASE("sparse: the header page written, the rest a hole") {
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(pwrite(fd, header.data(), header.size(), 0) == static_cast<ssize_t>(header.size()));
    REQUIRE(ftruncate(fd, static_cast<off_t>(real.size())) == 0);
    close(fd);
    try {
      (void)inspect(target.name());
      FAIL("a sparse object was accepted");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == Errc::corrupt_segment);
      CHECK(std::string(e.what()).find("backed") != std::string::npos);
    }
    CHECK_THROWS_AS(Reader::attach(target.name()), Error);
  }
  SUBCASE("short: only the header") {
    const int fd = open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY, 0600);
    REQUIRE(fd >= 0);
    REQUIRE(write(fd, header.data(), header.size()) == static_cast<ssize_t>(header.size()));
    close(fd);
    try {
      (void)inspect(target.name());
      FAIL("a short object was accepted");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == Errc::corrupt_segment);
    }
  }
}
