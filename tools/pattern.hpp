// pattern.hpp — the payload pattern of ringpub/ringsub and the tests: every 8-byte word of frame
// `sequence` at word offset k is a function of both, so a reader can verify a frame it holds and
// notice if it was overwritten while held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ipcring/tensor.hpp"

namespace ipcring::pattern {

inline std::uint64_t word(std::uint64_t sequence, std::uint64_t k) noexcept {
  std::uint64_t x = sequence * 0x9e3779b97f4a7c15ULL + k * 0xbf58476d1ce4e5b9ULL + 1;
  x ^= x >> 31;
  return x;
}

inline void fill(std::byte* p, std::size_t bytes, std::uint64_t sequence) noexcept {
  for (std::size_t k = 0; k < bytes / 8; ++k) {
    const std::uint64_t w = word(sequence, k);
    std::memcpy(p + k * 8, &w, 8);
  }
}

// Returns the index of the first wrong word, or SIZE_MAX when the frame is intact.
inline std::size_t first_mismatch(const std::byte* p, std::size_t bytes,
                                  std::uint64_t sequence) noexcept {
  for (std::size_t k = 0; k < bytes / 8; ++k) {
    std::uint64_t w;
    std::memcpy(&w, p + k * 8, 8);
    if (w != word(sequence, k)) return k;
  }
  return SIZE_MAX;
}

inline bool check(const std::byte* p, std::size_t bytes, std::uint64_t sequence) noexcept {
  return first_mismatch(p, bytes, sequence) == SIZE_MAX;
}

// The sequence a frame was filled for, recovered from its first word (word() is invertible in
// k = 0: x ^ (x >> 31) undoes itself with one more step, and the multiplier is odd). For frames
// relayed from another channel (ringbridge import), whose own sequence numbers differ from the
// ones the payload was made for. False when the frame has no whole word.
inline bool origin_sequence(const std::byte* p, std::size_t bytes, std::uint64_t& out) noexcept {
  if (bytes < 8) return false;
  std::uint64_t y;
  std::memcpy(&y, p, 8);
  const std::uint64_t x = y ^ (y >> 31) ^ (y >> 62);
  // Inverse of 0x9e3779b97f4a7c15 modulo 2^64 (Newton's iteration, each step doubles the bits).
  std::uint64_t inv = 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 5; ++i) inv *= 2 - 0x9e3779b97f4a7c15ULL * inv;
  out = (x - 1) * inv;
  return true;
}

// The tensor ringpub publishes its pattern frames as: `bytes` uint8 elements. (The pattern is
// made of 64-bit words, but uint64 is a type PyTorch 1.13 cannot import through DLPack, and the
// demo's consumers are PyTorch readers.)
inline TensorDesc tensor(std::size_t bytes) noexcept {
  return TensorDesc::contiguous(DType::uint, 8, {static_cast<std::int64_t>(bytes)});
}

// A tensor ringpub may describe its `bytes` pattern bytes as: pattern::tensor(bytes), or (ringpub
// --image) a contiguous uint8 tensor of 2 or 3 dimensions with exactly `bytes` elements.
inline bool is_pattern_tensor(const TensorDesc& t, std::size_t bytes) noexcept {
  if (t == tensor(bytes)) return true;
  return t.dtype_code == static_cast<std::uint8_t>(DType::uint) && t.dtype_bits == 8 &&
         (t.ndim == 2 || t.ndim == 3) && t.byte_offset == 0 && t.is_contiguous() &&
         t.elements() == bytes;
}

}  // namespace ipcring::pattern
