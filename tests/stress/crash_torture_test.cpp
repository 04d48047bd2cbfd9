// crash_torture_test.cpp — readers SIGKILLed at random points, many times over.
//
// A producer process publishes sequence-patterned frames as fast as it can. The test keeps up to
// max_readers reader processes alive; each attaches, reads frames, holds them for random times
// (verifying the pattern when it gets a frame and again before releasing it), and is SIGKILLed at
// a random moment — often inside claim or release, since that is most of what it does. Some exit
// normally. At the end every reader is gone, the producer reaps, and then:
//   * no reader ever saw a held frame change (a shared counter of corrupt frames stays 0);
//   * the producer never failed a loan (slots >= max_readers * max_held + 2);
//   * every slot's reader mask is 0 and the reader table is empty.
// IPCRING_TORTURE_READERS overrides the number of reader processes (default 1000).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
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

struct Board {
  std::atomic<int> producer_ready{0};
  std::atomic<int> finish{0};
  std::atomic<std::uint64_t> published{0};
  std::atomic<std::uint64_t> loan_failures{0};
  std::atomic<std::uint64_t> frames_verified{0};
  std::atomic<std::uint64_t> corrupt{0};
  std::atomic<std::uint64_t> attach_failures{0};
  std::atomic<std::uint64_t> final_masks{~0ULL};
  std::atomic<std::uint64_t> final_readers{~0ULL};
  std::atomic<std::uint64_t> final_reaped{0};
  std::atomic<std::uint64_t> final_problems{~0ULL};
  std::atomic<std::uint64_t> killed_while_reading{0};
  static constexpr int kMaxReaders = 1 << 16;
  std::atomic<std::uint8_t> attached[kMaxReaders];  // reader i has its lease and is reading
};

int reader_main(const std::string& ch, Board* board, int id, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const ReadPolicy policy = (rng() & 1) ? ReadPolicy::latest : ReadPolicy::sequential;
  std::optional<Reader> r;
  for (int tries = 0; !r; ++tries) {
    try {
      r.emplace(Reader::attach(ch, {.policy = policy}));
    } catch (const Error& e) {
      // The table can be full of dead readers not yet reaped; attach reaps, but a dying reader's
      // lease is released by the kernel a moment after its death.
      if (e.code() != Errc::too_many_readers || tries > 2000) {
        board->attach_failures.fetch_add(1);
        return 3;
      }
      std::this_thread::sleep_for(1ms);
    }
  }
  board->attached[id].store(1);
  std::vector<Frame> held;
  for (;;) {
    auto f = r->read(50ms);
    if (f) {
      if (!test::check_pattern(f->data(), f->size(), f->sequence())) board->corrupt.fetch_add(1);
      held.push_back(std::move(*f));
    }
    // Hold for a random while, then release a random frame after re-verifying it.
    if (!held.empty() && (rng() % 4 == 0 || held.size() == r->max_held())) {
      if (rng() % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
      const std::size_t k = rng() % held.size();
      Frame& h = held[k];
      if (!test::check_pattern(h.data(), h.size(), h.sequence())) board->corrupt.fetch_add(1);
      board->frames_verified.fetch_add(1, std::memory_order_relaxed);
      h.release();
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
    }
    if (rng() % 5000 == 0) return 0;  // a few leave cleanly
  }
}

}  // namespace

TEST_CASE("crash torture: readers SIGKILLed at random points never break the channel") {
  int total_readers = 1000;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
  if (const char* env = std::getenv("IPCRING_TORTURE_READERS")) total_readers = std::atoi(env);
  ScopedChannel ch("torture");
  ChannelConfig cfg{.slots = 10, .max_readers = 4, .max_held = 2, .frame_bytes = 2048};
  REQUIRE(cfg.loan_never_fails());
  cfg.reap_period = 20ms;
  Shared<Board> board;

  const pid_t producer = spawn([&] {
    auto p = Producer::create(ch.name(), cfg);
    board->producer_ready = 1;
    while (board->finish.load() == 0) {
      auto loan = p.loan();
      if (!loan) {
        board->loan_failures.fetch_add(1);
        continue;
      }
      test::fill_pattern(loan->data(), cfg.frame_bytes, loan->sequence());
      p.publish(std::move(*loan), cfg.frame_bytes);
      board->published.fetch_add(1, std::memory_order_relaxed);
      if ((board->published.load(std::memory_order_relaxed) & 63) == 0) {
        std::this_thread::sleep_for(50us);  // let readers run on 2 cores
      }
    }
    // Every reader is dead now: reap, then report the state of the channel.
    board->final_reaped = p.reap_dead_readers();
    auto snap = inspect(ch.name());
    std::uint64_t masks = 0;
    for (const auto& s : snap.slots) masks |= s.reader_mask;
    board->final_masks = masks;
    board->final_readers = snap.readers.size();
    board->final_problems = snap.problems.size();
    board->finish = 2;
    return 0;
  });
  REQUIRE(eventually([&] { return board->producer_ready.load() == 1; }));

  std::mt19937_64 rng(12345);
  REQUIRE(total_readers < Board::kMaxReaders);
  std::vector<std::pair<pid_t, int>> live;
  int spawned = 0, killed = 0, exited = 0;
  const auto start = std::chrono::steady_clock::now();
  while (spawned < total_readers) {
    while (live.size() < cfg.max_readers && spawned < total_readers) {
      const std::uint64_t seed = rng();
      const int id = spawned;
      live.emplace_back(spawn([&, id, seed] { return reader_main(ch.name(), &*board, id, seed); }),
                        id);
      ++spawned;
    }
    // Pick a victim; once it holds its lease and reads, let it run a random while (0-2 ms: many
    // claims and releases), then SIGKILL it.
    const std::size_t k = rng() % live.size();
    const pid_t victim = live[k].first;  // (not a structured binding: clang 14 cannot capture one)
    const int id = live[k].second;
    eventually([&] { return board->attached[id].load() == 1; }, 2000ms);
    if (board->attached[id].load() == 1) board->killed_while_reading.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    kill(victim, SIGKILL);
    const int code = wait_exit(victim);
    if (code == 128 + SIGKILL) {
      ++killed;
    } else {
      ++exited;
      CHECK_MESSAGE(code == 0, "reader exited with ", code);
    }
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
  }
  for (const auto& [pid, id] : live) {
    kill(pid, SIGKILL);
    wait_exit(pid);
    ++killed;
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  board->finish = 1;
  CHECK(wait_exit(producer) == 0);
  MESSAGE("readers spawned=", spawned, " killed=", killed,
          " (after attaching: ", board->killed_while_reading.load(), ") exited=", exited,
          " frames published=", board->published.load(),
          " verified=", board->frames_verified.load(),
          " reaped at end=", board->final_reaped.load(), " seconds=", secs);
  CHECK(spawned >= total_readers);
  CHECK(board->killed_while_reading.load() >= static_cast<std::uint64_t>(total_readers) * 9 / 10);
  CHECK(board->corrupt.load() == 0);
  CHECK(board->loan_failures.load() == 0);
  CHECK(board->attach_failures.load() == 0);
  CHECK(board->frames_verified.load() > 0);
  CHECK(board->final_masks.load() == 0);
  CHECK(board->final_readers.load() == 0);
  CHECK(board->final_problems.load() == 0);
}
