// test_util.hpp — helpers shared by the test suites.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include <chrono>
#include <utility>

#include "channel/handout.hpp"
#include "ipcring/ipcring.hpp"
#include "pattern.hpp"

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

// A new descriptor of a live channel's control segment, fetched from its producer as a reader
// would (the caller closes it): to look at or scribble on the memory as another process could.
inline int control_fd_of(const std::string& name) {
  const auto dir = detail::ChannelDirectory::open(name, {}, false);
  auto handout = detail::fetch_handout(name, dir, {}, std::chrono::milliseconds(2000));
  return std::exchange(handout.control_fd, -1);
}

// The payload pattern of ringpub/ringsub (tools/pattern.hpp).
inline void fill_pattern(std::byte* p, std::size_t bytes, std::uint64_t seq) {
  pattern::fill(p, bytes, seq);
}
inline bool check_pattern(const std::byte* p, std::size_t bytes, std::uint64_t seq) {
  return pattern::check(p, bytes, seq);
}

}  // namespace ipcring::test
