// harness.cpp — processes, pinning, the shared region, syscall counting and the statistics of the
// two-process harness (see harness.hpp for the protocol).
#include "harness.hpp"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

namespace ringbench {

std::uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

Settings& settings() {
  static Settings s;
  return s;
}

// ---- pinning ---------------------------------------------------------------------------------

namespace {
std::vector<int> allowed_cpus() {
  if (!settings().cpus.empty()) return settings().cpus;
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}
}  // namespace

int cpus_available() {
  return static_cast<int>(allowed_cpus().size());
}

bool fits_cpus(const RunSpec& spec, int cpus) {
  // The rtt/2 benchmarks' sender sleeps for the answer; every other sender spins on acks.
  const int spinning = (spec.measure == Measure::one_way ? 1 : 0) +
                       (spec.rx_wait == WaitMode::spin ? spec.receivers : 0);
  return cpus <= 0 || spinning <= cpus;  // unknown CPU count: nothing to judge by
}

Pinning plan_pinning(int receivers) {
  Pinning p;
  const std::vector<int> cpus = allowed_cpus();
  if (cpus.empty()) {
    p.receiver_cpus.assign(static_cast<std::size_t>(receivers), -1);
    return p;
  }
  p.sender_cpu = cpus[0];
  for (int r = 0; r < receivers; ++r) {
    if (cpus.size() == 1) {
      p.receiver_cpus.push_back(cpus[0]);
    } else {
      p.receiver_cpus.push_back(cpus[1 + static_cast<std::size_t>(r) % (cpus.size() - 1)]);
    }
  }
  return p;
}

void pin_to(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)sched_setaffinity(0, sizeof(set), &set);  // best effort: the label says what was planned
}

std::string Pinning::describe(const RunSpec& spec) const {
  const WaitMode rx_wait = spec.rx_wait;
  const Measure measure = spec.measure;
  auto cpu = [](int c) { return c < 0 ? std::string("unpinned") : "cpu" + std::to_string(c); };
  std::string s = measure == Measure::one_way ? "one-way" : "rtt/2";
  s += "; tx " + cpu(sender_cpu);
  s += measure == Measure::one_way ? " (spins on acks: holds a core)" : " (sleeps for the answer)";
  std::vector<int> distinct = receiver_cpus;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  s += "; " + std::to_string(receiver_cpus.size()) + " rx on ";
  for (std::size_t i = 0; i < distinct.size(); ++i) s += (i ? "," : "") + cpu(distinct[i]);
  if (rx_wait == WaitMode::spin) {
    s += receiver_cpus.size() > distinct.size() ? " (spinning, sharing CPUs)"
                                                : " (spinning: holds a core each)";
  } else {
    s += " (blocking)";
  }
  if (!receiver_cpus.empty() &&
      std::find(distinct.begin(), distinct.end(), sender_cpu) != distinct.end()) {
    s += "; tx and rx share a CPU";
  }
  if (spec.window != 0) s += "; streamed, window " + std::to_string(spec.window);
  const int cpus = cpus_available();
  if (!fits_cpus(spec, cpus)) {
    s += "; OVERSUBSCRIBED: more spinning processes than the " + std::to_string(cpus) + " CPUs";
  }
  return s;
}

// ---- failures --------------------------------------------------------------------------------

void report_failure(Control& control, const std::string& what, bool skip) noexcept {
  std::uint64_t expected = 0;
  if (control.failed.value.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    std::snprintf(control.error, sizeof(control.error), "%s", what.c_str());
    control.error_is_skip = skip ? 1 : 0;
  }
  control.abort.value.store(1, std::memory_order_release);
}

void fail(const std::string& what) {
  throw Failure(what);
}

bool wait_until(const std::function<bool()>& condition, double timeout_s, const Control& control) {
  const std::uint64_t deadline = now_ns() + static_cast<std::uint64_t>(timeout_s * 1e9);
  std::uint32_t round = 0;
  while (!condition()) {
    if (control.abort.value.load(std::memory_order_acquire) != 0) return false;
    if (now_ns() > deadline) return false;
    if (++round < 1000) {
      cpu_relax();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return true;
}

// ---- syscall counting --------------------------------------------------------------------------

namespace {
long tracepoint_id() {
  for (const char* path : {"/sys/kernel/tracing/events/raw_syscalls/sys_enter/id",
                           "/sys/kernel/debug/tracing/events/raw_syscalls/sys_enter/id"}) {
    std::ifstream in(path);
    long id = -1;
    if (in >> id) return id;
  }
  return -1;
}
}  // namespace

SyscallCounter::SyscallCounter() {
  static const long id = tracepoint_id();
  if (id < 0) return;
  perf_event_attr attr{};
  attr.type = PERF_TYPE_TRACEPOINT;
  attr.size = sizeof(attr);
  attr.config = static_cast<std::uint64_t>(id);
  attr.disabled = 1;
  attr.exclude_hv = 1;
  const long fd =
      syscall(SYS_perf_event_open, &attr, 0 /* this thread */, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return;
  fd_ = static_cast<int>(fd);
  // Calibrate: the DISABLE ioctl is itself counted.
  ioctl(fd_, PERF_EVENT_IOC_RESET, 0);
  ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0);
  ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0);
  std::int64_t count = 0;
  if (read(fd_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count))) overhead_ = count;
}

