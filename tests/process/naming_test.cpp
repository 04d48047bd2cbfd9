// naming_test.cpp — channel names and liveness bookkeeping that must hold with real processes:
// a stalled creator, removal racing a restart, gc racing creation, a small /dev/shm, waiters that
// die asleep, producer_gone once per ended producer, Frames inherited by fork, hostile bytes in a
// held lease, and memory with holes handed out by a hostile producer.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
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

#include "fake_producer.hpp"
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

const ChannelConfig kConfig{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 4096};

std::uint64_t publish_pattern(Producer& p, std::uint64_t offset = 0) {
  auto l = p.loan(1s);
  REQUIRE(l);
  test::fill_pattern(l->data(), kConfig.frame_bytes, l->sequence() + offset);
  return p.publish(std::move(*l), kConfig.frame_bytes);
}

bool named(const std::string& ch) {
  return inspect_name(ch).state == NameState::live;
}

}  // namespace

TEST_CASE(
    "a stalled creator holds its name; killed, the name is free at once, nothing left behind") {
  ScopedChannel ch("stall");
  const pid_t stalled = spawn([&] {
    // Stops itself right after making its memory, before the memory is complete and handed out.
    setenv("IPCRING_FAULT", "create.made:1:stop", 1);  // NOLINT(concurrency-mt-unsafe): one thread
    try {
      auto p = Producer::create(ch.name(), kConfig);
      for (;;) publish_pattern(p, 1'000'000);
    } catch (const Error&) {
    }
    return 0;
  });
  int status = 0;
  REQUIRE(waitpid(stalled, &status, WUNTRACED) == stalled);
  REQUIRE(WIFSTOPPED(status));
  // The stalled creator is the producer (it holds the name's lock): a second one is refused,
  // naming it; a reader finds nobody serving yet and waits.
  try {
    auto p = Producer::create(ch.name(), kConfig);
    FAIL("a second producer was accepted");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == Errc::producer_exists);
    CHECK(std::string(e.what()).find("pid " + std::to_string(stalled)) != std::string::npos);
  }
  CHECK_THROWS_AS(Reader::attach(ch.name()), Error);
  kill(stalled, SIGKILL);
  wait_exit(stalled);
  // Its death is a kernel fact: the lock is free, and its unfinished memory is gone with it.
  auto p = Producer::create(ch.name(), kConfig);
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
}

