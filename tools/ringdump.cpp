// ringdump — inspect and repair ipcring channels.
//
//   ringdump list                       every channel in /dev/shm, stale and broken ones included
//   ringdump show NAME                  header, producer, slots and readers of one channel
//   ringdump watch NAME                 show, redrawn every --interval seconds
//   ringdump check NAME                 exit status says healthy (0) or not (3); reasons on stderr
//   ringdump reap NAME                  frees the reader entries (and held slots) of dead readers
//   ringdump rm NAME [--force]          removes a channel (refuses a live one without --force)
//   ringdump gc [PATTERN...] [--force]  removes every channel whose processes are all dead
//   ringdump echo|hz|bw NAME            frames as a reader sees them (ringdump_stream.hpp)
//
// Looking (list, show, watch, check) only calls ipcring::inspect() and list_channels(), which
// take no lease and reap nothing: running ringdump never changes what producer and readers see.
// Repair (reap, rm, gc) is explicit.
//
// Exit status: 0 ok, 1 runtime error (cannot open or map a channel, removal refused ...),
// 2 usage error, 3 unhealthy (check), 4 layout version mismatch. Data goes to stdout,
// diagnostics to stderr. --json output carries "schema_version" (kSchemaVersion); fields are
// snake_case with their unit in the name (_ns, _bytes, _hz, _frames).
#include <dirent.h>
#include <fnmatch.h>
#include <pwd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "ringdump_stream.hpp"
#include "signals.hpp"

