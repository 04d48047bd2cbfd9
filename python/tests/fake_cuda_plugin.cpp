// fake_cuda_plugin.cpp — TEST ONLY: the fake CUDA of fake_cuda.hpp as a CUDA backend module.
//
// Built as libipcring_fake_cuda.so (python/CMakeLists.txt, with the Python tests). Pointing the
// loader at it with IPCRING_CUDA_PLUGIN=<path> (the variable it already honours,
// cuda_plugin.hpp) makes every Backend::cuda pool of the process use one simulated process of a
// simulated machine with one GPU: device memory is host memory, streams are queues the test
// controls. The Python tests (python/tests/cuda_fake_checks.py) drive the Python module's CUDA
// frame path through it and use the C functions below, through ctypes, to make streams, launch
// kernels that wait until finished, and count calls. The tools' tests (tests/tools/
// doctor_test.cpp, ringdump_test.cpp) point ringdump and producer children at it, with the
// device's attributes from $IPCRING_FAKE_CUDA_DEVICE. Never installed; nothing else loads it.
//
// One process of the simulated machine: a Producer and a Reader of the same real process find
// each other through the pool's same-process registry (docs/cuda.md, "Same process"), so the
// mapping path across simulated processes is left to tests/unit/cuda_pool_test.cpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "backend/cuda/cuda_plugin.hpp"
#include "unit/fake_cuda.hpp"

namespace {

using ipcring::test::FakeCuda;
using ipcring::test::FakeDevice;
using ipcring::test::FakeGpuWorld;
using ipcring::test::FakeOp;

// The simulated GPU: device(0xa1) with the attributes $IPCRING_FAKE_CUDA_DEVICE sets, a comma-
// separated list of NAME=0|1 (integrated, unified_addressing, ipc_events, host_register,
// stream_mem_ops, vmm_posix_fd) and compute_mode=N, e.g. "integrated=1" for a Jetson-like device
// or "vmm_posix_fd=0" for a driver without VMM descriptors. Empty `why` when it was understood.
FakeDevice configured_device(std::string& why) {
  FakeDevice d = FakeGpuWorld::device(0xa1);
  const char* env = std::getenv("IPCRING_FAKE_CUDA_DEVICE");  // NOLINT(concurrency-mt-unsafe)
  const std::string spec = env != nullptr ? env : "";
  std::size_t start = 0;
  while (start < spec.size()) {
    const std::size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string item = spec.substr(start, comma - start);
    start = comma + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    bool* flag = key == "integrated"           ? &d.integrated
                 : key == "unified_addressing" ? &d.unified_addressing
                 : key == "ipc_events"         ? &d.ipc_events
                 : key == "host_register"      ? &d.host_register
                 : key == "stream_mem_ops"     ? &d.stream_mem_ops
                 : key == "vmm_posix_fd"       ? &d.vmm_posix_fd
                                               : nullptr;
    if (flag != nullptr && (value == "0" || value == "1")) {
      *flag = value == "1";
    } else if (key == "compute_mode" && (value == "0" || value == "2" || value == "3")) {
      d.compute_mode = value[0] - '0';
    } else {
      why = "IPCRING_FAKE_CUDA_DEVICE: '" + item +
            "' is not NAME=0|1 (integrated, unified_addressing, ipc_events, host_register, "
            "stream_mem_ops, vmm_posix_fd) or compute_mode=0|2|3";
      return d;
    }
  }
  return d;
}

std::string& config_problem() {
  static std::string problem;
  return problem;
}

FakeCuda* make_process() {
  std::string why;
  const FakeDevice device = configured_device(why);
  if (!why.empty()) {
    config_problem() = why;
    return nullptr;
  }
  // Never destroyed: pools and the loader keep using it until the process exits.
  auto* world = new std::shared_ptr<FakeGpuWorld>(FakeGpuWorld::make({device}));
  auto* p = new std::shared_ptr<FakeCuda>((*world)->process());
  return p->get();
}

FakeCuda* fake_or_null() {
  static FakeCuda* const process = make_process();
  return process;
}

FakeCuda& fake() {
  FakeCuda* p = fake_or_null();
  if (p == nullptr) {
    std::fprintf(stderr, "fake CUDA: %s\n", config_problem().c_str());
    std::abort();
  }
  return *p;
}

FakeOp op_named(const char* name) {
  struct Entry {
    const char* name;
    FakeOp op;
  };
  static const Entry kOps[] = {
      {"record_event", FakeOp::record_event},
      {"stream_wait_event", FakeOp::stream_wait_event},
      {"stream_synchronize", FakeOp::stream_synchronize},
      {"synchronize_event", FakeOp::synchronize_event},
      {"stream_write_value64", FakeOp::stream_write_value64},
      {"stream_wait_value64", FakeOp::stream_wait_value64},
      {"ipc_open_mem_handle", FakeOp::ipc_open_mem_handle},
      {"malloc", FakeOp::malloc},
  };
  for (const Entry& e : kOps) {
    if (std::strcmp(e.name, name) == 0) return e.op;
  }
  return FakeOp::count_;
}

}  // namespace

#define IPCRING_FAKE_EXPORT extern "C" __attribute__((visibility("default")))

IPCRING_FAKE_EXPORT ipcring::detail::CudaApi* ipcring_cuda_plugin_api(unsigned abi,
                                                                      const char** why) noexcept {
  if (abi != ipcring::detail::kCudaPluginAbi) {
    if (why != nullptr) *why = "ABI mismatch (the fake CUDA module of another ipcring version)";
    return nullptr;
  }
  FakeCuda* p = fake_or_null();
  if (p == nullptr && why != nullptr) *why = config_problem().c_str();
  return p;
}

// A stream of the simulated process (blocking unless `nonblocking`), as the integer DLPack and
// torch use (never 1 or 2: the fake's handles are multiples of 16).
IPCRING_FAKE_EXPORT std::uintptr_t ipcring_fake_cuda_make_stream(int nonblocking) {
  return reinterpret_cast<std::uintptr_t>(fake().make_stream(nonblocking != 0));
}

// Queues a kernel on `stream` (1: the legacy default stream); a held one runs only after
// ipcring_fake_cuda_finish. Returns its id.
IPCRING_FAKE_EXPORT std::uint64_t ipcring_fake_cuda_launch(std::uintptr_t stream, int held) {
  return fake().launch(stream == 1 ? nullptr : reinterpret_cast<ipcring::CudaStream>(stream),
                       held != 0);
}

IPCRING_FAKE_EXPORT void ipcring_fake_cuda_finish(std::uint64_t work) {
  fake().finish(work);
}

// 1 when the kernel ran (everything queued before it on its stream, and what that waits for,
// ran).
IPCRING_FAKE_EXPORT int ipcring_fake_cuda_done(std::uint64_t work) {
  return fake().done(work) ? 1 : 0;
}

// Calls made so far of the CudaApi function `name` (-1: a name this table does not know).
IPCRING_FAKE_EXPORT int ipcring_fake_cuda_calls(const char* name) {
  const FakeOp op = op_named(name);
  return op == FakeOp::count_ ? -1 : fake().calls(op);
}