TEST_CASE("removal racing a restart never removes the live producer's names") {
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
        INFO(e.what());
        REQUIRE(e.code() == Errc::producer_exists);  // the remover held the stale name's lock
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

TEST_CASE("a small /dev/shm does not limit a channel: only its names live there") {
  if (geteuid() != 0) {
    MESSAGE("skipped: needs root (a private mount namespace with a small tmpfs on /dev/shm)");
    return;
  }
  const pid_t child = spawn([&] {
    if (unshare(CLONE_NEWNS) != 0) return 77;
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
    if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) return 77;
    // 4 MiB of frames with a 1 MiB /dev/shm (Docker's default is 64 MiB): the memory is sealed
    // memfds, reserved in full at create, and /dev/shm holds a lock file and a socket.
    ChannelConfig big = kConfig;
    big.frame_bytes = 1 << 20;
    auto p = Producer::create("small-shm", big);
    auto r = Reader::attach("small-shm");
    for (int i = 0; i < 8; ++i) {
      publish_pattern(p);
      auto f = r.try_read();
      if (!f || !test::check_pattern(f->data(), f->size(), f->sequence())) return 12;
    }
    struct statvfs vfs {};
    if (statvfs("/dev/shm", &vfs) != 0) return 13;
    if ((vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize > (64U << 10)) return 14;
    return 0;
  });
  const int rc = wait_exit(child);
  if (rc == 77) {
    MESSAGE("skipped: cannot make a private mount namespace here");
    return;
  }
  CHECK(rc == 0);
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
  auto p2 = Producer::create(ch.name(), kConfig);  // a new producer: the reader follows it
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
      const int fd = test::control_fd_of(ch.name());
      if (fd < 0) return 10;
      void* base = mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) return 11;
      const std::size_t entry = 512 + 512 + 512 * r.index();  // header, producer block, entries
      std::memset(static_cast<unsigned char*>(base) + entry + 24, 0x41, 16);
      munmap(base, 8192);
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

TEST_CASE("memory that is short, has a hole or is not sealed is refused before it is touched") {
  ScopedChannel source("sparse-src");
  ChannelConfig cfg = kConfig;
  cfg.slots = 64;  // a control segment of several pages
  auto p = Producer::create(source.name(), cfg);
  const int real_fd = test::control_fd_of(source.name());
  struct stat real_st {};
  REQUIRE(fstat(real_fd, &real_st) == 0);
  std::vector<unsigned char> real(static_cast<std::size_t>(real_st.st_size));
  REQUIRE(pread(real_fd, real.data(), real.size(), 0) == static_cast<ssize_t>(real.size()));
  close(real_fd);
  REQUIRE(real.size() > 8192);
  const std::uint64_t frames = [&] {
    detail::SegmentHeader h;
    std::memcpy(static_cast<void*>(&h), real.data(), sizeof h);
    return h.frames_segment_bytes;
  }();
  ScopedChannel target("sparse");
  test::FakeProducer fake(target.name());
  std::vector<unsigned char> renamed = real;
  // The copy names itself after its new channel, or the name check would refuse it first.
  char* name = reinterpret_cast<char*>(renamed.data()) + 208;  // SegmentHeader::name
  std::memset(name, 0, 201);
  std::memcpy(name, target.name().data(), target.name().size());
  constexpr unsigned kResize = F_SEAL_SHRINK | F_SEAL_GROW;
  auto frames_fd = [&] {
    return test::memfd_with(nullptr, frames, kResize | F_SEAL_FUTURE_WRITE, true);
  };
  detail::HandoutMessage m{};
  m.control_bytes = renamed.size();
  m.frames_bytes = frames;
  auto refused = [&](const char* what) {
    try {
      (void)inspect(target.name());
      FAIL("accepted: " << what);
    } catch (const Error& e) {
      INFO(what << ": " << e.what());
      CHECK(e.code() == Errc::corrupt_segment);
      CHECK(std::string(e.what()).find(target.name()) != std::string::npos);
      return std::string(e.what());
    }
    return std::string();
  };
  SUBCASE("well-formed: accepted (the cases below differ from it in one thing each)") {
    fake.set(m, {test::memfd_with(renamed.data(), renamed.size(), kResize), frames_fd()});
    CHECK(inspect(target.name()).slot_count == 64);
  }
  SUBCASE("a hole after the header page, and a page preallocated past the end") {
    // st_blocks * 512 == st_size despite the hole: the extra page beyond the end counts there.
    // A memfd's hole cannot SIGBUS (the kernel's internal shmem mount has no size limit; it is
    // filled on first touch), so this is read as zeros: never a crash.
    const int fd = memfd_create("hole", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    REQUIRE(ftruncate(fd, static_cast<off_t>(renamed.size())) == 0);
    REQUIRE(pwrite(fd, renamed.data(), 4096, 0) == 4096);
    const auto extra = static_cast<off_t>(renamed.size() - 4096);
    REQUIRE(fallocate(fd, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(renamed.size()), extra) == 0);
    REQUIRE(fcntl(fd, F_ADD_SEALS, kResize) == 0);
    fake.set(m, {fd, frames_fd()});
    try {
      (void)inspect(target.name());
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == Errc::corrupt_segment);
    }
  }
  SUBCASE("a file of a size-limited tmpfs, not a memfd") {
    char path[] = "/dev/shm/ipcring-test-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    unlink(path);
    REQUIRE(pwrite(fd, renamed.data(), renamed.size(), 0) == static_cast<ssize_t>(renamed.size()));
    fake.set(m, {fd, frames_fd()});
    CHECK(refused("tmpfs file").find("sealed") != std::string::npos);
  }
  SUBCASE("short: only the header, announced as such") {
    detail::HandoutMessage short_m = m;
    short_m.control_bytes = 4096;
    fake.set(short_m, {test::memfd_with(renamed.data(), 4096, kResize), frames_fd()});
    refused("short");
  }
  SUBCASE("announced one size, sent another") {
    fake.set(m, {test::memfd_with(renamed.data(), 4096, kResize), frames_fd()});
    CHECK(refused("size").find("announced") != std::string::npos);
  }
  SUBCASE("not sealed against resizing") {
    fake.set(m, {test::memfd_with(renamed.data(), renamed.size(), 0), frames_fd()});
    CHECK(refused("unsealed").find("sealed") != std::string::npos);
  }
  SUBCASE("frames that readers could write") {
    fake.set(m, {test::memfd_with(renamed.data(), renamed.size(), kResize),
                 test::memfd_with(nullptr, frames, kResize, false)});
    refused("writable frames");
  }
  SUBCASE("a FIFO instead of memory") {
    int pipe_fds[2];
    REQUIRE(pipe2(pipe_fds, O_CLOEXEC) == 0);
    close(pipe_fds[1]);
    fake.set(m, {pipe_fds[0], frames_fd()});
    CHECK(refused("fifo").find("not a memory file") != std::string::npos);
  }
  SUBCASE("too many descriptors") {
    m.descriptors = 3;
    fake.set(m,
             {test::memfd_with(renamed.data(), renamed.size(), kResize), frames_fd(), frames_fd()},
             true);
    refused("extra descriptors");
  }
  SUBCASE("a producer that never answers delays a reader by the attach timeout only") {
    fake.set_silent(true);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      (void)Reader::attach(target.name());
      FAIL("attached to a silent producer");
    } catch (const Error& e) {
      INFO(e.what());
      CHECK(e.code() == Errc::channel_busy);
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
}