namespace {

using Json = nlohmann::ordered_json;
using ipcring::Errc;
using ipcring::Snapshot;

constexpr int kSchemaVersion = 1;

// ---- exit codes (the tools' convention, cli.hpp) ------------------------------------------------

using ipcring::tools::kExitError;
using ipcring::tools::kExitOk;
using ipcring::tools::kExitUnhealthy;
using ipcring::tools::kExitUsage;

int report(const ipcring::Error& e) {
  return ipcring::tools::report("ringdump", e);
}

// ---- signals ----------------------------------------------------------------------------------

using ipcring::tools::g_stop;
using ipcring::tools::install_stop_handlers;

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

std::string octal_mode(std::uint32_t mode) {
  char b[16];
  std::snprintf(b, sizeof b, "0%03o", mode & 07777);
  return b;
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

std::vector<std::uint32_t> mask_indices(std::uint64_t mask) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t i = 0; i < 64; ++i) {
    if (((mask >> i) & 1) != 0) v.push_back(i);
  }
  return v;
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

Json opt_json(std::optional<std::uint64_t> v) {
  return v ? Json(*v) : Json(nullptr);
}
Json opt_json(std::optional<double> v) {
  return v ? Json(*v) : Json(nullptr);
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

const char* policy_name(ipcring::ReadPolicy p) {
  return p == ipcring::ReadPolicy::sequential ? "sequential" : "latest";
}

const char* backend_name(ipcring::Backend b) {
  return b == ipcring::Backend::cuda ? "cuda" : "host";
}

const char* producer_state(const ipcring::ProducerInfo& p) {
  if (p.alive) return "alive";
  if (p.closed) return "closed";
  return "dead";
}

// ---- colour and tables ------------------------------------------------------------------------

bool g_colour = false;  // set once in main: stdout is a terminal, NO_COLOR unset, TERM not dumb

const char* kGreen = "\x1b[32m";
const char* kRed = "\x1b[31m";
const char* kYellow = "\x1b[33m";
const char* kBold = "\x1b[1m";
const char* kReset = "\x1b[0m";

std::string paint(const std::string& text, const char* colour) {
  if (!g_colour || colour == nullptr) return text;
  return colour + text + kReset;
}

struct Cell {
  std::string text;
  const char* colour = nullptr;
};

class Table {
 public:
  // A header ending in '>' is right-aligned (numbers).
  explicit Table(std::vector<std::string> headers) {
    for (auto& h : headers) {
      const bool right = !h.empty() && h.back() == '>';
      if (right) h.pop_back();
      headers_.push_back({h, nullptr});
      right_.push_back(right);
    }
  }
  void add(std::vector<Cell> row) {
    row.resize(headers_.size());
    rows_.push_back(std::move(row));
  }
  std::string render(const std::string& indent) const {
    std::vector<std::size_t> width(headers_.size(), 0);
    auto measure = [&](const std::vector<Cell>& row) {
      for (std::size_t c = 0; c < row.size(); ++c)
        width[c] = std::max(width[c], row[c].text.size());
    };
    measure(headers_);
    for (const auto& r : rows_) measure(r);
    std::string out;
    auto line = [&](const std::vector<Cell>& row, bool header) {
      std::string l = indent;
      for (std::size_t c = 0; c < row.size(); ++c) {
        const std::string pad(width[c] - row[c].text.size(), ' ');
        std::string text = header ? paint(row[c].text, kBold) : paint(row[c].text, row[c].colour);
        l += right_[c] ? pad + text : text + (c + 1 < row.size() ? pad : "");
        if (c + 1 < row.size()) l += "  ";
      }
      out += l + "\n";
    };
    line(headers_, true);
    for (const auto& r : rows_) line(r, false);
    return out;
  }

 private:
  std::vector<Cell> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<Cell>> rows_;
};

Cell alive_cell(bool alive, const char* dead_word = "dead") {
  return alive ? Cell{"alive", kGreen} : Cell{dead_word, kRed};
}

// ---- rates ------------------------------------------------------------------------------------

struct Rates {
  std::string method = "none";  // "two snapshots", or "none" when there is no earlier snapshot
  std::uint64_t window_ns = 0;
  std::optional<double> publish_hz;
  std::map<std::uint32_t, double> read_hz;  // by reader index
};

// Rates from two snapshots of the same channel, `before` taken first.
Rates rates_between(const Snapshot& before, const Snapshot& after) {
  Rates r;
  if (after.taken_ns <= before.taken_ns) return r;
  r.method = "two snapshots";
  r.window_ns = after.taken_ns - before.taken_ns;
  const double secs = static_cast<double>(r.window_ns) / 1e9;
  if (after.producer.published >= before.producer.published &&
      after.producer.instance_id == before.producer.instance_id) {
    r.publish_hz = static_cast<double>(after.producer.published - before.producer.published) / secs;
  }
  for (const auto& a : after.readers) {
    for (const auto& b : before.readers) {
      if (a.index == b.index && a.generation == b.generation && a.frames_read >= b.frames_read) {
        r.read_hz[a.index] = static_cast<double>(a.frames_read - b.frames_read) / secs;
      }
    }
  }
  return r;
}

// ---- health -----------------------------------------------------------------------------------

struct CheckLimits {
  std::optional<std::uint64_t> max_lag;      // frames
  std::optional<std::uint64_t> max_idle_ns;  // since the last publication
};

std::vector<std::string> health_reasons(const Snapshot& s, const CheckLimits& limits) {
  std::vector<std::string> why;
  const auto& p = s.producer;
  if (p.closed) {
    why.push_back("producer pid " + std::to_string(p.pid) + " closed the channel (epoch " +
                  std::to_string(p.epoch) + ")");
  } else if (!p.alive) {
    why.push_back("producer pid " + std::to_string(p.pid) + " is dead (epoch " +
                  std::to_string(p.epoch) + "); a new producer can take the channel over");
  }
  if (limits.max_idle_ns && p.alive) {
    const auto idle = age(p.last_publish_ns != 0 ? p.last_publish_ns : p.started_ns, s.taken_ns);
    if (idle && *idle > *limits.max_idle_ns) {
      why.push_back("producer pid " + std::to_string(p.pid) + " has published nothing for " +
                    format_duration(*idle) + " (max " + format_duration(*limits.max_idle_ns) + ")");
    }
  }
  for (const auto& r : s.readers) {
    if (!r.alive) {
      why.push_back(
          "reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
          ") is dead and not reaped" +
          (r.held_slots.empty() ? std::string() : "; it holds slot(s) " + join(r.held_slots)) +
          " (run 'ringdump reap " + s.name + "')");
      continue;
    }
    const auto lag = reader_lag(r, p.head);
    if (limits.max_lag && lag && *lag > *limits.max_lag) {
      why.push_back("reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
                    ") lags " + std::to_string(*lag) + " frames behind head " +
                    std::to_string(p.head) + " (max " + std::to_string(*limits.max_lag) + ")");
    }
  }
  for (const auto& problem : s.problems) why.push_back("segment: " + problem);
  return why;
}

// ---- JSON -------------------------------------------------------------------------------------

// A slot's frame header: tensor, capture time, metadata size (null when the slot has none).
void add_frame_header_json(Json& sj, const ipcring::SlotInfo& si) {
  sj["capture_time_ns"] = si.capture_time_ns != 0 ? Json(si.capture_time_ns) : Json(nullptr);
  sj["metadata_bytes"] = si.metadata_bytes;
  if (!si.has_tensor) {
    sj["dtype"] = nullptr;
    sj["shape"] = nullptr;
    sj["strides"] = nullptr;
    sj["byte_offset"] = nullptr;
    return;
  }
  const ipcring::TensorDesc& t = si.tensor;
  Json shape = Json::array();
  Json strides = Json::array();
  for (std::uint8_t d = 0; d < t.ndim; ++d) {
    shape.push_back(t.shape[d]);
    strides.push_back(t.stride(d));
  }
  sj["dtype"] = t.dtype_name();
  sj["shape"] = shape;
  sj["strides"] = strides;  // in elements, C order when the producer gave none
  sj["byte_offset"] = t.byte_offset;
}

// "uint8(480, 640, 3)", "-" without a tensor.
std::string tensor_cell(const ipcring::SlotInfo& si) {
  if (!si.has_tensor) return "-";
  return si.tensor.dtype_name() + si.tensor.shape_text() +
         (si.tensor.is_contiguous() ? "" : " strided");
}

std::string delay_cell(const ipcring::ReaderInfo& r, std::uint64_t ns) {
  return r.delay_count != 0 ? "<" + format_duration(ns) : "-";
}

Json snapshot_json(const Snapshot& s, const Rates& rates) {
  Json j;
  j["schema_version"] = kSchemaVersion;
  j["name"] = s.name;
  j["taken_ns"] = s.taken_ns;
  j["layout_version"] = s.layout_version;
  j["backend"] = backend_name(s.backend);
  j["slot_count"] = s.slots;
  j["max_readers"] = s.max_readers;
  j["max_held"] = s.max_held;
  j["frame_bytes"] = s.frame_bytes;
  j["segment_bytes"] = s.segment_bytes;
  j["frames_segment_bytes"] = s.frames_segment_bytes;
  j["owner_uid"] = s.owner_uid;
  j["owner_name"] = user_name(s.owner_uid);
  j["mode"] = s.mode;
  j["mode_octal"] = octal_mode(s.mode);
  j["created_unix_ns"] = s.created_unix_ns;
  j["reap_period_ns"] = s.reap_period_ns;

  const auto& p = s.producer;
  Json pj;
  pj["pid"] = p.pid;
  pj["alive"] = p.alive;
  pj["closed"] = p.closed;
  pj["state"] = producer_state(p);
  pj["epoch"] = p.epoch;
  pj["instance_id"] = p.instance_id;
  pj["head"] = p.head;
  pj["published"] = p.published;
  pj["publish_rate_hz"] = opt_json(rates.publish_hz);
  pj["publish_rate_method"] = rates.method;
  pj["publish_rate_window_ns"] = rates.window_ns;
  pj["last_publish_ns"] = p.last_publish_ns;
  pj["last_publish_age_ns"] = opt_json(age(p.last_publish_ns, s.taken_ns));
  pj["started_ns"] = p.started_ns;
  pj["uptime_ns"] = opt_json(age(p.started_ns, s.taken_ns));
  pj["loan_failures"] = p.loan_failures;
  pj["readers_reaped"] = p.readers_reaped;
  pj["waiters"] = p.waiters;
  j["producer"] = pj;

  Json slots = Json::array();
  for (const auto& si : s.slots_info) {
    Json sj;
    sj["index"] = si.index;
    sj["sequence"] = si.sequence;
    sj["epoch"] = si.epoch;
    sj["state"] = ipcring::to_string(si.state);
    sj["reader_mask"] = si.reader_mask;
    sj["reader_indices"] = mask_indices(si.reader_mask);
    sj["generation"] = si.generation;
    sj["bytes"] = si.bytes;
    sj["timestamp_ns"] = si.timestamp_ns;
    sj["age_ns"] = si.sequence != 0 ? opt_json(age(si.timestamp_ns, s.taken_ns)) : Json(nullptr);
    add_frame_header_json(sj, si);
    slots.push_back(sj);
  }
  j["slots"] = slots;

  Json readers = Json::array();
  for (const auto& r : s.readers) {
    Json rj;
    rj["index"] = r.index;
    rj["pid"] = r.pid;
    rj["alive"] = r.alive;
    rj["policy"] = policy_name(r.policy);
    rj["generation"] = r.generation;
    rj["instance_id"] = r.instance_id;
    rj["frames_read"] = r.frames_read;
    const auto hz = rates.read_hz.find(r.index);
    rj["read_rate_hz"] = hz != rates.read_hz.end() ? Json(hz->second) : Json(nullptr);
    rj["overruns"] = r.overruns;
    rj["held_slots"] = r.held_slots;
    rj["last_sequence"] = r.last_sequence;
    rj["lag_frames"] = opt_json(reader_lag(r, p.head));
    rj["last_read_ns"] = r.last_read_ns;
    rj["last_read_age_ns"] = opt_json(age(r.last_read_ns, s.taken_ns));
    rj["attached_ns"] = r.attached_ns;
    rj["holds"] = hold_count(r.hold_histogram);
    rj["hold_p50_ns"] = opt_json(hold_percentile(r.hold_histogram, 0.50));
    rj["hold_p99_ns"] = opt_json(hold_percentile(r.hold_histogram, 0.99));
    rj["hold_histogram"] = r.hold_histogram;
    rj["delays"] = r.delay_count;
    rj["delay_p50_ns"] = r.delay_count != 0 ? Json(r.delay_p50_ns) : Json(nullptr);
    rj["delay_p99_ns"] = r.delay_count != 0 ? Json(r.delay_p99_ns) : Json(nullptr);
    rj["delay_histogram"] = r.delay_histogram;
    readers.push_back(rj);
  }
  j["readers"] = readers;
  j["problems"] = s.problems;
  return j;
}

Json error_json(const ipcring::Error& e) {
  Json j;
  j["code"] = ipcring::to_string(e.code());
  j["errc"] = static_cast<int>(e.code());
  j["message"] = e.what();
  return j;
}

// ---- show ---------------------------------------------------------------------------------------

std::string render_snapshot(const Snapshot& s, const Rates& rates) {
  std::string out;
  auto add = [&](const std::string& line) { out += line + "\n"; };
  const auto& p = s.producer;

  add(paint("channel " + s.name, kBold) + "  (layout " + std::to_string(s.layout_version) + ", " +
      backend_name(s.backend) + " backend)");
  add("  segment   /dev/shm/ipcring." + s.name + "  " + format_bytes(s.segment_bytes) +
      (s.frames_segment_bytes != 0 ? ", frames " + format_bytes(s.frames_segment_bytes) : "") +
      ", owner " + user_name(s.owner_uid) + " (uid " + std::to_string(s.owner_uid) + "), mode " +
      octal_mode(s.mode));
  add("  geometry  slots " + std::to_string(s.slots) + ", max_readers " +
      std::to_string(s.max_readers) + ", max_held " + std::to_string(s.max_held) +
      ", frame_bytes " + std::to_string(s.frame_bytes) + " (" + format_bytes(s.frame_bytes) + ")");
  add("  created   " + format_unix_time(s.created_unix_ns) + ", reap period " +
      format_duration(s.reap_period_ns));
  add("");

  const char* pcolour = p.alive ? kGreen : kRed;
  add(paint("producer", kBold) + "  pid " + std::to_string(p.pid) + " " +
      paint(producer_state(p), pcolour) + ", epoch " + std::to_string(p.epoch) + ", head " +
      std::to_string(p.head) + ", published " + std::to_string(p.published));
  std::string rate_line = "  rate " + format_rate(rates.publish_hz);
  if (rates.window_ns != 0) {
    rate_line += " (" + rates.method + " " + format_duration(rates.window_ns) + " apart)";
  } else {
    rate_line += " (no second snapshot)";
  }
  const auto last = age(p.last_publish_ns, s.taken_ns);
  rate_line += ", last publish " + (last ? format_duration(*last) + " ago" : std::string("never"));
  const auto up = age(p.started_ns, s.taken_ns);
  if (up) rate_line += ", up " + format_duration(*up);
  add(rate_line);
  add("  loan failures " + std::to_string(p.loan_failures) + ", readers reaped " +
      std::to_string(p.readers_reaped) + ", readers waiting " + std::to_string(p.waiters));
  add("");

  add(paint("slots", kBold));
  Table slots(
      {"INDEX>", "SEQUENCE>", "STATE", "MASK", "READERS", "BYTES>", "AGE>", "TENSOR", "CAPTURED>"});
  for (const auto& si : s.slots_info) {
    const char* colour = si.state == ipcring::SlotState::held      ? kYellow
                         : si.state == ipcring::SlotState::writing ? kGreen
                                                                   : nullptr;
    const auto a = si.sequence != 0 ? age(si.timestamp_ns, s.taken_ns) : std::nullopt;
    slots.add({{std::to_string(si.index)},
               {std::to_string(si.sequence)},
               {ipcring::to_string(si.state), colour},
               {mask_bits(si.reader_mask, s.max_readers)},
               {join(mask_indices(si.reader_mask))},
               {std::to_string(si.bytes)},
               {a ? format_duration(*a) : "-"},
               {tensor_cell(si)},
               {si.capture_time_ns != 0 ? std::to_string(si.capture_time_ns) : "-"}});
  }
  out += slots.render("  ");
  add("");

  add(paint("readers", kBold) + "  " + std::to_string(s.readers.size()) + " in use of " +
      std::to_string(s.max_readers));
  if (!s.readers.empty()) {
    Table readers({"INDEX>", "PID>", "STATE", "POLICY", "READ>", "RATE>", "OVERRUNS>", "HELD_SLOTS",
                   "LAG>", "LAST_READ>", "HOLD_P50>", "HOLD_P99>", "DELAY_P50>", "DELAY_P99>"});
    for (const auto& r : s.readers) {
      const auto hz = rates.read_hz.find(r.index);
      const auto lag = reader_lag(r, p.head);
      const auto last_read = age(r.last_read_ns, s.taken_ns);
      const auto p50 = hold_percentile(r.hold_histogram, 0.50);
      const auto p99 = hold_percentile(r.hold_histogram, 0.99);
      readers.add({{std::to_string(r.index)},
                   {std::to_string(r.pid)},
                   alive_cell(r.alive),
                   {policy_name(r.policy)},
                   {std::to_string(r.frames_read)},
                   {hz != rates.read_hz.end() ? format_rate(hz->second) : "-"},
                   {std::to_string(r.overruns)},
                   {join(r.held_slots), r.held_slots.empty() ? nullptr : kYellow},
                   {lag ? std::to_string(*lag) : "-"},
                   {last_read ? format_duration(*last_read) + " ago" : "never"},
                   {p50 ? "<" + format_duration(*p50) : "-"},
                   {p99 ? "<" + format_duration(*p99) : "-"},
                   {delay_cell(r, r.delay_p50_ns)},
                   {delay_cell(r, r.delay_p99_ns)}});
    }
    out += readers.render("  ");
  }
  if (!s.problems.empty()) {
    add("");
    add(paint("problems", kRed));
    for (const auto& problem : s.problems) add("  " + problem);
  }
  return out;
}

// ---- watch on a small terminal ------------------------------------------------------------------

// The snapshot in at most about 8 + readers lines of at most 100 columns: one line for the slots
// (counts by state, the newest frame's tensor), a narrow reader table with the delays.
std::string render_compact(const Snapshot& s, const Rates& rates) {
  std::string out;
  auto add = [&](const std::string& line) { out += line + "\n"; };
  const auto& p = s.producer;
  add(paint("channel " + s.name, kBold) + "  layout " + std::to_string(s.layout_version) + ", " +
      backend_name(s.backend) + ", " + std::to_string(s.slots) + " slots of " +
      format_bytes(s.frame_bytes));
  const auto last = age(p.last_publish_ns, s.taken_ns);
  add(paint("producer", kBold) + " pid " + std::to_string(p.pid) + " " +
      paint(producer_state(p), p.alive ? kGreen : kRed) + ", epoch " + std::to_string(p.epoch) +
      ", head " + std::to_string(p.head) + ", " + format_rate(rates.publish_hz) + ", last " +
      (last ? format_duration(*last) + " ago" : std::string("never")) + ", loan failures " +
      std::to_string(p.loan_failures));
  std::size_t counts[4] = {};
  const ipcring::SlotInfo* newest = nullptr;
  for (const auto& si : s.slots_info) {
    ++counts[static_cast<std::size_t>(si.state)];
    if (si.sequence != 0 && (newest == nullptr || si.sequence > newest->sequence)) newest = &si;
  }
  add(paint("slots", kBold) + " " + std::to_string(counts[1]) + " ready, " +
      std::to_string(counts[2]) + " held, " + std::to_string(counts[3]) + " writing, " +
      std::to_string(counts[0]) + " empty; newest " +
      (newest != nullptr ? std::to_string(newest->sequence) + " " + tensor_cell(*newest) + " " +
                               std::to_string(newest->bytes) + " B"
                         : std::string("none")));
  add(paint("readers", kBold) + " " + std::to_string(s.readers.size()) + " of " +
      std::to_string(s.max_readers));
  if (!s.readers.empty()) {
    Table readers({"IDX>", "PID>", "STATE", "POLICY", "READ>", "RATE>", "LAG>", "HELD", "OVERRUNS>",
                   "DELAY_P50>", "DELAY_P99>", "HOLD_P99>"});
    for (const auto& r : s.readers) {
      const auto hz = rates.read_hz.find(r.index);
      const auto lag = reader_lag(r, p.head);
      const auto p99 = hold_percentile(r.hold_histogram, 0.99);
      readers.add({{std::to_string(r.index)},
                   {std::to_string(r.pid)},
                   alive_cell(r.alive),
                   {policy_name(r.policy)},
                   {std::to_string(r.frames_read)},
                   {hz != rates.read_hz.end() ? format_rate(hz->second) : "-"},
                   {lag ? std::to_string(*lag) : "-"},
                   {join(r.held_slots), r.held_slots.empty() ? nullptr : kYellow},
                   {std::to_string(r.overruns)},
                   {delay_cell(r, r.delay_p50_ns)},
                   {delay_cell(r, r.delay_p99_ns)},
                   {p99 ? "<" + format_duration(*p99) : "-"}});
    }
    out += readers.render("  ");
  }
  if (!s.problems.empty()) {
    add(paint("problems", kRed) + " " + std::to_string(s.problems.size()) + ": " + s.problems[0]);
  }
  return out;
}

// Visible columns of a line (ANSI colour sequences take none).
std::size_t visible_width(const std::string& line) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < line.size(); ++i) {
    if (line[i] == '\x1b') {
      while (i < line.size() && line[i] != 'm') ++i;
      continue;
    }
    ++n;
  }
  return n;
}

