// liveness_test.cpp — producer and readers in separate processes: death, reaping, takeover,
// SIGSTOP, fork, and cleanup.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "common/naming.hpp"
#include "ipcring/ipcring.hpp"
#include "lease/lease.hpp"
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

std::uint64_t publish_tagged(Producer& p, const char* tag) {
  auto loan = p.loan();
  REQUIRE(loan);
  test::fill_pattern(loan->data(), 1024, loan->sequence());
  loan->set_metadata(std::as_bytes(std::span(tag, std::strlen(tag))));
  return p.publish(std::move(*loan), 1024);
}

std::uint64_t mask_of(const std::string& ch, std::uint32_t slot) {
  return inspect(ch).slots.at(slot).reader_mask;
}

struct ReaderReport {
  std::atomic<int> stage{0};
  std::atomic<std::uint32_t> slot{0};
  std::atomic<std::uint64_t> sequence{0};
  std::atomic<int> go{0};
};

// A reader child that takes the newest frame, reports it, then waits for `go` and either
// releases (go == 1) or hangs on to it until killed.
pid_t reader_taking_newest(const std::string& ch, ReaderReport* rep) {
  return spawn([ch, rep] {
    auto r = Reader::attach(ch);
    auto f = r.read(5s);
    if (!f) return 10;
    rep->slot = f->slot();
    rep->sequence = f->sequence();
    rep->stage = 1;
    while (rep->go.load() == 0) std::this_thread::sleep_for(1ms);
    if (rep->go.load() == 1) f->release();
    rep->stage = 2;
    for (;;) std::this_thread::sleep_for(1s);  // stays attached until killed
  });
}

}  // namespace

TEST_CASE("the seed lesson: a reader killed holding 'bev' pins it only until reaped") {
  ScopedChannel ch("seed");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 4096};
  cfg.reap_period = std::chrono::hours(1);  // no periodic reap: the test reaps explicitly
  auto p = Producer::create(ch, cfg);
  publish_tagged(p, "voxels");
  const std::uint64_t bev_seq = publish_tagged(p, "bev");

  Shared<ReaderReport> a, b;
  const pid_t pa = reader_taking_newest(ch.name(), &*a);
  const pid_t pb = reader_taking_newest(ch.name(), &*b);
  REQUIRE(eventually([&] { return a->stage == 1 && b->stage == 1; }));
  CHECK(a->sequence == bev_seq);
  CHECK(b->sequence == bev_seq);
  const std::uint32_t bev = a->slot;
  CHECK(std::popcount(mask_of(ch.name(), bev)) == 2);

  a->go = 1;  // reader A releases 'bev'
  REQUIRE(eventually([&] { return a->stage == 2; }));
  CHECK(std::popcount(mask_of(ch.name(), bev)) == 1);

  kill(pb, SIGKILL);  // reader B dies holding 'bev'
  CHECK(wait_exit(pb) == 128 + SIGKILL);
  {
    auto snap = inspect(ch);
    bool found_dead = false;
    for (const auto& r : snap.readers) {
      if (!r.alive) {
        found_dead = true;
        CHECK(r.held_slots == std::vector<std::uint32_t>{bev});
      }
    }
    CHECK(found_dead);
  }
  // The producer keeps publishing through the other slots; 'bev' stays out of its reach.
  for (int i = 0; i < 50; ++i) {
    auto loan = p.loan();
    REQUIRE(loan);
    CHECK(loan->slot() != bev);
    p.publish(std::move(*loan), 16);
  }
  CHECK(mask_of(ch.name(), bev) != 0);
  CHECK(p.reap_dead_readers() == 1);
  CHECK(mask_of(ch.name(), bev) == 0);
  bool reused = false;
  for (int i = 0; i < 8 && !reused; ++i) {
    auto loan = p.loan();
    REQUIRE(loan);
    reused = loan->slot() == bev;
    p.publish(std::move(*loan), 16);
  }
  CHECK(reused);
  kill(pa, SIGKILL);
  wait_exit(pa);
}

TEST_CASE("loan reaps by itself when no slot is free") {
  ScopedChannel ch("autoreap");
  ChannelConfig cfg{.slots = 2, .max_readers = 1, .max_held = 1, .frame_bytes = 1024};
  cfg.reap_period = std::chrono::hours(1);
  auto p = Producer::create(ch, cfg);
  publish_tagged(p, "a");
  Shared<ReaderReport> rep;
  const pid_t pid = reader_taking_newest(ch.name(), &*rep);
  REQUIRE(eventually([&] { return rep->stage == 1; }));
  publish_tagged(p, "b");  // the other slot; the reader pins the first one
  kill(pid, SIGKILL);
  wait_exit(pid);
  // Slot of "b" is the newest; the only other slot is pinned by a dead reader: loan must reap.
  auto loan = p.loan();
  CHECK(loan);
  CHECK(inspect(ch).producer.readers_reaped == 1);
}

