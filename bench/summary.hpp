// summary.hpp — what ringbench remembers of each run, the ratio table of --summary and its plot.
#pragma once

#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ringbench {

struct Captured {
  std::string name;
  bool error = false;
  std::string message;
  std::map<std::string, double> counters;
};

// A display reporter (console, json or csv, as --benchmark_format asks) that also keeps every run.
std::unique_ptr<benchmark::BenchmarkReporter> make_capturing_reporter(const std::string& format,
                                                                      std::vector<Captured>& sink);

// How the run was started, for the markdown table's heading.
struct SummaryOptions {
  std::string png_path;   // empty: no plot
  std::string md_path;    // empty: no markdown
  std::string command;    // the command line, as typed
  std::string placement;  // the CPUs of the sender and the receivers
};

// Prints the ratios against the baselines and the targets; writes a PNG with gnuplot when
// `png_path` is not empty and gnuplot can be run, and the markdown tables when `md_path` is not
// empty. Returns false when the markdown file could not be written.
bool print_summary(const std::vector<Captured>& runs, const SummaryOptions& options);

// The markdown tables of one run (between the markers kMarkdownBegin and kMarkdownEnd): every
// ratio is computed from the two values printed in its own row, so the table adds up.
std::string summary_markdown(const std::vector<Captured>& runs, const SummaryOptions& options);
inline constexpr const char* kMarkdownBegin = "<!-- ringbench-summary:begin -->";
inline constexpr const char* kMarkdownEnd = "<!-- ringbench-summary:end -->";
// The growth tables follow in a block of their own (docs/benchmarks.md only; the README quotes
// the verdicts).
inline constexpr const char* kGrowthBegin = "<!-- ringbench-growth:begin -->";
inline constexpr const char* kGrowthEnd = "<!-- ringbench-growth:end -->";

}  // namespace ringbench
