// bench_baselines.cpp — the mechanisms ipcring is compared with, in the same two-process harness:
//
//   baseline/atomic/spin                    a shared 64-bit word, receiver spins: the floor
//   baseline/futex/blocking                 shared futex word, FUTEX_WAKE after each store,
//   receiver
//                                           sleeps in FUTEX_WAIT (shared, not FUTEX_PRIVATE)
//   baseline/futex/pingpong_rtt2            the same, answered through a second futex word the
//                                           sender sleeps on: both sides sleep; rtt/2
//   baseline/uds_seqpacket/blocking/...     AF_UNIX SOCK_SEQPACKET socketpair, 4 KiB messages
//   baseline/pipe/blocking/...              pipe(2), 4 KiB messages (= PIPE_BUF: atomic writes)
//   baseline/boost_mq/blocking/...          boost::interprocess::message_queue, 4 KiB messages
//                                           copied in and out, as its users do
//   throughput/boost_mq/blocking/readers:1/bytes:<64|4096>   the same queue, streamed
//                                           (RunSpec::window); one reader only: a message_queue
//                                           hands each message to one receiver, it has no fan-out
//
// Every payload-carrying mechanism moves a 4 KiB message whose first and last cache lines carry
// the sequence number (the receiver validates both), like the ipcring benchmarks' frames.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <vector>

#include "harness.hpp"

#if RINGBENCH_HAVE_BOOST
#include <boost/interprocess/ipc/message_queue.hpp>
#endif

namespace ringbench {
namespace {

constexpr std::size_t kMessageBytes = 4096;
constexpr std::uint32_t kStop32 = 0xffffffffu;

// ---- raw atomic --------------------------------------------------------------------------------

struct AtomicSpin {
  struct Shared {
    alignas(kFalseSharing) std::atomic<std::uint64_t> word{0};
  };
  Shared* shared = nullptr;
  std::uint64_t last = 0;

