// name_token.cpp — the producer's abstract unix-socket token (name_token.hpp).
#include "lease/name_token.hpp"

#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/clock.hpp"
#include "common/naming.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

namespace {

// Descriptors of the tokens this process holds, closed in a fork child (the child must not keep
// its parent's names alive). A fixed table, zero meaning empty and fd + 1 a token: the atfork
// handler may not allocate. A process with more live producers than this keeps working; the
// extra tokens are closed only at exec in a fork child.
constexpr int kTrackedTokens = 256;
std::atomic<int> g_token_fds[kTrackedTokens];
std::once_flag g_atfork_once;

void close_tokens_in_child() noexcept {
  for (auto& slot : g_token_fds) {
    const int v = slot.exchange(0, std::memory_order_relaxed);
    if (v > 0) close(v - 1);
  }
}

// True when the table holds `fd` now.
bool track(int fd) noexcept {
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, &close_tokens_in_child); });
  for (auto& slot : g_token_fds) {
    int expected = 0;
    if (slot.compare_exchange_strong(expected, fd + 1, std::memory_order_relaxed)) return true;
  }
  return false;
}

// Forgets `fd`; false when a fork already closed it (it is not ours to close again).
bool untrack(int fd) noexcept {
  for (auto& slot : g_token_fds) {
    int expected = fd + 1;
    if (slot.compare_exchange_strong(expected, 0, std::memory_order_relaxed)) return true;
  }
  return false;
}

// FNV-1a: only to shorten a long channel name into the address, never for security.
std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string address_of(std::string_view channel) {
  struct stat st {};
  const unsigned long long dev = stat(std::string(kShmDirectory).c_str(), &st) == 0
                                     ? static_cast<unsigned long long>(st.st_dev)
                                     : 0ULL;
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "ipcring/%llx/", dev);
  std::string a = prefix;
  // sun_path holds 108 bytes; the leading NUL of an abstract address is one of them.
  if (a.size() + channel.size() + 1 <= sizeof(sockaddr_un::sun_path)) {
    a += channel;
  } else {
    char h[32];
    std::snprintf(h, sizeof h, "#%016llx", static_cast<unsigned long long>(fnv1a(channel)));
    a += std::string(channel.substr(0, 40)) + h;
  }
  return a;
}

}  // namespace

std::string name_token_address(std::string_view channel) {
  std::string text(1, '@');  // appended, not "@" + ...: GCC 12 warns (-Wrestrict) on the latter
  text += address_of(channel);
  return text;
}

NameToken::~NameToken() {
  release();
}

NameToken::NameToken(NameToken&& other) noexcept
    : fd_(other.fd_), tracked_(other.tracked_), fork_gen_(other.fork_gen_) {
  other.fd_ = -1;
}

NameToken& NameToken::operator=(NameToken&& other) noexcept {
  if (this != &other) {
    release();
    fd_ = other.fd_;
    tracked_ = other.tracked_;
    fork_gen_ = other.fork_gen_;
    other.fd_ = -1;
  }
  return *this;
}

void NameToken::release() noexcept {
  if (fd_ < 0) return;
  if (fork_gen_ != fork_generation()) {  // a fork child's copy: never ours to close
    fd_ = -1;
    return;
  }
  // Tracked: closed here unless a fork closed this copy already (in a child; the number may have
  // been reused since). Untracked (a full table): ours to close.
  if (!tracked_ || untrack(fd_)) close(fd_);
  fd_ = -1;
}

NameToken NameToken::claim(std::string_view channel) {
  const std::string address = address_of(channel);
  NameToken token;
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return token;  // no unix sockets here: the lease alone guards the name
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, address.data(), address.size());  // sun_path[0] = 0: abstract
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + address.size());
  if (bind(fd, reinterpret_cast<const sockaddr*>(&sa), len) != 0) {
    const int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
      throw Error(Errc::producer_exists,
                  channel_prefix(channel) +
                      "another live producer holds its name (its liveness token, the abstract unix "
                      "socket @" +
                      address +
                      ", is bound); "
                      "only one producer may publish into a channel");
    }
    return token;  // another failure (EPERM in a sandbox): the lease alone guards the name
  }
  token.fd_ = fd;
  token.tracked_ = track(fd);
  token.fork_gen_ = fork_generation();
  return token;
}

}  // namespace ipcring::detail
