// thread_stress_test.cpp — many threads over one mapping: a producer thread publishing as fast as
// it can, reader threads of both policies claiming, holding and releasing from several threads
// (frames are released by a thread other than the one that read them half of the time). Run under
// the tsan preset too. IPCRING_STRESS_SECONDS overrides the duration (default 2).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "ipcring/ipcring.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

TEST_CASE("thread stress: claim, release and recycle over one mapping") {
  double seconds = 2.0;
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
  if (const char* env = std::getenv("IPCRING_STRESS_SECONDS")) seconds = std::atof(env);
  ScopedChannel ch("threads");
  ChannelConfig cfg{.slots = 14, .max_readers = 6, .max_held = 2, .frame_bytes = 512};
  REQUIRE(cfg.loan_never_fails());
  auto p = Producer::create(ch, cfg);
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> corrupt{0}, frames{0}, loan_failures{0}, published{0};

  // Frames handed to a releaser thread, so release happens on another thread than read.
  std::mutex handoff_mutex;
  std::deque<Frame> handoff;

  std::vector<std::thread> threads;
  threads.emplace_back([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      auto l = p.loan();
      if (!l) {
        loan_failures.fetch_add(1);
        continue;
      }
      test::fill_pattern(l->data(), cfg.frame_bytes, l->sequence());
      p.publish(std::move(*l), cfg.frame_bytes);
      published.fetch_add(1, std::memory_order_relaxed);
    }
  });
  for (int t = 0; t < 5; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      auto r = Reader::attach(ch, {.policy = t % 2 ? ReadPolicy::sequential : ReadPolicy::latest});
      std::vector<Frame> held;
      while (!stop.load(std::memory_order_relaxed)) {
        auto f = r.read(10ms);
        if (f) {
          if (!test::check_pattern(f->data(), f->size(), f->sequence())) corrupt.fetch_add(1);
          frames.fetch_add(1, std::memory_order_relaxed);
          if (rng() % 2) {
            std::lock_guard lock(handoff_mutex);
            handoff.push_back(std::move(*f));
          } else {
            held.push_back(std::move(*f));
          }
        }
        if (!held.empty() && (rng() % 3 == 0 || held.size() >= 2)) {
          Frame& h = held.front();
          if (!test::check_pattern(h.data(), h.size(), h.sequence())) corrupt.fetch_add(1);
          held.erase(held.begin());
        }
      }
    });
  }
  threads.emplace_back([&] {  // releaser
    while (!stop.load(std::memory_order_relaxed)) {
      std::deque<Frame> batch;
      {
        std::lock_guard lock(handoff_mutex);
        batch.swap(handoff);
      }
      for (auto& f : batch) {
        if (!test::check_pattern(f.data(), f.size(), f.sequence())) corrupt.fetch_add(1);
        f.release();
      }
      std::this_thread::sleep_for(100us);
    }
  });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  handoff.clear();
  MESSAGE("published=", published.load(), " frames read=", frames.load());
  CHECK(corrupt.load() == 0);
  CHECK(loan_failures.load() == 0);
  CHECK(frames.load() > 0);
  auto snap = inspect(ch);
  for (const auto& s : snap.slots) CHECK(s.reader_mask == 0);
  CHECK(snap.readers.empty());
  CHECK(snap.problems.empty());
}
