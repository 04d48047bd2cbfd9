// summary_latency.cpp — the one-way latency part of --summary: absolute percentiles, and ipcring
// against the raw atomic floor, the concurrent floor, futex and iceoryx (polling and WaitSet),
// 8 MiB against 4 KiB frames, and the producer's system calls when no reader sleeps.
#include <cstdio>

#include "harness.hpp"
#include "summary_internal.hpp"

namespace ringbench::summary {
namespace {

std::vector<RatioSpec> latency_ratios() {
  std::vector<RatioSpec> rows;
  for (const char* policy : {"latest", "sequential"}) {
    const std::string p = policy;
    const std::string spin = ipc(p, "spin", k4K), block = ipc(p, "blocking", k4K);
    rows.push_back({p + ": spin / raw atomic floor", spin, "p50_ns", kFloor, "p50_ns", ""});
    rows.push_back({p + ": spin / its concurrent floor", spin, "p50_ns", spin, "ack_p50_ns",
                    "its own concurrent floor (`ack_p50_ns`)"});
    rows.push_back({p + ": spin / iceoryx polling", spin, "p50_ns", kIoxPoll, "p50_ns", ""});
    rows.push_back({p + ": blocking / futex one-way", block, "p50_ns", kFutex, "p50_ns", ""});
    rows.push_back({p + ": blocking / iceoryx WaitSet", block, "p50_ns", kIoxWait, "p50_ns", ""});
    rows.push_back({p + ": spin 8 MiB / 4 KiB", ipc(p, "spin", k8M), "p50_ns", spin, "p50_ns", ""});
    rows.push_back(
        {p + ": blocking 8 MiB / 4 KiB", ipc(p, "blocking", k8M), "p50_ns", block, "p50_ns", ""});
  }
  return rows;
}

}  // namespace

std::vector<std::string> latency_headline() {
  std::vector<std::string> headline = {kFloor,
                                       kFutex,
                                       kFutexRtt,
                                       "baseline/uds_seqpacket/blocking/bytes:4096",
                                       "baseline/pipe/blocking/bytes:4096",
                                       "baseline/boost_mq/blocking/bytes:4096",
                                       kIoxPoll,
                                       kIoxWait};
  for (const char* policy : {"latest", "sequential"}) {
    for (const char* wait : {"spin", "blocking"}) {
      headline.push_back(ipc(policy, wait, k4K));
      headline.push_back(ipc(policy, wait, k8M));
    }
  }
  return headline;
}

void print_latency(const std::vector<Captured>& runs, const std::vector<std::string>& headline) {
  std::printf("  %-50s %9s %9s %9s %9s %9s %9s %8s\n", "benchmark", "p50 ns", "p90 ns", "p99 ns",
              "p99.9 ns", "floor p50", "samples", "tx sc/msg");
  for (const auto& name : headline) absolute_row(runs, name);

  std::printf("\n  %-50s %8s %8s  %-9s %-7s %s\n", "ratio", "p50", "p99", "target", "p50", "how");
  for (const char* policy : {"latest", "sequential"}) {
    const std::string spin = ipc(policy, "spin", k4K), block = ipc(policy, "blocking", k4K);
    const std::string p = std::string(policy) + ": ";
    ratio_row(runs, p + "spin / raw atomic floor", spin, kFloor, 2.0, "<= 2x");
    in_run_row(runs, p + "spin / concurrent floor (same benchmark)", spin, 2.0, "<= 2x");
    ratio_row(runs, p + "spin / iceoryx polling", spin, kIoxPoll, 0.3, "<= 0.3x");
    normalized_row(runs, p + "spin / iceoryx polling (floor-normalised)", spin, kIoxPoll, 0.3,
                   "<= 0.3x");
    ratio_row(runs, p + "blocking / futex (one-way)", block, kFutex, 1.1, "<= 1.1x");
    ratio_row(runs, p + "blocking / futex ping-pong rtt/2", block, kFutexRtt, 0, "(info)");
    ratio_row(runs, p + "blocking / iceoryx WaitSet", block, kIoxWait, 1.0, "<= 1x");
    ratio_row(runs, p + "spin 8MiB / 4KiB", ipc(policy, "spin", k8M), spin, 1.1, "<= 1.1x");
    normalized_row(runs, p + "spin 8MiB / 4KiB (floor-normalised)", ipc(policy, "spin", k8M), spin,
                   1.1, "<= 1.1x");
    ratio_row(runs, p + "blocking 8MiB / 4KiB", ipc(policy, "blocking", k8M), block, 1.1,
              "<= 1.1x");
  }
  std::printf(
      "\n  publish with no sleeping reader (spin readers): system calls of the producer thread\n");
  for (const char* policy : {"latest", "sequential"}) {
    for (std::size_t bytes : {k4K, k8M}) {
      const std::string name = ipc(policy, "spin", bytes);
      auto per = counter(runs, name, "tx_syscalls_per_msg");
      auto samples = counter(runs, name, "samples");
      if (!per) {
        std::printf("  %-50s n/a\n", name.c_str());
        continue;
      }
      // samples excludes the warm-up messages; the count covers all messages sent.
      std::printf("  %-50s %.4f per message  target 0: %s\n", name.c_str(), *per,
                  *per == 0 ? "met" : "MISSED");
      (void)samples;
    }
  }
}

void latency_markdown(std::ostringstream& md, const std::vector<Captured>& runs) {
  md << "Latency, one-way, one reader (ns; median over repetitions):\n\n"
     << "| benchmark | p50 ns | p99 ns | concurrent floor p50 ns | fits the CPUs |\n"
     << "|---|---|---|---|---|\n";
  std::vector<std::string> latency = {kFloor, kFutex, kIoxPoll, kIoxWait,
                                      "baseline/boost_mq/blocking/bytes:4096"};
  for (const char* policy : {"latest", "sequential"}) {
    for (const char* wait : {"spin", "blocking"}) {
      latency.push_back(ipc(policy, wait, k4K));
      latency.push_back(ipc(policy, wait, k8M));
    }
  }
  for (const auto& name : latency) {
    const Shown p50 = shown(runs, name, "p50_ns", 0), p99 = shown(runs, name, "p99_ns", 0);
    const Shown floor = shown(runs, name, "ack_p50_ns", 0);
    md << "| `" << name << "` | " << value_cell(runs, name, p50) << " | "
       << (p99.text.empty() ? "n/a" : p99.text) << " | "
       << (floor.text.empty() ? "n/a" : floor.text) << " | "
       << (fits(runs, name) ? "yes" : "**no: oversubscribed**") << " |\n";
  }
  md << "\n";
  ratio_table(md, runs, latency_ratios(), "p50 ns");
}

}  // namespace ringbench::summary
