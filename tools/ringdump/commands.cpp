// commands.cpp — the looking subcommands: show, watch, check and list. They only call
// ipcring::inspect() and list_channels(): running them never changes what producer and readers see.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>
#include <tuple>

#include "ringdump/ringdump.hpp"
#include "ringdump/serve_status.hpp"

namespace ringdump {

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
  // Which ringdump serve processes serve it, and their slow clients' drops (serve_status.hpp).
  const auto served = serve_status::scan(ipcring::channel_directory());
  if (json) {
    Json j = snapshot_json(s, rates);
    const Json serving = serve_status::show_json(served, name);
    j["served_by"] = serving["served_by"];
    j["serve_status_problems"] = serving["serve_status_problems"];
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::fputs(render_snapshot(s, rates).c_str(), stdout);
    std::fputs(serve_status::show_text(served, name).c_str(), stdout);
  }
  return kExitOk;
}

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

int cmd_check(const std::string& name, bool json, const CheckLimits& limits) {
  std::vector<std::string> reasons;
  try {
    reasons = health_reasons(ipcring::inspect(name), limits);
  } catch (const ipcring::Error& e) {
    // Names left by a producer that ended: a channel nobody produces into is unhealthy, not an
    // error of ringdump's.
    if (e.code() != Errc::not_found ||
        ipcring::inspect_name(name).state != ipcring::NameState::stale) {
      throw;
    }
    reasons.push_back("no producer serves it: its producer ended and left its names (" +
                      ipcring::lock_path(name) + ")");
  }
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

// "live": a producer holds the name and answered; "stale": names left by a producer that ended
// (gc removes them); "broken": something ipcring did not make is at the name; "error": a live
// producer could not be inspected (the error says why).
std::string channel_state(const Listed& c) {
  switch (c.name_info.state) {
    case ipcring::NameState::stale:
      return "stale";
    case ipcring::NameState::broken:
      return "broken";
    case ipcring::NameState::missing:
      return "stale";
    case ipcring::NameState::live:
      break;
  }
  return c.snapshot ? "live" : "error";
}

std::vector<Listed> list_all() {
  std::vector<Listed> out;
  for (const auto& name : ipcring::list_channels()) {
    Listed c;
    c.name = name;
    try {
      c.name_info = ipcring::inspect_name(name);
      if (c.name_info.state == ipcring::NameState::missing) continue;  // removed since listed
      if (c.name_info.state == ipcring::NameState::live) c.snapshot = ipcring::inspect(name);
    } catch (const ipcring::Error& e) {
      c.error = e;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// Owner, mode and size of a channel that could not be inspected, from its lock file.
Json stat_json(const std::string& name) {
  Json j;
  struct stat st {};
  const std::string path = ipcring::lock_path(name);
  if (lstat(path.c_str(), &st) != 0) return j;
  j["owner_uid"] = st.st_uid;
  j["owner_name"] = user_name(st.st_uid);
  j["mode"] = st.st_mode & 07777;
  j["mode_octal"] = ipcring::format_mode(st.st_mode & 07777);
  return j;
}

namespace {

// One channel of `list --json`: a few fields of its snapshot, or owner, mode and size from the
// file with the error when it could not be inspected.
Json listed_json(const Listed& c) {
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
    j["readers_alive"] =
        std::count_if(s.readers.begin(), s.readers.end(), [](const auto& r) { return r.alive; });
    j["readers_in_use"] = s.readers.size();
    j["max_readers"] = s.max_readers;
    j["slot_count"] = s.slot_count;
    j["frame_bytes"] = s.frame_bytes;
    j["backend"] = ipcring::to_string(s.backend);
    j["cuda_path"] = ipcring::to_string(s.cuda_path);
    j["layout_version"] = s.layout_version;
    j["segment_bytes"] = s.segment_bytes;
    j["owner_uid"] = s.owner_uid;
    j["owner_name"] = user_name(s.owner_uid);
    j["mode"] = s.mode;
    j["mode_octal"] = ipcring::format_mode(s.mode);
    j["problems"] = s.problems.size();
    j["error"] = nullptr;
  } else {
    const Json st = stat_json(c.name);
    for (const auto& [k, v] : st.items()) j[k] = v;
    j["error"] = c.error ? error_json(*c.error) : nullptr;
    if (!c.name_info.problem.empty()) j["problem"] = c.name_info.problem;
  }
  return j;
}

}  // namespace

int cmd_list(bool json) {
  const auto channels = list_all();
  if (json) {
    Json arr = Json::array();
    for (const auto& c : channels) arr.push_back(listed_json(c));
    Json doc;
    doc["schema_version"] = kSchemaVersion;
    doc["channels"] = arr;
    std::printf("%s\n", doc.dump(2).c_str());
    return kExitOk;
  }
  if (channels.empty()) {
    std::fprintf(stderr, "ringdump: no ipcring channels in %s\n",
                 ipcring::channel_directory().c_str());
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
             {std::to_string(s.producer.pid) + " " + ipcring::producer_state(s.producer),
              s.producer.alive ? kGreen : kRed},
             {std::to_string(alive) + "/" + std::to_string(s.readers.size())},
             {std::to_string(s.slot_count)},
             {std::to_string(s.frame_bytes)},
             {backend_cell(s)},
             {std::to_string(s.layout_version)},
             {format_bytes(s.segment_bytes)},
             {user_name(s.owner_uid)},
             {ipcring::format_mode(s.mode)}});
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
             {"-"},
             {st.contains("owner_name") ? st["owner_name"].get<std::string>() : "-"},
             {st.contains("mode_octal") ? st["mode_octal"].get<std::string>() : "-"}});
      if (c.error) {
        errors.push_back(c.name + ": " + c.error->what() + " [" +
                         ipcring::to_string(c.error->code()) + "]");
      } else if (!c.name_info.problem.empty()) {
        errors.push_back(c.name + ": " + c.name_info.problem);
      }
    }
  }
  std::fputs(t.render("").c_str(), stdout);
  for (const auto& e : errors) std::printf("  error  %s\n", e.c_str());
  return kExitOk;
}

}  // namespace ringdump
