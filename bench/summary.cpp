// summary.cpp — see summary.hpp.
#include "summary.hpp"

#include "harness.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#ifndef RINGBENCH_GNUPLOT_PATH
#define RINGBENCH_GNUPLOT_PATH "gnuplot"
#endif

namespace ringbench {
namespace {

template <class Base>
class Capturing : public Base {
 public:
  template <class... Args>
  explicit Capturing(std::vector<Captured>& sink, Args... args) : Base(args...), sink_(sink) {}
  void ReportRuns(const std::vector<benchmark::BenchmarkReporter::Run>& runs) override {
    Base::ReportRuns(runs);
    for (const auto& run : runs) {
      if (run.run_type != benchmark::BenchmarkReporter::Run::RT_Iteration) continue;
      Captured c;
      c.name = run.run_name.function_name;  // without "/iterations:1/manual_time"
      c.error = run.error_occurred;
      c.message = run.error_message;
      for (const auto& [key, counter] : run.counters) c.counters[key] = counter.value;
      sink_.push_back(std::move(c));
    }
  }

 private:
  std::vector<Captured>& sink_;
};

const Captured* find(const std::vector<Captured>& runs, const std::string& name) {
  for (const auto& r : runs) {
    if (r.name == name && !r.error) return &r;
  }
  return nullptr;
}

// False when ringbench judged the benchmark oversubscribed (harness.hpp, fits_cpus): more
// spinning processes than CPUs. Such a benchmark is listed but never compared.
bool fits(const std::vector<Captured>& runs, const std::string& name) {
  for (const auto& r : runs) {
    if (r.name != name) continue;
    auto it = r.counters.find("fits_cpus");
    if (it != r.counters.end() && it->second == 0) return false;
  }
  return true;
}

// The counter of a benchmark; with --benchmark_repetitions, the median over the repetitions.
std::optional<double> counter(const std::vector<Captured>& runs, const std::string& name,
                              const char* key) {
  std::vector<double> values;
  for (const auto& r : runs) {
    if (r.name != name || r.error) continue;
    auto it = r.counters.find(key);
    if (it != r.counters.end()) values.push_back(it->second);
  }
  if (values.empty()) return std::nullopt;
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string ipc(const std::string& policy, const std::string& wait, std::size_t bytes) {
  return "ipcring/" + policy + "/" + wait + "/readers:1/bytes:" + std::to_string(bytes);
}

const std::string kFloor = "baseline/atomic/spin";
const std::string kFutex = "baseline/futex/blocking";
const std::string kFutexRtt = "baseline/futex/pingpong_rtt2";
const std::string kIoxPoll = "baseline/iceoryx/polling/bytes:4096";
const std::string kIoxWait = "baseline/iceoryx/waitset/bytes:4096";
constexpr std::size_t k4K = 4096;
constexpr std::size_t k8M = std::size_t{8} << 20;

// One repetition of a benchmark: its p50/p99 and the floor measured concurrently (ack_p50_ns).
struct Point {
  double p50 = NAN, p99 = NAN, floor50 = NAN, floor99 = NAN;
};

std::vector<Point> points(const std::vector<Captured>& runs, const std::string& name) {
  std::vector<Point> out;
  for (const auto& r : runs) {
    if (r.name != name || r.error) continue;
    auto get = [&](const char* key) {
      auto it = r.counters.find(key);
      return it == r.counters.end() ? NAN : it->second;
    };
    out.push_back({get("p50_ns"), get("p99_ns"), get("ack_p50_ns"), get("ack_p99_ns")});
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The host moves the two vCPUs between SMT siblings and separate cores while ringbench runs, which
// changes every latency by a factor of about 3 (the floor goes from ~85 to ~250 ns here). A ratio
// of two benchmarks is therefore taken over pairs of repetitions whose concurrent floors agree
// within 1.5x ("matched"); without such a pair it falls back to the ratio of the medians and says
// that the placement differed.
struct Ratio {
  double r50 = NAN, r99 = NAN;
  std::string note;
};

Ratio compare(const std::vector<Captured>& runs, const std::string& num, const std::string& den) {
  const auto a = points(runs, num), b = points(runs, den);
  Ratio r;
  if (!fits(runs, num) || !fits(runs, den)) {
    r.note = "not compared: " + (fits(runs, num) ? den : num) + " is oversubscribed";
    return r;
  }
  if (a.empty() || b.empty()) {
    r.note = a.empty() ? "no result for " + num : "no result for " + den;
    return r;
  }
  std::vector<double> q50, q99;
  bool floors = false;
  for (const auto& x : a) {
    for (const auto& y : b) {
      if (std::isnan(x.floor50) || std::isnan(y.floor50) || x.floor50 <= 0 || y.floor50 <= 0)
        continue;
      floors = true;
      if (std::max(x.floor50, y.floor50) / std::min(x.floor50, y.floor50) > 1.5) continue;
      q50.push_back(x.p50 / y.p50);
      q99.push_back(x.p99 / y.p99);
    }
  }
  char buf[160];
  if (!q50.empty()) {
    r.r50 = median(q50);
    r.r99 = median(q99);
    std::snprintf(buf, sizeof(buf), "placement matched (%zu pair%s)", q50.size(),
                  q50.size() == 1 ? "" : "s");
  } else {
    std::vector<double> a50, a99, b50, b99, af, bf;
    for (const auto& x : a) a50.push_back(x.p50), a99.push_back(x.p99), af.push_back(x.floor50);
    for (const auto& y : b) b50.push_back(y.p50), b99.push_back(y.p99), bf.push_back(y.floor50);
    r.r50 = median(a50) / median(b50);
    r.r99 = median(a99) / median(b99);
    if (floors) {
      std::snprintf(buf, sizeof(buf),
                    "PLACEMENT DIFFERED (floor %.0f vs %.0f ns): repeat, interleaved", median(af),
                    median(bf));
    } else {
      std::snprintf(buf, sizeof(buf), "medians (no concurrent floor to match)");
    }
  }
  r.note = buf;
  return r;
}

std::string times(double v) {
  if (std::isnan(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", v);
  return buf;
}

void print_ratio(const std::string& what, const Ratio& r, double target, const char* target_text) {
  const char* verdict = target <= 0         ? "-"
                        : std::isnan(r.r50) ? "n/a"
                        : r.r50 <= target   ? "met"
                                            : "MISSED";
  std::printf("  %-50s %8s %8s  %-9s %-7s %s\n", what.c_str(), times(r.r50).c_str(),
              times(r.r99).c_str(), target_text, verdict, r.note.c_str());
}

// Ratio of the floor-normalised p50s (p50 / concurrent floor, median over repetitions) of two
// spinning benchmarks: what is left when the placement is divided out.
void normalized_row(const std::vector<Captured>& runs, const std::string& what,
                    const std::string& num, const std::string& den, double target,
                    const char* target_text) {
  auto norm = [&](const std::string& name, bool p99) {
    std::vector<double> q;
    for (const auto& x : points(runs, name)) {
      const double f = p99 ? x.floor99 : x.floor50;
      if (f > 0) q.push_back((p99 ? x.p99 : x.p50) / f);
    }
    return median(q);
  };
  Ratio r;
  if (!fits(runs, num) || !fits(runs, den)) {
    r.note = "not compared: oversubscribed";
    print_ratio(what, r, target, target_text);
    return;
  }
  r.r50 = norm(num, false) / norm(den, false);
  r.r99 = norm(num, true) / norm(den, true);
  r.note = "each over its own concurrent floor";
  print_ratio(what, r, target, target_text);
}

void ratio_row(const std::vector<Captured>& runs, const std::string& what, const std::string& num,
               const std::string& den, double target, const char* target_text) {
  print_ratio(what, compare(runs, num, den), target, target_text);
}

// p50 of `name` over the floor measured concurrently in the same benchmark (median over
// repetitions).
void in_run_row(const std::vector<Captured>& runs, const std::string& what, const std::string& name,
                double target, const char* target_text) {
  std::vector<double> q50, q99;
  for (const auto& x : points(runs, name)) {
    if (x.floor50 > 0) q50.push_back(x.p50 / x.floor50);
    if (x.floor99 > 0) q99.push_back(x.p99 / x.floor99);
  }
  Ratio r;
  if (fits(runs, name)) {
    r.r50 = median(q50);
    r.r99 = median(q99);
    r.note = q50.empty() ? "no result" : "same benchmark, same placement";
  } else {
    r.note = "not compared: oversubscribed";
  }
  print_ratio(what, r, target, target_text);
}

void absolute_row(const std::vector<Captured>& runs, const std::string& name) {
  const Captured* r = find(runs, name);
  if (r == nullptr) {
    bool present = false;
    std::string why;
    for (const auto& c : runs) {
      if (c.name == name) present = true, why = c.message;
    }
    std::printf("  %-50s %s\n", name.c_str(), present ? why.c_str() : "(not run)");
    return;
  }
  auto get = [&](const char* key) { return counter(runs, name, key).value_or(NAN); };
  std::printf("  %-50s %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f", name.c_str(), get("p50_ns"),
              get("p90_ns"), get("p99_ns"), get("p999_ns"), get("ack_p50_ns"), get("samples"));
  const double sc = get("tx_syscalls_per_msg");
  if (!std::isnan(sc)) std::printf(" %8.3f", sc);
  if (!fits(runs, name)) std::printf("  OVERSUBSCRIBED (not compared)");
  std::printf("\n");
}

// "baseline/uds_seqpacket/blocking/bytes:4096" -> "uds_seqpacket/blocking 4K" (plot labels).
std::string short_label(std::string name) {
  auto cut = [&](const std::string& what, const std::string& with) {
    const auto at = name.find(what);
    if (at != std::string::npos) name.replace(at, what.size(), with);
  };
  cut("baseline/", "");
  cut("/readers:1", "");
  cut("/bytes:4096", " 4K");
  cut("/bytes:8388608", " 8M");
  return name;
}

bool plot(const std::vector<Captured>& runs, const std::string& png,
          const std::vector<std::string>& bars) {
  if (png.find('\'') != std::string::npos) {
    std::printf("plot: skipped (quote in the file name)\n");
    return false;
  }
  char dir_template[] = "/tmp/ringbench-plot-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  if (dir == nullptr) return false;
  const std::string bars_path = std::string(dir) + "/bars.dat";
  const std::string sizes_path = std::string(dir) + "/sizes.dat";
  const std::string script_path = std::string(dir) + "/plot.gp";
  {
    std::ofstream out(bars_path);
    for (const auto& name : bars) {
      auto p50 = counter(runs, name, "p50_ns"), p99 = counter(runs, name, "p99_ns");
      if (p50 && p99) out << '"' << short_label(name) << "\" " << *p50 << ' ' << *p99 << '\n';
    }
  }
  std::vector<std::string> series;
  {
    std::ofstream out(sizes_path);
    for (const char* policy : {"latest", "sequential"}) {
      for (const char* wait : {"spin", "blocking"}) {
        bool any = false;
        for (std::size_t bytes :
             {std::size_t{4} << 10, std::size_t{64} << 10, std::size_t{1} << 20, k8M}) {
          auto p50 = counter(runs, ipc(policy, wait, bytes), "p50_ns");
          if (p50) out << bytes << ' ' << *p50 << '\n', any = true;
        }
        if (any) {
          out << "\n\n";
          series.push_back(std::string(policy) + "/" + wait + " p50");
        }
      }
    }
  }
  {
    std::ofstream gp(script_path);
    gp << "set terminal pngcairo size 1400,1100 noenhanced font ',10'\n"
       << "set output '" << png << "'\n"
       << "set multiplot layout 2,1 title 'ringbench: one-way latency (rtt/2 for pingpong_rtt2), "
          "median over repetitions; absolute values move with the vCPU placement, compare with "
          "--summary ratios'\n"
       << "set style data histogram\nset style histogram clustered gap 1\n"
       << "set style fill solid 0.8 border -1\nset logscale y\nset ylabel 'ns (log)'\n"
       << "set grid ytics\nset xtics rotate by -30 scale 0\nset key top left\n"
       << "set bmargin 8\nset rmargin 6\n"
       << "plot '" << bars_path << "' using 2:xtic(1) title 'p50', '' using 3 title 'p99'\n"
       << "unset style\nset style data linespoints\nset bmargin\nset logscale xy\n"
       << "set xtics rotate by 0 scale 1\nset xlabel 'frame bytes (readers:1)'\n"
       << "set title 'ipcring p50 against frame size (zero-copy: should be flat)'\n";
    if (series.empty()) {
      gp << "unset logscale\nset label 1 'no ipcring results' at graph 0.4,0.5\nplot [0:1][0:1] "
            "NaN notitle\n";
    } else {
      gp << "plot ";
      for (std::size_t i = 0; i < series.size(); ++i) {
        gp << (i ? ", " : "") << "'" << sizes_path << "' index " << i
           << " using 1:2 with linespoints title '" << series[i] << "'";
      }
      gp << "\n";
    }
    gp << "unset multiplot\n";
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execlp(RINGBENCH_GNUPLOT_PATH, RINGBENCH_GNUPLOT_PATH, script_path.c_str(),
           static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = -1;
  if (pid > 0) waitpid(pid, &status, 0);
  for (const auto& p : {bars_path, sizes_path, script_path}) unlink(p.c_str());
  rmdir(dir);
  const bool ok = pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (ok) {
    std::printf("plot: %s\n", png.c_str());
  } else {
    std::printf("plot: skipped (%s)\n", pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 127
                                            ? "gnuplot not found"
                                            : "gnuplot failed");
  }
  return ok;
}

// ---- throughput, single-process costs and the markdown tables ----------------------------------

std::string tput(const std::string& mech, const std::string& wait, int readers, std::size_t bytes) {
  return "throughput/" + mech + "/" + wait + "/readers:" + std::to_string(readers) +
         "/bytes:" + std::to_string(bytes);
}
const std::string kSingleAtomic = "single/atomic_increment";
const std::string kSinglePublish = "single/ipcring/loan_publish";
const std::string kSingleRead = "single/ipcring/read_release";

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
            int decimals) {
  const auto v = counter(runs, name, key.c_str());
  if (!v || std::isnan(*v)) return {};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *v);
  return {buf, std::stod(buf)};
}

int decimals_of(const std::string& key) {
  return key == "ns_per_op" ? 1 : 0;
}

std::string ratio_cell(const std::vector<Captured>& runs, const RatioSpec& r, const Shown& a,
                       const Shown& b) {
  if (!fits(runs, r.num) || !fits(runs, r.den)) return "not compared (oversubscribed)";
  if (a.text.empty() || b.text.empty() || b.value == 0) return "n/a (no result)";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", a.value / b.value);
  return buf;
}

std::string value_cell(const std::vector<Captured>& runs, const std::string& name, const Shown& v) {
  if (v.text.empty()) {
    for (const auto& c : runs) {
      if (c.name == name && c.error) {
        std::string why = c.message;
        for (auto& ch : why) {
          if (ch == '|' || ch == '\n') ch = ' ';
        }
        return "n/a (" + why + ")";
      }
    }
    return "n/a (not run)";
  }
  return v.text;
}

void ratio_table(std::ostringstream& md, const std::vector<Captured>& runs,
                 const std::vector<RatioSpec>& rows, const char* unit) {
  md << "| ratio | numerator | " << unit << " | denominator | " << unit << " | ratio |\n"
     << "|---|---|---|---|---|---|\n";
  for (const auto& r : rows) {
    const Shown a = shown(runs, r.num, r.num_key, decimals_of(r.num_key));
    const Shown b = shown(runs, r.den, r.den_key, decimals_of(r.den_key));
    md << "| " << r.what << " | `" << r.num << "` | " << value_cell(runs, r.num, a) << " | "
       << (r.den_label.empty() ? "`" + r.den + "`" : r.den_label) << " | "
       << value_cell(runs, r.den, b) << " | " << ratio_cell(runs, r, a, b) << " |\n";
  }
}

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

std::string first_line_of(const char* path, const char* prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? line
                                        : line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "";
}

}  // namespace

std::string summary_markdown(const std::vector<Captured>& runs, const SummaryOptions& options) {
  std::ostringstream md;
  char date[64] = "unknown date";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc) != nullptr)
    std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", &utc);
  std::string cpu = first_line_of("/proc/cpuinfo", "model name");
  if (cpu.empty()) cpu = "unknown CPU model";
  std::string load;
  {
    std::ifstream in("/proc/loadavg");
    std::string one, five, fifteen;
    if (in >> one >> five >> fifteen) load = one + " " + five + " " + fifteen;
  }
  md << kMarkdownBegin << "\n"
     << "Generated by `" << options.command << "` on " << date << ": " << cpu << ", "
     << cpus_available() << " CPUs available to the process (affinity mask); " << options.placement
     << ".";
  if (!load.empty()) md << " Load average at the end of the run: " << load << ".";
  md << " The machine was shared with other work while it ran, so the absolute figures are noisy "
        "and move with the vCPU placement; every ratio below is computed from the two values in "
        "its own row, which come from this run. Rows marked oversubscribed had more spinning "
        "processes than CPUs: they are listed, never compared.\n\n";

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
  md << kMarkdownEnd << "\n";
  return md.str();
}

std::unique_ptr<benchmark::BenchmarkReporter> make_capturing_reporter(const std::string& format,
                                                                      std::vector<Captured>& sink) {
  if (format == "json") return std::make_unique<Capturing<benchmark::JSONReporter>>(sink);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // CSVReporter: still a GB format
  if (format == "csv") return std::make_unique<Capturing<benchmark::CSVReporter>>(sink);
#pragma GCC diagnostic pop
  const auto options = isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_Color
                                             : benchmark::ConsoleReporter::OO_None;
  return std::make_unique<Capturing<benchmark::ConsoleReporter>>(sink, options);
}

bool print_summary(const std::vector<Captured>& runs, const SummaryOptions& options) {
  const std::string& png_path = options.png_path;
  std::printf("\n== ringbench summary (ratios of this run; one-way latency unless noted) ==\n");
  std::printf("  %-50s %9s %9s %9s %9s %9s %9s %8s\n", "benchmark", "p50 ns", "p90 ns", "p99 ns",
              "p99.9 ns", "floor p50", "samples", "tx sc/msg");
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
  if (!png_path.empty()) {
    std::vector<std::string> bars = headline;
    plot(runs, png_path, bars);
  }
  if (options.md_path.empty()) return true;
  std::ofstream out(options.md_path);
  out << summary_markdown(runs, options);
  out.close();
  if (!out) {
    std::fprintf(stderr, "ringbench: cannot write the markdown summary to %s\n",
                 options.md_path.c_str());
    return false;
  }
  std::printf("markdown: %s\n", options.md_path.c_str());
  return true;
}

}  // namespace ringbench
