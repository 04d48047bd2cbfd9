// gpu_test.cpp — GPU tests of the CUDA backend: a producer and readers in separate processes,
// frames written by a kernel and verified by a kernel.
//
//   ipcring_gpu_tests <case>[@legacy|@vmm]   the driver: runs one case; exit 0 passed, 1 failed,
//                                            77 skipped
//   ipcring_gpu_tests --list      the cases and the two paths
//   ipcring_gpu_tests --probe     the GPUs this process sees; exit 77 when none
//
// The path: `<case>` creates the channel with Backend::cuda (the producer chooses the path from its
// device) and the readers print which one it took; `<case>@legacy` pins Backend::cuda_legacy and
// `<case>@vmm` Backend::cuda_vmm, and then the producer and every Reader check that the channel
// took that path (Snapshot::cuda_path, Reader::cuda_path()): one that silently took the other fails
// the case. `vmm_pid_namespace` is VMM by default; `vmm_pid_namespace@legacy` is its refusal.
//
// The driver starts every role as a fresh process (fork + exec of this binary, so no process
// inherits a CUDA context): `ipcring_gpu_tests --role <role> <case>[@path] <channel> <notify-fd>
// <device>`. Without a usable GPU every case prints "SKIPPED: ..." with the CUDA error and exits 77
// (CTest's SKIP_RETURN_CODE).
#include <cuda.h>  // attribute numbers only: nothing of libcuda is linked
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_kernels.hpp"
#include "ipcring/ipcring.hpp"

// Each process here is single-threaded (the driver and every role): exit, setenv and friends are
// safe, so the thread-safety check is off for this file.
// NOLINTBEGIN(concurrency-mt-unsafe)

using namespace ipcring;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kPass = 0;
constexpr int kFail = 1;
constexpr int kUsage = 2;
constexpr int kAttachRefused =
    3;                       // reader: attach threw Errc::unsupported (expected in some cases)
constexpr int kCorrupt = 4;  // reader: saw corrupted words (expected only under a negative control)
constexpr int kWrongPath =
    5;  // reader: the channel took the other CUDA path than the one asked for
// reader in its own PID namespace on legacy CUDA IPC: attach refused, the message names the PID
// namespace (the expected refusal of vmm_pid_namespace@legacy)
constexpr int kRefusedPidNamespace = 6;
constexpr int kNotIsolated =
    7;  // reader of a pid_namespace case: not in a PID namespace of its own
constexpr int kSkip = 77;

struct Case {
  const char* name;
  const char* what;
  std::uint32_t slots;
  std::uint32_t readers;  // reader processes
  std::size_t frame_bytes;
  int frames;                       // frames the producer publishes
  bool producer_stream;             // Producer::loan(timeout, stream) instead of loan(timeout)
  std::uint64_t verify_delay_ns;    // reader: check each frame again after this long on the GPU
  int pace_us;                      // producer: pause between frames
  int gpus;                         // devices needed
  std::uint64_t fill_delay_ns = 0;  // producer: its fill starts this late on its stream
  // Negative control: IPCRING_CUDA_TEST_BREAK for the readers; the case passes only if they
  // then see corrupted frames (proving the positive case can fail).
  const char* break_mode = nullptr;
  bool legacy = false;            // every stream is the legacy default stream (nullptr everywhere)
  std::uint32_t per_process = 1;  // Readers per reader process
  bool takeover = false;  // the first producer is SIGKILLed mid-stream, a second one takes over
  // Reader: each frame is released from a new thread with no CUDA context current (a Python
  // capsule deleter or the garbage collector), on the stream the frame was waited on.
  bool release_elsewhere = false;
  // Producer: closes right after its last frame while the reader still reads (slow kernels) and
  // keeps the buffers mapped; prints how long the close took.
  bool close_mapped = false;
  // The reader process runs in its own PID namespace (unshare --pid --fork --mount-proc around
  // its exec): VMM descriptors reach it over the socket; legacy CUDA IPC must refuse it.
  bool pid_namespace = false;
};

