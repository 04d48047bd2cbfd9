// cuda_unavailable.cpp — a build without the CUDA backend (no CUDA Toolkit, or
// IPCRING_WITH_CUDA=OFF). Backend::cuda then reports Errc::unsupported.
//
// When src/backend/cuda/cuda.cmake compiled the pool logic in (IPCRING_CUDA_POOL_LOGIC, always
// with that file present), the factories live in cuda_pool.cpp, which can still be driven by the
// unit tests' fake CUDA; this file then only says that there is no CUDA runtime.
#include "backend/pool.hpp"
#include "ipcring/error.hpp"

#if defined(IPCRING_CUDA_POOL_LOGIC)
#include "backend/cuda/cuda_pool.hpp"
#endif

namespace ipcring::detail {

#if defined(IPCRING_CUDA_POOL_LOGIC)

std::shared_ptr<CudaApi> cudart_api() noexcept {
  return nullptr;
}

#else

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request) {
  throw Error(Errc::unsupported, "ipcring: channel '" + request.name +
                                     "': this build of ipcring has no CUDA backend (configure with "
                                     "IPCRING_WITH_CUDA=ON and a CUDA Toolkit); use Backend::host");
}

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request) {
  throw Error(Errc::unsupported,
              "ipcring: channel '" + request.name +
                  "' carries CUDA frames, but this build of ipcring has no CUDA backend "
                  "(configure with IPCRING_WITH_CUDA=ON)");
}

#endif

}  // namespace ipcring::detail
