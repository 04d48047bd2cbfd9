// ringdump — inspect and repair ipcring channels.
//
//   ringdump list                       every channel in /dev/shm, stale and broken ones included
//   ringdump show NAME                  header, producer, slots and readers of one channel
//   ringdump watch NAME                 show, redrawn every --interval seconds
//   ringdump check NAME                 exit status says healthy (0) or not (3); reasons on stderr
//   ringdump reap NAME                  frees the reader entries (and held slots) of dead readers
//   ringdump rm NAME [--force]          removes a channel (refuses a live one without --force)
//   ringdump gc [PATTERN...] [--force]  removes every channel whose processes are all dead
//   ringdump echo|hz|bw NAME            frames as a reader sees them (stream.hpp)
//   ringdump record|info|play           frames into and out of MCAP files (record.hpp)
//   ringdump serve NAME...              live view: Foxglove WebSocket, and a page (serve.hpp)
//   ringdump doctor [NAME]              what will happen on this machine, and why (doctor.cpp)
//
// Looking (list, show, watch, check) only calls ipcring::inspect() and list_channels(), which
// take no lease and reap nothing: running ringdump never changes what producer and readers see.
// Repair (reap, rm, gc) is explicit.
//
// Exit status: 0 ok, 1 runtime error (cannot open or map a channel, removal refused ...),
// 2 usage error, 3 unhealthy (check), 4 layout version mismatch. Data goes to stdout,
// diagnostics to stderr. --json output carries "schema_version" (kSchemaVersion); fields are
// snake_case with their unit in the name (_ns, _bytes, _hz, _frames).
//
// The files of ringdump: main.cpp (the command line), commands.cpp (show, watch, check, list),
// repair.cpp (reap, rm, gc), stream.cpp (echo, hz, bw), json.cpp (--json, from the Snapshot
// schema), render.cpp (the text views), health.cpp (rates, check's reasons), format.cpp (units,
// colour), record.cpp, info.cpp, play.cpp (MCAP files: mcap_writer, mcap_reader, messages),
// serve.cpp and page.cpp (the live view), doctor.cpp (the machine's checks).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "ringdump/record.hpp"
#include "ringdump/ringdump.hpp"
#include "ringdump/serve.hpp"
#include "ringdump/stream.hpp"

namespace ringdump {

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
      ->check(ipcring::tools::count(0, 60000))
      ->capture_default_str();

  auto* watch = app.add_subcommand("watch", "Show one channel repeatedly (Ctrl-C quits)");
  watch->add_option("name", name, "Channel name")->required();
  watch->add_option("--interval", interval_s, "Seconds between snapshots")
      ->check(ipcring::tools::positive(86400))
      ->capture_default_str();
  watch->add_option("--count", count, "Stop after N snapshots (0: until Ctrl-C)")
      ->check(ipcring::tools::count());
  watch->add_flag("--json", json, "One JSON document per snapshot, one per line");
  std::string watch_size;
  watch->add_option("--size", watch_size,
                    "Fit COLSxROWS (default: the terminal's size when stdout is a terminal)");

  auto* check = app.add_subcommand("check", "Exit 0 when the channel is healthy, 3 when not");
  check->add_option("name", name, "Channel name")->required();
  auto* lag_opt = check
                      ->add_option("--max-lag", max_lag,
                                   "Unhealthy when a reader is more than N frames behind head")
                      ->check(ipcring::tools::count());
  auto* idle_opt = check
                       ->add_option("--max-idle", max_idle_s,
                                    "Unhealthy when the producer published nothing for S seconds")
                       ->check(ipcring::tools::positive(1e6));
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

  auto* doctor = app.add_subcommand(
      "doctor",
      "Say what will happen on this machine and why; exit 0 when it can work, 3 when not");
  doctor->add_option("name", name, "Channel name (default: any channel)");
  doctor->add_flag("--json", json, "One JSON document");

  stream::Commands streaming;
  stream::add(app, streaming);
  record::Commands recording;
  record::add(app, recording);
  serve::Commands serving;
  serve::add(app, serving);

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
    if (doctor->parsed()) return cmd_doctor(name, json);
    if (const auto rc = stream::run(streaming)) return *rc;
    if (const auto rc = record::run(recording)) return *rc;
    if (const auto rc = serve::run(serving)) return *rc;
  } catch (const ipcring::Error& e) {
    return report(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringdump: %s\n", e.what());
    return ringdump::kExitError;
  }
  return kExitUsage;
}

}  // namespace ringdump

int main(int argc, char** argv) {
  try {
    return ringdump::run(argc, argv);
  } catch (const std::exception& e) {  // building the command line, printing
    std::fprintf(stderr, "ringdump: %s\n", e.what());
    return ringdump::kExitError;
  } catch (...) {
    return ringdump::kExitError;
  }
}