TEST_CASE("a SIGSTOPped reader pins at most max_held slots") {
  ScopedChannel ch("sigstop");
  ChannelConfig cfg{.slots = 6, .max_readers = 2, .max_held = 2, .frame_bytes = 1024};
  auto p = Producer::create(ch, cfg);
  Shared<std::atomic<int>> holding;
  const pid_t pid = spawn([&] {
    auto r = Reader::attach(ch.name(), {.policy = ReadPolicy::sequential});
    std::vector<Frame> frames;
    for (;;) {
      auto f = r.read(100ms);
      if (f) frames.push_back(std::move(*f));
      if (frames.size() == 2) holding->store(1);
      if (f.status() == Status::max_held) std::this_thread::sleep_for(1ms);
    }
  });
  REQUIRE(eventually([&] {
    publish_tagged(p, "x");
    return holding->load() == 1;
  }));
  kill(pid, SIGSTOP);
  for (int i = 0; i < 500; ++i) {
    auto loan = p.loan();
    REQUIRE(loan);
    p.publish(std::move(*loan), 8);
  }
  auto snap = inspect(ch);
  REQUIRE(snap.readers.size() == 1);
  CHECK(snap.readers[0].alive);  // stopped, not dead
  CHECK(snap.readers[0].held_slots.size() == 2);
  CHECK(p.reap_dead_readers() == 0);
  kill(pid, SIGKILL);
  kill(pid, SIGCONT);
  wait_exit(pid);
}

TEST_CASE("producer SIGKILLed: waiting readers get producer_gone, a new producer takes over") {
  ScopedChannel ch("takeover");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  Shared<std::atomic<int>> phase;
  Shared<std::atomic<std::uint64_t>> first_epoch_frames;
  const pid_t producer = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    phase->store(1);
    for (;;) {
      publish_tagged(p, "old");
      std::this_thread::sleep_for(1ms);
      if (phase->load() == 2) break;
    }
    phase->store(3);
    for (;;) std::this_thread::sleep_for(1s);  // wait to be killed
  });
  REQUIRE(eventually([&] { return phase->load() == 1; }));
  Shared<std::atomic<int>> reader_result;
  Shared<std::atomic<std::uint64_t>> gone_after_ms;
  const pid_t reader = spawn([&] {
    auto r = Reader::attach(ch.name());
    std::uint64_t epoch1 = r.epoch();
    // Read the first epoch's frames until the producer stops.
    for (int i = 0; i < 5; ++i) {
      auto f = r.read(2s);
      if (!f) return 20;
      if (f->epoch() != epoch1) return 21;
      first_epoch_frames->fetch_add(1);
    }
    // Now block: the producer is killed while we wait.
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
      auto f = r.read(3s);
      if (f.status() == Status::producer_gone) break;
      if (!f) return 22;  // timeout: death not noticed in time
    }
    gone_after_ms->store(static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count()));
    // Later reads wait for a takeover (no busy producer_gone loop), then read on in the new
    // epoch without re-attaching.
    int fresh = 0;
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    while (fresh < 4 && std::chrono::steady_clock::now() < deadline) {
      auto f = r.read(1s);
      if (f.status() == Status::producer_gone || f.status() == Status::timeout) continue;
      if (!f) return 23;
      if (f->epoch() == epoch1) return 24;  // an old-epoch descriptor was used
      if (!test::check_pattern(f->data(), f->size(), f->sequence())) return 25;
      ++fresh;
    }
    return fresh == 4 ? 0 : 26;
  });
  REQUIRE(eventually([&] { return first_epoch_frames->load() == 5; }));
  phase->store(2);
  REQUIRE(eventually([&] { return phase->load() == 3; }));
  std::this_thread::sleep_for(50ms);  // the reader is now blocked in read()
  const auto killed_at = std::chrono::steady_clock::now();
  kill(producer, SIGKILL);
  CHECK(wait_exit(producer) == 128 + SIGKILL);
  // Nobody serves the channel now: its names are stale.
  CHECK(inspect_name(ch.name()).state == NameState::stale);
  // The reader must notice within the probe interval (100 ms by default; allow for load).
  REQUIRE(eventually([&] { return gone_after_ms->load() != 0; }, 3s));
  const auto noticed = std::chrono::steady_clock::now() - killed_at;
  CHECK(noticed < 1s);
  auto p2 = Producer::create(ch, cfg);  // a new producer, with fresh memory and the next epoch
  CHECK(p2.epoch() == 2);
  for (int i = 0; i < 200 && reader_result->load() == 0; ++i) {
    publish_tagged(p2, "new");
    std::this_thread::sleep_for(2ms);
  }
  CHECK(wait_exit(reader) == 0);
}

TEST_CASE("a second producer is refused with the live producer's pid") {
  ScopedChannel ch("second");
  ChannelConfig cfg{.slots = 4, .max_readers = 1, .max_held = 1, .frame_bytes = 1024};
  auto p = Producer::create(ch, cfg);
  Shared<std::atomic<int>> code;
  const pid_t pid = spawn([&] {
    try {
      auto p2 = Producer::create(ch.name(), cfg);
      return 1;
    } catch (const Error& e) {
      const std::string msg = e.what();
      if (e.code() != Errc::producer_exists) return 2;
      if (msg.find("pid " + std::to_string(getppid())) == std::string::npos) return 3;
      return 0;
    }
  });
  CHECK(wait_exit(pid) == 0);
}