// Cuts `text` to `cols` visible columns per line and `rows` lines (the last says what was cut).
std::string clip_to(const std::string& text, std::size_t cols, std::size_t rows) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  std::string out;
  const std::size_t keep = lines.size() <= rows ? lines.size() : rows - 1;
  for (std::size_t k = 0; k < keep; ++k) {
    const std::string& l = lines[k];
    if (visible_width(l) <= cols) {
      out += l + "\n";
      continue;
    }
    std::string cut;
    std::size_t n = 0;
    for (std::size_t i = 0; i < l.size() && n < cols; ++i) {
      if (l[i] == '\x1b') {
        const std::size_t end = l.find('m', i);
        cut += l.substr(i, end == std::string::npos ? std::string::npos : end - i + 1);
        i = end == std::string::npos ? l.size() : end;
        continue;
      }
      cut += l[i];
      ++n;
    }
    out += cut + (g_colour ? "\x1b[0m" : "") + "\n";
  }
  if (keep < lines.size()) {
    out += "... " + std::to_string(lines.size() - keep) + " more line(s): enlarge the terminal\n";
  }
  return out;
}

// Rendering for a terminal of `cols` x `rows` (title line included): the full view when it fits,
// else the compact one, clipped so that nothing scrolls.
std::string render_for_terminal(const Snapshot& s, const Rates& rates, std::size_t cols,
                                std::size_t rows) {
  const std::size_t body_rows = rows > 2 ? rows - 2 : 1;  // the title, and the cursor's line
  std::string full = render_snapshot(s, rates);
  std::size_t lines = 0;
  std::size_t widest = 0;
  std::size_t start = 0;
  for (std::size_t nl; (nl = full.find('\n', start)) != std::string::npos; start = nl + 1) {
    ++lines;
    widest = std::max(widest, visible_width(full.substr(start, nl - start)));
  }
  if (lines <= body_rows && widest <= cols) return full;
  return clip_to(render_compact(s, rates), cols, body_rows);
}

