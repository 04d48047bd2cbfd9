// render.cpp — a snapshot as text: the full view (show, watch) and the compact one that fits a
// small terminal.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "ringdump/ringdump.hpp"

namespace ringdump {

// "uint8(480, 640, 3)", "-" without a tensor.
std::string tensor_cell(const ipcring::SlotInfo& si) {
  if (!si.has_tensor) return "-";
  return si.tensor.dtype_name() + si.tensor.shape_text() +
         (si.tensor.is_contiguous() ? "" : " strided");
}

// "host backend"; "cuda backend, cuda_path vmm" (how the buffers reach the readers). `compact`:
// without " backend".
std::string backend_text(const Snapshot& s, bool compact) {
  std::string out = std::string(ipcring::to_string(s.backend)) + (compact ? "" : " backend");
  if (s.cuda_path != ipcring::CudaPath::none) {
    out += std::string(", cuda_path ") + ipcring::to_string(s.cuda_path);
  }
  return out;
}

// "host", "cuda/legacy_ipc", "cuda/vmm": the BACKEND cell of list.
std::string backend_cell(const Snapshot& s) {
  std::string out = ipcring::to_string(s.backend);
  if (s.cuda_path != ipcring::CudaPath::none)
    out += std::string("/") + ipcring::to_string(s.cuda_path);
  return out;
}

std::string delay_cell(const ipcring::ReaderInfo& r, std::uint64_t ns) {
  return r.delay_count != 0 ? "<" + format_duration(ns) : "-";
}

namespace {

// The channel: object, geometry, creation.
void render_header(const Snapshot& s, std::string& out) {
  auto add = [&](const std::string& line) { out += line + "\n"; };
  add(paint("channel " + s.name, kBold) + "  (layout " + std::to_string(s.layout_version) + ", " +
      backend_text(s) + ")");
  add("  socket    " + ipcring::socket_path(s.name) + "  " + format_bytes(s.segment_bytes) +
      (s.frames_segment_bytes != 0 ? ", frames " + format_bytes(s.frames_segment_bytes) : "") +
      ", owner " + user_name(s.owner_uid) + " (uid " + std::to_string(s.owner_uid) + "), mode " +
      ipcring::format_mode(s.mode));
  add("  geometry  slots " + std::to_string(s.slot_count) + ", max_readers " +
      std::to_string(s.max_readers) + ", max_held " + std::to_string(s.max_held) +
      ", frame_bytes " + std::to_string(s.frame_bytes) + " (" + format_bytes(s.frame_bytes) + ")");
  add("  created   " + format_unix_time(s.created_unix_ns) + ", reap period " +
      format_duration(s.reap_period_ns));
  add("");
}

// The producer: state, rate, counters.
void render_producer(const Snapshot& s, const Rates& rates, std::string& out) {
  auto add = [&](const std::string& line) { out += line + "\n"; };
  const auto& p = s.producer;
  const char* pcolour = p.alive ? kGreen : kRed;
  add(paint("producer", kBold) + "  pid " + std::to_string(p.pid) + " " +
      paint(ipcring::producer_state(p), pcolour) + ", epoch " + std::to_string(p.epoch) +
      ", head " + std::to_string(p.head) + ", published " + std::to_string(p.published));
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
}

// The slot table.
void render_slots(const Snapshot& s, std::string& out) {
  auto add = [&](const std::string& line) { out += line + "\n"; };
  add(paint("slots", kBold));
  Table slots(
      {"INDEX>", "SEQUENCE>", "STATE", "MASK", "READERS", "BYTES>", "AGE>", "TENSOR", "CAPTURED>"});
  for (const auto& si : s.slots) {
    const char* colour = si.state == ipcring::SlotState::held      ? kYellow
                         : si.state == ipcring::SlotState::writing ? kGreen
                                                                   : nullptr;
    const auto a = si.sequence != 0 ? age(si.timestamp_ns, s.taken_ns) : std::nullopt;
    slots.add({{std::to_string(si.index)},
               {std::to_string(si.sequence)},
               {ipcring::to_string(si.state), colour},
               {mask_bits(si.reader_mask, s.max_readers)},
               {join(ipcring::mask_indices(si.reader_mask))},
               {std::to_string(si.bytes)},
               {a ? format_duration(*a) : "-"},
               {tensor_cell(si)},
               {si.capture_time_ns != 0 ? std::to_string(si.capture_time_ns) : "-"}});
  }
  out += slots.render("  ");
  add("");
}

// The reader table, and the problems found.
void render_readers(const Snapshot& s, const Rates& rates, std::string& out) {
  auto add = [&](const std::string& line) { out += line + "\n"; };
  const auto& p = s.producer;
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
                   {ipcring::to_string(r.policy)},
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
}

}  // namespace

std::string render_snapshot(const Snapshot& s, const Rates& rates) {
  std::string out;
  render_header(s, out);
  render_producer(s, rates, out);
  render_slots(s, out);
  render_readers(s, rates, out);
  return out;
}

// The snapshot in at most about 8 + readers lines of at most 100 columns: one line for the slots
// (counts by state, the newest frame's tensor), a narrow reader table with the delays.
std::string render_compact(const Snapshot& s, const Rates& rates) {
  std::string out;
  auto add = [&](const std::string& line) { out += line + "\n"; };
  const auto& p = s.producer;
  add(paint("channel " + s.name, kBold) + "  layout " + std::to_string(s.layout_version) + ", " +
      backend_text(s, true) + ", " + std::to_string(s.slot_count) + " slots of " +
      format_bytes(s.frame_bytes));
  const auto last = age(p.last_publish_ns, s.taken_ns);
  add(paint("producer", kBold) + " pid " + std::to_string(p.pid) + " " +
      paint(ipcring::producer_state(p), p.alive ? kGreen : kRed) + ", epoch " +
      std::to_string(p.epoch) + ", head " + std::to_string(p.head) + ", " +
      format_rate(rates.publish_hz) + ", last " +
      (last ? format_duration(*last) + " ago" : std::string("never")) + ", loan failures " +
      std::to_string(p.loan_failures));
  std::size_t counts[4] = {};
  const ipcring::SlotInfo* newest = nullptr;
  for (const auto& si : s.slots) {
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
                   {ipcring::to_string(r.policy)},
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

}  // namespace ringdump
