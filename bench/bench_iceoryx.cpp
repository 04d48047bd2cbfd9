// bench_iceoryx.cpp — Eclipse iceoryx 2.0.3 (Debian's packages) in the two-process harness:
//
//   baseline/iceoryx/polling/bytes:4096   UntypedSubscriber::take() in a spinning loop
//   baseline/iceoryx/waitset/bytes:4096   WaitSet::timedWait() on SubscriberState::HAS_DATA, then
//   take()
//
//   throughput/iceoryx/<polling|waitset>/readers:<R>/bytes:<B>   streamed (RunSpec::window),
//                                         R = 1 or 4 subscribers, B = 64 or 4096
//
// The publisher loans a 4 KiB chunk (64-byte aligned), writes its first and last cache line and
// publishes it (zero-copy, like ipcring); t0 is taken right before publish(). ringbench starts its
// own iox-roudi (roudi.hpp). Without iceoryx at configure time both report themselves skipped.
#include <unistd.h>

#include <optional>
#include <string>

#include "harness.hpp"
#include "roudi.hpp"

#if RINGBENCH_HAVE_ICEORYX
#include "iceoryx_hoofs/log/logmanager.hpp"
#include "iceoryx_posh/popo/untyped_publisher.hpp"
#include "iceoryx_posh/popo/untyped_subscriber.hpp"
#include "iceoryx_posh/popo/wait_set.hpp"
#include "iceoryx_posh/runtime/posh_runtime.hpp"
#endif

namespace ringbench {
namespace {

constexpr std::size_t kChunkBytes = 4096;

#if RINGBENCH_HAVE_ICEORYX
struct Iceoryx {
  struct Shared {};
  bool use_waitset = false;
  std::size_t bytes = kChunkBytes;
  std::string instance;
  std::optional<iox::popo::UntypedPublisher> publisher;
  std::optional<iox::popo::UntypedSubscriber> subscriber;
  std::optional<iox::popo::WaitSet<>> waitset;
  void* loaned = nullptr;
  const void* taken = nullptr;
  bool intact = true;

  explicit Iceoryx(bool waitset_mode) : use_waitset(waitset_mode) {}

  static void init_runtime(const std::string& name) {
    // The library logs at verbose level by default; keep the benchmark output readable.
    iox::log::LogManager::GetLogManager().SetDefaultLogLevel(
        iox::log::LogLevel::kWarn, iox::log::LogLevelOutput::kHideLogLevel);
    iox::runtime::PoshRuntime::initRuntime(
        iox::RuntimeName_t(iox::cxx::TruncateToCapacity, name.c_str()));
  }
  iox::capro::ServiceDescription service() const {
    return {iox::capro::IdString_t(iox::cxx::TruncateToCapacity, "ringbench"),
            iox::capro::IdString_t(iox::cxx::TruncateToCapacity, instance.c_str()),
            iox::capro::IdString_t(iox::cxx::TruncateToCapacity, "frames")};
  }

  void driver_setup(Shared&) {
    ensure_roudi_running();
    static int counter = 0;
    instance = std::to_string(getpid()) + "-" + std::to_string(++counter);
  }
  void driver_after_fork() {}
  void driver_cleanup() noexcept {}

  void sender_open(Shared&) {
    init_runtime("ringbench-tx-" + std::to_string(getpid()));
    iox::popo::PublisherOptions options;
    options.historyCapacity = 0;
    publisher.emplace(service(), options);
  }
  bool sender_ready() { return publisher->hasSubscribers(); }
  void sender_close() noexcept { publisher.reset(); }
  void prepare(std::uint64_t seq) {
    auto chunk = publisher->loan(static_cast<std::uint32_t>(bytes), 64);
    if (chunk.has_error())
      fail("iceoryx loan failed: error " + std::to_string(static_cast<int>(chunk.get_error())));
    loaned = chunk.value();
    stamp_payload(loaned, bytes, seq);
  }
  void send(std::uint64_t) { publisher->publish(loaned); }