const Case kCases[] = {
    {"roundtrip", "2 readers verify 400 kernel-written frames (loan(stream))", 8, 2, 1 << 20, 400,
     true, 0, 200, 1},
    {"slow_reader_stream",
     "a reader whose kernel checks each frame again 20 ms after release(stream) never sees the "
     "next frame's data; the producer uses loan(stream)",
     3, 1, 1 << 20, 60, true, 20'000'000, 0, 1},
    {"slow_reader_plain", "same, the producer uses the plain loan(timeout)", 3, 1, 1 << 20, 60,
     false, 20'000'000, 0, 1},
    {"reader_killed_plain",
     "a reader SIGKILLed while its 60 s kernel reads a released frame: the producer (plain "
     "loan) recycles the slot without waiting for that kernel",
     3, 1, 1 << 20, 1500, false, 0, 1000, 1},
    {"reader_killed_stream",
     "same with loan(stream): the GPU wait on the dead reader's fence word is released when the "
     "producer reaps it",
     3, 1, 1 << 20, 1500, true, 0, 1000, 1},
    {"reader_killed_successor",
     "a reader SIGKILLed while its 60 s kernel reads a released frame; a successor takes its "
     "entry at once and verifies, with slow kernels, every frame it reads: a late fence write "
     "of the dead reader must not stall the producer or expose a buffer under the successor",
     3, 1, 1 << 20, 4000, true, 2'000'000, 1000, 1},
    {"slow_fill",
     "2 readers verify 200 frames whose fill starts 2 ms late on the producer's stream", 8, 2,
     1 << 20, 200, true, 0, 200, 1, 2'000'000},
    {"neg_wait_on",
     "negative control of slow_fill: with wait_on disabled the readers must see corruption", 8, 2,
     1 << 20, 200, true, 0, 200, 1, 2'000'000, "wait_on"},
    {"neg_release_fence",
     "negative control of slow_reader_stream: with the release fence disabled the reader must see "
     "the next frame's data",
     3, 1, 1 << 20, 60, true, 20'000'000, 0, 1, 0, "release_fence"},
    {"legacy_stream",
     "plain loan, publish, wait_on and release on the legacy default stream, slow fill, slow "
     "reader",
     3, 1, 1 << 20, 60, false, 10'000'000, 0, 1, 2'000'000, nullptr, true},
    {"two_readers_one_process",
     "two Readers in one process share the mappings and both verify every frame", 6, 2, 1 << 20,
     200, true, 0, 200, 1, 1'000'000, nullptr, false, 2},
    {"takeover",
     "the producer is SIGKILLed with frames in flight; a new one takes the channel over and the "
     "reader, still attached, verifies its frames",
     4, 1, 1 << 20, 300, true, 0, 5000, 1, 1'000'000, nullptr, false, 1, true},
    {"uuid_visible",
     "a reader started with CUDA_VISIBLE_DEVICES=GPU-<uuid> finds the frames' GPU by UUID", 4, 1,
     1 << 20, 100, true, 0, 200, 1},
    {"peer_reader", "a reader on another GPU: works with peer access, else a clear error", 4, 1,
     1 << 20, 100, true, 0, 200, 2},
    {"visible_devices",
     "devices are matched by UUID: a reader with CUDA_VISIBLE_DEVICES renumbering finds the GPU, "
     "one that hides it gets a clear error",
     4, 1, 1 << 20, 100, true, 0, 200, 2},
    {"latency", "latency from the producer's stream reaching publish to the reader's kernel start",
     8, 1, 1 << 16, 2000, true, 0, 500, 1},
    {"release_elsewhere",
     "as the Python layer does: wait_on on the consumer's stream, release(stream) from a thread "
     "with no CUDA context (a capsule deleter); slow kernels must still be fenced",
     3, 1, 1 << 20, 60, true, 20'000'000, 0, 1, 0, nullptr, false, 1, false, true},
    {"close_mapped",
     "the producer closes right after its last frame while the reader's slow kernels still read "
     "and its mappings are open: no corrupted word, no fault, the close ends once the reader let "
     "go",
     3, 1, 1 << 20, 40, true, 10'000'000, 0, 1, 0, nullptr, false, 1, false, false, true},
    {"vmm_pid_namespace",
     "a reader in its own PID namespace verifies 200 frames (CUDA VMM: the buffers reach it as "
     "descriptors over the socket); @legacy: its attach must be refused naming the PID namespace",
     4, 1, 1 << 20, 200, true, 0, 200, 1, 0, nullptr, false, 1, false, false, false, true},
};

// Which CUDA path a run of a case asks for: `<case>` (Backend::cuda, the producer chooses),
// `<case>@legacy` or `<case>@vmm` (pinned, and checked by the producer and every Reader).
enum class Path { automatic, legacy, vmm };

const char* path_suffix(Path p) {
  return p == Path::legacy ? "legacy" : p == Path::vmm ? "vmm" : "auto";
}

Backend backend_of(Path p) {
  return p == Path::legacy ? Backend::cuda_legacy
         : p == Path::vmm  ? Backend::cuda_vmm
                           : Backend::cuda;
}

CudaPath cuda_path_of(Path p) {
  return p == Path::legacy ? CudaPath::legacy_ipc : p == Path::vmm ? CudaPath::vmm : CudaPath::none;
}

// A case and the path asked for; `name` is what the command line said (`roundtrip@vmm`).
struct Run {
  const Case* c = nullptr;
  Path path = Path::automatic;
  std::string name;
};

