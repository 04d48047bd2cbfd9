// ringsub — reads frames and verifies their sequence-derived payload when it gets a frame and
// again just before releasing it, so an overwrite of a held frame is caught. It reads on across
// producer restarts (the reader follows the channel by name) until --count or --duration.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "pattern.hpp"
#include "signals.hpp"
#include "wait.hpp"

using namespace std::chrono;

namespace {
int run(int argc, char** argv) {
  CLI::App app{"ringsub: read and verify frames of an ipcring channel"};
  ipcring::tools::apply_convention(app, "ringsub");
  std::string name;
  std::string policy = "latest";
  double hold_ms = 0.0;
  std::uint64_t count = 0;
  double duration_s = 0.0;
  double wait_s = ipcring::tools::kDefaultWaitForChannelS;
  bool quiet = false;
  bool origin = false;
  app.add_option("name", name, "Channel name")->required();
  app.add_option("--policy", policy, "latest or sequential")
      ->check(CLI::IsMember({"latest", "sequential"}))
      ->capture_default_str();
  app.add_option("--hold-ms", hold_ms, "Hold each frame this long before releasing it")
      ->check(ipcring::tools::non_negative())
      ->capture_default_str();
  auto* count_opt = app.add_option("--count", count, "Stop after N frames (0: no limit)")
                        ->check(ipcring::tools::count());
  app.add_option("--duration", duration_s, "Stop after SEC seconds (0: no limit)")
      ->check(ipcring::tools::non_negative())
      ->excludes(count_opt);
  ipcring::tools::add_wait_option(&app, wait_s);
  std::vector<std::uint32_t> trust_uids;
  app.add_option("--trust-uid", trust_uids,
                 "Also accept a producer of this user id (repeatable; by default this user, the "
                 "directory's owner and root)")
      ->check(CLI::Range(0U, 4294967294U));
  app.add_flag("--quiet", quiet, "Print only the summary");
  app.add_flag("--origin-sequence", origin,
               "Frames relayed from another channel (ringbridge import): verify each against the "
               "sequence its payload was made for, which must grow; gaps are counted");
  if (const auto rc = ipcring::tools::parse(app, argc, argv)) return *rc;

  const auto start = steady_clock::now();
  ipcring::ReaderOptions opts;
  opts.trust_uids = trust_uids;
  opts.policy =
      policy == "sequential" ? ipcring::ReadPolicy::sequential : ipcring::ReadPolicy::latest;
  // Before the wait for the channel: Ctrl-C while waiting ends ringsub as it does later, with
  // the summary (of no frames) and exit 0.
  ipcring::tools::install_stop_handlers();
  std::optional<ipcring::Reader> reader;
  try {
    reader = ipcring::tools::attach_waiting("ringsub", name, opts, wait_s);
  } catch (const ipcring::Error& e) {
    return ipcring::tools::report("ringsub", e);
  }
  const auto end = duration_s > 0
                       ? start + duration_cast<steady_clock::duration>(duration<double>(duration_s))
                       : steady_clock::time_point::max();
  std::uint64_t frames = 0, corrupt = 0, gone = 0, untyped = 0;
  std::uint64_t last_seq = 0;  // the last frame read (the summary's last_sequence)
  std::uint64_t prev_seq = 0;  // the last frame read from the current producer (0: none yet)
  std::uint64_t gaps = 0;      // --origin-sequence: frames missing between consecutive ones
  std::uint64_t restarts = 0;  // --origin-sequence: the relay's source restarted (its own
                               // producer_gone, which this reader cannot see)
  while (reader && !ipcring::tools::stop_requested() && (count == 0 || frames < count)) {
    const auto now = steady_clock::now();
    if (now >= end) break;
    const auto slice = std::min<steady_clock::duration>(milliseconds(100), end - now);
    auto f = reader->read(slice);
    if (!f) {
      const auto st = f.status();
      if (st == ipcring::Status::timeout || st == ipcring::Status::no_frame) continue;
      if (st == ipcring::Status::producer_gone) {
        // The producer ended (closed, or died). The reader follows the channel by name: a
        // takeover, a restart or a re-created channel's frames come next, so read on until
        // --count or --duration. A new producer's sequence numbers start again.
        ++gone;
        prev_seq = 0;
        continue;
      }
      if (st == ipcring::Status::evicted && !reader->follow_error().empty()) {
        std::fprintf(stderr, "ringsub %s: %.*s\n", name.c_str(),
                     static_cast<int>(reader->follow_error().size()),
                     reader->follow_error().data());
        continue;  // it looks again every producer probe period
      }
      std::fprintf(stderr, "ringsub %s: read failed: %s\n", name.c_str(), ipcring::to_string(st));
      break;
    }
    ++frames;
    std::uint64_t seq = f->sequence();
    bool bad = origin && !ipcring::pattern::origin_sequence(f->data(), f->size(), seq);
    bad = bad || !ipcring::pattern::check(f->data(), f->size(), seq);
    // ringpub describes its frames as uint8 bytes (or, with --image, as a uint8 image covering
    // them); a frame without a tensor is counted (a producer other than ringpub, or a relay such
    // as ringbridge import, which carries no tensor), one with another tensor is corrupt.
    // With --origin-sequence, a relay may describe the same bytes as an image (ringbridge import
    // --ros2: (H, W, C) uint8): any contiguous uint8 tensor of all the frame's bytes is right.
    if (const auto t = f->tensor()) {
      const bool relayed_bytes =
          origin && t->dtype_code == ipcring::pattern::tensor(1).dtype_code && t->dtype_bits == 8 &&
          t->is_contiguous() && t->byte_offset == 0 && t->elements() == f->size();
      if (!ipcring::pattern::is_pattern_tensor(*t, f->size()) && !relayed_bytes) bad = true;
    } else {
      ++untyped;
    }
    // Sequences only grow within one producer. Through a relay, the origin's sequence starts again
    // when the relay's source has a new producer (fresh memory): a well-formed frame whose origin
    // sequence went back is that restart, counted, not corruption.
    if (seq <= prev_seq && origin && !bad) {
      ++restarts;
      prev_seq = 0;
    }
    if (seq <= prev_seq) bad = true;
    if (origin && !bad && prev_seq != 0) gaps += seq - prev_seq - 1;
    prev_seq = seq;
    last_seq = seq;
    if (hold_ms > 0) std::this_thread::sleep_for(duration<double, std::milli>(hold_ms));
    if (!ipcring::pattern::check(f->data(), f->size(), seq)) bad = true;  // overwritten while held?
    f->release();
    if (bad) {
      ++corrupt;
      if (!quiet) {
        std::fprintf(stderr, "ringsub %s: frame %llu is corrupt\n", name.c_str(),
                     static_cast<unsigned long long>(seq));
      }
    }
  }
  const double secs = duration_cast<duration<double>>(steady_clock::now() - start).count();
  std::printf(
      "ringsub %s [%s, hold %.1f ms]: frames=%llu overruns=%llu corrupt=%llu last_sequence=%llu "
      "producer_gone=%llu untyped=%llu seconds=%.2f%s\n",
      name.c_str(), policy.c_str(), hold_ms, static_cast<unsigned long long>(frames),
      static_cast<unsigned long long>(reader ? reader->overruns() : 0),
      static_cast<unsigned long long>(corrupt), static_cast<unsigned long long>(last_seq),
      static_cast<unsigned long long>(gone), static_cast<unsigned long long>(untyped), secs,
      origin ? (" origin_gaps=" + std::to_string(gaps) +
                " origin_restarts=" + std::to_string(restarts))
                   .c_str()
             : "");
  std::fflush(stdout);
  return corrupt != 0 ? ipcring::tools::kExitError : ipcring::tools::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringsub: %s\n", e.what());
    return ipcring::tools::kExitError;
  }
}
