// summary_throughput.cpp — the streamed part of --summary (frames per second of ipcring's
// sequential policy against iceoryx and Boost message_queue, 1 and 4 readers, 64 B and 4 KiB) and
// the single-process cost of loan + publish and read + release against an atomic increment.
#include <cstdio>

#include "harness.hpp"
#include "summary_internal.hpp"

namespace ringbench::summary {
namespace {

std::vector<RatioSpec> throughput_ratios() {
  std::vector<RatioSpec> rows;
  for (std::size_t bytes : {std::size_t{64}, k4K}) {
    const std::string b = bytes == 64 ? "64 B" : "4 KiB";
    for (int readers : {1, 4}) {
      const std::string rd = std::to_string(readers) + " reader" + (readers == 1 ? "" : "s");
      rows.push_back({"spin, " + rd + ", " + b + ": ipcring / iceoryx polling",
                      tput("ipcring/sequential", "spin", readers, bytes), "items_per_second",
                      tput("iceoryx", "polling", readers, bytes), "items_per_second", ""});
      rows.push_back({"blocking, " + rd + ", " + b + ": ipcring / iceoryx WaitSet",
                      tput("ipcring/sequential", "blocking", readers, bytes), "items_per_second",
                      tput("iceoryx", "waitset", readers, bytes), "items_per_second", ""});
      if (readers == 1) {
        rows.push_back({"blocking, " + rd + ", " + b + ": ipcring / Boost message_queue",
                        tput("ipcring/sequential", "blocking", readers, bytes), "items_per_second",
                        tput("boost_mq", "blocking", readers, bytes), "items_per_second", ""});
      }
    }
  }
  return rows;
}

std::vector<std::string> throughput_names() {
  std::vector<std::string> names;
  for (std::size_t bytes : {std::size_t{64}, k4K}) {
    for (int readers : {1, 4}) {
      names.push_back(tput("ipcring/sequential", "spin", readers, bytes));
      names.push_back(tput("iceoryx", "polling", readers, bytes));
      names.push_back(tput("ipcring/sequential", "blocking", readers, bytes));
      names.push_back(tput("iceoryx", "waitset", readers, bytes));
      if (readers == 1) names.push_back(tput("boost_mq", "blocking", readers, bytes));
    }
  }
  return names;
}

std::vector<RatioSpec> single_ratios() {
  return {{"loan + publish / atomic increment", kSinglePublish, "ns_per_op", kSingleAtomic,
           "ns_per_op", ""},
          {"read + release / atomic increment", kSingleRead, "ns_per_op", kSingleAtomic,
           "ns_per_op", ""}};
}

}  // namespace

void print_throughput(const std::vector<Captured>& runs) {
  std::printf("\n  %-58s %12s\n",
              ("throughput, streamed (window " + std::to_string(kThroughputWindow) + ")").c_str(),
              "frames/s");
  for (const auto& name : throughput_names()) {
    const auto rate = counter(runs, name, "items_per_second");
    if (!rate) {
      std::printf("  %-50s n/a\n", name.c_str());
      continue;
    }
    std::printf("  %-58s %12.0f%s\n", name.c_str(), *rate,
                fits(runs, name) ? "" : "  OVERSUBSCRIBED (not compared)");
  }
  std::printf("\n  %-58s %12s\n", "single process", "ns/op");
  for (const auto& name : {kSingleAtomic, kSinglePublish, kSingleRead}) {
    const auto ns = counter(runs, name, "ns_per_op");
    if (ns) {
      std::printf("  %-58s %12.1f\n", name.c_str(), *ns);
    } else {
      std::printf("  %-50s n/a\n", name.c_str());
    }
  }
}

void throughput_markdown(std::ostringstream& md, const std::vector<Captured>& runs) {
  md << "\nThroughput, streamed (frames per second; the producer keeps up to " << kThroughputWindow
     << " frames unacknowledged by the slowest reader; ipcring with the sequential policy; higher "
        "is "
        "better, so a ratio above 1 means ipcring moved more frames):\n\n"
     << "| benchmark | frames/s | fits the CPUs |\n|---|---|---|\n";
  for (const auto& name : throughput_names()) {
    md << "| `" << name << "` | "
       << value_cell(runs, name, shown(runs, name, "items_per_second", 0)) << " | "
       << (fits(runs, name) ? "yes" : "**no: oversubscribed**") << " |\n";
  }
  md << "\n";
  ratio_table(md, runs, throughput_ratios(), "frames/s");

  md << "\nCost of one operation in one process (ns per operation, 64 B frames, batches of "
        "16):\n\n";
  ratio_table(md, runs, single_ratios(), "ns/op");
}

}  // namespace ringbench::summary
