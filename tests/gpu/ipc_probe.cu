// ipc_probe — answers, on a real GPU, the CUDA facts the CUDA backend's design depends on or
// deliberately avoids depending on (docs/cuda.md, "What the design relies on"). Standalone: links
// only the static CUDA runtime (driver entry points are loaded at run time), two processes (this
// binary re-executed as the importer), no ipcring code.
//
//   ipc_probe            runs every check; prints one line per answer:
//                          ipc_probe: <check>: PASS|FAIL|ANSWER <what happened> (<timings>)
//                        PASS/FAIL for facts the design relies on, ANSWER for the behaviour of
//                        things it avoids (recorded, not judged). Exit 0: every relied-on fact
//                        holds; 1: one does not (or the driver is too old); 77: no GPU here.
//   ipc_probe <check>... runs only the named checks (event_record, shm_fence, open_twice,
//                        close_in_flight, free_while_mapped, write_after_kill, event_killed)
//   ipc_probe --importer <check> <fd-in> <fd-out>    (internal) the second process
//
// Each check is bounded (a few seconds); a wait that does not end is reported, never waited out.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

// Every process here is single-threaded.
// NOLINTBEGIN(concurrency-mt-unsafe)

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSkip = 77;
int failures = 0;

__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void spin_kernel(std::uint64_t ns, const std::uint64_t* read, std::uint64_t* sink) {
  const std::uint64_t end = global_ns() + ns;
  std::uint64_t acc = 0;
  while (global_ns() < end) {
    if (read != nullptr) acc += read[acc & 7];
  }
  if (sink != nullptr) *sink = acc;
}

#define OK(call)                                                                 \
  do {                                                                           \
    const cudaError_t e_ = (call);                                               \
    if (e_ != cudaSuccess) {                                                     \
      std::printf("ipc_probe: error: %s:%d %s: %s\n", __FILE__, __LINE__, #call, \
                  cudaGetErrorName(e_));                                         \
      std::exit(1);                                                              \
    }                                                                            \
  } while (0)

using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
StreamValueFn write_value64 = nullptr;
StreamValueFn wait_value64 = nullptr;

void load_driver_entry_points() {
  cudaDriverEntryPointQueryResult q{};
  void* p = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &p, 12000, cudaEnableDefault, &q) ==
      cudaSuccess)
    write_value64 = reinterpret_cast<StreamValueFn>(p);
  p = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue64", &p, 12000, cudaEnableDefault, &q) ==
      cudaSuccess)
    wait_value64 = reinterpret_cast<StreamValueFn>(p);
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void report(const char* check, const char* verdict, const std::string& what) {
  std::printf("ipc_probe: %s: %s %s\n", check, verdict, what.c_str());
  std::fflush(stdout);
  if (std::strcmp(verdict, "FAIL") == 0) ++failures;
}