TEST_CASE("a new producer may change the geometry: readers follow it there") {
  ScopedChannel ch("geometry");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  const pid_t producer = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    for (;;) std::this_thread::sleep_for(1s);
  });
  REQUIRE(eventually([&] {
    try {
      return inspect(ch).producer.alive;
    } catch (const Error&) {
      return false;
    }
  }));
  auto r = Reader::attach(ch, {.producer_probe = std::chrono::milliseconds(5)});
  kill(producer, SIGKILL);
  wait_exit(producer);
  ChannelConfig bigger = cfg;
  bigger.frame_bytes = 2048;
  bigger.max_readers = 3;
  auto p = Producer::create(ch, bigger);  // fresh memory: no old geometry to keep
  CHECK(inspect(ch).frame_bytes == 2048);
  int read = 0;
  int gone = 0;
  for (int i = 0; i < 200 && read == 0; ++i) {
    auto l = p.loan();
    REQUIRE(l);
    p.publish(std::move(*l), 2048);
    auto f = r.read(std::chrono::milliseconds(10));
    if (f.status() == Status::producer_gone) ++gone;
    if (f && f->size() == 2048) ++read;
  }
  CHECK(read == 1);
  CHECK(gone == 1);
}

TEST_CASE("fork: a child that inherited a Producer or Reader gets errors, never touches slots") {
  ScopedChannel ch("fork");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  auto p = Producer::create(ch, cfg);
  auto r = Reader::attach(ch);
  publish_tagged(p, "x");
  auto f = r.try_read();
  REQUIRE(f);
  const std::uint32_t slot = f->slot();
  const pid_t pid = spawn([&] {
    if (r.try_read().status() != Status::forked) return 1;
    if (p.loan().status() != Status::forked) return 2;
    try {
      Loan empty;
      p.publish(std::move(empty), 0);
      return 3;
    } catch (const Error& e) {
      if (e.code() != Errc::invalid_argument) return 4;
    }
    f->release();  // must not clear the parent's bit
    // A fresh reader in the child works.
    auto mine = Reader::attach(ch.name());
    return 0;
    // (destructors of p and r run at _exit? no: spawn() calls _exit, but the child's copies of
    // p/r were made in the parent; the lambda returns before they are destroyed)
  });
  CHECK(wait_exit(pid) == 0);
  CHECK(mask_of(ch.name(), slot) == (1u << r.index()));  // still held by the parent
  CHECK(f->held());
  CHECK(inspect(ch).producer.alive);
}

TEST_CASE("a child process that inherited objects and then exits leaves the channel intact") {
  ScopedChannel ch("forkexit");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  std::optional<Producer> p(Producer::create(ch, cfg));
  std::optional<Reader> r(Reader::attach(ch));
  const pid_t pid = fork();
  if (pid == 0) {
    r.reset();  // destructors in the child must not detach the parent's reader ...
    p.reset();  // ... nor close and unlink the parent's channel
    _exit(0);
  }
  CHECK(wait_exit(pid) == 0);
  auto snap = inspect(ch);
  CHECK(snap.producer.alive);
  CHECK_FALSE(snap.producer.closed);
  REQUIRE(snap.readers.size() == 1);
  CHECK(snap.readers[0].alive);
}

TEST_CASE("a channel whose processes all died can be removed; a live one is refused") {
  ScopedChannel ch("cleanup");
  ChannelConfig cfg{.slots = 4, .max_readers = 2, .max_held = 1, .frame_bytes = 1024};
  Shared<std::atomic<int>> ready;
  const pid_t producer = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    publish_tagged(p, "x");
    ready->fetch_add(1);
    for (;;) std::this_thread::sleep_for(1s);
  });
  REQUIRE(eventually([&] { return ready->load() == 1; }));
  const pid_t reader = spawn([&] {
    auto r = Reader::attach(ch.name());
    auto f = r.read(2s);
    ready->fetch_add(1);
    for (;;) std::this_thread::sleep_for(1s);
  });
  REQUIRE(eventually([&] { return ready->load() == 2; }));
  try {
    remove_channel(ch.name());
    FAIL("removing a live channel must be refused");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::channel_busy);
    CHECK(std::string(e.what()).find(std::to_string(producer)) != std::string::npos);
  }
  kill(producer, SIGKILL);
  kill(reader, SIGKILL);
  wait_exit(producer);
  wait_exit(reader);
  // Its producer dead, the channel's names are stale; its memory went with its last process.
  CHECK(inspect_name(ch.name()).state == NameState::stale);
  CHECK_THROWS_AS(inspect(ch), Error);
  CHECK(remove_channel(ch.name()));
  CHECK(access(lock_path(ch.name()).c_str(), F_OK) != 0);
  CHECK(access(socket_path(ch.name()).c_str(), F_OK) != 0);
  CHECK_FALSE(remove_channel(ch.name()));
}

TEST_CASE("robust mutexes work on this platform (the self-test run at create)") {
  CHECK_NOTHROW(detail::self_test_robust_mutexes());
}