// Columns and rows of the terminal on stdout; 0 when unknown.
std::pair<std::size_t, std::size_t> terminal_size() {
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0) return {0, 0};
  return {ws.ws_col, ws.ws_row};
}

// Takes a snapshot, and a second one `window_ms` later for the rates (the second is returned).
Snapshot snapshot_with_rates(const std::string& name, std::uint64_t window_ms, Rates& rates) {
  Snapshot first = ipcring::inspect(name);
  if (window_ms == 0) return first;
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  try {
    Snapshot second = ipcring::inspect(name);
    rates = rates_between(first, second);
    return second;
  } catch (const ipcring::Error&) {
    return first;  // gone meanwhile (a clean producer exit): show what we saw
  }
}

int cmd_show(const std::string& name, bool json, std::uint64_t window_ms) {
  Rates rates;
  const Snapshot s = snapshot_with_rates(name, window_ms, rates);
  if (json) {
    std::printf("%s\n", snapshot_json(s, rates).dump(2).c_str());
  } else {
    std::fputs(render_snapshot(s, rates).c_str(), stdout);
  }
  return kExitOk;
}

// ---- watch --------------------------------------------------------------------------------------

// `size`: a terminal size "COLSxROWS" to fit (the terminal's own when empty and stdout is one).
int cmd_watch(const std::string& name, bool json, double interval_s, std::uint64_t count,
              const std::string& size) {
  install_stop_handlers();
  const bool tty = isatty(STDOUT_FILENO) == 1;
  std::size_t fit_cols = 0;
  std::size_t fit_rows = 0;
  if (!size.empty()) {
    unsigned c = 0;
    unsigned r = 0;
    if (std::sscanf(size.c_str(), "%ux%u", &c, &r) != 2 || c < 20 || r < 5) {
      std::fprintf(stderr, "ringdump: --size '%s': expected COLSxROWS, at least 20x5\n",
                   size.c_str());
      return kExitUsage;
    }
    fit_cols = c;
    fit_rows = r;
  }
  const auto interval_ns = static_cast<std::uint64_t>(interval_s * 1e9);
  std::optional<Snapshot> previous;
  for (std::uint64_t tick = 1; g_stop == 0; ++tick) {
    std::string frame;
    std::size_t cols = fit_cols;
    std::size_t rows = fit_rows;
    if (cols == 0 && tty && !json) std::tie(cols, rows) = terminal_size();
    try {
      Snapshot s = ipcring::inspect(name);
      Rates rates;
      if (previous) rates = rates_between(*previous, s);
      if (json) {
        frame = snapshot_json(s, rates).dump() + "\n";
      } else {
        frame = cols != 0 && rows != 0 ? render_for_terminal(s, rates, cols, rows)
                                       : render_snapshot(s, rates);
      }
      previous = std::move(s);
    } catch (const ipcring::Error& e) {
      // A channel that is not there (yet, or any more) is watched on; anything else ends the watch.
      if (e.code() != Errc::not_found) return report(e);
      previous.reset();
      if (json) {
        Json j;
        j["schema_version"] = kSchemaVersion;
        j["name"] = name;
        j["error"] = error_json(e);
        frame = j.dump() + "\n";
      } else {
        frame = "channel " + name + ": not present (" + ipcring::to_string(e.code()) + ")\n";
      }
    }
    if (!json) {
      char stamp[32];
      const std::time_t t = std::time(nullptr);
      std::tm tm{};
      localtime_r(&t, &tm);
      std::strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
      const std::string title = "ringdump watch " + name + "  every " +
                                printf_string("%.2g", interval_s) + " s  " + stamp +
                                (tty ? "  (Ctrl-C quits)" : "") + "\n";
      frame = (cols != 0 ? clip_to(title, cols, 1) : title) + frame;
      if (tty) {
        // Terminal: redraw in place. Clear the screen once, then home the cursor, overwrite each
        // line (erasing its tail) and erase whatever the previous, longer frame left below.
        std::string drawn = tick == 1 ? "\x1b[2J\x1b[H" : "\x1b[H";
        std::size_t start = 0;
        for (std::size_t nl; (nl = frame.find('\n', start)) != std::string::npos; start = nl + 1) {
          drawn += frame.substr(start, nl - start) + "\x1b[K\n";
        }
        frame = drawn + "\x1b[J";
      } else if (tick > 1) {
        frame = "\n" + frame;  // plain blocks separated by a blank line
      }
    }
    std::fputs(frame.c_str(), stdout);
    std::fflush(stdout);
    if (count != 0 && tick >= count) break;
    if (!sleep_unless_stopped(interval_ns)) break;
  }
  return kExitOk;  // Ctrl-C is the normal way to leave
}

