// cuda_pool.cpp — the CUDA backend's factories: which CudaApi a pool gets (the test API, or the
// CUDA runtime binding loaded from libipcring_cuda.so), and the errors when there is none.
//
// The backend's parts (docs/cuda.md has the whole story):
//   cuda_api.hpp            the narrow CUDA interface (no CUDA header), DeviceGuard
//   cuda_plugin.hpp, cuda_loader.cpp, cuda_api_cudart.cpp   the runtime binding as a module
//   cuda_capability.*       what a machine must offer (errors at create/attach)
//   cuda_handles.hpp        IPC handles in the segment under a sequence lock
//   cuda_fence.hpp          release fence words, and the reaper's hook
//   cuda_common.*           messages, error log, teardown waits, segment registration
//   cuda_import.*           producer resources and the process-wide import cache
//   cuda_producer_pool.cpp  allocation, export, fences (producer side), close order
//   cuda_reader_pool.cpp    mapping, fences (reader side), detach
#include <memory>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_common.hpp"
#include "backend/cuda/cuda_plugin.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

namespace {

std::shared_ptr<CudaApi>& testing_api() {
  static std::shared_ptr<CudaApi> api;
  return api;
}
std::mutex& testing_mutex() {
  static std::mutex m;
  return m;
}

std::shared_ptr<CudaApi> api_or_throw(const PoolRequest& request, bool producer) {
  if (auto api = cuda_api_for_testing()) return api;
  std::string why;
  if (auto api = load_cuda_plugin(why)) return api;
  throw Error(Errc::unsupported,
              channel_prefix(request.name) +
                  (producer ? "Backend::cuda is not available: " + why + "\nUse Backend::host"
                            : "the channel carries CUDA frames, but the CUDA backend is not "
                              "available: " +
                                  why));
}

}  // namespace

void set_cuda_api_for_testing(std::shared_ptr<CudaApi> api) noexcept {
  std::lock_guard lock(testing_mutex());
  testing_api() = std::move(api);
}

std::shared_ptr<CudaApi> cuda_api_for_testing() noexcept {
  std::lock_guard lock(testing_mutex());
  return testing_api();
}

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request) {
  return make_cuda_producer_pool(request, api_or_throw(request, true));
}

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request) {
  return make_cuda_reader_pool(request, api_or_throw(request, false));
}

}  // namespace ipcring::detail
