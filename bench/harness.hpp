// harness.hpp — the two-process harness every ringbench benchmark runs in.
//
// Roles. The benchmark process (the "driver", where Google Benchmark runs) measures nothing
// itself: for each benchmark it maps a shared anonymous region, forks one sender process and one
// process per receiver, waits for them (sleeping on pidfds, so it takes no CPU) and turns the
// timestamps they left in the region into percentiles. Children are forked from a driver that never
// touched the transport under test, so each child initialises its own (iceoryx runtime, ipcring
// lease thread ...).
//
// Protocol of one benchmark (one message in flight, "paced"):
//   sender                                   receiver r
//   prepare(seq)   (loan + write, or fill)
//   t0 = now(); send(seq)          ------>   seq = receive()   (spin or block, per mechanism)
//   send_ts[seq] = t0                        t1 = now(); recv_ts[r][seq] = t1
//                                            finish(seq)       (validate, release)
//   spin until ack[r] >= seq ∀r    <------   ack[r] = seq      (release store)
//   [blocking benchmarks: spin gap_ns so the receivers are asleep again]
// One-way latency = t1 - t0 on the same clock (CLOCK_MONOTONIC, system-wide, vDSO). The ack path
// is a spinning atomic for every mechanism, so the measured direction is the only thing that
// differs between benchmarks. The ack of receiver 0 doubles as a concurrent floor: it timestamps
// right before its ack store (ack_sent_ts) and the sender right after it saw it (ack_seen_ts), so
// every one-way benchmark also reports the raw atomic one-way latency of the same CPU pair at the
// same time (ack_p50_ns ...), which the host's placement of the vCPUs cannot skew between the two.
// Streamed benchmarks (RunSpec::window = N, the throughput figures) run the same loops, but the
// sender only waits until fewer than N messages are unacknowledged by the slowest receiver (and
// for all of them at the end): frames per second over the whole stream, no concurrent floor.
// Measure::rtt_half benchmarks (futex ping-pong) acknowledge through
// the mechanism itself and report (ack - t0) / 2 measured by the sender.
//
// Memory orderings in the harness: ack[r] is stored with release by receiver r after it wrote
// recv_ts[r][seq] and is loaded with acquire by the sender; the driver reads the arrays only after
// waitpid() (which orders everything the children did before exiting).
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ringbench {

// Thread-safe text of an errno value (std::strerror is not thread-safe).
inline std::string errno_message(int err) {
  char buffer[128];
  return strerror_r(err, buffer, sizeof buffer);  // GNU strerror_r returns the message
}

inline constexpr std::uint64_t kNothing = 0;       // receive(): nothing arrived yet
inline constexpr std::uint64_t kStop = ~0ULL;      // the message that ends a run
inline constexpr std::size_t kLine = 64;           // the cache lines written/read per payload
inline constexpr std::size_t kFalseSharing = 128;  // separation of fields written by two sides
inline constexpr int kMaxReceivers = 32;

std::uint64_t now_ns() noexcept;  // CLOCK_MONOTONIC

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Run-wide settings (command line: see main.cpp).
struct Settings {
  double budget_s = 1.0;  // stream duration per benchmark
  std::uint64_t max_messages = 1'000'000;
  std::uint64_t blocking_gap_ns = 100'000;  // pause after each ack when receivers block
  double child_timeout_s = 30.0;            // setup + budget beyond which children are killed
  std::vector<int> cpus;                    // [sender, receivers...]; empty: from the affinity mask
  bool smoke = false;
};
Settings& settings();

enum class Measure { one_way, rtt_half };
enum class WaitMode { spin, blocking };

// Thrown in the driver (setup) to skip a benchmark with a reason, or anywhere to fail it.
struct Skip : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Shared between the driver and its children; lives at the start of the shared region. Fields
// written by different processes are kFalseSharing apart.
struct alignas(kFalseSharing) PaddedCounter {
  std::atomic<std::uint64_t> value{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "must work across processes");
static_assert(sizeof(PaddedCounter) == kFalseSharing);

struct Control {
  PaddedCounter sender_open;  // sender: transport created (receivers may attach)
  PaddedCounter ready;        // receivers attached and ready
  PaddedCounter done;         // sender: the stream ended (kStop follows)
  PaddedCounter abort;        // driver or any child: give up now
  PaddedCounter exited;       // receivers that left their loop
  PaddedCounter acks[kMaxReceivers];
  PaddedCounter failed;  // 0, or 1 once error[] holds the first failure
  char error[512] = {};
  int error_is_skip = 0;
  // Results, written by the sender (or receiver 0 for rx_*) before it exits.
  std::uint64_t messages = 0;
  std::uint64_t elapsed_ns = 0;
  std::int64_t tx_syscalls = -1;  // raw_syscalls:sys_enter of the sending thread; -1: unknown
  std::int64_t rx_syscalls = -1;  // ... of receiver 0
  std::uint64_t rx_messages = 0;
  std::uint64_t bad_frames = 0;  // summed by receivers (fetch_add through atomic_ref)
};

struct RunSpec;

// Where each side runs. cpus[0] is the sender's, receivers share the rest round-robin.
struct Pinning {
  int sender_cpu = -1;
  std::vector<int> receiver_cpus;
  std::string describe(const RunSpec& spec) const;
};
Pinning plan_pinning(int receivers);
void pin_to(int cpu);  // best effort

// What one run produced, seen by the driver.
struct Outcome {
  std::string error;  // empty on success
  bool skipped = false;
  std::uint64_t messages = 0;
  double elapsed_s = 0;
  std::vector<std::uint64_t> samples;      // ns
  std::vector<std::uint64_t> ack_samples;  // ns, the concurrent floor (one-way only)
  std::int64_t tx_syscalls = -1, rx_syscalls = -1;
  std::uint64_t rx_messages = 0, bad_frames = 0, negative = 0;
};

struct RunSpec {
  int receivers = 1;
  std::size_t payload_bytes = 0;
  Measure measure = Measure::one_way;
  WaitMode rx_wait = WaitMode::spin;
  std::uint64_t gap_ns = 0;
  std::size_t mech_shared_bytes = 0;
  bool exit_runs_destructors = false;  // children leave with exit() instead of _exit() (iceoryx)
  // 0: paced (one message in flight, latency). N > 0: streamed (throughput): the sender keeps up
  // to N messages unacknowledged by the slowest receiver, so sends and receives overlap; there is
  // no concurrent floor and no gap, and the latency counters include the queueing.
  std::uint32_t window = 0;
};

// The window of the throughput benchmarks: within every mechanism's queue (Boost message_queue
// holds 8 messages, iceoryx subscribers 16, ipcring's streamed channels have 32 slots).
inline constexpr std::uint32_t kThroughputWindow = 8;

// CPUs the benchmark may use: --ringbench_cpus, else the process's affinity mask.
int cpus_available();
// Whether a configuration fits the CPUs: every process that spins (the sender always, as it spins
// on acknowledgements; receivers when they spin) needs a CPU of its own. An oversubscribed
// benchmark measures the scheduler's time slices, not the transport.
bool fits_cpus(const RunSpec& spec, int cpus);

// The shared region of one benchmark run.
struct Region {
  Control* control = nullptr;
  void* mech_shared = nullptr;
  std::uint64_t* send_ts = nullptr;      // [max]
  std::uint64_t* recv_ts = nullptr;      // [receivers][max]
  std::uint64_t* ack_sent_ts = nullptr;  // [max], receiver 0 before its ack store
  std::uint64_t* ack_seen_ts = nullptr;  // [max], the sender once it saw that ack
  std::uint64_t max = 0;
  int receivers = 0;
  void* base = nullptr;
  std::size_t bytes = 0;
};

// Records the first failure of any process into control.error.
void report_failure(Control& control, const std::string& what, bool skip = false) noexcept;
[[noreturn]] void fail(const std::string& what);

// Counts system calls entered by the calling thread (perf tracepoint raw_syscalls:sys_enter).
// Unavailable (value() = -1) without tracefs access or perf permissions.
class SyscallCounter {
 public:
  SyscallCounter();
  ~SyscallCounter();
  SyscallCounter(const SyscallCounter&) = delete;
  SyscallCounter& operator=(const SyscallCounter&) = delete;
  void start() noexcept;
  void stop() noexcept;
  std::int64_t value() const noexcept { return value_; }

 private:
  int fd_ = -1;
  std::int64_t overhead_ = 0;
  std::int64_t value_ = -1;
};

// Forks the children, runs sender() in one and receiver(r) in the others, waits, and collects.
Outcome run_processes(const RunSpec& spec, const Pinning& pinning, Region& region,
                      const std::function<void()>& after_fork_in_driver,
                      const std::function<void(Region&)>& sender,
                      const std::function<void(Region&, int)>& receiver);

Region map_region(const RunSpec& spec);
void unmap_region(Region& region) noexcept;

// Publishes percentiles and rates as counters, or the error.
void report(benchmark::State& state, const RunSpec& spec, const Pinning& pinning, Outcome& out);

// Helpers children use while waiting for each other.
bool wait_until(const std::function<bool()>& condition, double timeout_s, const Control& control);
inline bool stop_requested(const Control& c) noexcept {
  return c.done.value.load(std::memory_order_acquire) != 0 ||
         c.abort.value.load(std::memory_order_acquire) != 0;
}

// Writes seq into every word of the first and last cache line of a payload of `bytes` (>= 64).
inline void stamp_payload(void* data, std::size_t bytes, std::uint64_t seq) noexcept {
  auto* first = static_cast<std::uint64_t*>(data);
  auto* last = reinterpret_cast<std::uint64_t*>(static_cast<unsigned char*>(data) + bytes - kLine);
  for (std::size_t i = 0; i < kLine / sizeof(std::uint64_t); ++i) first[i] = seq;
  for (std::size_t i = 0; i < kLine / sizeof(std::uint64_t); ++i) last[i] = seq;
}
// Reads the first cache line: returns the sequence it carries, `intact` says whether every word of
// the line agrees (a torn line means a partially written frame was visible).
inline std::uint64_t read_first_line(const void* data, bool& intact) noexcept {
  const auto* first = static_cast<const std::uint64_t*>(data);
  std::uint64_t folded = 0;
  for (std::size_t i = 1; i < kLine / sizeof(std::uint64_t); ++i) folded |= first[i] ^ first[0];
  intact = folded == 0;
  return first[0];
}
// ... and the last one (true when it carries `seq`).
inline bool check_last_line(const void* data, std::size_t bytes, std::uint64_t seq) noexcept {
  const auto* last = reinterpret_cast<const std::uint64_t*>(
      static_cast<const unsigned char*>(data) + bytes - kLine);
  std::uint64_t folded = 0;
  for (std::size_t i = 0; i < kLine / sizeof(std::uint64_t); ++i) folded |= last[i] ^ seq;
  return folded == 0;
}

// ---- the templated part: per-message loops, inlined for each mechanism ------------------------
//
// A mechanism M provides:
//   struct Shared;                            // placed in the shared region (zero-filled memory)
//   void driver_setup(Shared&);               // before fork; may throw Skip
//   void driver_after_fork();                 // in the driver after all forks (close fds ...)
//   void driver_cleanup() noexcept;           // after the children exited
//   void sender_open(Shared&);  bool sender_ready();  void sender_close() noexcept;
//   void prepare(std::uint64_t seq);          // before t0: loan and write / fill a buffer
//   void send(std::uint64_t seq);             // right after t0
//   void receiver_open(Shared&, int r);  void receiver_close() noexcept;
//   std::uint64_t receive(const Control&);    // seq, kStop, or kNothing (gave up for now)
//   bool finish(std::uint64_t seq);           // after t1: validate, release; false = bad frame
// and for Measure::rtt_half: void ack(std::uint64_t seq); std::uint64_t wait_ack(seq, Control&)
// (returns the time the ack was seen, 0 when it gave up because of an abort).

template <class M>
void sender_loop(M& mech, Region& region, const RunSpec& spec) {
  Control& control = *region.control;
  auto& shared = *static_cast<typename M::Shared*>(region.mech_shared);
  mech.sender_open(shared);
  control.sender_open.value.store(1, std::memory_order_release);
  const auto receivers = static_cast<std::uint64_t>(spec.receivers);
  if (!wait_until(
          [&] {
            return control.ready.value.load(std::memory_order_acquire) == receivers &&
                   mech.sender_ready();
          },
          settings().child_timeout_s, control)) {
    fail("receivers did not get ready (" + std::to_string(control.ready.value.load()) + " of " +
         std::to_string(receivers) + ")");
  }
  const std::uint64_t budget_ns = static_cast<std::uint64_t>(settings().budget_s * 1e9);
  SyscallCounter syscalls;
  syscalls.start();
  const std::uint64_t start = now_ns();
  std::uint64_t seq = 0;
  std::uint64_t acked_at = start;
  for (;;) {
    ++seq;
    mech.prepare(seq);
    const std::uint64_t t0 = now_ns();
    mech.send(seq);
    region.send_ts[seq - 1] = t0;
    if constexpr (requires(M m, std::uint64_t s, Control & c) { m.wait_ack(s, c); }) {
      acked_at = mech.wait_ack(seq, control);
      if (acked_at == 0) fail("no answer to message " + std::to_string(seq));
      region.recv_ts[seq - 1] = acked_at;
    } else {
      // Paced: wait for the ack of seq. Streamed: wait until fewer than `window` messages are
      // unacknowledged, and for everything at the end of the budget.
      const bool last = spec.window != 0 && (seq >= region.max || now_ns() - start >= budget_ns);
      const std::uint64_t need =
          spec.window == 0 || last ? seq : seq - std::min<std::uint64_t>(seq, spec.window - 1);
      for (int r = 0; r < spec.receivers; ++r) {
        std::uint64_t spins = 0;
        // Receiver 0's ack was just seen (paced benchmarks: the concurrent floor).
        if (r == 1 && spec.window == 0) region.ack_seen_ts[seq - 1] = now_ns();
        // (A) acquire, pairs with (B) in receiver_loop.
        while (control.acks[r].value.load(std::memory_order_acquire) < need) {
          cpu_relax();
          if ((++spins & 0xffffu) == 0) {
            if (control.abort.value.load(std::memory_order_relaxed) != 0) fail("aborted");
            if (now_ns() - t0 > 10'000'000'000ULL) {
              fail("receiver " + std::to_string(r) + " did not acknowledge message " +
                   std::to_string(seq) + " within 10 s");
            }
          }
        }
      }
      acked_at = now_ns();
      if (spec.receivers == 1 && spec.window == 0) region.ack_seen_ts[seq - 1] = acked_at;
      if (last) break;
    }
    if (spec.window == 0 && (seq >= region.max || acked_at - start >= budget_ns)) break;
    if (spec.gap_ns != 0) {
      while (now_ns() - acked_at < spec.gap_ns) cpu_relax();
    }
  }
  const std::uint64_t end = acked_at;
  syscalls.stop();
  control.messages = seq;
  control.elapsed_ns = end - start;
  control.tx_syscalls = syscalls.value();
  control.done.value.store(1, std::memory_order_release);
  mech.prepare(kStop);
  mech.send(kStop);
  // Let the receivers leave before the transport goes away.
  wait_until([&] { return control.exited.value.load(std::memory_order_acquire) == receivers; },
             10.0, control);
  mech.sender_close();
}

template <class M>
void receiver_loop(M& mech, Region& region, const RunSpec& spec, int r) {
  Control& control = *region.control;
  auto& shared = *static_cast<typename M::Shared*>(region.mech_shared);
  if (!wait_until([&] { return control.sender_open.value.load(std::memory_order_acquire) != 0; },
                  settings().child_timeout_s, control)) {
    fail("sender did not open the transport");
  }
  mech.receiver_open(shared, r);
  control.ready.value.fetch_add(1, std::memory_order_acq_rel);
  std::uint64_t* recv_ts = region.recv_ts + static_cast<std::uint64_t>(r) * region.max;
  SyscallCounter syscalls;
  syscalls.start();
  std::uint64_t received = 0;
  std::uint64_t bad = 0;
  std::uint64_t expected = 1;
  for (;;) {
    const std::uint64_t seq = mech.receive(control);
    const std::uint64_t t1 = now_ns();
    if (seq == kStop) break;
    if (seq == kNothing) {
      if (control.abort.value.load(std::memory_order_acquire) != 0) break;
      if (control.done.value.load(std::memory_order_acquire) != 0 && expected > control.messages)
        break;
      continue;
    }
    if (!mech.finish(seq) || seq != expected) ++bad;
    if (seq > region.max) fail("sequence " + std::to_string(seq) + " out of range");
    ++received;
    expected = seq + 1;
    if (spec.measure == Measure::one_way) recv_ts[seq - 1] = t1;
    if constexpr (requires(M m, std::uint64_t s) { m.ack(s); }) {
      mech.ack(seq);
    } else {
      if (r == 0) region.ack_sent_ts[seq - 1] = now_ns();
      control.acks[r].value.store(seq, std::memory_order_release);  // (B) pairs with (A)
    }
  }
  syscalls.stop();
  if (bad != 0) {
    std::atomic_ref<std::uint64_t>(control.bad_frames).fetch_add(bad, std::memory_order_relaxed);
  }
  if (r == 0) {
    control.rx_syscalls = syscalls.value();
    control.rx_messages = received;
  }
  mech.receiver_close();
  control.exited.value.fetch_add(1, std::memory_order_acq_rel);
}

// Runs one benchmark of mechanism M: setup in the driver, the loops in children, counters.
template <class M>
void run(benchmark::State& state, M& mech, RunSpec spec) {
  spec.mech_shared_bytes = sizeof(typename M::Shared);
  const Pinning pinning = plan_pinning(spec.receivers);
  Outcome out;
  Region region;
  try {
    region = map_region(spec);
    mech.driver_setup(*new (region.mech_shared) typename M::Shared{});
    try {
      out = run_processes(
          spec, pinning, region, [&] { mech.driver_after_fork(); },
          [&](Region& reg) { sender_loop(mech, reg, spec); },
          [&](Region& reg, int r) { receiver_loop(mech, reg, spec, r); });
    } catch (...) {
      mech.driver_cleanup();
      throw;
    }
    mech.driver_cleanup();
  } catch (const Skip& e) {
    out.error = e.what();
    out.skipped = true;
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  unmap_region(region);
  report(state, spec, pinning, out);
}

}  // namespace ringbench

namespace ringbench {
// Registers one harness benchmark: one iteration, manual time (= mean period of the paced stream).
benchmark::internal::Benchmark* add_benchmark(const std::string& name,
                                              std::function<void(benchmark::State&)> body);

void register_baselines();
void register_iceoryx();
void register_ipcring();
void register_growth();  // bench_growth.cpp
}  // namespace ringbench
