// buffer.hpp — the byte buffer ringdump's recorder copies frames into and the MCAP writer takes:
// a std::vector whose growth leaves new bytes uninitialised (they are written at once by a
// memcpy of the frame), so a frame is touched once, not zero-filled first.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace ringdump {

template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {
  }  // NOLINT(google-explicit-constructor)
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using Buffer = std::vector<std::byte, DefaultInitAllocator<std::byte>>;

}  // namespace ringdump
