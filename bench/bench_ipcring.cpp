// bench_ipcring.cpp — ipcring through its public API only, in the two-process harness.
//
//   ipcring/<policy>/<wait>/readers:<R>/bytes:<B>
//     policy  latest | sequential                 (ReaderOptions::policy)
//     wait    spin     = a try_read() polling loop: each reader holds a core
//             blocking = read(timeout) with ReaderOptions::spin = 0: the reader sleeps on the
//                        channel's futex; the producer pauses (--ringbench_gap_us) after each
//                        acknowledgement so the readers are asleep when the next frame comes
//     R       1, 2, 4, 8 reader processes (each its own Reader)
//     B       4 KiB, 64 KiB, 1 MiB, 8 MiB frames
//
//   throughput/ipcring/sequential/<wait>/readers:<R>/bytes:<B>   streamed (RunSpec::window:
//             up to 8 frames unacknowledged), R = 1 or 4, B = 64 B or 4 KiB, 32 slots; sequential
//             only, as a latest-policy reader skips frames by design when it falls behind
//   single/atomic_increment, single/ipcring/loan_publish, single/ipcring/read_release
//             the cost of one operation in one process (no other process, no transfer between
//             CPUs): a plain fetch_add on a local atomic beside loan+publish (one reader attached,
//             which reads the batch outside the timed part) and read+release (sequential reader,
//             the batch published outside the timed part); timed over batches of 16
//
// The producer loans a frame, writes its first and last cache line (the sequence number), takes t0
// and publishes; a reader takes t1 once read()/try_read() returned the Frame and it read the first
// line, then reads and checks the last line and releases the frame before acknowledging. Nothing
// else of the payload is touched: zero-copy means the latency must not grow with B.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>

#include <chrono>
#include <cstdio>
#include <new>
#include <optional>
#include <string>

#include "harness.hpp"

#if IPCRING_BENCH_HAVE_LIB
#include <ipcring/ipcring.hpp>
#endif

namespace ringbench {
namespace {

#if IPCRING_BENCH_HAVE_LIB
struct Ipcring {
  struct Shared {};
  ipcring::ReadPolicy policy = ipcring::ReadPolicy::latest;
  bool blocking = false;
  int readers = 1;
  std::size_t bytes = 4096;
  std::uint32_t slots = 0;  // 0: the sizing rule's minimum (at least 8)
  std::string name;
  std::optional<ipcring::Producer> producer;
  ipcring::Loan loan;
  std::optional<ipcring::Reader> reader;
  ipcring::Frame frame;
  bool intact = true;