const Case* find_case(const std::string& name) {
  for (const Case& c : kCases) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// `<case>`, `<case>@legacy` or `<case>@vmm`; a Run without a case for anything else.
Run parse_run(const std::string& arg) {
  Run r;
  r.name = arg;
  const auto at = arg.find('@');
  const std::string base = arg.substr(0, at);
  if (at != std::string::npos) {
    const std::string suffix = arg.substr(at + 1);
    if (suffix == "legacy") {
      r.path = Path::legacy;
    } else if (suffix == "vmm") {
      r.path = Path::vmm;
    } else {
      return Run{};
    }
  }
  r.c = find_case(base);
  // vmm_pid_namespace is about the VMM path: without a suffix it pins it.
  if (r.c != nullptr && r.c->pid_namespace && r.path == Path::automatic) r.path = Path::vmm;
  return r;
}

// This process's PID namespace, as /proc/self/ns/pid names it ("pid:[4026531836]"), or "".
std::string pid_namespace_id() {
  char buf[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// This binary's path, for the exec behind `unshare` (where /proc/self/exe would be unshare).
std::string self_exe() {
  char buf[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("/proc/self/exe");
}

#define CUDA_OK(call)                                                                           \
  do {                                                                                          \
    const cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                                    \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
      std::exit(kFail);                                                                         \
    }                                                                                           \
  } while (0)

template <class T>
cudaError_t device_alloc(T** ptr, std::size_t count) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, count * sizeof(T));
  *ptr = static_cast<T*>(p);
  return e;
}

// Waits for `stream` without risking a hang: false after `limit`.
bool sync_within(cudaStream_t stream, std::chrono::milliseconds limit) {
  const auto end = Clock::now() + limit;
  for (;;) {
    const cudaError_t e = cudaStreamQuery(stream);
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) {
      std::fprintf(stderr, "cudaStreamQuery: %s\n", cudaGetErrorName(e));
      return false;
    }
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(200us);
  }
}

void notify(int fd, char c) {
  if (fd >= 0) (void)!write(fd, &c, 1);
}

// ---- roles
// ---------------------------------------------------------------------------------------

