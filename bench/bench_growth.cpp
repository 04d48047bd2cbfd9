// bench_growth.cpp — how ipcring's costs grow, for the growth section of --summary
// (summary_growth.cpp). The two-process latency and throughput against readers, slots and frame
// size are harness benchmarks (bench_ipcring.cpp's Ipcring, registered here under their own
// names); the rest run in one forked child each (the driver never holds a channel):
//
//   growth/latency/sequential/spin/slots:<S>       paced, one spinning reader, 4 KiB, S slots
//   growth/throughput/sequential/spin/slots:<S>    streamed (window 4), one reader, 64 B, S slots
//   growth/throughput/sequential/blocking/readers:<R>   streamed (window 8), 64 B, R readers
//   ipcring/latest/spin/readers:1/bytes:<B>        B = 64 and 64 MiB (the others: bench_ipcring)
//   single/ipcring/channels:<N>   N channels in one process, each with one sequential reader:
//                                 loan, publish, try_read and release of one frame per channel,
//                                 round-robin; ns per frame (ns_per_op)
//   single/ipcring/reap/max_readers:<M>   Producer::reap_dead_readers() after one reader process
//                                 was killed, with the other M - 1 entries held by live readers
//                                 of another process; ns per reap (ns_per_op), median of the
//                                 repetitions. M = 64 exceeds the reader limit (32): the library's
//                                 refusal is reported as the row's reason.
//   growth/idle/blocking/readers:<R>/hz:30   R reader processes blocked in read() on a channel
//                                 published at 30 Hz; their user + system CPU time (getrusage)
//                                 over the window, in percent of one core (cpu_percent, all R
//                                 together)
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "harness.hpp"

#if IPCRING_BENCH_HAVE_LIB
#include <ipcring/ipcring.hpp>
#endif

namespace ringbench {

// bench_ipcring.cpp: one two-process ipcring benchmark (slots 0: the sizing rule's minimum).
void ipcring_growth_benchmark(benchmark::State& state, bool sequential, bool blocking, int readers,
                              std::size_t bytes, std::uint32_t window, std::uint32_t slots);

namespace {

// Runs `measure` in a forked child and publishes the counters it returns; a Skip thrown there
// becomes "skipped: ...", anything else "error: ...".
using Counters = std::map<std::string, double>;
void in_growth_child(benchmark::State& state, const std::function<Counters()>& measure) {
  struct Shared {
    int skipped;
    int count;
    char keys[8][32];
    double values[8];
    char error[512];
  };
  void* mem =
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError(("error: mmap: " + errno_message(errno)).c_str());
    return;
  }
  auto* shared = new (mem) Shared{};
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      const Counters c = measure();
      for (const auto& [key, value] : c) {
        if (shared->count == 8) break;
        std::snprintf(shared->keys[shared->count], sizeof shared->keys[0], "%s", key.c_str());
        shared->values[shared->count++] = value;
      }
    } catch (const Skip& e) {
      shared->skipped = 1;
      std::snprintf(shared->error, sizeof shared->error, "%s", e.what());
    } catch (const std::exception& e) {
      std::snprintf(shared->error, sizeof shared->error, "%s", e.what());
    }
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    std::snprintf(shared->error, sizeof shared->error, "measuring child died (status %d)", status);
  }
  const Shared copy = *shared;
  munmap(mem, sizeof(Shared));
  if (copy.error[0] != 0 || copy.count == 0) {
    const std::string why = copy.error[0] != 0 ? copy.error : "no result";
    state.SkipWithError(((copy.skipped != 0 ? "skipped: " : "error: ") + why).c_str());
    return;
  }
  double seconds = 0;
  for (int i = 0; i < copy.count; ++i) {
    state.counters[copy.keys[i]] = copy.values[i];
    if (std::string(copy.keys[i]) == "ns_per_op") seconds = copy.values[i] * 1e-9;
  }
  for (auto _ : state) state.SetIterationTime(seconds > 0 ? seconds : 1e-9);
  state.counters["fits_cpus"] = 1;
}

#if IPCRING_BENCH_HAVE_LIB

std::string channel_name(const char* what, int i) {
  return "ringbench-" + std::to_string(getpid()) + "-" + what + "-" + std::to_string(i);
}