// Polls `stream` until done or `limit`; returns the time it took, or -1.
double stream_done_within(cudaStream_t s, double limit_ms) {
  const auto t = Clock::now();
  while (ms_since(t) < limit_ms) {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return ms_since(t);
    if (e != cudaErrorNotReady) return -2;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return -1;
}

// ---- the second process ------------------------------------------------------------------------

struct Importer {
  pid_t pid = -1;
  int to = -1;    // we write
  int from = -1;  // we read
};

Importer spawn(const char* check) {
  int down[2];
  int up[2];
  if (pipe(down) != 0 || pipe(up) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    close(down[1]);
    close(up[0]);
    const std::string in = std::to_string(down[0]);
    const std::string out = std::to_string(up[1]);
    execl("/proc/self/exe", "ipc_probe", "--importer", check, in.c_str(), out.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(down[0]);
  close(up[1]);
  return Importer{pid, down[1], up[0]};
}

bool send_all(int fd, const void* p, std::size_t n) {
  return write(fd, p, n) == static_cast<ssize_t>(n);
}
bool recv_all(int fd, void* p, std::size_t n, int timeout_ms = 20000) {
  auto* b = static_cast<char*>(p);
  std::size_t got = 0;
  const auto t = Clock::now();
  fcntl(fd, F_SETFL, O_NONBLOCK);
  while (got < n) {
    const ssize_t r = read(fd, b + got, n - got);
    if (r > 0) {
      got += static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0 || ms_since(t) > timeout_ms) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}
int reap(Importer& im, bool kill_it = false) {
  if (kill_it) kill(im.pid, SIGKILL);
  int status = 0;
  const auto t = Clock::now();
  while (waitpid(im.pid, &status, WNOHANG) == 0) {
    if (ms_since(t) > 20000) {
      kill(im.pid, SIGKILL);
      waitpid(im.pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  close(im.to);
  close(im.from);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The importer's side of every check. Protocol: it reads what the exporter sends, answers with
// one status byte per step ('k' ok, 'x' failed) or with data.
int importer(const std::string& check, int in, int out) {
  OK(cudaSetDevice(0));
  load_driver_entry_points();
  cudaStream_t s = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto answer = [&](char c) { (void)send_all(out, &c, 1); };
  if (check == "event_record" || check == "event_killed") {
    cudaIpcEventHandle_t h{};
    std::uint64_t spin = 0;
    if (!recv_all(in, &h, sizeof h) || !recv_all(in, &spin, sizeof spin)) return 2;
    cudaEvent_t e = nullptr;
    if (cudaIpcOpenEventHandle(&e, h) != cudaSuccess) return answer('x'), 1;
    spin_kernel<<<1, 1, 0, s>>>(spin, nullptr, nullptr);
    if (cudaEventRecord(e, s) != cudaSuccess) return answer('x'), 1;
    answer('k');
    if (check == "event_killed") {
      for (;;) pause();  // the exporter kills us with the record behind the kernel
    }
    OK(cudaStreamSynchronize(s));
    char bye = 0;
    (void)recv_all(in, &bye, 1);
    return 0;
  }
  if (check == "close_in_flight" || check == "free_while_mapped" || check == "open_twice") {
    cudaIpcMemHandle_t h{};
    if (!recv_all(in, &h, sizeof h)) return 2;
    void* p = nullptr;
    cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) return answer('x'), 1;
    if (check == "open_twice") {
      void* q = nullptr;
      e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess);
      const char r =
          e == cudaSuccess ? (q == p ? 's' : 'd') : (e == cudaErrorAlreadyMapped ? 'a' : 'x');
      (void)cudaGetLastError();
      answer(r);
      if (e == cudaSuccess) (void)cudaIpcCloseMemHandle(q);
      (void)cudaIpcCloseMemHandle(p);
      return 0;
    }
    if (check == "close_in_flight") {
      std::uint64_t* sink = nullptr;
      OK(cudaMalloc(reinterpret_cast<void**>(&sink), 8));
      spin_kernel<<<1, 1, 0, s>>>(500'000'000ULL, static_cast<const std::uint64_t*>(p), sink);
      const auto t = Clock::now();
      e = cudaIpcCloseMemHandle(p);
      const double close_ms = ms_since(t);
      const cudaError_t k = cudaStreamSynchronize(s);
      std::printf(
          "ipc_probe: close_in_flight: ANSWER cudaIpcCloseMemHandle with a 500 ms kernel "
          "reading the mapping returned %s after %.1f ms; the kernel then ended with %s\n",
          cudaGetErrorName(e), close_ms, cudaGetErrorName(k));
      std::fflush(stdout);
      answer('k');
      return 0;
    }
    // free_while_mapped: tell the exporter we mapped, wait until it freed, then read.
    answer('k');
    char go = 0;
    if (!recv_all(in, &go, 1)) return 2;
    std::uint64_t v = 0;
    e = cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost);
    std::printf(
        "ipc_probe: free_while_mapped: ANSWER after the exporter's cudaFree, the importer's "
        "read of its mapping returned %s (value 0x%llx, written 0x5a5a before the free)\n",
        cudaGetErrorName(e), static_cast<unsigned long long>(v));
    std::fflush(stdout);
    (void)cudaGetLastError();
    (void)cudaIpcCloseMemHandle(p);
    answer('k');
    return 0;
  }
  if (check == "write_after_kill") {
    // Holds a robust mutex in the shared page (as a reader holds its lease), queues a 2 s kernel
    // and behind it a stream write of the word, then waits to be SIGKILLed.
    char name[64] = {};
    if (!recv_all(in, name, sizeof name)) return 2;
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return answer('x'), 1;
    void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return answer('x'), 1;
    auto* lease = reinterpret_cast<pthread_mutex_t*>(static_cast<char*>(base) + 64);
    if (pthread_mutex_lock(lease) != 0) return answer('x'), 1;
    if (cudaHostRegister(base, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
        cudaSuccess)
      return answer('x'), 1;
    void* dptr = nullptr;
    if (cudaHostGetDevicePointer(&dptr, base, 0) != cudaSuccess || write_value64 == nullptr)
      return answer('x'), 1;
    spin_kernel<<<1, 1, 0, s>>>(2'000'000'000ULL, nullptr, nullptr);
    if (write_value64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(dptr), 0x600dULL,
                      CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
      return answer('x'), 1;
    answer('k');
    for (;;) pause();
  }
  if (check == "shm_fence") {
    char name[64] = {};
    if (!recv_all(in, name, sizeof name)) return 2;
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) return answer('x'), 1;
    void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) return answer('x'), 1;
    if (cudaHostRegister(base, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
        cudaSuccess)
      return answer('x'), 1;
    void* dptr = nullptr;
    if (cudaHostGetDevicePointer(&dptr, base, 0) != cudaSuccess || write_value64 == nullptr)
      return answer('x'), 1;
    spin_kernel<<<1, 1, 0, s>>>(300'000'000ULL, nullptr, nullptr);
    if (write_value64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(dptr), 7,
                      CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
      return answer('x'), 1;
    answer('k');
    OK(cudaStreamSynchronize(s));
    char bye = 0;
    (void)recv_all(in, &bye, 1);
    (void)cudaHostUnregister(base);
    return 0;
  }
  return 2;
}

// ---- the checks (exporter side) ----------------------------------------------------------------

void check_event_record() {
  cudaEvent_t e = nullptr;
  OK(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcEventHandle_t h{};
  OK(cudaIpcGetEventHandle(&h, e));
  Importer im = spawn("event_record");
  const std::uint64_t spin = 300'000'000ULL;
  send_all(im.to, &h, sizeof h);
  send_all(im.to, &spin, sizeof spin);
  char ok = 0;
  if (!recv_all(im.from, &ok, 1) || ok != 'k') {
    report("event_record", "FAIL", "the importer could not open or record the exported event");
    reap(im, true);
    return;
  }
  const auto t = Clock::now();
  const bool pending = cudaEventQuery(e) == cudaErrorNotReady;
  cudaStream_t s = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaStreamWaitEvent(s, e, 0));
  spin_kernel<<<1, 1, 0, s>>>(1000, nullptr, nullptr);
  const double waited = stream_done_within(s, 5000);
  double query_ms = -1;
  while (ms_since(t) < 5000) {
    if (cudaEventQuery(e) == cudaSuccess) {
      query_ms = ms_since(t);
      break;
    }
  }
  const char c = 0;
  send_all(im.to, &c, 1);
  reap(im);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "an importer's record (behind a 300 ms kernel) is seen by the exporter: query "
                "pending at first: %s, complete after %.1f ms; stream wait released after %.1f ms",
                pending ? "yes" : "no", query_ms, waited);
  report("event_record", pending && query_ms >= 0 && waited >= 0 ? "PASS" : "FAIL", buf);
  OK(cudaStreamDestroy(s));
  OK(cudaEventDestroy(e));
}

void check_event_killed() {
  cudaEvent_t e = nullptr;
  OK(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming));
  cudaIpcEventHandle_t h{};
  OK(cudaIpcGetEventHandle(&h, e));
  Importer im = spawn("event_killed");
  const std::uint64_t spin = 3'000'000'000ULL;
  send_all(im.to, &h, sizeof h);
  send_all(im.to, &spin, sizeof spin);
  char ok = 0;
  if (!recv_all(im.from, &ok, 1) || ok != 'k') {
    report("event_killed", "FAIL", "the importer could not open or record the exported event");
    reap(im, true);
    return;
  }
  cudaStream_t s = nullptr;
  cudaStream_t r = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  OK(cudaStreamCreateWithFlags(&r, cudaStreamNonBlocking));
  OK(cudaStreamWaitEvent(s, e, 0));
  spin_kernel<<<1, 1, 0, s>>>(1000, nullptr, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t = Clock::now();
  reap(im, true);  // SIGKILL with its record behind a 3 s kernel
  const double after_kill = stream_done_within(s, 6000);
  char buf[320];
  if (after_kill >= 0) {
    std::snprintf(buf, sizeof buf,
                  "a wait queued on a SIGKILLed importer's pending record ended %.1f ms after the "
                  "kill (the driver completed or dropped the record at teardown; %.1f ms since)",
                  after_kill, ms_since(t));
    report("event_killed", "ANSWER", buf);
  } else {
    // Does a newer record by the exporter release it? (The runtime documentation says no.)
    OK(cudaEventRecord(e, r));
    const double rescued = stream_done_within(s, 2000);
    std::snprintf(buf, sizeof buf,
                  "a wait queued on a SIGKILLed importer's pending record did not end within 6 s; "
                  "a newer record by the exporter %s",
                  rescued >= 0 ? "released it" : "did not release it either (as documented)");
    report("event_killed", "ANSWER", buf);
  }
  // The stream may be stuck for good: do not destroy what it uses.
}

void check_memory(const char* check) {
  void* p = nullptr;
  OK(cudaMalloc(&p, 2 << 20));
  const std::uint64_t pattern = 0x5a5a;
  OK(cudaMemcpy(p, &pattern, sizeof pattern, cudaMemcpyHostToDevice));
  cudaIpcMemHandle_t h{};
  OK(cudaIpcGetMemHandle(&h, p));
  Importer im = spawn(check);
  send_all(im.to, &h, sizeof h);
  char a = 0;
  const bool got = recv_all(im.from, &a, 1);
  if (std::strcmp(check, "open_twice") == 0) {
    report("open_twice", got && a != 'x' ? "ANSWER" : "FAIL",
           !got       ? "no answer"
           : a == 's' ? "a second cudaIpcOpenMemHandle of the same handle in one context returns "
                        "the same pointer (reference counted)"
           : a == 'd' ? "a second open returns a different pointer"
           : a == 'a' ? "a second open fails with cudaErrorAlreadyMapped"
                      : "the first open failed");
  } else if (std::strcmp(check, "free_while_mapped") == 0) {
    OK(cudaFree(p));
    p = nullptr;
    const char go = 'g';
    send_all(im.to, &go, 1);
    (void)recv_all(im.from, &a, 1);
  } else {
    (void)recv_all(im.from, &a, 1, 10000);
  }
  reap(im);
  if (p != nullptr) OK(cudaFree(p));
}

void check_shm_fence() {
  char name[64] = {};
  std::snprintf(name, sizeof name, "/ipc_probe.%d", static_cast<int>(getpid()));
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) {
    report("shm_fence", "FAIL", "shm_open failed");
    return;
  }
  void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  auto* words = static_cast<std::uint64_t*>(base);
  words[0] = 0;
  words[1] = 0;
  const cudaError_t reg =
      cudaHostRegister(base, 4096, cudaHostRegisterMapped | cudaHostRegisterPortable);
  void* dptr = nullptr;
  if (reg != cudaSuccess || cudaHostGetDevicePointer(&dptr, base, 0) != cudaSuccess ||
      wait_value64 == nullptr || write_value64 == nullptr) {
    report("shm_fence", "FAIL",
           std::string("cudaHostRegister of shared memory / stream memory operations: ") +
               cudaGetErrorName(reg));
    shm_unlink(name);
    return;
  }
  cudaStream_t s = nullptr;
  OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // 1. Another process's stream writes the word; ours waits for it (GEQ).
  if (wait_value64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(dptr), 7,
                   CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
    report("shm_fence", "FAIL", "cuStreamWaitValue64 on registered shared memory failed");
    shm_unlink(name);
    return;
  }
  spin_kernel<<<1, 1, 0, s>>>(1000, nullptr, nullptr);
  Importer im = spawn("shm_fence");
  send_all(im.to, name, sizeof name);
  char ok = 0;
  const bool started = recv_all(im.from, &ok, 1) && ok == 'k';
  const auto t = Clock::now();
  const double waited = stream_done_within(s, 5000);
  const char c = 0;
  send_all(im.to, &c, 1);
  reap(im);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "a word in shared memory written by another process's stream (after a 300 ms "
                "kernel) releases this process's cuStreamWaitValue64 after %.1f ms (value %llu)",
                waited, static_cast<unsigned long long>(words[0]));
  report("shm_fence", started && waited >= 0 && words[0] == 7 ? "PASS" : "FAIL", buf);
  // 2. A CPU store releases a wait already queued (what a reaper does for a dead reader).
  OK(cudaStreamSynchronize(s));
  void* d1 = static_cast<char*>(dptr) + 8;
  if (wait_value64(reinterpret_cast<CUstream>(s), reinterpret_cast<CUdeviceptr>(d1), 5,
                   CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
    report("cpu_completes_fence", "FAIL", "cuStreamWaitValue64 failed");
  } else {
    spin_kernel<<<1, 1, 0, s>>>(1000, nullptr, nullptr);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const bool still = cudaStreamQuery(s) == cudaErrorNotReady;
    __atomic_store_n(&words[1], 5, __ATOMIC_RELEASE);
    const double released = stream_done_within(s, 3000);
    std::snprintf(buf, sizeof buf,
                  "a queued cuStreamWaitValue64 was still waiting after 100 ms: %s; a CPU store of "
                  "the word released it after %.3f ms",
                  still ? "yes" : "no", released >= 0 ? released : -1.0);
    report("cpu_completes_fence", still && released >= 0 ? "PASS" : "FAIL", buf);
  }
  (void)t;
  OK(cudaStreamDestroy(s));
  (void)cudaHostUnregister(base);
  munmap(base, 4096);
  shm_unlink(name);
}

// Item 1 of docs/cuda.md's second review: can a SIGKILLed process's queued stream write still land
// after its robust mutexes were released (its lease reads dead and may be handed over)? Timeline
// from the kill: when the robust mutex reads owner-dead (EOWNERDEAD), when waitpid returns, when
// (if ever, within 5 s) the word holds the queued value.
void check_write_after_kill() {
  char name[64];
  std::snprintf(name, sizeof name, "/ipc_probe.wak.%d", static_cast<int>(getpid()));
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, 4096) != 0) {
    report("write_after_kill", "FAIL", "shm_open failed");
    return;
  }
  void* base = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    report("write_after_kill", "FAIL", "mmap failed");
    shm_unlink(name);
    return;
  }
  auto* word = static_cast<std::uint64_t*>(base);
  auto* lease = reinterpret_cast<pthread_mutex_t*>(static_cast<char*>(base) + 64);
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(lease, &a);
  pthread_mutexattr_destroy(&a);
  __atomic_store_n(word, 0, __ATOMIC_RELEASE);
  Importer im = spawn("write_after_kill");
  send_all(im.to, name, sizeof name);
  char ok = 0;
  if (!recv_all(im.from, &ok, 1) || ok != 'k') {
    report("write_after_kill", "FAIL", "the importer could not lock, register or queue the write");
    reap(im, true);
    shm_unlink(name);
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its kernel is running
  const auto t = Clock::now();
  kill(im.pid, SIGKILL);
  double owner_dead = -1;
  double exited = -1;
  double landed = -1;
  int status = 0;
  while (ms_since(t) < 5000 && (landed < 0 || exited < 0 || owner_dead < 0)) {
    if (owner_dead < 0) {
      const int r = pthread_mutex_trylock(lease);
      if (r == EOWNERDEAD) {
        owner_dead = ms_since(t);
        pthread_mutex_consistent(lease);
        pthread_mutex_unlock(lease);
      } else if (r == 0) {
        pthread_mutex_unlock(lease);
      }
    }
    if (exited < 0 && waitpid(im.pid, &status, WNOHANG) == im.pid) exited = ms_since(t);
    if (landed < 0 && __atomic_load_n(word, __ATOMIC_ACQUIRE) == 0x600dULL) landed = ms_since(t);
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (exited < 0) {
    kill(im.pid, SIGKILL);
    waitpid(im.pid, &status, 0);
  }
  close(im.to);
  close(im.from);
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "SIGKILL with a stream write queued behind a 2 s kernel: the robust mutex read "
                "owner-dead after %.1f ms, waitpid returned after %.1f ms; the queued write %s "
                "(%.1f ms)%s",
                owner_dead, exited, landed >= 0 ? "landed" : "never landed within 5 s", landed,
                landed >= 0 && landed > owner_dead ? ": AFTER the lease read dead" : "");
  report("write_after_kill", "ANSWER", buf);
  munmap(base, 4096);
  shm_unlink(name);
}

bool wanted(int argc, char** argv, const char* check) {
  if (argc < 2) return true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], check) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--importer") == 0) {
    return importer(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  }
  int runtime = 0;
  int driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  const cudaError_t dv = cudaDriverGetVersion(&driver);
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e == cudaErrorInsufficientDriver && dv == cudaSuccess && driver > 0) {
    std::printf(
        "ipc_probe: FAIL the NVIDIA driver supports CUDA %d.%d, older than this runtime "
        "(%d.%d): update the driver\n",
        driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    return 1;
  }
  if (e != cudaSuccess || devices == 0) {
    std::printf("ipc_probe: SKIPPED no usable CUDA device (cudaGetDeviceCount: %s)\n",
                e != cudaSuccess ? cudaGetErrorName(e) : "0 devices");
    return kSkip;
  }
  OK(cudaSetDevice(0));
  load_driver_entry_points();
  std::printf("ipc_probe: driver %d, runtime %d, %d device(s)\n", driver, runtime, devices);
  if (wanted(argc, argv, "event_record")) check_event_record();
  if (wanted(argc, argv, "shm_fence")) check_shm_fence();
  if (wanted(argc, argv, "open_twice")) check_memory("open_twice");
  if (wanted(argc, argv, "close_in_flight")) check_memory("close_in_flight");
  if (wanted(argc, argv, "free_while_mapped")) check_memory("free_while_mapped");
  if (wanted(argc, argv, "write_after_kill")) check_write_after_kill();
  if (wanted(argc, argv, "event_killed")) check_event_killed();  // last: may leave a stream stuck
  std::printf("ipc_probe: %s\n", failures == 0
                                     ? "PASS (every relied-on fact holds)"
                                     : "FAIL (a fact the design relies on does not hold)");
  return failures == 0 ? 0 : 1;
}

// NOLINTEND(concurrency-mt-unsafe)