SyscallCounter::~SyscallCounter() {
  if (fd_ >= 0) close(fd_);
}

void SyscallCounter::start() noexcept {
  if (fd_ < 0) return;
  ioctl(fd_, PERF_EVENT_IOC_RESET, 0);
  ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0);
}

void SyscallCounter::stop() noexcept {
  if (fd_ < 0) return;
  ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0);
  std::int64_t count = 0;
  if (read(fd_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count))) {
    value_ = std::max<std::int64_t>(0, count - overhead_);
  }
}

// ---- shared region
// -------------------------------------------------------------------------------

namespace {
constexpr std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}
}  // namespace

Region map_region(const RunSpec& spec) {
  if (spec.receivers < 1 || spec.receivers > kMaxReceivers) {
    throw Failure("receivers must be 1.." + std::to_string(kMaxReceivers) + ", not " +
                  std::to_string(spec.receivers));
  }
  Region region;
  region.receivers = spec.receivers;
  region.max = std::max<std::uint64_t>(16, settings().max_messages);
  const std::size_t control_bytes = round_up(sizeof(Control), 4096);
  const std::size_t mech_bytes = round_up(std::max<std::size_t>(spec.mech_shared_bytes, 1), 4096);
  const std::size_t ts_bytes = region.max * sizeof(std::uint64_t);
  region.bytes =
      control_bytes + mech_bytes + ts_bytes * (3 + static_cast<std::size_t>(spec.receivers));
  // MAP_POPULATE: every page exists before the children fork, so no timestamp store page-faults.
  void* base = mmap(nullptr, region.bytes, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (base == MAP_FAILED)
    throw Failure(std::string("mmap of the shared region: ") + errno_message(errno));
  region.base = base;
  auto* bytes = static_cast<unsigned char*>(base);
  region.control = new (bytes) Control{};
  region.mech_shared = bytes + control_bytes;
  region.send_ts = reinterpret_cast<std::uint64_t*>(bytes + control_bytes + mech_bytes);
  region.ack_sent_ts = region.send_ts + region.max;
  region.ack_seen_ts = region.ack_sent_ts + region.max;
  region.recv_ts = region.ack_seen_ts + region.max;
  return region;
}

void unmap_region(Region& region) noexcept {
  if (region.base != nullptr) munmap(region.base, region.bytes);
  region = Region{};
}

// ---- processes
// -------------------------------------------------------------------------------------

namespace {
int pidfd_open(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

std::string describe_status(pid_t pid, int status) {
  if (WIFEXITED(status))
    return "child " + std::to_string(pid) + " exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = sigabbrev_np(WTERMSIG(status));  // thread-safe, unlike strsignal
    return "child " + std::to_string(pid) + " killed by signal " +
           std::to_string(WTERMSIG(status)) + " (SIG" + (abbrev != nullptr ? abbrev : "?") + ")";
  }
  return "child " + std::to_string(pid) + " ended with status " + std::to_string(status);
}
}  // namespace

Outcome run_processes(const RunSpec& spec, const Pinning& pinning, Region& region,
                      const std::function<void()>& after_fork_in_driver,
                      const std::function<void(Region&)>& sender,
                      const std::function<void(Region&, int)>& receiver) {
  Control& control = *region.control;
  std::fflush(nullptr);
  const pid_t driver = getpid();
  struct Child {
    pid_t pid = -1;
    int pidfd = -1;
    bool running = true;
    int status = 0;
  };
  std::vector<Child> children;
  auto spawn = [&](int role) {  // role -1: the sender, r >= 0: receiver r
    const pid_t pid = fork();
    if (pid < 0) throw Failure(std::string("fork: ") + errno_message(errno));
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != driver) _exit(3);
      int code = 0;
      try {
        pin_to(role < 0 ? pinning.sender_cpu
                        : pinning.receiver_cpus[static_cast<std::size_t>(role)]);
        if (role < 0) {
          sender(region);
        } else {
          receiver(region, role);
        }
      } catch (const Skip& e) {
        report_failure(control, e.what(), true);
        code = 2;
      } catch (const std::exception& e) {
        report_failure(control,
                       (role < 0 ? "sender: " : "receiver " + std::to_string(role) + ": ") +
                           std::string(e.what()));
        code = 1;
      } catch (...) {
        report_failure(control, "unknown exception in a child");
        code = 1;
      }
      std::fflush(nullptr);
      // iceoryx deregisters its runtime in a static destructor; everything else leaves quickly.
      if (spec.exit_runs_destructors)
        std::exit(code);  // NOLINT(concurrency-mt-unsafe): a forked child with one thread
      _exit(code);
    }
    Child child;
    child.pid = pid;
    child.pidfd = pidfd_open(pid);
    children.push_back(child);
  };
  auto kill_all = [&] {
    for (auto& c : children) {
      if (c.running) kill(c.pid, SIGKILL);
    }
  };
  try {
    for (int r = 0; r < spec.receivers; ++r) spawn(r);
    spawn(-1);
  } catch (...) {
    control.abort.value.store(1);
    kill_all();
    for (auto& c : children) waitpid(c.pid, &c.status, 0);
    throw;
  }
  after_fork_in_driver();

  const std::uint64_t deadline =
      now_ns() +
      static_cast<std::uint64_t>((settings().child_timeout_s + settings().budget_s) * 1e9);
  std::uint64_t kill_at = 0;  // set once something went wrong: grace period for the others
  std::string trouble;
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& c : children) {
      if (c.running) fds.push_back(pollfd{c.pidfd, POLLIN, 0});
    }
    if (fds.empty()) break;
    const std::uint64_t now = now_ns();
    if (kill_at == 0 && now > deadline) {
      trouble = "timed out after " +
                std::to_string(static_cast<int>(settings().child_timeout_s + settings().budget_s)) +
                " s";
      control.abort.value.store(1, std::memory_order_release);
      kill_at = now + 2'000'000'000ULL;
    }
    if (kill_at != 0 && now > kill_at) kill_all();
    const bool pollable =
        std::all_of(fds.begin(), fds.end(), [](const pollfd& p) { return p.fd >= 0; });
    if (pollable) {
      poll(fds.data(), fds.size(), 100);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (auto& c : children) {
      if (!c.running) continue;
      if (waitpid(c.pid, &c.status, WNOHANG) == c.pid) {
        c.running = false;
        if (c.pidfd >= 0) close(c.pidfd);
        const bool clean = WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0;
        if (!clean) {
          if (trouble.empty()) trouble = describe_status(c.pid, c.status);
          // A child that failed wrote its reason already (exit 1 or 2); one that crashed did not:
          // record the crash first, so the others' "aborted" is not taken for the cause.
          const bool reported =
              WIFEXITED(c.status) && (WEXITSTATUS(c.status) == 1 || WEXITSTATUS(c.status) == 2);
          if (!reported) report_failure(control, describe_status(c.pid, c.status));
          control.abort.value.store(1, std::memory_order_release);
          if (kill_at == 0) kill_at = now_ns() + 2'000'000'000ULL;
        }
      }
    }
  }

  Outcome out;
  if (control.failed.value.load() != 0) {
    out.error = control.error;
    out.skipped = control.error_is_skip != 0;
    return out;
  }
  if (!trouble.empty()) {
    out.error = trouble;
    return out;
  }
  out.messages = control.messages;
  out.elapsed_s = static_cast<double>(control.elapsed_ns) * 1e-9;
  out.tx_syscalls = control.tx_syscalls;
  out.rx_syscalls = control.rx_syscalls;
  out.rx_messages = control.rx_messages;
  out.bad_frames = control.bad_frames;
  std::uint64_t missing = 0;
  // The first messages warm up (page faults on first touch of each slot or chunk, cold caches):
  // they are sent and checked but left out of the statistics.
  const std::uint64_t warmup = out.messages >= 640 ? 64 : out.messages / 10;
  if (spec.measure == Measure::one_way) {
    out.samples.reserve(out.messages * static_cast<std::uint64_t>(spec.receivers));
    for (int r = 0; r < spec.receivers; ++r) {
      const std::uint64_t* recv = region.recv_ts + static_cast<std::uint64_t>(r) * region.max;
      for (std::uint64_t i = warmup; i < out.messages; ++i) {
        if (recv[i] == 0) {
          ++missing;
        } else if (recv[i] < region.send_ts[i]) {
          ++out.negative;
          out.samples.push_back(0);
        } else {
          out.samples.push_back(recv[i] - region.send_ts[i]);
        }
      }
    }
    out.ack_samples.reserve(out.messages);
    for (std::uint64_t i = warmup; i < out.messages; ++i) {
      const std::uint64_t sent = region.ack_sent_ts[i], seen = region.ack_seen_ts[i];
      if (sent != 0 && seen >= sent) out.ack_samples.push_back(seen - sent);
    }
  } else {
    out.samples.reserve(out.messages);
    for (std::uint64_t i = warmup; i < out.messages; ++i) {
      if (region.recv_ts[i] == 0) {
        ++missing;
      } else {
        out.samples.push_back((region.recv_ts[i] - region.send_ts[i]) / 2);
      }
    }
  }
  if (missing != 0)
    out.error = std::to_string(missing) + " messages acknowledged without a receive timestamp";
  if (out.bad_frames != 0) {
    out.error = std::to_string(out.bad_frames) +
                " frames failed validation (torn line, wrong or repeated sequence)";
  }
  if (out.samples.empty() && out.error.empty()) out.error = "no samples";
  return out;
}

