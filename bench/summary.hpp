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

// Prints the ratios against the baselines and the targets; writes a PNG with gnuplot when
// `png_path` is not empty and gnuplot can be run.
void print_summary(const std::vector<Captured>& runs, const std::string& png_path);

}  // namespace ringbench
