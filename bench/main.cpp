// main.cpp — ringbench: cross-process latency and throughput of ipcring against baselines
// measured in the same run, and the single-process cost of its hot-path calls.
//
// Every cross-process benchmark runs in the two-process harness of harness.hpp. Google Benchmark
// flags work as usual (--benchmark_filter, --benchmark_out=FILE, --benchmark_out_format,
// --benchmark_format,
// --benchmark_repetitions ...); ringbench's own flags are listed by usage() below.
//
// Exit status (the tools' convention): 0 when every selected benchmark ran or was skipped with a
// reason ("skipped: ..."), 1 when one failed ("error: ..."), 2 for a bad command line. --version
// prints "ringbench VERSION (layout N)".
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"
#include "ipcring/version.hpp"
#include "roudi.hpp"
#include "summary.hpp"

namespace {

void usage() {
  std::printf(
      "ringbench: latency and throughput of ipcring and its baselines (see docs/benchmarks.md)\n"
      "  --summary                 print ratios against the baselines and the targets, and plot\n"
      "                            (without --benchmark_filter: only the benchmarks it needs)\n"
      "  --summary_png=FILE        where the plot goes (default ringbench-latency.png; empty: "
      "none)\n"
      "  --summary_md=FILE         also write the summary as markdown tables (the README's)\n"
      "  --smoke                   tiny budgets: proves every benchmark runs, in a few seconds\n"
      "  --ringbench_budget=S      seconds of messages per benchmark (default 1.0)\n"
      "  --ringbench_max_messages=N  cap on messages per benchmark (default 1000000)\n"
      "  --ringbench_gap_us=N      pause after each ack when receivers block (default 100)\n"
      "  --ringbench_cpus=A,B,...  CPUs to use: A for the sender, the rest for receivers\n"
      "                            (default: the affinity mask, lowest CPU to the sender)\n"
      "  --version                 print the version and exit\n"
      "Google Benchmark's flags follow (--benchmark_filter, --benchmark_out ...).\n\n");
}

bool take_flag(const std::string& arg, const char* name, std::string& value) {
  const std::string prefix = std::string(name) + "=";
  if (arg.rfind(prefix, 0) != 0) return false;
  value = arg.substr(prefix.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  using ringbench::settings;
  bool summary = false;
  bool user_filter = false;
  std::string png = "ringbench-latency.png";
  std::string md;
  std::string command = "ringbench";  // as typed, without the path of the binary
  for (int i = 1; i < argc; ++i) command += std::string(" ") + argv[i];
  std::string format = "console";
  std::vector<char*> rest = {argv[0]};
  std::string option;  // the option whose value is being converted, for the message
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      std::string value;
      option = arg.substr(0, arg.find('='));
      if (arg == "--version") {
        std::printf("ringbench %s (layout %u)\n", ipcring::kVersion,
                    static_cast<unsigned>(ipcring::layout_version()));
        return 0;
      }
      if (arg == "--summary") {
        summary = true;
      } else if (arg == "--smoke") {
        settings().smoke = true;
        settings().budget_s = 0.02;
        settings().max_messages = 2000;
        settings().child_timeout_s = 20;
      } else if (take_flag(arg, "--summary_png", value)) {
        png = value;
      } else if (take_flag(arg, "--summary_md", value)) {
        md = value;
      } else if (take_flag(arg, "--ringbench_budget", value)) {
        settings().budget_s = std::stod(value);
      } else if (take_flag(arg, "--ringbench_max_messages", value)) {
        settings().max_messages = std::stoull(value);
      } else if (take_flag(arg, "--ringbench_gap_us", value)) {
        settings().blocking_gap_ns = std::stoull(value) * 1000;
      } else if (take_flag(arg, "--ringbench_cpus", value)) {
        std::stringstream list(value);
        std::string cpu;
        while (std::getline(list, cpu, ',')) settings().cpus.push_back(std::stoi(cpu));
      } else {
        if (arg == "--help" || arg == "-h") usage();
        if (arg.rfind("--benchmark_filter", 0) == 0) user_filter = true;
        if (take_flag(arg, "--benchmark_format", value)) format = value;
        rest.push_back(argv[i]);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringbench: %s: bad value (%s)\n", option.c_str(), e.what());
    return 2;
  }
  if (!md.empty() && !summary) {
    std::fprintf(stderr, "ringbench: --summary_md needs --summary\n");
    return 2;
  }
  if (summary && format != "console") {
    std::fprintf(stderr,
                 "ringbench: --summary prints to the console; use --benchmark_out=FILE for JSON\n");
    format = "console";
  }

  // --benchmark_list_tests[=true]: the names are the output; nothing runs, which is no failure.
  bool listing = false;
  for (const char* a : rest) {
    const std::string arg = a == nullptr ? "" : a;
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" ||
        arg == "--benchmark_list_tests=1" || arg == "--benchmark_list_tests=yes") {
      listing = true;
    }
  }
  int rest_argc = static_cast<int>(rest.size());
  benchmark::Initialize(&rest_argc, rest.data());
  if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 2;
  if (summary && !user_filter) {
    // The headline (readers:1, 4 KiB and 8 MiB), then the growth section: blocking readers 1-8,
    // spinning readers only as many as fit beside the sender, frame sizes 64 B to 64 MiB.
    std::string spinning = "1";
    for (int r : {2, 4, 8}) {
      if (r + 1 <= ringbench::cpus_available()) spinning += "|" + std::to_string(r);
    }
    benchmark::SetBenchmarkFilter(
        "^(baseline/|single/|throughput/|growth/|ipcring/[a-z]+/[a-z]+/readers:1/"
        "bytes:(4096|8388608)/"
        "|ipcring/latest/blocking/readers:(2|4|8)/bytes:4096/"
        "|ipcring/latest/spin/readers:(" +
        spinning +
        ")/bytes:4096/|ipcring/latest/spin/readers:1/bytes:(64|65536|1048576|67108864)/)");
  }

  ringbench::register_baselines();
  ringbench::register_iceoryx();
  ringbench::register_ipcring();
  ringbench::register_growth();

  const ringbench::Pinning one = ringbench::plan_pinning(1);
  const ringbench::Pinning eight = ringbench::plan_pinning(8);
  std::string pinning = "sender cpu" + std::to_string(one.sender_cpu) + ", receivers cpu";
  for (std::size_t i = 0; i < eight.receiver_cpus.size(); ++i) {
    pinning += (i ? "," : "") + std::to_string(eight.receiver_cpus[i]);
  }
  pinning += " (round-robin over all but the sender's CPU)";
  benchmark::AddCustomContext("ringbench_pinning", pinning);
  benchmark::AddCustomContext(
      "ringbench_cores",
      "the sender spins on acknowledgements (holds its core); spin-mode receivers "
      "hold a core each; blocking receivers sleep");
  benchmark::AddCustomContext("ringbench_clock", "CLOCK_MONOTONIC, read by both processes");
#ifdef RINGBENCH_ABLATE_TEXT
  if (RINGBENCH_ABLATE_TEXT[0] != '\0') {
    benchmark::AddCustomContext(
        "ringbench_ablated",
        std::string("read-path steps removed (RINGBENCH_ABLATE): ") + RINGBENCH_ABLATE_TEXT);
  }
#endif
  benchmark::AddCustomContext("ringbench_budget_s", std::to_string(settings().budget_s));
  benchmark::AddCustomContext("ringbench_blocking_gap_us",
                              std::to_string(settings().blocking_gap_ns / 1000));
  benchmark::AddCustomContext(
      "ringbench_time_column",
      "Time = mean period of the paced stream (send, receive, ack), or of the streamed one "
      "(throughput/*: items_per_second); latency is in the p*_ns counters; single/*: ns_per_op");

  std::vector<ringbench::Captured> runs;
  auto reporter = ringbench::make_capturing_reporter(format, runs);
  benchmark::RunSpecifiedBenchmarks(reporter.get());
  benchmark::Shutdown();
  ringbench::stop_roudi();

  int failures = 0;
  if (summary) {
    ringbench::SummaryOptions options;
    options.png_path = png;
    options.md_path = md;
    options.command = command;
    options.placement = pinning;
    if (!ringbench::print_summary(runs, options)) ++failures;
  }

  for (const auto& run : runs) {
    if (run.error && run.message.rfind("skipped:", 0) != 0) {
      ++failures;
      std::fprintf(stderr, "ringbench: %s failed: %s\n", run.name.c_str(), run.message.c_str());
    }
  }
  if (runs.empty() && !listing) {
    std::fprintf(stderr, "ringbench: no benchmark matched\n");
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
