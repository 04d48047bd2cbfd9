// summary_plot.cpp — the PNG of --summary: the headline's p50/p99 bars and ipcring's p50 against
// the frame size, drawn by gnuplot in a child process.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "summary_internal.hpp"

#ifndef RINGBENCH_GNUPLOT_PATH
#define RINGBENCH_GNUPLOT_PATH "gnuplot"
#endif

namespace ringbench::summary {
namespace {

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

}  // namespace

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

}  // namespace ringbench::summary