// Shared memory for the children of one measurement (zero-filled, MAP_SHARED).
template <class T>
T* shared_block() {
  void* mem = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) fail("mmap: " + errno_message(errno));
  return new (mem) T{};
}

bool wait_for(const std::function<bool()>& done, double seconds) {
  const std::uint64_t end = now_ns() + static_cast<std::uint64_t>(seconds * 1e9);
  while (!done()) {
    if (now_ns() > end) return false;
    usleep(200);
  }
  return true;
}

void reap_children(std::vector<pid_t>& pids) {
  for (pid_t p : pids) {
    if (p > 0) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
  }
  pids.clear();
}

Counters channels_cost(int channels) {
  std::vector<ipcring::Producer> producers;
  std::vector<ipcring::Reader> readers;
  ipcring::ChannelConfig config;
  config.max_readers = 1;
  config.max_held = 1;
  config.slots = 8;
  config.frame_bytes = 64;
  ipcring::ReaderOptions options;
  options.policy = ipcring::ReadPolicy::sequential;
  for (int c = 0; c < channels; ++c) {
    producers.push_back(ipcring::Producer::create(channel_name("channels", c), config));
    readers.push_back(ipcring::Reader::attach(channel_name("channels", c), options));
  }
  auto one_round = [&] {
    for (int c = 0; c < channels; ++c) {
      auto loan = producers[c].loan();
      if (!loan) fail(std::string("Producer::loan: ") + ipcring::to_string(loan.status()));
      loan->data()[0] = std::byte{1};
      producers[c].publish(std::move(*loan), 64);
    }
    for (int c = 0; c < channels; ++c) {
      auto frame = readers[c].try_read();
      if (!frame) fail(std::string("Reader::try_read: ") + ipcring::to_string(frame.status()));
      std::byte first = frame->data()[0];
      benchmark::DoNotOptimize(first);
      frame->release();
    }
  };
  one_round();  // first touch
  const std::uint64_t budget =
      static_cast<std::uint64_t>(std::max(settings().budget_s, 0.01) * 1e9);
  std::uint64_t frames = 0;
  const std::uint64_t start = now_ns();
  std::uint64_t now = start;
  while (now - start < budget) {
    one_round();
    frames += static_cast<std::uint64_t>(channels);
    now = now_ns();
  }
  readers.clear();
  producers.clear();
  return {{"ns_per_op", static_cast<double>(now - start) / static_cast<double>(frames)},
          {"channels", channels}};
}