// ---- check --------------------------------------------------------------------------------------

int cmd_check(const std::string& name, bool json, const CheckLimits& limits) {
  const Snapshot s = ipcring::inspect(name);
  const auto reasons = health_reasons(s, limits);
  for (const auto& r : reasons) std::fprintf(stderr, "ringdump: %s: %s\n", name.c_str(), r.c_str());
  if (json) {
    Json j;
    j["schema_version"] = kSchemaVersion;
    j["name"] = name;
    j["healthy"] = reasons.empty();
    j["reasons"] = reasons;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s: %s\n", name.c_str(),
                reasons.empty() ? "healthy"
                                : ("unhealthy (" + std::to_string(reasons.size()) + " reason" +
                                   (reasons.size() == 1 ? "" : "s") + ")")
                                      .c_str());
  }
  return reasons.empty() ? kExitOk : kExitUnhealthy;
}

// ---- list ---------------------------------------------------------------------------------------

struct Listed {
  std::string name;
  std::optional<Snapshot> snapshot;
  std::optional<ipcring::Error> error;
};

// "live": the producer is alive; "no-producer": it is not, but some reader is; "stale": every
// process of the channel is dead (gc removes it); "error": the channel could not be inspected.
std::string channel_state(const Listed& c) {
  if (!c.snapshot) return "error";
  const Snapshot& s = *c.snapshot;
  if (s.producer.alive) return "live";
  const bool reader_alive =
      std::any_of(s.readers.begin(), s.readers.end(), [](const auto& r) { return r.alive; });
  return reader_alive ? "no-producer" : "stale";
}