  void receiver_open(Shared&, int r) {
    init_runtime("ringbench-rx" + std::to_string(r) + "-" + std::to_string(getpid()));
    iox::popo::SubscriberOptions options;
    options.queueCapacity = 16;
    options.historyRequest = 0;
    subscriber.emplace(service(), options);
    const std::uint64_t deadline = now_ns() + 10'000'000'000ULL;
    while (subscriber->getSubscriptionState() != iox::SubscribeState::SUBSCRIBED) {
      if (now_ns() > deadline) fail("iceoryx subscriber not subscribed within 10 s");
      usleep(1000);
    }
    if (use_waitset) {
      waitset.emplace();
      if (waitset->attachState(*subscriber, iox::popo::SubscriberState::HAS_DATA).has_error()) {
        fail("iceoryx WaitSet::attachState failed");
      }
    }
  }
  void receiver_close() noexcept {
    waitset.reset();
    subscriber.reset();
  }
  std::uint64_t receive(const Control& control) {
    if (use_waitset) {
      for (;;) {
        auto notifications = waitset->timedWait(iox::units::Duration::fromMilliseconds(100));
        if (!notifications.empty() && take()) break;
        if (stop_requested(control)) return kNothing;
      }
    } else {
      for (std::uint32_t spins = 1; !take(); ++spins) {
        cpu_relax();
        if ((spins & 0xffffu) == 0 && stop_requested(control)) return kNothing;
      }
    }
    return read_first_line(taken, intact);
  }
  bool take() {
    auto chunk = subscriber->take();
    if (chunk.has_error()) {
      if (chunk.get_error() != iox::popo::ChunkReceiveResult::NO_CHUNK_AVAILABLE) {
        fail("iceoryx take failed: error " + std::to_string(static_cast<int>(chunk.get_error())));
      }
      return false;
    }
    taken = chunk.value();
    return true;
  }
  bool finish(std::uint64_t seq) {
    const bool ok = intact && check_last_line(taken, bytes, seq);
    subscriber->release(taken);
    taken = nullptr;
    return ok;
  }
};
#endif

void iceoryx_benchmark(benchmark::State& state, bool waitset, int readers = 1,
                       std::size_t bytes = kChunkBytes, std::uint32_t window = 0) {
#if RINGBENCH_HAVE_ICEORYX
  Iceoryx m(waitset);
  m.bytes = bytes;
  RunSpec spec;
  spec.receivers = readers;
  spec.payload_bytes = bytes;
  spec.measure = Measure::one_way;
  spec.rx_wait = waitset ? WaitMode::blocking : WaitMode::spin;
  spec.gap_ns = waitset && window == 0 ? settings().blocking_gap_ns : 0;
  spec.window = window;
  spec.exit_runs_destructors = true;  // the runtime deregisters from RouDi in a static destructor
  run(state, m, spec);
#else
  (void)waitset, (void)readers, (void)bytes, (void)window;
  state.SkipWithError(
      "skipped: iceoryx not built in (iceoryx_posh CMake package not found at configure time)");
#endif
}

}  // namespace

void register_iceoryx() {
  const std::string bytes = "/bytes:" + std::to_string(kChunkBytes);
  add_benchmark("baseline/iceoryx/polling" + bytes,
                [](benchmark::State& s) { iceoryx_benchmark(s, false); });
  add_benchmark("baseline/iceoryx/waitset" + bytes,
                [](benchmark::State& s) { iceoryx_benchmark(s, true); });
  for (const bool waitset : {false, true}) {
    for (const int readers : {1, 4}) {
      for (const std::size_t size : {std::size_t{64}, kChunkBytes}) {
        add_benchmark(std::string("throughput/iceoryx/") + (waitset ? "waitset" : "polling") +
                          "/readers:" + std::to_string(readers) + "/bytes:" + std::to_string(size),
                      [=](benchmark::State& s) {
                        iceoryx_benchmark(s, waitset, readers, size, kThroughputWindow);
                      });
      }
    }
  }
}

}  // namespace ringbench