int producer_role(const Case& c, Path path, const std::string& channel, int fd, int device) {
  CUDA_OK(cudaSetDevice(device));
  ChannelConfig config;
  config.slots = c.slots;
  config.max_readers = c.readers;
  config.max_held = 1;
  config.frame_bytes = c.frame_bytes;
  config.backend = backend_of(path);
  config.cuda_device = device;
  std::optional<Producer> holder(Producer::create(channel, config));
  Producer& p = *holder;
  const CudaPath took = inspect(channel).cuda_path;
  std::printf("producer: Backend::%s took the %s path\n", to_string(config.backend),
              to_string(took));
  if (path != Path::automatic && took != cuda_path_of(path)) {
    std::printf("FAILED: producer: asked for Backend::%s, the channel took %s\n",
                to_string(config.backend), to_string(took));
    return kWrongPath;
  }
  cudaStream_t stream = nullptr;
  if (!c.legacy) CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  notify(fd, 'P');
  const auto attach_deadline = Clock::now() + 30s;
  while (inspect(channel).readers.size() < c.readers) {
    if (Clock::now() > attach_deadline) {
      std::fprintf(stderr, "producer: readers did not attach\n");
      return kFail;
    }
    std::this_thread::sleep_for(1ms);
  }
  const bool latency = std::string(c.name) == "latency";
  const auto start = Clock::now();
  for (int i = 0; i < c.frames; ++i) {
    Result<Loan> loan = c.producer_stream ? p.loan(10s, stream) : p.loan(10s);
    if (!loan) {
      std::fprintf(stderr, "producer: loan of frame %d failed: %s\n", i, to_string(loan.status()));
      return kFail;
    }
    CUDA_OK(static_cast<cudaError_t>(
        gpu_fill_slow(loan->data(), c.frame_bytes, loan->sequence(), c.fill_delay_ns, stream)));
    if (latency) CUDA_OK(static_cast<cudaError_t>(gpu_stamp(loan->data(), stream)));
    p.publish(std::move(*loan), c.frame_bytes, stream);
    if (c.pace_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(c.pace_us));
    if (i % 16 == 15 && !sync_within(stream, 10s)) {
      std::fprintf(stderr,
                   "producer: its stream hung at frame %d (a release fence that never "
                   "completes?)\n",
                   i);
      return kFail;
    }
  }
  if (!sync_within(stream, 10s)) {
    std::fprintf(stderr, "producer: its stream hung at the end\n");
    return kFail;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("producer: %d frames in %.2f s, %llu readers reaped\n", c.frames, secs,
              static_cast<unsigned long long>(inspect(channel).producer.readers_reaped));
  if (c.close_mapped) {
    // Close with the reader attached, its mappings open and its kernels running: the close waits
    // (bounded, 2 s) until it closed them, and frees nothing it still maps.
    const auto t0 = Clock::now();
    holder.reset();
    std::printf("producer: close with a reader mapping the buffers took %.0f ms\n",
                std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    if (stream != nullptr) CUDA_OK(cudaStreamDestroy(stream));
    std::this_thread::sleep_for(3s);  // the exporter lives on while the reader finishes
    return kPass;
  }
  const auto detach_deadline = Clock::now() + 30s;
  while (!inspect(channel).readers.empty() && Clock::now() < detach_deadline) {
    (void)p.reap_dead_readers();
    std::this_thread::sleep_for(2ms);
  }
  if (stream != nullptr) CUDA_OK(cudaStreamDestroy(stream));
  return kPass;
}

int reader_role(const Case& c, Path path, const std::string& channel, int fd, int device,
                bool kill_me) {
  if (device >= 0) CUDA_OK(cudaSetDevice(device));
  if (c.pid_namespace) {
    // The case means nothing unless this process really is in another PID namespace.
    const char* parent = std::getenv("IPCRING_GPU_TEST_PARENT_PIDNS");
    const std::string mine = pid_namespace_id();
    std::printf("reader: pid %d in PID namespace %s (the driver's: %s)\n",
                static_cast<int>(getpid()), mine.c_str(), parent != nullptr ? parent : "?");
    if (parent == nullptr || mine.empty() || mine == parent) {
      std::printf("FAILED: reader: not in a PID namespace of its own\n");
      return kNotIsolated;
    }
  }
  ReaderOptions options;
  options.policy = std::string(c.name) == "latency" ? ReadPolicy::latest : ReadPolicy::sequential;
  options.spin = 100us;
  std::vector<Reader> readers;
  try {
    for (std::uint32_t i = 0; i < c.per_process; ++i) {
      readers.push_back(Reader::attach(channel, options));
    }
  } catch (const Error& e) {
    std::printf("reader: attach refused (%s): %s\n", to_string(e.code()), e.what());
    std::fflush(stdout);
    if (c.pid_namespace) {
      const std::string what = e.what();
      if (what.find("PID namespace") != std::string::npos ||
          what.find("pid namespace") != std::string::npos)
        return kRefusedPidNamespace;
    }
    return e.code() == Errc::unsupported ? kAttachRefused : kFail;
  }
  for (const Reader& r : readers) {
    const CudaPath took = r.cuda_path();
    std::printf("reader: attached, the channel's path is %s (asked: %s)\n", to_string(took),
                path == Path::automatic ? "the producer's choice" : to_string(cuda_path_of(path)));
    if (path != Path::automatic && took != cuda_path_of(path)) {
      std::printf("FAILED: reader: asked for %s, the channel took %s\n",
                  to_string(cuda_path_of(path)), to_string(took));
      return kWrongPath;
    }
  }
  std::fflush(stdout);
  cudaStream_t stream = nullptr;
  if (!c.legacy) CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned long long* errors = nullptr;
  CUDA_OK(device_alloc(&errors, 1));
  CUDA_OK(cudaMemset(errors, 0, sizeof *errors));
  const bool latency = std::string(c.name) == "latency";
  std::uint64_t* lat = nullptr;
  if (latency) CUDA_OK(device_alloc(&lat, static_cast<std::size_t>(c.frames)));
  notify(fd, 'A');
  int frames = 0;
  int dropped = 0;  // frames wait_on refused (producer_gone: their producer was killed)
  bool ended = false;
  bool gone_seen = false;
  while (frames < c.frames && !ended) {
    for (Reader& reader : readers) {
      Result<Frame> f = reader.read(c.takeover ? 20s : 3s);
      if (!f) {
        if (f.status() == Status::producer_gone && c.takeover && !gone_seen) {
          gone_seen = true;  // the first producer died: wait for its successor
          std::printf("reader: producer_gone after %d frames; waiting for the takeover\n", frames);
          std::fflush(stdout);
          continue;
        }
        if (f.status() == Status::producer_gone || f.status() == Status::timeout) {
          ended = true;
          break;
        }
        std::fprintf(stderr, "reader: read: %s\n", to_string(f.status()));
        return kFail;
      }
      if (const Status w = f->wait_on(stream); w != Status::ok) {
        if (w == Status::producer_gone && c.takeover) {
          // A frame of the killed producer whose writes nothing says completed: dropped unread.
          ++dropped;
          f->release();
          continue;
        }
        std::fprintf(stderr, "reader: wait_on failed: %s\n", to_string(w));
        return kFail;
      }
      if (latency) {
        CUDA_OK(static_cast<cudaError_t>(gpu_probe(f->data(), lat + frames, stream)));
      } else {
        CUDA_OK(static_cast<cudaError_t>(
            gpu_verify(f->data(), f->size(), f->sequence(), c.verify_delay_ns, errors, stream)));
      }
      if (kill_me) {
        // Verify the frame first (so the kill hits a reader that really read it), then keep the
        // GPU reading it for 60 s, release it at once, and wait to be killed. A producer that
        // finishes well within those 60 s was released by the reaper's fence write, not by the
        // kernel ending (or the driver finishing the dead context's work).
        CUDA_OK(cudaStreamSynchronize(stream));
        unsigned long long bad = 0;
        CUDA_OK(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost));
        std::printf("victim: frame %llu verified (%llu corrupted words); now reading it for 60 s\n",
                    static_cast<unsigned long long>(f->sequence()), bad);
        std::fflush(stdout);
        if (bad != 0) return kFail;
        CUDA_OK(static_cast<cudaError_t>(gpu_spin(f->data(), 60'000'000'000ULL, errors, stream)));
        f->release(stream);
        notify(fd, 'R');
        for (;;) pause();
      }
      if (c.release_elsewhere) {
        std::thread([&] { f->release(stream); }).join();  // a thread that never set a device
      } else {
        f->release(stream);  // at once: the fence keeps the buffer ours until the kernel is done
      }
    }
    if (!ended) ++frames;
  }
  CUDA_OK(cudaStreamSynchronize(stream));
  unsigned long long bad = 0;
  CUDA_OK(cudaMemcpy(&bad, errors, sizeof bad, cudaMemcpyDeviceToHost));
  if (latency) {
    std::vector<std::uint64_t> ns(static_cast<std::size_t>(frames));
    CUDA_OK(cudaMemcpy(ns.data(), lat, ns.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost));
    std::sort(ns.begin(), ns.end());
    auto pct = [&](double q) {
      return ns.empty()
                 ? 0.0
                 : static_cast<double>(
                       ns[static_cast<std::size_t>(q * static_cast<double>(ns.size() - 1))]) /
                       1000.0;
    };
    std::printf(
        "latency (producer stream at publish -> reader kernel start), %d frames: "
        "p50 %.1f us  p90 %.1f us  p99 %.1f us  max %.1f us\n",
        frames, pct(0.5), pct(0.9), pct(0.99), pct(1.0));
  }
  std::uint64_t overruns = 0;
  for (const Reader& r : readers) overruns += r.overruns();
  std::printf(
      "reader: %d frames x %zu readers, %llu corrupted words, %llu overruns, %d frames of a killed "
      "producer dropped by wait_on\n",
      frames, readers.size(), bad, static_cast<unsigned long long>(overruns), dropped);
  readers.clear();
  if (bad != 0) return kCorrupt;
  // A slow reader under a fast producer reads few frames; the point is zero corrupted words.
  const int minimum = latency ? 100 : std::max(3, c.frames / 20);
  return frames >= minimum ? kPass : kFail;
}

// ---- driver
// --------------------------------------------------------------------------------------

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of its notification pipe
  std::string role;
};

// A reader of a pid_namespace case runs as `unshare --pid --fork --kill-child --mount-proc
// <this binary> --role ...`: PID 1 of a namespace of its own, killed with unshare.
Child spawn(const std::string& role, const Run& run, const std::string& channel, int device,
            const char* visible_devices = nullptr) {
  const Case& c = *run.c;
  const bool own_pid_namespace = c.pid_namespace && role != "producer";
  const std::string exe = self_exe();
  const std::string parent_ns = pid_namespace_id();
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) std::exit(kFail);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (visible_devices != nullptr) setenv("CUDA_VISIBLE_DEVICES", visible_devices, 1);
    if (role != "producer" && c.break_mode != nullptr) {
      setenv("IPCRING_CUDA_TEST_BREAK", c.break_mode, 1);
    }
    const std::string fd = std::to_string(fds[1]);
    const std::string dev = std::to_string(device);
    if (own_pid_namespace) {
      setenv("IPCRING_GPU_TEST_PARENT_PIDNS", parent_ns.c_str(), 1);
      execlp("unshare", "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", exe.c_str(),
             "--role", role.c_str(), run.name.c_str(), channel.c_str(), fd.c_str(), dev.c_str(),
             static_cast<char*>(nullptr));
    } else {
      execl("/proc/self/exe", "ipcring_gpu_tests", "--role", role.c_str(), run.name.c_str(),
            channel.c_str(), fd.c_str(), dev.c_str(), static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  return Child{pid, fds[0], role};
}

bool wait_for(const Child& ch, char c, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  while (Clock::now() < end) {
    char got = 0;
    if (read(ch.fd, &got, 1) == 1 && got == c) return true;
    std::this_thread::sleep_for(1ms);
  }
  return false;
}

// The child's exit code, or -1 after killing it when it did not finish in time.
int finish(const Child& ch, std::chrono::seconds limit) {
  const auto end = Clock::now() + limit;
  int status = 0;
  while (Clock::now() < end) {
    const pid_t r = waitpid(ch.pid, &status, WNOHANG);
    if (r == ch.pid) {
      close(ch.fd);
      if (WIFEXITED(status)) return WEXITSTATUS(status);
      std::fprintf(stderr, "%s: killed by signal %d\n", ch.role.c_str(), WTERMSIG(status));
      return -1;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::fprintf(stderr, "%s: did not finish within %lld s (hang): killing it\n", ch.role.c_str(),
               static_cast<long long>(limit.count()));
  kill(ch.pid, SIGKILL);
  waitpid(ch.pid, &status, 0);
  close(ch.fd);
  return -1;
}

// A driver that exists but is older than this runtime is a failure, not a skip: the machine has a
// GPU that these tests should have run on.
bool driver_too_old(cudaError_t e) {
  int driver = 0;
  int runtime = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  if (e != cudaErrorInsufficientDriver || cudaDriverGetVersion(&driver) != cudaSuccess ||
      driver == 0) {
    return false;
  }
  std::printf(
      "FAILED: the NVIDIA driver supports CUDA %d.%d, older than this build's runtime "
      "%d.%d: update the driver\n",
      driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  return true;
}

// Whether this process may make a PID namespace (`unshare --pid --fork --mount-proc true`); when
// not, `why` holds what unshare said.
bool pid_namespace_available(std::string* why) {
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) {
    *why = "pipe failed";
    return false;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    dup2(fds[1], STDERR_FILENO);
    dup2(fds[1], STDOUT_FILENO);
    execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", "true",
           static_cast<char*>(nullptr));
    std::fprintf(stderr, "cannot run unshare (util-linux): %s", std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  std::string said;
  char buf[256];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;)
    said.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  *why = said.empty() ? "unshare --pid --fork --mount-proc failed" : said;
  return false;
}

int run_case(const Run& run) {
  const Case& c = *run.c;
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (driver_too_old(e)) return kFail;
  if (e != cudaSuccess || devices == 0) {
    std::printf(
        "SKIPPED: GPU test '%s' needs a CUDA device; this machine has none usable "
        "(cudaGetDeviceCount: %s)\n",
        run.name.c_str(), e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return kSkip;
  }
  if (devices < c.gpus) {
    std::printf("SKIPPED: GPU test '%s' needs %d CUDA devices; this machine has %d\n",
                run.name.c_str(), c.gpus, devices);
    return kSkip;
  }
  if (c.pid_namespace) {
    std::string why;
    if (!pid_namespace_available(&why)) {
      std::printf("SKIPPED: GPU test '%s' needs a PID namespace for its reader; unshare said: %s\n",
                  run.name.c_str(), why.c_str());
      return kSkip;
    }
  }
  std::printf("%s: %s (path: %s)\n", run.name.c_str(), c.what,
              run.path == Path::automatic ? "Backend::cuda, the producer chooses"
                                          : to_string(backend_of(run.path)));
  std::fflush(stdout);
  const std::string channel =
      std::string("gpu-") + c.name + "-" + path_suffix(run.path) + "-" + std::to_string(getpid());
  const std::string name(c.name);
  bool ok = true;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) {
      std::fprintf(stderr, "FAILED: %s\n", what);
      ok = false;
    }
  };

  if (name == "peer_reader" || name == "visible_devices") {
    Child prod = spawn("producer", run, channel, 1);
    expect(wait_for(prod, 'P', 60s), "the producer started");
    if (name == "peer_reader") {
      int can = 0;
      CUDA_OK(cudaDeviceCanAccessPeer(&can, 0, 1));
      Child rd = spawn("reader", run, channel, 0);
      const int rc = finish(rd, 90s);
      if (can != 0) {
        expect(rc == kPass, "a reader on device 0 reads device 1's frames through peer access");
      } else {
        expect(rc == kAttachRefused, "a reader on a GPU without peer access is refused clearly");
      }
      if (rc != kPass) kill(prod.pid, SIGTERM);
    } else {
      // This process's device 1 is ordinal 0 for a reader that sees only it.
      Child hidden = spawn("reader", run, channel, -1, "0");
      expect(finish(hidden, 60s) == kAttachRefused,
             "a reader that cannot see the frames' GPU is refused with a clear error");
      Child renumbered = spawn("reader", run, channel, 0, "1");
      expect(finish(renumbered, 90s) == kPass, "a reader seeing the GPU as ordinal 0 reads it");
    }
    const int rc = finish(prod, 90s);
    if (name == "visible_devices") expect(rc == kPass, "the producer finished");
    remove_channel(channel, true);
    return ok ? kPass : kFail;
  }

  Child prod = spawn("producer", run, channel, 0);
  expect(wait_for(prod, 'P', 60s), "the producer started");
  const bool kill_case = name.rfind("reader_killed", 0) == 0;
  std::string uuid;  // uuid_visible: the reader sees the GPU only by its UUID
  if (name == "uuid_visible") {
    cudaDeviceProp prop{};
    CUDA_OK(cudaGetDeviceProperties(&prop, 0));
    static const char* const kHex = "0123456789abcdef";
    uuid = "GPU-";
    for (int i = 0; i < 16; ++i) {
      if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
      const auto b = static_cast<unsigned char>(prop.uuid.bytes[i]);
      uuid += kHex[b >> 4];
      uuid += kHex[b & 0xf];
    }
    std::printf("uuid_visible: CUDA_VISIBLE_DEVICES=%s\n", uuid.c_str());
  }
  if (c.takeover) {
    Child rd = spawn("reader", run, channel, 0);
    expect(wait_for(rd, 'A', 60s), "the reader attached");
    std::this_thread::sleep_for(700ms);  // about 140 of its 300 frames, at 5 ms
    kill(prod.pid, SIGKILL);
    (void)finish(prod, 30s);
    std::printf("takeover: first producer SIGKILLed; starting its successor\n");
    Child next = spawn("producer", run, channel, 0);
    expect(wait_for(next, 'P', 60s), "the successor took the channel over");
    expect(finish(rd, 120s) == kPass, "the reader verified the frames of both producers");
    expect(finish(next, 120s) == kPass, "the successor finished");
    remove_channel(channel, true);
    return ok ? kPass : kFail;
  }
  if (c.pid_namespace && run.path == Path::legacy) {
    // Legacy CUDA IPC cannot serve a reader in another PID namespace: the expected outcome is a
    // refusal at attach whose message names the PID namespace (PASS). Any other clean outcome is
    // recorded as an ANSWER (what this driver does); corrupted frames, a crash or a hang fail.
    Child rd = spawn("reader", run, channel, 0);
    const int rc = finish(rd, 90s);
    kill(prod.pid, SIGTERM);
    (void)finish(prod, 30s);
    switch (rc) {
      case kRefusedPidNamespace:
        std::printf("pid namespace: the legacy attach was refused naming the PID namespace\n");
        break;
      case kAttachRefused:
      case kFail:
        std::printf(
            "ANSWER: legacy CUDA IPC with the reader in its own PID namespace: it %s (exit %d), "
            "but its message does not name the PID namespace (the reader's lines above)\n",
            rc == kAttachRefused ? "was refused at attach as unsupported" : "failed", rc);
        break;
      case kPass:
        std::printf(
            "ANSWER: legacy CUDA IPC worked for a reader in its own PID namespace on this "
            "driver: it verified every frame\n");
        break;
      default:
        expect(false,
               "the legacy reader in its own PID namespace is refused or fails cleanly "
               "(no corrupted frame, crash or hang)");
    }
    remove_channel(channel, true);
    return ok ? kPass : kFail;
  }
  std::vector<Child> readers;
  for (std::uint32_t i = 0; i < c.readers / c.per_process; ++i) {
    readers.push_back(spawn(kill_case ? "victim" : "reader", run, channel, 0,
                            uuid.empty() ? nullptr : uuid.c_str()));
  }
  if (kill_case) {
    expect(wait_for(readers[0], 'R', 60s), "the reader released a frame its kernel still reads");
    // Let the producer come round to that slot (it cycles the 3 slots every few ms), so that with
    // loan(stream) its stream is already waiting on the fence when the reader dies.
    std::this_thread::sleep_for(200ms);
    const auto t0 = Clock::now();
    kill(readers[0].pid, SIGKILL);
    // reader_killed_successor: a new reader attaches at once (max_readers 1: it can only take the
    // dead reader's entry, reaping it as it does), while the dead context may still hold queued
    // fence writes.
    std::optional<Child> successor;
    if (name == "reader_killed_successor") successor = spawn("reader", run, channel, 0);
    const int rc = finish(prod, 75s);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("kill: the producer finished %.2f s after the reader was killed (exit %d): %s\n",
                took, rc,
                took < 50.0 ? "its wait ended by the reaper's fence write (the dead reader's "
                              "60 s kernel could not have finished)"
                            : "it waited about as long as the dead reader's kernel ran");
    const auto v0 = Clock::now();
    (void)finish(readers[0], 80s);
    std::printf("kill: the victim process was gone %.2f s after the producer finished\n",
                std::chrono::duration<double>(Clock::now() - v0).count());
    expect(rc == kPass, "the producer recycled the dead reader's slot and never hung");
    expect(took < 50.0, "the producer did not wait for the dead reader's kernel");
    if (successor) {
      expect(finish(*successor, 90s) == kPass,
             "the successor in the dead reader's entry verified every frame it read");
    }
  } else if (c.break_mode != nullptr) {
    bool corrupt = false;
    for (const Child& r : readers) corrupt = finish(r, 120s) == kCorrupt || corrupt;
    (void)finish(prod, 120s);
    std::printf("negative control (%s disabled): readers %s\n", c.break_mode,
                corrupt ? "saw corrupted frames, as they must" : "saw NO corruption");
    expect(corrupt, "the negative control makes the positive test fail");
  } else {
    for (const Child& r : readers) expect(finish(r, 120s) == kPass, "reader verified every frame");
    expect(finish(prod, 120s) == kPass, "the producer finished");
  }
  remove_channel(channel, true);
  return ok ? kPass : kFail;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--probe") == 0) {
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (driver_too_old(e)) return kFail;
    if (e != cudaSuccess || devices == 0) {
      std::printf("no usable CUDA device (cudaGetDeviceCount: %s)\n",
                  e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
      return kSkip;
    }
    int driver = 0;
    int runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    std::printf("CUDA driver %d, runtime %d, %d device(s):\n", driver, runtime, devices);
    for (int d = 0; d < devices; ++d) {
      cudaDeviceProp prop{};
      CUDA_OK(cudaGetDeviceProperties(&prop, d));
      static const char* const kModes[] = {"default", "exclusive-thread", "prohibited",
                                           "exclusive-process"};
      int mode = -1;
      (void)cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d);
      std::printf(
          "  %d: %s (sm_%d%d), %zu MiB, compute mode %s, integrated %d, unified "
          "addressing %d\n",
          d, prop.name, prop.major, prop.minor, prop.totalGlobalMem >> 20,
          mode >= 0 && mode < 4 ? kModes[mode] : "unknown", prop.integrated,
          prop.unifiedAddressing);
      // What the backend's fences and registration rely on (docs/cuda.md); -1: not reported.
      // CAN_USE_64_BIT_STREAM_MEM_OPS is a driver attribute the runtime has no name for; the
      // runtime's numbering is the driver's, so it is asked by number (-1: refused).
      const auto attr = [d](cudaDeviceAttr a) {
        int v = -1;
        if (cudaDeviceGetAttribute(&v, a, d) != cudaSuccess) {
          (void)cudaGetLastError();
          v = -1;
        }
        return v;
      };
      char uuid[64];
      std::snprintf(uuid, sizeof uuid, "%02x%02x%02x%02x-...", prop.uuid.bytes[0] & 0xff,
                    prop.uuid.bytes[1] & 0xff, prop.uuid.bytes[2] & 0xff,
                    prop.uuid.bytes[3] & 0xff);
      std::printf(
          "  attributes %d: CAN_USE_64_BIT_STREAM_MEM_OPS %d, HOST_REGISTER_SUPPORTED %d, "
          "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM %d, CAN_FLUSH_REMOTE_WRITES %d, "
          "COMPUTE_MODE %d, IPC_EVENT_SUPPORTED %d, uuid %s (MIG mode: nvidia-smi's "
          "mig.mode.current above)\n",
          d, attr(static_cast<cudaDeviceAttr>(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)),
          attr(cudaDevAttrHostRegisterSupported),
          attr(cudaDevAttrCanUseHostPointerForRegisteredMem), attr(cudaDevAttrCanFlushRemoteWrites),
          mode, attr(cudaDevAttrIpcEventSupport), uuid);
    }
    return kPass;
  }
  if (argc >= 2 && std::strcmp(argv[1], "--list") == 0) {
    for (const Case& c : kCases) std::printf("%-24s %s\n", c.name, c.what);
    std::printf(
        "\nEvery case runs on either CUDA path: <case>@legacy (Backend::cuda_legacy) or "
        "<case>@vmm\n"
        "(Backend::cuda_vmm), and the producer and readers fail the case if the channel took the\n"
        "other path; <case> alone uses Backend::cuda (the producer chooses) and prints the path\n"
        "taken. vmm_pid_namespace alone is @vmm; vmm_pid_namespace@legacy expects the refusal.\n");
    return kPass;
  }
  if (argc >= 7 && std::strcmp(argv[1], "--role") == 0) {
    const Run run = parse_run(argv[3]);
    if (run.c == nullptr) return kUsage;
    const Case& c = *run.c;
    const std::string role = argv[2];
    const int fd = std::atoi(argv[5]);
    const int device = std::atoi(argv[6]);
    try {
      if (role == "producer") return producer_role(c, run.path, argv[4], fd, device);
      if (role == "reader") return reader_role(c, run.path, argv[4], fd, device, false);
      if (role == "victim") return reader_role(c, run.path, argv[4], fd, device, true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", role.c_str(), e.what());
      return kFail;
    }
    return kUsage;
  }
  if (argc == 2) {
    const Run run = parse_run(argv[1]);
    if (run.c != nullptr) return run_case(run);
  }
  std::fprintf(stderr, "usage: %s <case>[@legacy|@vmm] | --list | --probe\n", argv[0]);
  return kUsage;
}

// NOLINTEND(concurrency-mt-unsafe)
