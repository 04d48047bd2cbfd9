// cuda_handles.hpp — the IPC handles of a slot in the segment (CudaSlot), read and written under a
// sequence lock.
//
// The producer rewrites a slot's handles when it takes a channel over, while readers of the old
// epoch may still read them, so they are accessed as 64-bit atomics under a sequence lock keyed by
// CudaSlot::memory_generation (the exporting producer's instance id, 0 while being rewritten):
//   writer: generation = 0; handle words (release stores); ... generation = id (release);
//   reader: g1 = generation (acquire); handle words (acquire loads); g2 = generation;
//           the copy is valid when g1 == g2 == the instance the reader expects.
// A reader that loads any word of a rewrite synchronises with its release store, so it then sees
// generation 0 (or the new id) in g2. (No fences: ThreadSanitizer does not model them.)
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "backend/cuda/cuda_api.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail::cuda {

static_assert(sizeof(CudaIpcMemHandle) == kCudaHandleBytes &&
                  sizeof(CudaIpcEventHandle) == kCudaHandleBytes,
              "CudaSlot reserves kCudaHandleBytes per IPC handle");

inline std::atomic_ref<std::uint64_t> handle_word(unsigned char* base, std::size_t i) noexcept {
  return std::atomic_ref<std::uint64_t>(reinterpret_cast<std::uint64_t*>(base)[i]);
}

inline void store_handle(unsigned char (&dst)[kCudaHandleBytes],
                         const unsigned char* src) noexcept {
  for (std::size_t i = 0; i < kCudaHandleBytes / 8; ++i) {
    std::uint64_t w;
    std::memcpy(&w, src + i * 8, 8);
    handle_word(dst, i).store(w, std::memory_order_release);
  }
}

inline void load_handle(unsigned char* dst, unsigned char (&src)[kCudaHandleBytes]) noexcept {
  for (std::size_t i = 0; i < kCudaHandleBytes / 8; ++i) {
    const std::uint64_t w = handle_word(src, i).load(std::memory_order_acquire);
    std::memcpy(dst + i * 8, &w, 8);
  }
}

struct SlotHandles {
  CudaIpcMemHandle memory;
  CudaIpcEventHandle write_done;
};

// Copies a slot's handles if they were exported by producer `instance`.
inline bool read_handles(CudaSlot& cs, std::uint64_t instance, SlotHandles& out) noexcept {
  const std::uint64_t g1 = cs.memory_generation.load(std::memory_order_acquire);
  if (g1 != instance || instance == 0) return false;
  load_handle(out.memory.bytes, cs.memory_handle);
  load_handle(out.write_done.bytes, cs.write_done_handle);
  return cs.memory_generation.load(std::memory_order_relaxed) == g1;
}

}  // namespace ipcring::detail::cuda
