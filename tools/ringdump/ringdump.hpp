// ringdump.hpp — what the files of ringdump share (tools/ringdump/main.cpp lists them).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "signals.hpp"

namespace ringdump {

using Json = nlohmann::ordered_json;
using ipcring::Errc;
using ipcring::Snapshot;

// --json documents carry "schema_version": this value.
inline constexpr int kSchemaVersion = 1;

// ---- exit codes and signals (the tools' convention, cli.hpp) -----------------------------------

using ipcring::tools::g_stop;
using ipcring::tools::install_stop_handlers;
using ipcring::tools::kExitError;
using ipcring::tools::kExitOk;
using ipcring::tools::kExitUnhealthy;
using ipcring::tools::kExitUsage;

inline int report(const ipcring::Error& e) {
  return ipcring::tools::report("ringdump", e);
}

// Sleeps up to `ns`, returning early (false) once Ctrl-C was pressed.
bool sleep_unless_stopped(std::uint64_t ns);

// ---- units (format.cpp) -------------------------------------------------------------------------

std::string printf_string(const char* format, double value);
std::string format_duration(std::uint64_t ns);      // "12.3 ms", "4m05s"
std::string format_bytes(std::uint64_t bytes);      // "1.5 MiB"
std::string format_rate(std::optional<double> hz);  // "30.0 Hz", "-"
std::string user_name(std::uint32_t uid);
std::string format_unix_time(std::uint64_t unix_ns);
// Bits of a slot's reader mask, reader max_readers-1 first (leftmost) down to reader 0.
std::string mask_bits(std::uint64_t mask, std::uint32_t max_readers);
std::string join(const std::vector<std::uint32_t>& v);  // "1,3", "-" when empty
// Age of a CLOCK_MONOTONIC stamp at `now`; none when the stamp is unset or in the future.
std::optional<std::uint64_t> age(std::uint64_t stamp_ns, std::uint64_t now_ns);
// Hold-time percentile from the reader's log2 histogram (bucket b: holds of [2^b, 2^(b+1)) ns):
// the upper bound of the bucket holding it (the true value is at most this, more than half).
std::optional<std::uint64_t> hold_percentile(const std::vector<std::uint64_t>& histogram, double p);
std::uint64_t hold_count(const std::vector<std::uint64_t>& histogram);
// Frames published after the reader's last read; none before its first read.
std::optional<std::uint64_t> reader_lag(const ipcring::ReaderInfo& r, std::uint64_t head);

// ---- colour and tables (format.cpp) -------------------------------------------------------------

extern bool g_colour;  // set once in main: stdout is a terminal, NO_COLOR unset, TERM not dumb

inline constexpr const char* kGreen = "\x1b[32m";
inline constexpr const char* kRed = "\x1b[31m";
inline constexpr const char* kYellow = "\x1b[33m";
inline constexpr const char* kBold = "\x1b[1m";
inline constexpr const char* kReset = "\x1b[0m";

std::string paint(const std::string& text, const char* colour);

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

Cell alive_cell(bool alive, const char* dead_word = "dead");

// ---- rates and health (health.cpp) --------------------------------------------------------------

struct Rates {
  std::string method = "none";  // "two snapshots", or "none" when there is no earlier snapshot
  std::uint64_t window_ns = 0;
  std::optional<double> publish_hz;
  std::map<std::uint32_t, double> read_hz;  // by reader index
};

// Rates from two snapshots of the same channel, `before` taken first.
Rates rates_between(const Snapshot& before, const Snapshot& after);

struct CheckLimits {
  std::optional<std::uint64_t> max_lag;      // frames
  std::optional<std::uint64_t> max_idle_ns;  // since the last publication
};

std::vector<std::string> health_reasons(const Snapshot& s, const CheckLimits& limits);

// ---- JSON (json.cpp) ----------------------------------------------------------------------------

Json opt_json(std::optional<std::uint64_t> v);
Json opt_json(std::optional<double> v);
// The snapshot under its schema's names (ipcring::for_each_field), and the values derived at
// display time (rates, ages, lag, hold percentiles, owner name, octal mode).
Json snapshot_json(const Snapshot& s, const Rates& rates);
Json error_json(const ipcring::Error& e);

// ---- text views (render.cpp) --------------------------------------------------------------------

std::string tensor_cell(const ipcring::SlotInfo& si);  // "uint8(480, 640, 3)", "-"
std::string delay_cell(const ipcring::ReaderInfo& r, std::uint64_t ns);
// "host backend", "cuda backend, cuda_path vmm"; compact: "host", "cuda, cuda_path vmm".
std::string backend_text(const Snapshot& s, bool compact = false);
std::string backend_cell(const Snapshot& s);  // list: "host", "cuda/legacy_ipc", "cuda/vmm"
std::string render_snapshot(const Snapshot& s, const Rates& rates);
std::string render_compact(const Snapshot& s, const Rates& rates);
std::size_t visible_width(const std::string& line);
std::string clip_to(const std::string& text, std::size_t cols, std::size_t rows);
std::string render_for_terminal(const Snapshot& s, const Rates& rates, std::size_t cols,
                                std::size_t rows);
// Columns and rows of the terminal on stdout; 0 when unknown.
std::pair<std::size_t, std::size_t> terminal_size();

// ---- looking (commands.cpp) ---------------------------------------------------------------------

struct Listed {
  std::string name;
  ipcring::NameInfo name_info;  // the lock and socket, read without taking anything
  std::optional<Snapshot> snapshot;
  std::optional<ipcring::Error> error;
};

// Takes a snapshot, and a second one `window_ms` later for the rates (the second is returned).
Snapshot snapshot_with_rates(const std::string& name, std::uint64_t window_ms, Rates& rates);
std::string channel_state(const Listed& c);
std::vector<Listed> list_all();
Json stat_json(const std::string& name);
int cmd_show(const std::string& name, bool json, std::uint64_t window_ms);
int cmd_watch(const std::string& name, bool json, double interval_s, std::uint64_t count,
              const std::string& size);
int cmd_check(const std::string& name, bool json, const CheckLimits& limits);
int cmd_list(bool json);

// ---- repair (repair.cpp) ------------------------------------------------------------------------

int cmd_reap(const std::string& name);
int cmd_rm(const std::string& name, bool force);
// True when `name` matches one of the shell patterns (all names when there are none).
bool selected(const std::string& name, const std::vector<std::string>& patterns);
int cmd_gc(const std::vector<std::string>& patterns, bool force, bool dry_run);

// ---- doctor (doctor.cpp) ------------------------------------------------------------------------

// What will happen on this machine for channel `name` (empty: any channel), and why; 0 when the
// setup can work, 3 when a problem stops it.
int cmd_doctor(const std::string& name, bool json);

// ---- the command line (main.cpp) ----------------------------------------------------------------

int run(int argc, char** argv);

}  // namespace ringdump
