// gpu_kernels.cu — the kernels of the GPU tests, behind plain C launchers (gpu_kernels.hpp) so the
// test logic compiles with the host compiler.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu_kernels.hpp"

namespace {

__device__ __forceinline__ std::uint64_t pattern(std::uint64_t seq, std::uint64_t k) {
  std::uint64_t x = seq * 0x9e3779b97f4a7c15ULL + k * 0xbf58476d1ce4e5b9ULL + 1;
  x ^= x >> 31;
  return x;
}

__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Spins for about `ns` nanoseconds of GPU time.
__device__ void spin_ns(std::uint64_t ns) {
  const std::uint64_t end = global_ns() + ns;
  while (global_ns() < end) {
  }
}

__global__ void fill_kernel(std::uint64_t* words, std::uint64_t n, std::uint64_t seq) {
  for (std::uint64_t k = blockIdx.x * blockDim.x + threadIdx.x; k < n;
       k += static_cast<std::uint64_t>(gridDim.x) * blockDim.x) {
    words[k] = pattern(seq, k);
  }
}

// Checks the frame twice: at the start and after `delay_ns` of spinning (a slow consumer). A word
// that differs from the pattern of `seq` either time counts one error.
__global__ void verify_kernel(const std::uint64_t* words, std::uint64_t n, std::uint64_t seq,
                              std::uint64_t delay_ns, unsigned long long* errors) {
  unsigned long long bad = 0;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  const std::uint64_t first = blockIdx.x * blockDim.x + threadIdx.x;
  for (std::uint64_t k = first; k < n; k += stride) bad += words[k] != pattern(seq, k);
  if (delay_ns != 0) {
    spin_ns(delay_ns);
    for (std::uint64_t k = first; k < n; k += stride) {
      bad += *static_cast<const volatile std::uint64_t*>(words + k) != pattern(seq, k);
    }
  }
  if (bad != 0) atomicAdd(errors, bad);
}

__global__ void stamp_kernel(std::uint64_t* where) {
  *where = global_ns();
}

__global__ void probe_kernel(const std::uint64_t* stamp, std::uint64_t* out) {
  const std::uint64_t now = global_ns();
  *out = now - *static_cast<const volatile std::uint64_t*>(stamp);
}

__global__ void spin_kernel(const std::uint64_t* words, std::uint64_t ns,
                            unsigned long long* sink) {
  spin_ns(ns);
  if (words[0] == 0x5eed) atomicAdd(sink, 1ULL);  // reads the frame at the end
}

__global__ void delay_kernel(std::uint64_t ns) {
  spin_ns(ns);
}

constexpr unsigned kThreads = 256;

unsigned blocks_for(std::uint64_t n) {
  const std::uint64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 1024 ? (b == 0 ? 1 : b) : 1024);
}

}  // namespace

extern "C" {

int gpu_fill(void* frame, std::uint64_t bytes, std::uint64_t seq, cudaStream_t stream) {
  const std::uint64_t n = bytes / 8;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<std::uint64_t*>(frame), n, seq);
  return static_cast<int>(cudaGetLastError());
}

int gpu_fill_slow(void* frame, std::uint64_t bytes, std::uint64_t seq, std::uint64_t delay_ns,
                  cudaStream_t stream) {
  if (delay_ns != 0) {
    delay_kernel<<<1, 1, 0, stream>>>(delay_ns);
  }
  return gpu_fill(frame, bytes, seq, stream);
}

int gpu_verify(const void* frame, std::uint64_t bytes, std::uint64_t seq, std::uint64_t delay_ns,
               unsigned long long* errors, cudaStream_t stream) {
  const std::uint64_t n = bytes / 8;
  // A slow check runs in one block so the delay is paid once per frame, not once per block.
  const unsigned blocks = delay_ns != 0 ? 1 : blocks_for(n);
  verify_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const std::uint64_t*>(frame), n, seq,
                                                 delay_ns, errors);
  return static_cast<int>(cudaGetLastError());
}

int gpu_stamp(void* where, cudaStream_t stream) {
  stamp_kernel<<<1, 1, 0, stream>>>(static_cast<std::uint64_t*>(where));
  return static_cast<int>(cudaGetLastError());
}

int gpu_probe(const void* stamp, std::uint64_t* out, cudaStream_t stream) {
  probe_kernel<<<1, 1, 0, stream>>>(static_cast<const std::uint64_t*>(stamp), out);
  return static_cast<int>(cudaGetLastError());
}

int gpu_spin(const void* frame, std::uint64_t ns, unsigned long long* sink, cudaStream_t stream) {
  spin_kernel<<<1, 1, 0, stream>>>(static_cast<const std::uint64_t*>(frame), ns, sink);
  return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
