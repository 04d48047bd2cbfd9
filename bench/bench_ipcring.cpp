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
// The producer loans a frame, writes its first and last cache line (the sequence number), takes t0
// and publishes; a reader takes t1 once read()/try_read() returned the Frame and it read the first
// line, then reads and checks the last line and releases the frame before acknowledging. Nothing
// else of the payload is touched: zero-copy means the latency must not grow with B.
#include <unistd.h>

#include <chrono>
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
    config.slots = std::max<std::uint32_t>(8, config.max_readers * config.max_held + 2);
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
                       std::size_t bytes) {
#if IPCRING_BENCH_HAVE_LIB
  Ipcring m;
  m.policy = sequential ? ipcring::ReadPolicy::sequential : ipcring::ReadPolicy::latest;
  m.blocking = blocking;
  m.readers = readers;
  m.bytes = bytes;
  RunSpec spec;
  spec.receivers = readers;
  spec.payload_bytes = bytes;
  spec.measure = Measure::one_way;
  spec.rx_wait = blocking ? WaitMode::blocking : WaitMode::spin;
  spec.gap_ns = blocking ? settings().blocking_gap_ns : 0;
  run(state, m, spec);
#else
  (void)sequential, (void)blocking, (void)readers, (void)bytes;
  state.SkipWithError(
      "skipped: ipcring library not built in (ringbench configured without ipcring::ipcring)");
#endif
}

}  // namespace

void register_ipcring() {
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
