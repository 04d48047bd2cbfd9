// summary_growth.cpp — the growth section of --summary: small tables of one cost against one
// parameter (readers, slots, frame size, channels in one process, max_readers for the reap, idle
// readers), each with a verdict computed from its own rows.
//
// The verdict. Each row gives (x, value); a cost is the value itself, or 1 / value where higher is
// better (frames per second). The least-squares slope of log(cost) against log(x) over the rows
// with a value is the growth exponent; the fitted growth over the table is
// (x_last / x_first)^slope. "flat": fitted growth <= 1.5x; "linear": slope <= 1.25 (sub-linear
// included); "worse": steeper. Fewer than two values: n/a. check_tables.py recomputes every
// verdict from the printed rows.
#include <cmath>
#include <cstdio>
#include <utility>

#include "harness.hpp"
#include "summary_internal.hpp"

namespace ringbench::summary {
namespace {

struct GrowthRow {
  double x;
  std::string name;
};
struct GrowthTable {
  std::string title;
  std::string x_label;
  std::string value_label;
  std::string key;
  bool higher_is_better = false;
  int decimals = 0;
  std::vector<GrowthRow> rows;
  std::string note;  // after the verdict, when not empty
};

GrowthTable table(std::string title, std::string x_label, std::string value_label, std::string key,
                  bool higher_is_better = false) {
  GrowthTable g;
  g.title = std::move(title);
  g.x_label = std::move(x_label);
  g.value_label = std::move(value_label);
  g.key = std::move(key);
  g.higher_is_better = higher_is_better;
  return g;
}

std::string x_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.0f", x);
  return buf;
}

std::vector<GrowthTable> growth_tables() {
  std::vector<GrowthTable> t;
  {
    GrowthTable g =
        table("Latency against readers (blocking, latest, 4 KiB)", "readers", "p50 ns", "p50_ns");
    for (int r : {1, 2, 4, 8}) {
      g.rows.push_back({static_cast<double>(r),
                        "ipcring/latest/blocking/readers:" + std::to_string(r) + "/bytes:4096"});
    }
    t.push_back(g);
  }
  {
    GrowthTable g = table("Latency against readers (spinning, latest, 4 KiB; only where they fit)",
                          "readers", "p50 ns", "p50_ns");
    for (int r : {1, 2, 4, 8}) {
      if (r + 1 > cpus_available()) break;
      g.rows.push_back({static_cast<double>(r),
                        "ipcring/latest/spin/readers:" + std::to_string(r) + "/bytes:4096"});
    }
    if (g.rows.size() < 2) {
      g.note = "only " + std::to_string(g.rows.size()) + " spinning reader(s) and the sender fit " +
               std::to_string(cpus_available()) + " CPUs";
    }
    t.push_back(g);
  }
  {
    GrowthTable g = table("Throughput against readers (blocking, sequential, 64 B, window 8)",
                          "readers", "frames/s (higher is better)", "items_per_second", true);
    for (int r : {1, 2, 4, 8}) {
      g.rows.push_back({static_cast<double>(r),
                        "growth/throughput/sequential/blocking/readers:" + std::to_string(r)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g = table("Latency against slots (spinning, sequential, one reader, 4 KiB)",
                          "slots", "p50 ns", "p50_ns");
    for (int s : {8, 64, 512}) {
      g.rows.push_back(
          {static_cast<double>(s), "growth/latency/sequential/spin/slots:" + std::to_string(s)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g =
        table("Throughput against slots (spinning, sequential, one reader, 64 B, window 4)",
              "slots", "frames/s (higher is better)", "items_per_second", true);
    for (int s : {8, 64, 512}) {
      g.rows.push_back(
          {static_cast<double>(s), "growth/throughput/sequential/spin/slots:" + std::to_string(s)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g =
        table("Latency against frame size (spinning, latest, one reader; zero-copy: flat)", "bytes",
              "p50 ns", "p50_ns");
    for (double b : {64.0, 4096.0, 65536.0, 1048576.0, 8388608.0, 67108864.0}) {
      g.rows.push_back({b, "ipcring/latest/spin/readers:1/bytes:" + x_text(b)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g =
        table("Loan + publish + read + release per frame against channels in one process (64 B)",
              "channels", "ns per frame", "ns_per_op");
    g.decimals = 1;
    for (int c : {1, 16, 64}) {
      g.rows.push_back({static_cast<double>(c), "single/ipcring/channels:" + std::to_string(c)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g = table("Reap of one dead reader against max_readers (the others alive)",
                          "max_readers", "ns per reap (median)", "ns_per_op");
    for (int m : {4, 16, 32, 64}) {
      g.rows.push_back(
          {static_cast<double>(m), "single/ipcring/reap/max_readers:" + std::to_string(m)});
    }
    t.push_back(g);
  }
  {
    GrowthTable g = table("Idle CPU of blocking readers on a 30 Hz channel (all readers together)",
                          "readers", "% of one core", "cpu_percent");
    g.decimals = 3;
    for (int r : {1, 8}) {
      g.rows.push_back(
          {static_cast<double>(r), "growth/idle/blocking/readers:" + std::to_string(r) + "/hz:30"});
    }
    t.push_back(g);
  }
  return t;
}

struct Verdict {
  std::string word;  // flat, linear, worse, n/a
  double slope = NAN, growth = NAN, span = NAN;
};

Verdict verdict_of(const std::vector<std::pair<double, double>>& xy, bool higher_is_better) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& [x, y] : xy) {
    if (x > 0 && y > 0) pts.push_back({std::log(x), std::log(higher_is_better ? 1 / y : y)});
  }
  Verdict v;
  if (pts.size() < 2) {
    v.word = "n/a";
    return v;
  }
  double mx = 0, my = 0;
  for (const auto& [x, y] : pts) mx += x, my += y;
  mx /= static_cast<double>(pts.size());
  my /= static_cast<double>(pts.size());
  double sxy = 0, sxx = 0;
  for (const auto& [x, y] : pts) sxy += (x - mx) * (y - my), sxx += (x - mx) * (x - mx);
  v.slope = sxy / sxx;
  v.span = std::exp(pts.back().first - pts.front().first);
  v.growth = std::exp(v.slope * (pts.back().first - pts.front().first));
  v.word = v.growth <= 1.5 ? "flat" : v.slope <= 1.25 ? "linear" : "worse";
  return v;
}

std::string verdict_text(const Verdict& v) {
  if (v.word == "n/a") return "n/a (fewer than two results)";
  char buf[160];
  std::snprintf(buf, sizeof buf, "%s (cost fitted %.2fx over %.0fx; log-log slope %.2f)",
                v.word.c_str(), v.growth, v.span, v.slope);
  return buf;
}

}  // namespace

void print_growth(const std::vector<Captured>& runs) {
  std::printf("\n  growth (verdict from the rows: flat <= 1.5x fitted, linear: slope <= 1.25)\n");
  for (const auto& g : growth_tables()) {
    std::printf("  %s\n", g.title.c_str());
    std::vector<std::pair<double, double>> xy;
    for (const auto& row : g.rows) {
      const Shown v = shown(runs, row.name, g.key, g.decimals);
      if (!v.text.empty() && fits(runs, row.name)) xy.push_back({row.x, v.value});
      std::printf("    %-12s %-54s %s\n", x_text(row.x).c_str(), row.name.c_str(),
                  value_cell(runs, row.name, v).c_str());
    }
    std::printf("    verdict: %s%s%s\n", verdict_text(verdict_of(xy, g.higher_is_better)).c_str(),
                g.note.empty() ? "" : "; ", g.note.c_str());
  }
}

void growth_markdown(std::ostringstream& md, const std::vector<Captured>& runs) {
  md << kGrowthBegin << "\n"
     << "How the costs grow, from the same run. Each table's verdict is computed from its rows "
        "(check_tables.py recomputes it): the least-squares slope of log(cost) against log(x), "
        "cost being the value or, where higher is better, its inverse; **flat** when the fitted "
        "growth over the table is at most 1.5x, **linear** when the slope is at most 1.25 "
        "(sub-linear included), **worse** above.\n";
  for (const auto& g : growth_tables()) {
    md << "\n"
       << g.title << ":\n\n"
       << "| " << g.x_label << " | benchmark | " << g.value_label << " |\n|---|---|---|\n";
    std::vector<std::pair<double, double>> xy;
    for (const auto& row : g.rows) {
      const Shown v = shown(runs, row.name, g.key, g.decimals);
      const bool ok = !v.text.empty() && fits(runs, row.name);
      if (ok) xy.push_back({row.x, v.value});
      md << "| " << x_text(row.x) << " | `" << row.name << "` | "
         << (fits(runs, row.name) ? value_cell(runs, row.name, v)
                                  : std::string("not compared (oversubscribed)"))
         << " |\n";
    }
    md << "\nVerdict: " << verdict_text(verdict_of(xy, g.higher_is_better));
    if (!g.note.empty()) md << "; " << g.note;
    md << "\n";
  }
  md << kGrowthEnd << "\n";
}

}  // namespace ringbench::summary
