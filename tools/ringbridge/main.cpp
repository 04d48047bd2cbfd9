// ringbridge — carries ipcring channels over Eclipse Cyclone DDS, optionally as ROS 2 messages.
//
//   ringbridge export NAME [--topic T] [--reliable|--best-effort] [--ros2 --width W --height H
//                          [--encoding E] [--frame-id F]] [--policy latest|sequential]
//   ringbridge import T --channel NAME [--slots N] [--frame-bytes B] [--reliable|--best-effort]
//                       [--ros2]
//   ringbridge config [--interface IF]   the CYCLONEDDS_URI it uses when none is set
//
// Exit status: 0 ok (also when stopped by SIGINT/SIGTERM), 1 runtime error, 2 usage error.
// The summary goes to stdout, events and diagnostics to stderr. docs/bridge.md is the manual.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <dds/version.h>

#include "bridge.hpp"
#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "signals.hpp"
#include "wait.hpp"

namespace {

using ipcring::bridge::Reliability;

using ipcring::tools::kExitError;
using ipcring::tools::kExitOk;
using ipcring::tools::kExitUsage;

std::uint32_t default_domain() {
  // Read before any thread exists.
  const char* d = std::getenv("ROS_DOMAIN_ID");  // NOLINT(concurrency-mt-unsafe)
  if (d == nullptr || d[0] == '\0') return 0;
  char* end = nullptr;
  const unsigned long v = std::strtoul(d, &end, 10);
  return (*end == '\0' && v <= 232) ? static_cast<std::uint32_t>(v) : 0;
}

// Options both directions have.
struct Common {
  bool reliable = false;
  bool best_effort = false;
  std::int32_t depth = 5;
  std::uint32_t domain = 0;
  std::string interface_name;
  bool quiet = false;
  bool ros2 = false;
  std::uint64_t count = 0;
};

void add_common(CLI::App* sub, Common& c) {
  auto* rel = sub->add_flag("--reliable", c.reliable,
                            "Reliable delivery (default without --ros2): every frame arrives; a "
                            "slow subscriber slows the export");
  auto* be = sub->add_flag("--best-effort", c.best_effort,
                           "Best-effort delivery (default with --ros2, as ROS 2's sensor-data "
                           "profile): lost frames are not resent");
  rel->excludes(be);
  sub->add_option("--depth", c.depth, "History depth (keep-last) where it applies")
      ->check(ipcring::tools::count(1, 10000))
      ->capture_default_str();
  sub->add_option("--domain", c.domain, "DDS domain id (default: ROS_DOMAIN_ID, else 0)")
      ->check(ipcring::tools::count(0, 232));
  sub->add_option("--interface", c.interface_name,
                  "Network interface (e.g. lo, eth0) when CYCLONEDDS_URI is unset; default: "
                  "Cyclone's choice");
  sub->add_flag("--ros2", c.ros2,
                "ROS 2 conventions: topic rt/<T>, type sensor_msgs::msg::dds_::Image_");
  sub->add_option("--count", c.count, "Stop after N frames (0: run until SIGINT/SIGTERM)")
      ->check(ipcring::tools::count());
  sub->add_flag("--quiet", c.quiet, "Only the summary and errors");
}

ipcring::bridge::DdsOptions dds_options(const Common& c, bool domain_given) {
  ipcring::bridge::DdsOptions d;
  d.domain = domain_given ? c.domain : default_domain();
  d.interface_name = c.interface_name;
  const bool reliable = c.reliable || (!c.best_effort && !c.ros2);
  d.reliability = reliable ? Reliability::reliable : Reliability::best_effort;
  d.depth = c.depth;
  // The ipcring frame type, reliable: keep all, so that no frame is replaced in the writer's
  // history before every subscriber has it. ROS 2 reliable profiles are keep-last.
  d.keep_all = reliable && !c.ros2;
  return d;
}

int run(int argc, char** argv) {
  CLI::App app{"ringbridge: carry ipcring channels over Eclipse Cyclone DDS (ROS 2 on request)"};
  app.require_subcommand(1);
  ipcring::tools::apply_convention(app, "ringbridge");
  app.set_version_flag(
      "--version", ipcring::tools::version_text("ringbridge") + " (Cyclone DDS " DDS_VERSION ")");
  app.footer("Exit status: 0 ok (also after SIGINT/SIGTERM), 1 runtime error, 2 usage error.");

  Common ce;
  Common ci;
  ipcring::bridge::ExportOptions eo;
  ipcring::bridge::ImportOptions io;
  std::string policy;
  io.channel_config.frame_bytes = std::size_t{1} << 20;

  auto* ex = app.add_subcommand("export", "Read channel NAME and publish each frame on DDS");
  ex->add_option("name", eo.channel, "Channel to read")->required();
  ex->add_option("--topic", eo.topic, "DDS topic (default: the channel name)");
  ex->add_option("--policy", policy,
                 "latest or sequential (default: sequential when reliable, else latest)")
      ->check(CLI::IsMember({"latest", "sequential"}));
  ex->add_option("--width", eo.image.width,
                 "--ros2: image width in pixels (default: from the frame's tensor)")
      ->check(ipcring::tools::count(1, 1U << 20));
  ex->add_option("--height", eo.image.height,
                 "--ros2: image height in rows (default: from the frame's tensor)")
      ->check(ipcring::tools::count(1, 1U << 20));
  ex->add_option("--encoding", eo.image.encoding,
                 "--ros2: mono8, rgb8, bgr8, rgba8, bgra8, 8UC1..8UC4, bayer_*8 (default: from the "
                 "frame's tensor: mono8, 8UC2, rgb8 or rgba8 by its channels; mono8 without one)")
      ->check([](const std::string& e) {
        return ipcring::bridge::bytes_per_pixel(e) ? std::string() : "unsupported encoding " + e;
      });
  ex->add_option("--frame-id", eo.frame_id, "--ros2: header.frame_id (default: the channel name)");
  ipcring::tools::add_wait_option(ex, eo.wait_s);
  add_common(ex, ce);

  auto* im = app.add_subcommand("import", "Subscribe to DDS topic T and publish into a channel");
  im->add_option("topic", io.topic, "DDS topic")->required();
  im->add_option("--channel", io.channel, "Channel to create (this bridge is its producer)")
      ->required();
  im->add_option("--slots", io.channel_config.slots, "Frame buffers in the pool")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  im->add_option("--readers", io.channel_config.max_readers,
                 "Reader entries: readers attached at once (ringdump show/list/check take none)")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  im->add_option("--max-held", io.channel_config.max_held, "Frames one reader may hold")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  im->add_option("--frame-bytes", io.channel_config.frame_bytes,
                 "Capacity of each frame (bytes, or k, M, G); larger samples are counted "
                 "(too_large) and dropped")
      ->transform(ipcring::tools::size_bytes(1, std::uint64_t{1} << 40))
      ->capture_default_str();
  add_common(im, ci);

  std::string config_interface;
  auto* cf = app.add_subcommand(
      "config", "Print the Cyclone DDS configuration used when CYCLONEDDS_URI is unset");
  cf->add_option("--interface", config_interface, "As for export and import");

  if (const auto rc = ipcring::tools::parse(app, argc, argv)) return *rc;

  if (cf->parsed()) {
    std::printf("%s\n", ipcring::bridge::default_cyclone_config(config_interface).c_str());
    return kExitOk;
  }
  ipcring::tools::install_stop_handlers();
  if (ex->parsed()) {
    if (eo.topic.empty()) eo.topic = eo.channel;
    eo.ros2 = ce.ros2;
    eo.dds = dds_options(ce, ex->get_option("--domain")->count() > 0);
    eo.policy = policy.empty()
                    ? (eo.dds.reliability == Reliability::reliable ? ipcring::ReadPolicy::sequential
                                                                   : ipcring::ReadPolicy::latest)
                : policy == "sequential" ? ipcring::ReadPolicy::sequential
                                         : ipcring::ReadPolicy::latest;
    eo.count = ce.count;
    eo.quiet = ce.quiet;
    return ipcring::bridge::run_export(eo);
  }
  io.ros2 = ci.ros2;
  io.dds = dds_options(ci, im->get_option("--domain")->count() > 0);
  io.count = ci.count;
  io.quiet = ci.quiet;
  return ipcring::bridge::run_import(io);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringbridge: %s\n", e.what());
    return kExitError;
  }
}
