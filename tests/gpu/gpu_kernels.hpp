// gpu_kernels.hpp — launchers of the GPU tests' kernels (gpu_kernels.cu). Each returns the
// cudaError_t of the launch as an int.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

extern "C" {
// Writes the test pattern of frame `seq` (the same as tests/test_util.hpp's pattern_word).
int gpu_fill(void* frame, std::uint64_t bytes, std::uint64_t seq, cudaStream_t stream);
// The same, after `delay_ns` of GPU time on `stream` (slow fill: a reader that does not wait for
// the producer's writes reads the previous frame).
int gpu_fill_slow(void* frame, std::uint64_t bytes, std::uint64_t seq, std::uint64_t delay_ns,
                  cudaStream_t stream);
// Adds to *errors the words that differ from the pattern of `seq`, checked at kernel start and
// again after spinning `delay_ns` (0: once).
int gpu_verify(const void* frame, std::uint64_t bytes, std::uint64_t seq, std::uint64_t delay_ns,
               unsigned long long* errors, cudaStream_t stream);
// Stores the GPU's global timer (ns) at `where`.
int gpu_stamp(void* where, cudaStream_t stream);
// Stores (global timer now) - *stamp in *out.
int gpu_probe(const void* stamp, std::uint64_t* out, cudaStream_t stream);
// Spins for `ns` of GPU time, then reads the frame.
int gpu_spin(const void* frame, std::uint64_t ns, unsigned long long* sink, cudaStream_t stream);
}