std::vector<Listed> list_all() {
  std::vector<Listed> out;
  for (const auto& name : ipcring::list_channels()) {
    Listed c;
    c.name = name;
    try {
      c.snapshot = ipcring::inspect(name);
    } catch (const ipcring::Error& e) {
      if (e.code() == Errc::not_found) continue;  // removed since it was listed
      c.error = e;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Owner, mode and size of a channel that could not be inspected, from the file itself.
Json stat_json(const std::string& name) {
  Json j;
  struct stat st {};
  const std::string path = "/dev/shm/ipcring." + name;
  if (stat(path.c_str(), &st) != 0) return j;
  j["segment_bytes"] = static_cast<std::uint64_t>(st.st_size);
  j["owner_uid"] = st.st_uid;
  j["owner_name"] = user_name(st.st_uid);
  j["mode"] = st.st_mode & 07777;
  j["mode_octal"] = octal_mode(st.st_mode & 07777);
  return j;
}

int cmd_list(bool json) {
  const auto channels = list_all();
  if (json) {
    Json arr = Json::array();
    for (const auto& c : channels) {
      Json j;
      j["name"] = c.name;
      j["state"] = channel_state(c);
      if (c.snapshot) {
        const Snapshot& s = *c.snapshot;
        Json p;
        p["pid"] = s.producer.pid;
        p["alive"] = s.producer.alive;
        p["closed"] = s.producer.closed;
        p["epoch"] = s.producer.epoch;
        j["producer"] = p;
        j["readers_alive"] = std::count_if(s.readers.begin(), s.readers.end(),
                                           [](const auto& r) { return r.alive; });
        j["readers_in_use"] = s.readers.size();
        j["max_readers"] = s.max_readers;
        j["slot_count"] = s.slots;
        j["frame_bytes"] = s.frame_bytes;
        j["backend"] = backend_name(s.backend);
        j["layout_version"] = s.layout_version;
        j["segment_bytes"] = s.segment_bytes;
        j["owner_uid"] = s.owner_uid;
        j["owner_name"] = user_name(s.owner_uid);
        j["mode"] = s.mode;
        j["mode_octal"] = octal_mode(s.mode);
        j["problems"] = s.problems.size();
        j["error"] = nullptr;
      } else {
        const Json st = stat_json(c.name);
        for (const auto& [k, v] : st.items()) j[k] = v;
        j["error"] = error_json(*c.error);
      }
      arr.push_back(j);
    }
    Json doc;
    doc["schema_version"] = kSchemaVersion;
    doc["channels"] = arr;
    std::printf("%s\n", doc.dump(2).c_str());
    return kExitOk;
  }
  if (channels.empty()) {
    std::fprintf(stderr, "ringdump: no ipcring channels in /dev/shm\n");
    return kExitOk;
  }
  Table t({"NAME", "STATE", "PRODUCER", "READERS>", "SLOTS>", "FRAME_BYTES>", "BACKEND", "LAYOUT>",
           "SEGMENT>", "OWNER", "MODE"});
  std::vector<std::string> errors;
  for (const auto& c : channels) {
    const std::string state = channel_state(c);
    const char* scolour = state == "live" ? kGreen : state == "no-producer" ? kYellow : kRed;
    if (c.snapshot) {
      const Snapshot& s = *c.snapshot;
      const auto alive =
          std::count_if(s.readers.begin(), s.readers.end(), [](const auto& r) { return r.alive; });
      t.add({{c.name},
             {state, scolour},
             {std::to_string(s.producer.pid) + " " + producer_state(s.producer),
              s.producer.alive ? kGreen : kRed},
             {std::to_string(alive) + "/" + std::to_string(s.readers.size())},
             {std::to_string(s.slots)},
             {std::to_string(s.frame_bytes)},
             {backend_name(s.backend)},
             {std::to_string(s.layout_version)},
             {format_bytes(s.segment_bytes)},
             {user_name(s.owner_uid)},
             {octal_mode(s.mode)}});
    } else {
      const Json st = stat_json(c.name);
      t.add({{c.name},
             {state, scolour},
             {"-"},
             {"-"},
             {"-"},
             {"-"},
             {"-"},
             {"-"},
             {st.contains("segment_bytes") ? format_bytes(st["segment_bytes"].get<std::uint64_t>())
                                           : "-"},
             {st.contains("owner_name") ? st["owner_name"].get<std::string>() : "-"},
             {st.contains("mode_octal") ? st["mode_octal"].get<std::string>() : "-"}});
      errors.push_back(c.name + ": " + c.error->what() + " [" +
                       ipcring::to_string(c.error->code()) + "]");
    }
  }
  std::fputs(t.render("").c_str(), stdout);
  for (const auto& e : errors) std::printf("  error  %s\n", e.c_str());
  return kExitOk;
}

// ---- repair -------------------------------------------------------------------------------------

int cmd_reap(const std::string& name) {
  // Name the dead readers first (for the operator), then reap: the library reaps only entries it
  // finds dead itself when it holds their lease mutex, so a reader that died after this snapshot is
  // reaped too and one that is alive is never touched.
  std::vector<std::string> dead;
  for (const auto& r : ipcring::inspect(name).readers) {
    if (!r.alive) {
      dead.push_back("reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
                     (r.held_slots.empty() ? "" : ", held slot(s) " + join(r.held_slots)) + ")");
    }
  }
  const std::size_t n = ipcring::reap_dead_readers(name);
  std::printf("%s: reaped %zu dead reader%s\n", name.c_str(), n, n == 1 ? "" : "s");
  for (const auto& d : dead) std::printf("  %s\n", d.c_str());
  return kExitOk;
}

int cmd_rm(const std::string& name, bool force) {
  if (!ipcring::remove_channel(name, force)) {
    std::fprintf(stderr, "ringdump: channel '%s': no such channel (/dev/shm/ipcring.%s)\n",
                 name.c_str(), name.c_str());
    return kExitError;
  }
  std::printf("removed %s\n", name.c_str());
  return kExitOk;
}

// Frames objects of layout 2 and earlier whose control segment is gone. This version keeps a
// channel's frames inside its one object and never makes such names, so removing one cannot hit a
// channel of this version.
std::vector<std::string> orphaned_frames() {
  std::vector<std::string> out;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return out;
  // One thread, one directory stream: readdir is safe here.
  while (const dirent* d = readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    const std::string n = d->d_name;
    const std::string prefix = "ipcring.";
    const std::string suffix = ".frames";
    if (n.size() <= prefix.size() + suffix.size() || n.rfind(prefix, 0) != 0 ||
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string control = n.substr(0, n.size() - suffix.size());
    struct stat st {};
    if (stat(("/dev/shm/" + control).c_str(), &st) != 0 && errno == ENOENT) out.push_back(n);
  }
  closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

// True when `name` matches one of the shell patterns (all names when there are none).
bool selected(const std::string& name, const std::vector<std::string>& patterns) {
  if (patterns.empty()) return true;
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
    return fnmatch(p.c_str(), name.c_str(), 0) == 0;
  });
}

int cmd_gc(const std::vector<std::string>& patterns, bool force, bool dry_run) {
  int rc = kExitOk;
  std::size_t removed = 0;
  std::size_t kept = 0;
  auto remove = [&](const std::string& name, bool force_it, const std::string& why) {
    if (dry_run) {
      std::printf("would remove %s (%s)\n", name.c_str(), why.c_str());
      return;
    }
    try {
      if (ipcring::remove_channel(name, force_it)) {
        std::printf("removed %s (%s)\n", name.c_str(), why.c_str());
        ++removed;
      }
    } catch (const ipcring::Error& e) {
      // Came back to life meanwhile (a new producer took it over), or cannot be checked.
      std::fprintf(stderr, "ringdump: kept %s: %s [%s]\n", name.c_str(), e.what(),
                   ipcring::to_string(e.code()));
      ++kept;
    }
  };
  for (const auto& c : list_all()) {
    if (!selected(c.name, patterns)) continue;
    const std::string state = channel_state(c);
    if (state == "stale") {
      remove(c.name, false, "stale: producer and readers dead");
    } else if (state == "error") {
      const Errc code = c.error->code();
      if (code == Errc::invalid_name) {
        std::fprintf(stderr, "ringdump: kept /dev/shm/ipcring.%s: not a valid channel name\n",
                     c.name.c_str());
        ++kept;
      } else if (code == Errc::not_ready) {
        remove(c.name, true, "never finished: its creator died while creating it");
      } else if (force) {
        remove(c.name, true, std::string("forced; ") + ipcring::to_string(code));
      } else {
        std::fprintf(stderr,
                     "ringdump: kept %s: cannot be inspected (%s); 'ringdump rm --force %s' "
                     "removes it\n",
                     c.name.c_str(), ipcring::to_string(code), c.name.c_str());
        ++kept;
      }
    } else if (force) {
      remove(c.name, true, "forced; " + state);
    } else {
      const Snapshot& s = *c.snapshot;
      std::string live;
      if (s.producer.alive) live = "producer pid " + std::to_string(s.producer.pid);
      for (const auto& r : s.readers) {
        if (r.alive)
          live += (live.empty() ? "" : ", ") + std::string("reader pid ") + std::to_string(r.pid);
      }
      std::fprintf(stderr, "ringdump: kept %s: in use (%s alive); --force removes it anyway\n",
                   c.name.c_str(), live.c_str());
      ++kept;
    }
  }
  for (const auto& object : orphaned_frames()) {
    // "ipcring.<channel>.frames"
    if (!selected(object.substr(8, object.size() - 8 - 7), patterns)) continue;
    if (dry_run) {
      std::printf("would remove /dev/shm/%s (frames without a control segment)\n", object.c_str());
      continue;
    }
    if (shm_unlink(object.c_str()) == 0) {
      std::printf("removed /dev/shm/%s (frames without a control segment)\n", object.c_str());
      ++removed;
    } else if (errno != ENOENT) {
      std::fprintf(stderr, "ringdump: cannot remove /dev/shm/%s: %s\n", object.c_str(),
                   std::error_code(errno, std::generic_category()).message().c_str());
      rc = kExitError;
    }
  }
  if (!dry_run) std::printf("gc: removed %zu, kept %zu\n", removed, kept);
  return rc;
}

int run(int argc, char** argv) {
  CLI::App app{"ringdump: inspect and repair ipcring channels (shared-memory frame rings)"};
  app.require_subcommand(1);
  ipcring::tools::apply_convention(app, "ringdump");

  std::string name;
  bool json = false;
  bool force = false;
  bool dry_run = false;
  std::uint64_t rate_window_ms = 150;
  double interval_s = 1.0;
  std::uint64_t count = 0;
  std::uint64_t max_lag = 0;
  double max_idle_s = 0;

  auto* list = app.add_subcommand("list",
                                  "List every ipcring channel on this machine, stale ones "
                                  "included");
  list->add_flag("--json", json, "One JSON document");

  auto* show = app.add_subcommand("show", "Show one channel: header, producer, slots, readers");
  show->add_option("name", name, "Channel name")->required();
  show->add_flag("--json", json, "One JSON document");
  show->add_option("--rate-window-ms", rate_window_ms,
                   "Milliseconds between the two snapshots that measure rates (0: one snapshot)")
      ->capture_default_str();

  auto* watch = app.add_subcommand("watch", "Show one channel repeatedly (Ctrl-C quits)");
  watch->add_option("name", name, "Channel name")->required();
  watch->add_option("--interval", interval_s, "Seconds between snapshots")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  watch->add_option("--count", count, "Stop after N snapshots (0: until Ctrl-C)");
  watch->add_flag("--json", json, "One JSON document per snapshot, one per line");
  std::string watch_size;
  watch->add_option("--size", watch_size,
                    "Fit COLSxROWS (default: the terminal's size when stdout is a terminal)");

  auto* check = app.add_subcommand("check", "Exit 0 when the channel is healthy, 3 when not");
  check->add_option("name", name, "Channel name")->required();
  auto* lag_opt = check->add_option("--max-lag", max_lag,
                                    "Unhealthy when a reader is more than N frames behind head");
  auto* idle_opt = check
                       ->add_option("--max-idle", max_idle_s,
                                    "Unhealthy when the producer published nothing for S seconds")
                       ->check(CLI::PositiveNumber);
  check->add_flag("--json", json, "Verdict and reasons as one JSON line");

  auto* reap = app.add_subcommand("reap", "Free the entries and held slots of dead readers");
  reap->add_option("name", name, "Channel name")->required();

  auto* rm = app.add_subcommand("rm", "Remove a channel's shared-memory objects");
  rm->add_option("name", name, "Channel name")->required();
  rm->add_flag("--force", force, "Remove it even while its producer or readers are alive");

  std::vector<std::string> patterns;
  auto* gc =
      app.add_subcommand("gc", "Remove every channel whose producer and readers are all dead");
  gc->add_option("pattern", patterns,
                 "Only channels whose name matches one of these shell patterns (default: all)");
  gc->add_flag("--force", force, "Remove live and uninspectable channels too");
  gc->add_flag("--dry-run", dry_run, "Only say what would be removed");

  ringdump_stream::Commands stream;
  ringdump_stream::add(app, stream);

  if (const auto rc = ipcring::tools::parse(app, argc, argv)) return *rc;

  // Read once, before anything could start a thread.
  const char* no_colour = std::getenv("NO_COLOR");  // NOLINT(concurrency-mt-unsafe)
  const char* term = std::getenv("TERM");           // NOLINT(concurrency-mt-unsafe)
  g_colour = isatty(STDOUT_FILENO) == 1 && (no_colour == nullptr || no_colour[0] == '\0') &&
             !(term != nullptr && std::strcmp(term, "dumb") == 0) && !json;

  try {
    if (list->parsed()) return cmd_list(json);
    if (show->parsed()) return cmd_show(name, json, rate_window_ms);
    if (watch->parsed()) return cmd_watch(name, json, interval_s, count, watch_size);
    if (check->parsed()) {
      CheckLimits limits;
      if (lag_opt->count() != 0) limits.max_lag = max_lag;
      if (idle_opt->count() != 0) limits.max_idle_ns = static_cast<std::uint64_t>(max_idle_s * 1e9);
      return cmd_check(name, json, limits);
    }
    if (reap->parsed()) return cmd_reap(name);
    if (rm->parsed()) return cmd_rm(name, force);
    if (gc->parsed()) return cmd_gc(patterns, force, dry_run);
    if (const auto rc = ringdump_stream::run(stream)) return *rc;
  } catch (const ipcring::Error& e) {
    return report(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringdump: %s\n", e.what());
    return kExitError;
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // building the command line, printing
    std::fprintf(stderr, "ringdump: %s\n", e.what());
    return kExitError;
  } catch (...) {
    return kExitError;
  }
}
