// cuda_pool.hpp — the CUDA frame pool over an injectable CudaApi (see cuda_pool.cpp and
// docs/cuda.md). The factories of backend/pool.hpp use the CUDA runtime; these take the API
// explicitly so the unit tests can drive the pool with tests/unit/fake_cuda.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/cuda/cuda_api.hpp"
#include "backend/pool.hpp"

namespace ipcring::detail {

// Every frame buffer is one allocation of frame_bytes rounded up to this (the granularity the
// driver maps IPC allocations at, so nothing else shares the buffer's pages).
inline constexpr std::uint64_t kCudaBufferAlignment = 2ULL << 20;

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request,
                                                      std::shared_ptr<CudaApi> api);
std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request,
                                                  std::shared_ptr<CudaApi> api);

// The CUDA runtime binding, loaded from libipcring_cuda.so on first use (cuda_loader.cpp); nullptr
// when the module cannot be loaded (a build without the CUDA backend, or the module is missing).
std::shared_ptr<CudaApi> cudart_api() noexcept;

// Tests only: while set, the factories of backend/pool.hpp use `api` instead of the CUDA runtime
// (also in a build without the CUDA backend). Pass nullptr to restore. Pools keep the API they were
// made with.
void set_cuda_api_for_testing(std::shared_ptr<CudaApi> api) noexcept;
std::shared_ptr<CudaApi> cuda_api_for_testing() noexcept;

}  // namespace ipcring::detail
