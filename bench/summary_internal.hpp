// summary_internal.hpp — what the parts of `ringbench --summary` share: the runs' counters looked
// up by benchmark name, the ratio of two benchmarks over placement-matched repetitions, the console
// rows and the markdown ratio table. Each report has its own file: summary_latency.cpp (one-way
// latency against the floor, futex and iceoryx), summary_throughput.cpp (streamed frames per
// second, single-process costs), summary_plot.cpp (the PNG); summary.cpp renders them in order.
#pragma once

#include <cmath>
#include <cstddef>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "summary.hpp"

namespace ringbench::summary {

// The run named `name` that did not fail, or nullptr.
const Captured* find(const std::vector<Captured>& runs, const std::string& name);

// False when ringbench judged the benchmark oversubscribed (harness.hpp, fits_cpus): more
// spinning processes than CPUs. Such a benchmark is listed but never compared.
bool fits(const std::vector<Captured>& runs, const std::string& name);

// The counter of a benchmark; with --benchmark_repetitions, the median over the repetitions.
std::optional<double> counter(const std::vector<Captured>& runs, const std::string& name,
                              const char* key);

double median(std::vector<double> v);

// "ipcring/<policy>/<wait>/readers:1/bytes:<bytes>"
std::string ipc(const std::string& policy, const std::string& wait, std::size_t bytes);
// "throughput/<mech>/<wait>/readers:<readers>/bytes:<bytes>"
std::string tput(const std::string& mech, const std::string& wait, int readers, std::size_t bytes);

inline const std::string kFloor = "baseline/atomic/spin";
inline const std::string kFutex = "baseline/futex/blocking";
inline const std::string kFutexRtt = "baseline/futex/pingpong_rtt2";
inline const std::string kIoxPoll = "baseline/iceoryx/polling/bytes:4096";
inline const std::string kIoxWait = "baseline/iceoryx/waitset/bytes:4096";
inline const std::string kSingleAtomic = "single/atomic_increment";
inline const std::string kSinglePublish = "single/ipcring/loan_publish";
inline const std::string kSingleRead = "single/ipcring/read_release";
inline constexpr std::size_t k4K = 4096;
inline constexpr std::size_t k8M = std::size_t{8} << 20;

// ---- console rows ------------------------------------------------------------------------------

// "1.23x", or "n/a" for NaN.
std::string times(double v);

// benchmark p50 p90 p99 p99.9 floor-p50 samples [syscalls/msg] [OVERSUBSCRIBED]
void absolute_row(const std::vector<Captured>& runs, const std::string& name);
// num / den over placement-matched repetitions, against the target (<= 0: information only).
void ratio_row(const std::vector<Captured>& runs, const std::string& what, const std::string& num,
               const std::string& den, double target, const char* target_text);
// The ratio of the floor-normalised p50s of two spinning benchmarks.
void normalized_row(const std::vector<Captured>& runs, const std::string& what,
                    const std::string& num, const std::string& den, double target,
                    const char* target_text);
// p50 of `name` over the floor measured concurrently in the same benchmark.
void in_run_row(const std::vector<Captured>& runs, const std::string& what, const std::string& name,
                double target, const char* target_text);

// ---- markdown ----------------------------------------------------------------------------------

// One row of a ratio table: numerator / denominator, each a benchmark's counter (or, for the
// concurrent floor, another counter of the same benchmark).
struct RatioSpec {
  std::string what;
  std::string num, num_key;
  std::string den, den_key;
  std::string den_label;  // how the denominator is named in the table (default: den)
};

// A value as the table prints it, and the number it reads back as: ratios are computed from the
// printed values so that anyone can recompute them from the table.
struct Shown {
  std::string text;  // empty: no value
  double value = NAN;
};
Shown shown(const std::vector<Captured>& runs, const std::string& name, const std::string& key,
            int decimals);
// The value, or "n/a (why)" from the run's error, or "n/a (not run)".
std::string value_cell(const std::vector<Captured>& runs, const std::string& name, const Shown& v);
void ratio_table(std::ostringstream& md, const std::vector<Captured>& runs,
                 const std::vector<RatioSpec>& rows, const char* unit);

// ---- the reports -------------------------------------------------------------------------------

// The benchmarks whose absolute figures head the console summary (and make the plot's bars).
std::vector<std::string> latency_headline();
// Console: the headline's absolute rows, the latency ratios and the producer's system calls.
void print_latency(const std::vector<Captured>& runs, const std::vector<std::string>& headline);
void latency_markdown(std::ostringstream& md, const std::vector<Captured>& runs);

// Console and markdown: streamed frames per second, and the single-process costs.
void print_throughput(const std::vector<Captured>& runs);
void throughput_markdown(std::ostringstream& md, const std::vector<Captured>& runs);

// Console and markdown (its own block, kGrowthBegin ... kGrowthEnd): the growth tables and their
// verdicts (summary_growth.cpp).
void print_growth(const std::vector<Captured>& runs);
void growth_markdown(std::ostringstream& md, const std::vector<Captured>& runs);

// Writes a PNG with gnuplot (the bars, and ipcring's p50 against the frame size).
bool plot(const std::vector<Captured>& runs, const std::string& png,
          const std::vector<std::string>& bars);

}  // namespace ringbench::summary
