// fake_cuda_plugin.cpp — TEST ONLY: the fake CUDA of fake_cuda.hpp as a CUDA backend module.
//
// Built as libipcring_fake_cuda.so (python/CMakeLists.txt, with the Python tests). Pointing the
// loader at it with IPCRING_CUDA_PLUGIN=<path> (the variable it already honours,
// cuda_plugin.hpp) makes every Backend::cuda pool of the process use one simulated process of a
// simulated machine with one GPU: device memory is host memory, streams are queues the test
// controls. The Python tests (python/tests/cuda_fake_checks.py) drive the Python module's CUDA
// frame path through it and use the C functions below, through ctypes, to make streams, launch
// kernels that wait until finished, and count calls. Never installed; nothing else loads it.
//
// One process of the simulated machine: a Producer and a Reader of the same real process find
// each other through the pool's same-process registry (docs/cuda.md, "Same process"), so the
// mapping path across simulated processes is left to tests/unit/cuda_pool_test.cpp.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_plugin.hpp"
#include "unit/fake_cuda.hpp"

namespace {

using ipcring::test::FakeCuda;
using ipcring::test::FakeGpuWorld;
using ipcring::test::FakeOp;

FakeCuda& fake() {
  // Never destroyed: pools and the loader keep using it until the process exits.
  static FakeCuda* const process = [] {
    auto* world =
        new std::shared_ptr<FakeGpuWorld>(FakeGpuWorld::make({FakeGpuWorld::device(0xa1)}));
    auto* p = new std::shared_ptr<FakeCuda>((*world)->process());
    return p->get();
  }();
  return *process;
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
  return &fake();
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