Counters reap_cost(std::uint32_t max_readers) {
  struct Control {
    std::atomic<int> live_ready{0};
    std::atomic<int> turn{-1};
    std::atomic<int> attached[32] = {};
    std::atomic<int> failed{0};
  };
  const int reps = settings().smoke ? 3 : 15;
  const std::string name = channel_name("reap", static_cast<int>(max_readers));
  ipcring::ChannelConfig config;
  config.max_readers = max_readers;
  config.max_held = 1;
  config.slots = std::max<std::uint32_t>(8, max_readers + 2);
  config.frame_bytes = 64;
  config.reap_period = std::chrono::hours(1);  // only the timed call reaps
  auto* control = shared_block<Control>();
  // The library's own check, in a child of its own (this process must not hold a channel when it
  // forks the readers): a max_readers it refuses is the row's reason, in the library's words.
  {
    struct Refusal {
      char text[400];
    };
    auto* refusal = shared_block<Refusal>();
    const pid_t probe = fork();
    if (probe == 0) {
      try {
        ipcring::Producer::create(name, config);
      } catch (const std::exception& e) {
        std::snprintf(refusal->text, sizeof refusal->text, "%s", e.what());
      }
      _exit(0);
    }
    waitpid(probe, nullptr, 0);
    const std::string text = refusal->text;
    munmap(refusal, sizeof(Refusal));
    if (!text.empty()) throw Skip("refused by the library: " + text);
  }
  ipcring::ReaderOptions options;
  options.wait_for_channel = std::chrono::seconds(10);
  std::vector<pid_t> pids;
  // Children first, while this process holds no channel and runs no library thread.
  const pid_t live = fork();
  if (live == 0) {
    try {
      std::vector<ipcring::Reader> held;
      for (std::uint32_t i = 0; i + 1 < max_readers; ++i) {
        held.push_back(ipcring::Reader::attach(name, options));
      }
      control->live_ready.store(1);
      for (;;) pause();
    } catch (...) {
      control->failed.store(1);
      _exit(1);
    }
  }
  pids.push_back(live);
  for (int d = 0; d < reps; ++d) {
    const pid_t dead = fork();
    if (dead == 0) {
      while (control->turn.load() != d) usleep(100);
      try {
        ipcring::Reader reader = ipcring::Reader::attach(name, options);
        control->attached[d].store(1);
        for (;;) pause();
      } catch (...) {
        control->failed.store(1);
        _exit(1);
      }
    }
    pids.push_back(dead);
  }
  std::vector<double> ns;
  try {
    ipcring::Producer producer = ipcring::Producer::create(name, config);
    if (!wait_for([&] { return control->live_ready.load() != 0 || control->failed.load(); }, 20) ||
        control->failed.load() != 0) {
      fail("the live readers did not attach");
    }
    for (int d = 0; d < reps; ++d) {
      control->turn.store(d);
      if (!wait_for([&] { return control->attached[d].load() != 0 || control->failed.load(); },
                    20) ||
          control->failed.load() != 0) {
        fail("reader process " + std::to_string(d) + " did not attach");
      }
      kill(pids[static_cast<std::size_t>(d) + 1], SIGKILL);
      waitpid(pids[static_cast<std::size_t>(d) + 1], nullptr, 0);
      pids[static_cast<std::size_t>(d) + 1] = -1;
      const std::uint64_t t0 = now_ns();
      const std::size_t reaped = producer.reap_dead_readers();
      const std::uint64_t t1 = now_ns();
      if (reaped != 1) fail("reaped " + std::to_string(reaped) + " readers, expected 1");
      ns.push_back(static_cast<double>(t1 - t0));
    }
  } catch (...) {
    reap_children(pids);
    throw;
  }
  reap_children(pids);
  std::sort(ns.begin(), ns.end());
  return {{"ns_per_op", ns[ns.size() / 2]},
          {"max_readers", max_readers},
          {"samples", static_cast<double>(ns.size())}};
}