  void driver_setup(Shared&) {
    static int counter = 0;
    name = "ringbench-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  }
  void driver_after_fork() {}
  void driver_cleanup() noexcept {
    // The producer unlinks the channel when it exits cleanly; this removes what a crash left.
    try {
      ipcring::remove_channel(name, /*force=*/true);
    } catch (...) {
    }
  }

  void sender_open(Shared&) {
    ipcring::ChannelConfig config;
    config.max_readers = static_cast<std::uint32_t>(readers);
    config.max_held = 1;
    config.slots = std::max<std::uint32_t>({8, slots, config.max_readers * config.max_held + 2});
    config.frame_bytes = bytes;
    producer.emplace(ipcring::Producer::create(name, config));
  }
  bool sender_ready() { return true; }
  void sender_close() noexcept {
    loan = ipcring::Loan{};
    producer.reset();
  }
  void prepare(std::uint64_t seq) {
    auto result = producer->loan();
    if (!result) fail(std::string("Producer::loan: ") + ipcring::to_string(result.status()));
    loan = std::move(*result);
    stamp_payload(loan.data(), bytes, seq);
  }
  void send(std::uint64_t) { producer->publish(std::move(loan), bytes); }

  void receiver_open(Shared&, int) {
    ipcring::ReaderOptions options;
    options.policy = policy;
    options.spin = std::chrono::nanoseconds(0);
    reader.emplace(ipcring::Reader::attach(name, options));
  }
  void receiver_close() noexcept {
    frame.release();
    reader.reset();
  }
  std::uint64_t receive(const Control& control) {
    if (blocking) {
      for (;;) {
        auto result = reader->read(std::chrono::milliseconds(100));
        if (result) {
          frame = std::move(*result);
          break;
        }
        if (result.status() == ipcring::Status::producer_gone) return kStop;
        if (result.status() != ipcring::Status::timeout) {
          fail(std::string("Reader::read: ") + ipcring::to_string(result.status()));
        }
        if (stop_requested(control)) return kNothing;
      }
    } else {
      for (std::uint32_t spins = 1;; ++spins) {
        auto result = reader->try_read();
        if (result) {
          frame = std::move(*result);
          break;
        }
        if (result.status() == ipcring::Status::producer_gone) return kStop;
        if (result.status() != ipcring::Status::no_frame) {
          fail(std::string("Reader::try_read: ") + ipcring::to_string(result.status()));
        }
        cpu_relax();
        if ((spins & 0xffffu) == 0 && stop_requested(control)) return kNothing;
      }
    }
    return read_first_line(frame.data(), intact);
  }
  bool finish(std::uint64_t seq) {
    const bool ok = intact && frame.size() == bytes && check_last_line(frame.data(), bytes, seq);
    frame.release();
    return ok;
  }
};
#endif

void ipcring_benchmark(benchmark::State& state, bool sequential, bool blocking, int readers,
                       std::size_t bytes, std::uint32_t window = 0) {
#if IPCRING_BENCH_HAVE_LIB
  Ipcring m;
  m.policy = sequential ? ipcring::ReadPolicy::sequential : ipcring::ReadPolicy::latest;
  m.blocking = blocking;
  m.readers = readers;
  m.bytes = bytes;
  m.slots = window == 0 ? 0 : 4 * window;
  RunSpec spec;
  spec.receivers = readers;
  spec.payload_bytes = bytes;
  spec.measure = Measure::one_way;
  spec.rx_wait = blocking ? WaitMode::blocking : WaitMode::spin;
  spec.gap_ns = blocking && window == 0 ? settings().blocking_gap_ns : 0;
  spec.window = window;
  run(state, m, spec);
#else
  (void)sequential, (void)blocking, (void)readers, (void)bytes, (void)window;
  state.SkipWithError(
      "skipped: ipcring library not built in (ringbench configured without ipcring::ipcring)");
#endif
}

// ---- single-process costs ----------------------------------------------------------------------

constexpr int kBatch = 16;

// Runs `measure` (which returns ns per operation) in a forked child, so that the driver never
// holds a channel or its lease thread when it forks the next benchmark's processes; reports
// ns_per_op, or the child's failure.
template <class F>
void in_child(benchmark::State& state, F measure) {
  struct Result {
    double ns_per_op;
    char error[256];
  };
  void* mem =
      mmap(nullptr, sizeof(Result), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    state.SkipWithError(("error: mmap: " + errno_message(errno)).c_str());
    return;
  }
  auto* result = new (mem) Result{-1, {}};
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    try {
      result->ns_per_op = measure();
    } catch (const std::exception& e) {
      std::snprintf(result->error, sizeof result->error, "%s", e.what());
    }
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    std::snprintf(result->error, sizeof result->error, "measuring child died (status %d)", status);
  }
  const Result copy = *result;
  munmap(mem, sizeof(Result));
  if (copy.error[0] != 0 || copy.ns_per_op < 0) {
    state.SkipWithError((std::string("error: ") + copy.error).c_str());
    return;
  }
  for (auto _ : state) state.SetIterationTime(copy.ns_per_op * 1e-9);
  state.counters["ns_per_op"] = copy.ns_per_op;
  state.counters["fits_cpus"] = 1;
}

// Time of `batches` rounds of `timed` (kBatch operations each) with `untimed` between them.
template <class Timed, class Untimed>
double per_op_ns(Timed timed, Untimed untimed) {
  const std::uint64_t budget_ns =
      static_cast<std::uint64_t>(std::max(settings().budget_s, 0.01) * 1e9);
  std::uint64_t spent = 0, ops = 0;
  const std::uint64_t end = now_ns() + budget_ns;
  while (now_ns() < end) {
    untimed();
    const std::uint64_t t0 = now_ns();
    timed();
    spent += now_ns() - t0;
    ops += kBatch;
  }
  return ops == 0 ? 0 : static_cast<double>(spent) / static_cast<double>(ops);
}

double atomic_increment_ns() {
  std::atomic<std::uint64_t> word{0};
  return per_op_ns(
      [&] {
        for (int i = 0; i < kBatch; ++i) word.fetch_add(1, std::memory_order_acq_rel);
      },
      [] {});
}

#if IPCRING_BENCH_HAVE_LIB
struct SingleProcess {
  std::string name;
  std::optional<ipcring::Producer> producer;
  std::optional<ipcring::Reader> reader;
  static constexpr std::size_t kBytes = 64;

