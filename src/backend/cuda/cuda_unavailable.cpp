// cuda_unavailable.cpp — factories for builds that leave out src/backend/cuda/ altogether (the
// fuzz targets and the aarch64 protocol check compile the library's sources without the CUDA pool).
// The regular library always contains the pool and its loader (cuda.cmake) and does not use this
// file. Backend::cuda then reports Errc::unsupported.
#include "backend/pool.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request) {
  throw Error(Errc::unsupported, channel_prefix(request.name) +
                                     "this build of ipcring has no CUDA backend (configure with "
                                     "IPCRING_WITH_CUDA=ON and a CUDA Toolkit); use Backend::host");
}

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request) {
  throw Error(Errc::unsupported,
              channel_prefix(request.name) +
                  "the channel carries CUDA frames, but this build of ipcring has no CUDA backend "
                  "(configure with IPCRING_WITH_CUDA=ON)");
}

}  // namespace ipcring::detail
