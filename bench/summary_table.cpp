// summary_table.cpp — the lookups, ratios and table cells every part of --summary uses; see
// summary_internal.hpp.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "summary_internal.hpp"

namespace ringbench::summary {

const Captured* find(const std::vector<Captured>& runs, const std::string& name) {
  for (const auto& r : runs) {
    if (r.name == name && !r.error) return &r;
  }
  return nullptr;
}

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

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string tput(const std::string& mech, const std::string& wait, int readers, std::size_t bytes) {
  return "throughput/" + mech + "/" + wait + "/readers:" + std::to_string(readers) +
         "/bytes:" + std::to_string(bytes);
}

std::string times(double v) {
  if (std::isnan(v)) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", v);
  return buf;
}

namespace {

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

void print_ratio(const std::string& what, const Ratio& r, double target, const char* target_text) {
  const char* verdict = target <= 0         ? "-"
                        : std::isnan(r.r50) ? "n/a"
                        : r.r50 <= target   ? "met"
                                            : "MISSED";
  std::printf("  %-50s %8s %8s  %-9s %-7s %s\n", what.c_str(), times(r.r50).c_str(),
              times(r.r99).c_str(), target_text, verdict, r.note.c_str());
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

}  // namespace

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

Shown shown(const std::vector<Captured>& runs, const std::string& name, const std::string& key,
            int decimals) {
  const auto v = counter(runs, name, key.c_str());
  if (!v || std::isnan(*v)) return {};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, *v);
  return {buf, std::stod(buf)};
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

}  // namespace ringbench::summary
