// test_util.hpp — helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include "ipcring/ipcring.hpp"

namespace ipcring::test {

// A channel name unique to this process and call, removed when the guard dies.
class ScopedChannel {
 public:
  explicit ScopedChannel(const std::string& stem) {
    static std::atomic<int> counter{0};
    name_ = "t-" + stem + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
  }
  ~ScopedChannel() {
    try {
      remove_channel(name_, true);
    } catch (...) {
    }
  }
  ScopedChannel(const ScopedChannel&) = delete;
  ScopedChannel& operator=(const ScopedChannel&) = delete;
  const std::string& name() const { return name_; }
  operator std::string_view() const { return name_; }  // NOLINT(google-explicit-constructor)

 private:
  std::string name_;
};

// The payload pattern of ringpub/ringsub: word k of frame `seq` is a mix of both.
inline std::uint64_t pattern_word(std::uint64_t seq, std::uint64_t k) {
  std::uint64_t x = seq * 0x9e3779b97f4a7c15ULL + k * 0xbf58476d1ce4e5b9ULL + 1;
  x ^= x >> 31;
  return x;
}
inline void fill_pattern(std::byte* p, std::size_t bytes, std::uint64_t seq) {
  for (std::size_t k = 0; k < bytes / 8; ++k) {
    const std::uint64_t w = pattern_word(seq, k);
    std::memcpy(p + k * 8, &w, 8);
  }
}
inline bool check_pattern(const std::byte* p, std::size_t bytes, std::uint64_t seq) {
  for (std::size_t k = 0; k < bytes / 8; ++k) {
    std::uint64_t w;
    std::memcpy(&w, p + k * 8, 8);
    if (w != pattern_word(seq, k)) return false;
  }
  return true;
}

}  // namespace ipcring::test