// ---- reporting
// ------------------------------------------------------------------------------------

namespace {
std::uint64_t percentile(const std::vector<std::uint64_t>& sorted, double p) {
  // Nearest rank.
  const double rank = std::ceil(p * static_cast<double>(sorted.size()));
  const std::size_t index = rank < 1 ? 0 : static_cast<std::size_t>(rank) - 1;
  return sorted[std::min(index, sorted.size() - 1)];
}
}  // namespace

void report(benchmark::State& state, const RunSpec& spec, const Pinning& pinning, Outcome& out) {
  state.SetLabel(pinning.describe(spec));
  // Reported for errors and skips too, so that the summary can say why a row is not compared.
  const int cpus = cpus_available();
  state.counters["fits_cpus"] = fits_cpus(spec, cpus) ? 1 : 0;
  state.counters["cpus"] = cpus;
  state.counters["window"] = spec.window;
  if (!out.error.empty()) {
    const std::string message = (out.skipped ? "skipped: " : "error: ") + out.error;
    state.SkipWithError(message.c_str());
    return;
  }
  auto& samples = out.samples;
  std::sort(samples.begin(), samples.end());
  double sum = 0;
  for (auto s : samples) sum += static_cast<double>(s);
  const double per_message_s =
      out.elapsed_s / static_cast<double>(std::max<std::uint64_t>(out.messages, 1));
  for (auto _ : state) state.SetIterationTime(per_message_s);

  using benchmark::Counter;
  auto plain = [&](const char* name, double v) {
    state.counters[name] = Counter(v, Counter::kDefaults);
  };
  plain("p50_ns", static_cast<double>(percentile(samples, 0.50)));
  plain("p90_ns", static_cast<double>(percentile(samples, 0.90)));
  plain("p99_ns", static_cast<double>(percentile(samples, 0.99)));
  plain("p999_ns", static_cast<double>(percentile(samples, 0.999)));
  plain("max_ns", static_cast<double>(samples.back()));
  plain("min_ns", static_cast<double>(samples.front()));
  plain("mean_ns", sum / static_cast<double>(samples.size()));
  plain("samples", static_cast<double>(samples.size()));
  const double rate = out.elapsed_s > 0 ? static_cast<double>(out.messages) / out.elapsed_s : 0;
  plain("items_per_second", rate);
  plain("bytes_per_second", rate * static_cast<double>(spec.payload_bytes));
  plain("receivers", spec.receivers);
  plain("payload_bytes", static_cast<double>(spec.payload_bytes));
  plain("tx_cpu", pinning.sender_cpu);
  plain("rx_cpu", pinning.receiver_cpus.empty() ? -1 : pinning.receiver_cpus[0]);
  if (out.tx_syscalls >= 0) {
    plain("tx_syscalls_per_msg",
          static_cast<double>(out.tx_syscalls) / static_cast<double>(out.messages));
  }
  if (out.rx_syscalls >= 0 && out.rx_messages > 0) {
    plain("rx_syscalls_per_msg",
          static_cast<double>(out.rx_syscalls) / static_cast<double>(out.rx_messages));
  }
  if (out.negative != 0) plain("negative_samples", static_cast<double>(out.negative));
  if (!out.ack_samples.empty()) {
    // The concurrent floor: receiver 0's ack store seen by the sender (see harness.hpp).
    std::sort(out.ack_samples.begin(), out.ack_samples.end());
    plain("ack_p50_ns", static_cast<double>(percentile(out.ack_samples, 0.50)));
    plain("ack_p99_ns", static_cast<double>(percentile(out.ack_samples, 0.99)));
  }
}

}  // namespace ringbench

namespace ringbench {
benchmark::internal::Benchmark* add_benchmark(const std::string& name,
                                              std::function<void(benchmark::State&)> body) {
  return benchmark::RegisterBenchmark(name.c_str(),
                                      [body](benchmark::State& state) { body(state); })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kNanosecond);
}
}  // namespace ringbench
