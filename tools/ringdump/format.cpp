// format.cpp — how ringdump spells times, sizes, rates, masks and colours on a terminal.
#include <pwd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "ringdump/ringdump.hpp"

namespace ringdump {

// Sleeps up to `ns`, returning early (false) once Ctrl-C was pressed.
bool sleep_unless_stopped(std::uint64_t ns) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  while (g_stop == 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= end) return true;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(end - now, std::chrono::milliseconds(20)));
  }
  return false;
}

// ---- formatting -------------------------------------------------------------------------------

std::string printf_string(const char* format, double value) {
  char b[64];
  std::snprintf(b, sizeof b, format, value);
  return b;
}

std::string format_duration(std::uint64_t ns) {
  const double v = static_cast<double>(ns);
  if (ns < 1'000) return std::to_string(ns) + " ns";
  if (ns < 1'000'000) return printf_string("%.1f us", v / 1e3);
  if (ns < 1'000'000'000) return printf_string("%.1f ms", v / 1e6);
  if (ns < 60'000'000'000ULL) return printf_string("%.2f s", v / 1e9);
  const std::uint64_t s = ns / 1'000'000'000ULL;
  char b[48];
  if (s < 3600) {
    std::snprintf(b, sizeof b, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  } else if (s < 86400) {
    std::snprintf(b, sizeof b, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  } else {
    std::snprintf(b, sizeof b, "%llud%02lluh", static_cast<unsigned long long>(s / 86400),
                  static_cast<unsigned long long>(s / 3600 % 24));
  }
  return b;
}

std::string format_bytes(std::uint64_t bytes) {
  const double v = static_cast<double>(bytes);
  if (bytes < 1024) return std::to_string(bytes) + " B";
  if (bytes < (1ULL << 20)) return printf_string("%.1f KiB", v / 1024.0);
  if (bytes < (1ULL << 30)) return printf_string("%.1f MiB", v / (1024.0 * 1024.0));
  return printf_string("%.2f GiB", v / (1024.0 * 1024.0 * 1024.0));
}

std::string format_rate(std::optional<double> hz) {
  if (!hz) return "-";
  return printf_string(*hz < 100 ? "%.1f Hz" : "%.0f Hz", *hz);
}

std::string user_name(std::uint32_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return std::to_string(uid);
}

std::string format_unix_time(std::uint64_t unix_ns) {
  const auto t = static_cast<std::time_t>(unix_ns / 1'000'000'000ULL);
  std::tm tm{};
  if (localtime_r(&t, &tm) == nullptr) return "?";
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
  return b;
}

// Bits of a slot's reader mask, reader max_readers-1 first (leftmost) down to reader 0.
std::string mask_bits(std::uint64_t mask, std::uint32_t max_readers) {
  std::string s;
  for (std::uint32_t i = max_readers; i-- > 0;) s += ((mask >> i) & 1) != 0 ? '1' : '0';
  return s;
}

std::string join(const std::vector<std::uint32_t>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (auto x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// Age of a CLOCK_MONOTONIC stamp at `now`; none when the stamp is unset or in the future.
std::optional<std::uint64_t> age(std::uint64_t stamp_ns, std::uint64_t now_ns) {
  if (stamp_ns == 0 || stamp_ns > now_ns) return std::nullopt;
  return now_ns - stamp_ns;
}

// Hold-time percentile from the reader's log2 histogram (bucket b: holds of [2^b, 2^(b+1)) ns).
// Returns the upper bound of the bucket holding the percentile: the true value is at most this
// and more than half of it.
std::optional<std::uint64_t> hold_percentile(const std::vector<std::uint64_t>& histogram,
                                             double p) {
  std::uint64_t total = 0;
  for (auto c : histogram) total += c;
  if (total == 0) return std::nullopt;
  const auto rank = static_cast<std::uint64_t>(p * static_cast<double>(total) + 0.999999);
  std::uint64_t cumulative = 0;
  for (std::size_t b = 0; b < histogram.size(); ++b) {
    cumulative += histogram[b];
    if (cumulative >= std::max<std::uint64_t>(rank, 1)) {
      return b + 1 >= 64 ? UINT64_MAX : (std::uint64_t{1} << (b + 1));
    }
  }
  return std::nullopt;
}

std::uint64_t hold_count(const std::vector<std::uint64_t>& histogram) {
  std::uint64_t total = 0;
  for (auto c : histogram) total += c;
  return total;
}

// Frames published after the reader's last read; none before its first read (the reader entry
// does not record where it started).
std::optional<std::uint64_t> reader_lag(const ipcring::ReaderInfo& r, std::uint64_t head) {
  if (r.frames_read == 0) return std::nullopt;
  return head > r.last_sequence ? head - r.last_sequence : 0;
}

bool g_colour = false;

std::string paint(const std::string& text, const char* colour) {
  if (!g_colour || colour == nullptr) return text;
  return colour + text + kReset;
}

Cell alive_cell(bool alive, const char* dead_word) {
  return alive ? Cell{"alive", kGreen} : Cell{dead_word, kRed};
}

}  // namespace ringdump