  void driver_setup(Shared&) {}
  void driver_after_fork() {}
  void driver_cleanup() noexcept {}
  void sender_open(Shared& s) { shared = &s; }
  bool sender_ready() { return true; }
  void sender_close() noexcept {}
  void prepare(std::uint64_t) {}
  void send(std::uint64_t seq) {
    shared->word.store(seq, std::memory_order_release);
  }  // pairs with (R)
  void receiver_open(Shared& s, int) { shared = &s; }
  void receiver_close() noexcept {}
  std::uint64_t receive(const Control& control) {
    for (std::uint32_t spins = 1;; ++spins) {
      const std::uint64_t v = shared->word.load(std::memory_order_acquire);  // (R)
      if (v != last) return last = v;
      cpu_relax();
      if ((spins & 0xffffu) == 0 && stop_requested(control)) return kNothing;
    }
  }
  bool finish(std::uint64_t) { return true; }
};

// ---- futex
// -----------------------------------------------------------------------------------------

long futex(std::uint32_t* word, int op, std::uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

// Sleeps until *word != seen (or 100 ms passed); returns the value then seen.
std::uint32_t futex_wait_change(std::uint32_t* word, std::uint32_t seen) {
  const timespec timeout{0, 100'000'000};
  std::uint32_t v = std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
  if (v == seen) {
    futex(word, FUTEX_WAIT, seen, &timeout);  // shared futex: no FUTEX_PRIVATE_FLAG
    v = std::atomic_ref<std::uint32_t>(*word).load(std::memory_order_acquire);
  }
  return v;
}

void futex_post(std::uint32_t* word, std::uint32_t value) {
  std::atomic_ref<std::uint32_t>(*word).store(value, std::memory_order_release);
  futex(word, FUTEX_WAKE, INT_MAX, nullptr);  // unconditional, as a plain wait/wake pair does
}

struct FutexOneWay {
  struct Shared {
    alignas(kFalseSharing) std::uint32_t ping = 0;
    alignas(kFalseSharing) std::uint32_t pong = 0;
  };
  Shared* shared = nullptr;
  std::uint32_t last = 0;

  void driver_setup(Shared&) {}
  void driver_after_fork() {}
  void driver_cleanup() noexcept {}
  void sender_open(Shared& s) { shared = &s; }
  bool sender_ready() { return true; }
  void sender_close() noexcept {}
  void prepare(std::uint64_t) {}
  void send(std::uint64_t seq) {
    futex_post(&shared->ping, seq == kStop ? kStop32 : static_cast<std::uint32_t>(seq));
  }
  void receiver_open(Shared& s, int) { shared = &s; }
  void receiver_close() noexcept {}
  std::uint64_t receive(const Control& control) {
    for (;;) {
      const std::uint32_t v = futex_wait_change(&shared->ping, last);
      if (v != last) {
        last = v;
        return v == kStop32 ? kStop : v;
      }
      if (stop_requested(control)) return kNothing;
    }
  }
  bool finish(std::uint64_t) { return true; }
};

// Both directions through futexes: the sender sleeps until the receiver answers.
struct FutexPingPong : FutexOneWay {
  std::uint32_t answered = 0;
  void ack(std::uint64_t seq) { futex_post(&shared->pong, static_cast<std::uint32_t>(seq)); }
  std::uint64_t wait_ack(std::uint64_t seq, const Control& control) {
    const auto want = static_cast<std::uint32_t>(seq);
    for (;;) {
      answered = futex_wait_change(&shared->pong, answered);
      if (answered == want) return now_ns();
      if (control.abort.value.load(std::memory_order_acquire) != 0) return 0;
    }
  }
};

// ---- file descriptors: Unix socket, pipe -------------------------------------------------------

struct FdMessages {
  struct Shared {};
  enum class Kind { seqpacket, pipe } kind = Kind::seqpacket;
  int fds[2] = {-1, -1};  // [0]: receiver's end, [1]: sender's end
  std::vector<unsigned char> buffer;
  bool intact = true;

  explicit FdMessages(Kind k) : kind(k) {}
  void driver_setup(Shared&) {
    const int rc = kind == Kind::pipe ? pipe2(fds, O_CLOEXEC)
                                      : socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds);
    if (rc != 0)
      throw Skip(std::string(kind == Kind::pipe ? "pipe2: " : "socketpair: ") +
                 errno_message(errno));
  }
  void driver_after_fork() { close_both(); }  // only the children keep their ends, so EOF works
  void driver_cleanup() noexcept { close_both(); }
  void close_both() noexcept {
    for (int& fd : fds) {
      if (fd >= 0) close(fd);
      fd = -1;
    }
  }
  void sender_open(Shared&) {
    close(fds[0]);
    fds[0] = -1;
    buffer.assign(kMessageBytes, 0);
  }
  bool sender_ready() { return true; }
  void sender_close() noexcept { close_both(); }
  void prepare(std::uint64_t seq) { stamp_payload(buffer.data(), buffer.size(), seq); }
  void send(std::uint64_t) {
    const ssize_t n = write(fds[1], buffer.data(), buffer.size());
    if (n != static_cast<ssize_t>(buffer.size()))
      fail(std::string("write: ") + errno_message(errno));
  }
  void receiver_open(Shared&, int) {
    close(fds[1]);
    fds[1] = -1;
    buffer.assign(kMessageBytes, 0);
  }
  void receiver_close() noexcept { close_both(); }
  std::uint64_t receive(const Control&) {
    std::size_t got = 0;
    while (got < buffer.size()) {  // a pipe may in principle return less; a seqpacket never does
      const ssize_t n = read(fds[0], buffer.data() + got, buffer.size() - got);
      if (n == 0) return kStop;  // the sender is gone
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(std::string("read: ") + errno_message(errno));
      }
      got += static_cast<std::size_t>(n);
    }
    return read_first_line(buffer.data(), intact);
  }
  bool finish(std::uint64_t seq) {
    return intact && check_last_line(buffer.data(), buffer.size(), seq);
  }
};

// ---- Boost.Interprocess message_queue
// --------------------------------------------------------------

#if RINGBENCH_HAVE_BOOST
namespace bip = boost::interprocess;

struct BoostQueue {
  struct Shared {};
  std::size_t bytes = kMessageBytes;
  std::string name;
  std::optional<bip::message_queue> queue;
  std::vector<unsigned char> buffer;
  bool intact = true;

