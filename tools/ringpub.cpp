// ringpub — publishes frames whose payload is derived from their sequence number.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "pattern.hpp"
#include "signals.hpp"

using namespace std::chrono;

namespace {
int run(int argc, char** argv) {
  CLI::App app{"ringpub: publish sequence-derived frames into an ipcring channel"};
  ipcring::tools::apply_convention(app, "ringpub");
  std::string name;
  ipcring::ChannelConfig cfg;  // the library's defaults, which satisfy the sizing rule
  cfg.frame_bytes = std::size_t{64} * 1024;
  double rate = 1000.0;
  std::uint64_t count = 0;
  double duration_s = 0.0;
  unsigned mode = cfg.mode;
  std::string image;
  app.add_option("name", name, "Channel name ([A-Za-z0-9_-], at most 200)")->required();
  app.add_option("--slots", cfg.slots, "Frame buffers in the pool")->capture_default_str();
  app.add_option("--readers", cfg.max_readers, "Maximum readers")->capture_default_str();
  app.add_option("--max-held", cfg.max_held, "Frames one reader may hold")->capture_default_str();
  app.add_option("--frame-bytes", cfg.frame_bytes, "Capacity (and payload) of each frame")
      ->capture_default_str();
  app.add_option("--rate", rate, "Frames per second (0: as fast as possible)")
      ->check(ipcring::tools::non_negative())
      ->capture_default_str();
  auto* count_opt = app.add_option("--count", count, "Stop after N frames");
  app.add_option("--duration", duration_s, "Stop after SEC seconds")
      ->check(ipcring::tools::non_negative())
      ->excludes(count_opt);
  app.add_option("--mode", mode, "Permission bits of the segments (octal, e.g. 0660)")
      ->transform(ipcring::tools::octal_mode)
      ->default_str("0600");
  app.add_option("--image", image,
                 "WxHxC: describe each frame as a uint8 (H, W, C) image (sets --frame-bytes); the "
                 "payload is the same pattern")
      ->check([](const std::string& v) {
        unsigned w = 0, h = 0, c = 0;
        char tail = 0;
        return std::sscanf(v.c_str(), "%ux%ux%u%c", &w, &h, &c, &tail) == 3 && w > 0 && h > 0 &&
                       c > 0 && w <= 65536 && h <= 65536 && c <= 4
                   ? std::string()
                   : "--image " + v + ": want WxHxC, e.g. 640x480x3 (C at most 4)";
      });
  if (const auto rc = ipcring::tools::parse(app, argc, argv)) return *rc;
  cfg.mode = mode;
  ipcring::TensorDesc tensor = ipcring::pattern::tensor(cfg.frame_bytes);
  if (!image.empty()) {
    unsigned w = 0, h = 0, c = 0;
    std::sscanf(image.c_str(), "%ux%ux%u", &w, &h, &c);
    cfg.frame_bytes = std::size_t{w} * h * c;
    tensor = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {h, w, c});
  }

  ipcring::tools::install_stop_handlers();
  std::optional<ipcring::Producer> producer;
  try {
    producer.emplace(ipcring::Producer::create(name, cfg));
  } catch (const ipcring::Error& e) {
    return ipcring::tools::report("ringpub", e);
  }
  if (!cfg.loan_never_fails()) {
    std::fprintf(stderr,
                 "ringpub: note: slots=%u < max_readers*max_held+2=%u; loans can fail when "
                 "readers hold frames\n",
                 cfg.slots, cfg.max_readers * cfg.max_held + 2);
  }
  const auto start = steady_clock::now();
  const auto end = duration_s > 0
                       ? start + duration_cast<steady_clock::duration>(duration<double>(duration_s))
                       : steady_clock::time_point::max();
  const auto period = rate > 0 ? duration_cast<steady_clock::duration>(duration<double>(1.0 / rate))
                               : steady_clock::duration::zero();
  std::uint64_t published = 0;
  std::uint64_t loan_failures = 0;
  std::size_t reaped_manually = 0;
  auto next = start;
  while (!ipcring::tools::stop_requested() && (count == 0 || published < count) &&
         steady_clock::now() < end) {
    auto loan = producer->loan();
    if (!loan) {
      ++loan_failures;
      std::this_thread::sleep_for(microseconds(100));
      continue;
    }
    ipcring::pattern::fill(loan->data(), cfg.frame_bytes, loan->sequence());
    // Describe the frame (uint8 bytes, or an image) and when it was made, so readers and ringdump
    // see both.
    loan->set_tensor(tensor);
    loan->set_capture_time_ns(static_cast<std::uint64_t>(
        duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()));
    producer->publish(std::move(*loan), cfg.frame_bytes);
    ++published;
    if (period.count() > 0) {
      next += period;
      const auto now = steady_clock::now();
      if (next > now) {
        std::this_thread::sleep_until(next);
      } else if (now - next > 100 * period) {
        next = now;  // fell far behind (stopped): do not burst to catch up
      }
    }
  }
  reaped_manually = producer->reap_dead_readers();
  const auto snap = ipcring::inspect(name);
  const double secs = duration_cast<duration<double>>(steady_clock::now() - start).count();
  std::printf(
      "ringpub %s: published=%llu loan_failures=%llu readers_reaped=%llu seconds=%.2f "
      "rate_hz=%.0f epoch=%llu\n",
      name.c_str(), static_cast<unsigned long long>(published),
      static_cast<unsigned long long>(loan_failures),
      static_cast<unsigned long long>(snap.producer.readers_reaped), secs,
      secs > 0 ? static_cast<double>(published) / secs : 0.0,
      static_cast<unsigned long long>(producer->epoch()));
  (void)reaped_manually;
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringpub: %s\n", e.what());
    return ipcring::tools::kExitError;
  }
}