Counters idle_cpu(int readers, int hz) {
  struct Control {
    std::atomic<int> ready{0};
    std::atomic<int> start{0};
    std::atomic<int> stop{0};
    std::atomic<int> failed{0};
    std::atomic<std::uint64_t> cpu_ns{0};
    std::atomic<std::uint64_t> frames{0};
  };
  const double window_s = settings().smoke ? 0.3 : 2.0;
  const std::string name = channel_name("idle", readers);
  auto* control = shared_block<Control>();
  std::vector<pid_t> pids;
  for (int r = 0; r < readers; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        ipcring::ReaderOptions options;
        options.wait_for_channel = std::chrono::seconds(10);
        ipcring::Reader reader = ipcring::Reader::attach(name, options);
        control->ready.fetch_add(1);
        while (control->start.load() == 0) usleep(100);
        auto cpu = [] {
          rusage u{};
          getrusage(RUSAGE_SELF, &u);
          auto ns = [](const timeval& t) {
            return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL +
                   static_cast<std::uint64_t>(t.tv_usec) * 1000ULL;
          };
          return ns(u.ru_utime) + ns(u.ru_stime);
        };
        const std::uint64_t before = cpu();
        std::uint64_t frames = 0;
        while (control->stop.load() == 0) {
          auto frame = reader.read(std::chrono::milliseconds(100));
          if (frame) {
            ++frames;
            frame->release();
          } else if (frame.status() != ipcring::Status::timeout) {
            break;
          }
        }
        control->cpu_ns.fetch_add(cpu() - before);
        control->frames.fetch_add(frames);
      } catch (...) {
        control->failed.store(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  std::uint64_t published = 0;
  try {
    ipcring::ChannelConfig config;
    config.max_readers = static_cast<std::uint32_t>(readers);
    config.max_held = 1;
    config.slots = std::max<std::uint32_t>(8, config.max_readers + 2);
    config.frame_bytes = 4096;
    ipcring::Producer producer = ipcring::Producer::create(name, config);
    if (!wait_for([&] { return control->ready.load() == readers || control->failed.load(); }, 20) ||
        control->failed.load() != 0) {
      fail("the reader processes did not attach");
    }
    control->start.store(1);
    const std::uint64_t period = 1'000'000'000ULL / static_cast<std::uint64_t>(hz);
    const std::uint64_t start = now_ns();
    timespec next{};
    clock_gettime(CLOCK_MONOTONIC, &next);
    while (now_ns() - start < static_cast<std::uint64_t>(window_s * 1e9)) {
      next.tv_nsec += static_cast<long>(period);
      while (next.tv_nsec >= 1'000'000'000L) next.tv_nsec -= 1'000'000'000L, ++next.tv_sec;
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, nullptr);
      auto loan = producer.loan();
      if (!loan) fail(std::string("Producer::loan: ") + ipcring::to_string(loan.status()));
      producer.publish(std::move(*loan), 64);
      ++published;
    }
    control->stop.store(1);
    for (pid_t& p : pids) {
      waitpid(p, nullptr, 0);
      p = -1;
    }
    pids.clear();
    const double elapsed = static_cast<double>(now_ns() - start) * 1e-9;
    if (control->failed.load() != 0) fail("a reader process failed");
    return {{"cpu_percent", 100.0 * static_cast<double>(control->cpu_ns.load()) * 1e-9 / elapsed},
            {"readers", readers},
            {"frames_per_reader",
             static_cast<double>(control->frames.load()) / static_cast<double>(readers)},
            {"published", static_cast<double>(published)}};
  } catch (...) {
    reap_children(pids);
    throw;
  }
}
#endif

}  // namespace

void register_growth() {
  for (const std::uint32_t slots : {8U, 64U, 512U}) {
    add_benchmark(
        "growth/latency/sequential/spin/slots:" + std::to_string(slots),
        [=](benchmark::State& s) { ipcring_growth_benchmark(s, true, false, 1, 4096, 0, slots); });
    add_benchmark(
        "growth/throughput/sequential/spin/slots:" + std::to_string(slots),
        [=](benchmark::State& s) { ipcring_growth_benchmark(s, true, false, 1, 64, 4, slots); });
  }
  for (const int readers : {1, 2, 4, 8}) {
    add_benchmark("growth/throughput/sequential/blocking/readers:" + std::to_string(readers),
                  [=](benchmark::State& s) {
                    ipcring_growth_benchmark(s, true, true, readers, 64, kThroughputWindow, 0);
                  });
  }
  for (const std::size_t bytes : {std::size_t{64}, std::size_t{64} << 20}) {
    add_benchmark(
        "ipcring/latest/spin/readers:1/bytes:" + std::to_string(bytes),
        [=](benchmark::State& s) { ipcring_growth_benchmark(s, false, false, 1, bytes, 0, 0); });
  }
#if IPCRING_BENCH_HAVE_LIB
  for (const int channels : {1, 16, 64}) {
    add_benchmark("single/ipcring/channels:" + std::to_string(channels), [=](benchmark::State& s) {
      in_growth_child(s, [=] { return channels_cost(channels); });
    });
  }
  for (const std::uint32_t m : {4U, 16U, 32U, 64U}) {
    add_benchmark("single/ipcring/reap/max_readers:" + std::to_string(m),
                  [=](benchmark::State& s) { in_growth_child(s, [=] { return reap_cost(m); }); });
  }
  for (const int readers : {1, 8}) {
    add_benchmark(
        "growth/idle/blocking/readers:" + std::to_string(readers) + "/hz:30",
        [=](benchmark::State& s) { in_growth_child(s, [=] { return idle_cpu(readers, 30); }); });
  }
#else
  for (const char* name : {"single/ipcring/channels:1", "single/ipcring/reap/max_readers:4",
                           "growth/idle/blocking/readers:1/hz:30"}) {
    add_benchmark(name, [](benchmark::State& s) {
      s.SkipWithError(
          "skipped: ipcring library not built in (ringbench configured without ipcring::ipcring)");
    });
  }
#endif
}

}  // namespace ringbench