  SingleProcess() {
    name = "ringbench-" + std::to_string(getpid()) + "-single";
    ipcring::ChannelConfig config;
    config.max_readers = 1;
    config.max_held = 1;
    config.slots = 4 * kBatch;
    config.frame_bytes = kBytes;
    producer.emplace(ipcring::Producer::create(name, config));
    ipcring::ReaderOptions options;
    options.policy = ipcring::ReadPolicy::sequential;
    reader.emplace(ipcring::Reader::attach(name, options));
  }
  ~SingleProcess() {
    reader.reset();
    producer.reset();
  }
  SingleProcess(const SingleProcess&) = delete;
  SingleProcess& operator=(const SingleProcess&) = delete;

  void publish_batch() {
    for (int i = 0; i < kBatch; ++i) {
      auto loan = producer->loan();
      if (!loan) fail(std::string("Producer::loan: ") + ipcring::to_string(loan.status()));
      loan->data()[0] = static_cast<std::byte>(i);
      producer->publish(std::move(*loan), kBytes);
    }
  }
  void read_batch() {
    for (int i = 0; i < kBatch; ++i) {
      auto frame = reader->try_read();
      if (!frame) fail(std::string("Reader::try_read: ") + ipcring::to_string(frame.status()));
      std::byte first = frame->data()[0];
      benchmark::DoNotOptimize(first);
      frame->release();
    }
  }
};
#endif

void single_benchmark(benchmark::State& state, int which) {
  if (which == 0) {
    in_child(state, atomic_increment_ns);
    return;
  }
#if IPCRING_BENCH_HAVE_LIB
  in_child(state, [which] {
    SingleProcess ring;
    ring.publish_batch();  // first touch of the slots; per_op_ns starts with the untimed part
    if (which == 1) return per_op_ns([&] { ring.publish_batch(); }, [&] { ring.read_batch(); });
    ring.read_batch();
    return per_op_ns([&] { ring.read_batch(); }, [&] { ring.publish_batch(); });
  });
#else
  state.SkipWithError(
      "skipped: ipcring library not built in (ringbench configured without ipcring::ipcring)");
#endif
}

}  // namespace

void ipcring_growth_benchmark(benchmark::State& state, bool sequential, bool blocking, int readers,
                              std::size_t bytes, std::uint32_t window, std::uint32_t slots) {
#if IPCRING_BENCH_HAVE_LIB
  Ipcring m;
  m.policy = sequential ? ipcring::ReadPolicy::sequential : ipcring::ReadPolicy::latest;
  m.blocking = blocking;
  m.readers = readers;
  m.bytes = bytes;
  m.slots = slots != 0 ? slots : window == 0 ? 0 : 4 * window;
  RunSpec spec;
  spec.receivers = readers;
  spec.payload_bytes = bytes;
  spec.measure = Measure::one_way;
  spec.rx_wait = blocking ? WaitMode::blocking : WaitMode::spin;
  spec.gap_ns = blocking && window == 0 ? settings().blocking_gap_ns : 0;
  spec.window = window;
  run(state, m, spec);
#else
  (void)sequential, (void)blocking, (void)readers, (void)bytes, (void)window, (void)slots;
  state.SkipWithError(
      "skipped: ipcring library not built in (ringbench configured without ipcring::ipcring)");
#endif
}

void register_ipcring() {
  add_benchmark("single/atomic_increment", [](benchmark::State& s) { single_benchmark(s, 0); });
  add_benchmark("single/ipcring/loan_publish", [](benchmark::State& s) { single_benchmark(s, 1); });
  add_benchmark("single/ipcring/read_release", [](benchmark::State& s) { single_benchmark(s, 2); });
  for (const bool blocking : {false, true}) {
    for (const int readers : {1, 4}) {
      for (const std::size_t bytes : {std::size_t{64}, std::size_t{4} << 10}) {
        const std::string name =
            std::string("throughput/ipcring/sequential/") + (blocking ? "blocking" : "spin") +
            "/readers:" + std::to_string(readers) + "/bytes:" + std::to_string(bytes);
        add_benchmark(name, [=](benchmark::State& state) {
          ipcring_benchmark(state, true, blocking, readers, bytes, kThroughputWindow);
        });
      }
    }
  }
  for (const bool sequential : {false, true}) {
    for (const bool blocking : {false, true}) {
      for (const int readers : {1, 2, 4, 8}) {
        for (const std::size_t bytes : {std::size_t{4} << 10, std::size_t{64} << 10,
                                        std::size_t{1} << 20, std::size_t{8} << 20}) {
          const std::string name =
              std::string("ipcring/") + (sequential ? "sequential" : "latest") + "/" +
              (blocking ? "blocking" : "spin") + "/readers:" + std::to_string(readers) +
              "/bytes:" + std::to_string(bytes);
          add_benchmark(name, [=](benchmark::State& state) {
            ipcring_benchmark(state, sequential, blocking, readers, bytes);
          });
        }
      }
    }
  }
}

}  // namespace ringbench