  void driver_setup(Shared&) {
    name = "ringbench-" + std::to_string(getpid()) + "-mq";
    bip::message_queue::remove(name.c_str());
    try {
      bip::message_queue created(bip::create_only, name.c_str(), 8, bytes);
    } catch (const std::exception& e) {
      throw Skip(std::string("boost message_queue create: ") + e.what());
    }
  }
  void driver_after_fork() {}
  void driver_cleanup() noexcept { bip::message_queue::remove(name.c_str()); }
  void sender_open(Shared&) {
    queue.emplace(bip::open_only, name.c_str());
    buffer.assign(bytes, 0);
  }
  bool sender_ready() { return true; }
  void sender_close() noexcept { queue.reset(); }
  void prepare(std::uint64_t seq) { stamp_payload(buffer.data(), buffer.size(), seq); }
  void send(std::uint64_t) { queue->send(buffer.data(), buffer.size(), 0); }
  void receiver_open(Shared&, int) {
    queue.emplace(bip::open_only, name.c_str());
    buffer.assign(bytes, 0);
  }
  void receiver_close() noexcept { queue.reset(); }
  std::uint64_t receive(const Control&) {
    bip::message_queue::size_type got = 0;
    unsigned int priority = 0;
    queue->receive(buffer.data(), buffer.size(), got,
                   priority);  // blocks on its condition variable
    if (got != buffer.size()) fail("message_queue delivered " + std::to_string(got) + " bytes");
    return read_first_line(buffer.data(), intact);
  }
  bool finish(std::uint64_t seq) {
    return intact && check_last_line(buffer.data(), buffer.size(), seq);
  }
};
#endif

RunSpec spec(Measure measure, WaitMode wait, std::size_t payload) {
  RunSpec s;
  s.receivers = 1;
  s.payload_bytes = payload;
  s.measure = measure;
  s.rx_wait = wait;
  s.gap_ns =
      (wait == WaitMode::blocking && measure == Measure::one_way) ? settings().blocking_gap_ns : 0;
  return s;
}

}  // namespace

void register_baselines() {
  const std::string bytes = "/bytes:" + std::to_string(kMessageBytes);
  add_benchmark("baseline/atomic/spin", [](benchmark::State& state) {
    AtomicSpin m;
    run(state, m, spec(Measure::one_way, WaitMode::spin, sizeof(std::uint64_t)));
  });
  add_benchmark("baseline/futex/blocking", [](benchmark::State& state) {
    FutexOneWay m;
    run(state, m, spec(Measure::one_way, WaitMode::blocking, sizeof(std::uint32_t)));
  });
  add_benchmark("baseline/futex/pingpong_rtt2", [](benchmark::State& state) {
    FutexPingPong m;
    run(state, m, spec(Measure::rtt_half, WaitMode::blocking, sizeof(std::uint32_t)));
  });
  add_benchmark("baseline/uds_seqpacket/blocking" + bytes, [](benchmark::State& state) {
    FdMessages m(FdMessages::Kind::seqpacket);
    run(state, m, spec(Measure::one_way, WaitMode::blocking, kMessageBytes));
  });
  add_benchmark("baseline/pipe/blocking" + bytes, [](benchmark::State& state) {
    FdMessages m(FdMessages::Kind::pipe);
    run(state, m, spec(Measure::one_way, WaitMode::blocking, kMessageBytes));
  });
  add_benchmark("baseline/boost_mq/blocking" + bytes, [](benchmark::State& state) {
#if RINGBENCH_HAVE_BOOST
    BoostQueue m;
    run(state, m, spec(Measure::one_way, WaitMode::blocking, kMessageBytes));
#else
    state.SkipWithError("skipped: Boost.Interprocess not found when ringbench was configured");
#endif
  });
  for (const std::size_t size : {std::size_t{64}, kMessageBytes}) {
    add_benchmark("throughput/boost_mq/blocking/readers:1/bytes:" + std::to_string(size),
                  [size](benchmark::State& state) {
#if RINGBENCH_HAVE_BOOST
                    BoostQueue m;
                    m.bytes = size;
                    RunSpec s = spec(Measure::one_way, WaitMode::blocking, size);
                    s.gap_ns = 0;
                    s.window = kThroughputWindow;
                    run(state, m, s);
#else
                    (void)size;
                    state.SkipWithError(
                        "skipped: Boost.Interprocess not found when ringbench was configured");
#endif
                  });
  }
}

}  // namespace ringbench
