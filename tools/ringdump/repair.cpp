// repair.cpp — the explicit repairs: reap (dead readers), rm (one channel), gc (every dead one).
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>

#include "common/errno_text.hpp"
#include "ringdump/ringdump.hpp"
#include "ringdump/serve_status.hpp"

namespace ringdump {

int cmd_reap(const std::string& name) {
  // Name the dead readers first (for the operator), then reap: the library reaps only entries it
  // finds dead itself when it holds their lease mutex, so a reader that died after this snapshot is
  // reaped too and one that is alive is never touched.
  std::vector<std::string> dead;
  for (const auto& r : ipcring::inspect(name).readers) {
    if (!r.alive) {
      dead.push_back("reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
                     (r.held_slots.empty() ? "" : ", held slot(s) " + join(r.held_slots)) + ")");
    }
  }
  const std::size_t n = ipcring::reap_dead_readers(name);
  std::printf("%s: reaped %zu dead reader%s\n", name.c_str(), n, n == 1 ? "" : "s");
  for (const auto& d : dead) std::printf("  %s\n", d.c_str());
  return kExitOk;
}

int cmd_rm(const std::string& name, bool force) {
  if (!ipcring::remove_channel(name, force)) {
    std::fprintf(stderr, "ringdump: channel '%s': no such channel (%s)\n", name.c_str(),
                 ipcring::lock_path(name).c_str());
    return kExitError;
  }
  std::printf("removed %s\n", name.c_str());
  return kExitOk;
}

// True when `name` matches one of the shell patterns (all names when there are none).
bool selected(const std::string& name, const std::vector<std::string>& patterns) {
  if (patterns.empty()) return true;
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& p) {
    return fnmatch(p.c_str(), name.c_str(), 0) == 0;
  });
}

namespace {

// One gc run: what it removed and kept, and its exit status.
class Gc {
 public:
  Gc(bool force, bool dry_run) : force_(force), dry_run_(dry_run) {}

  // Removes a listed channel's names when its producer has ended (under the name's lock, which
  // gc takes for the removal), or, with --force, a broken name; says why it keeps one.
  void channel(const Listed& c) {
    const std::string state = channel_state(c);
    if (state == "stale") {
      remove(c.name, false, "stale: its producer ended");
    } else if (state == "broken") {
      if (force_) {
        remove(c.name, true, "forced; " + c.name_info.problem);
      } else {
        std::fprintf(stderr,
                     "ringdump: kept %s: %s; ipcring did not make it: look at it, then "
                     "'ringdump gc --force' removes it\n",
                     c.name.c_str(), c.name_info.problem.c_str());
        ++kept_;
      }
    } else if (state == "error" && c.error && c.error->code() == Errc::invalid_name) {
      std::fprintf(stderr, "ringdump: kept %s: not a valid channel name\n", c.name.c_str());
      ++kept_;
    } else {
      std::fprintf(stderr,
                   "ringdump: kept %s: its producer is running (%s); gc removes only "
                   "the names of producers that ended\n",
                   c.name.c_str(), c.name_info.holder.c_str());
      ++kept_;
    }
  }

  // ringdump serve's status files (serve_status.hpp) whose process is gone: removed. A malformed
  // one is removed when the pid of its name is gone too, and kept (said so) while it lives.
  void serve_status_files() {
    for (const auto& f : serve_status::scan(ipcring::channel_directory())) {
      std::string why;
      if (f.state == serve_status::Found::State::stale) {
        why = "stale: " + f.problem;
      } else if (f.state == serve_status::Found::State::malformed && !f.pid_alive) {
        why = "malformed, and pid " + std::to_string(f.pid) + " is gone";
      } else {
        if (f.state == serve_status::Found::State::malformed) {
          std::fprintf(stderr, "ringdump: kept %s: pid %u is alive\n", f.problem.c_str(), f.pid);
        }
        continue;
      }
      if (dry_run_) {
        std::printf("would remove %s (%s)\n", f.path.c_str(), why.c_str());
      } else if (::unlink(f.path.c_str()) == 0 || errno == ENOENT) {
        std::printf("removed %s (%s)\n", f.path.c_str(), why.c_str());
        ++removed_;
      } else {
        std::fprintf(stderr, "ringdump: cannot remove %s: %s\n", f.path.c_str(),
                     ipcring::detail::errno_text(errno).c_str());
        ++kept_;
        rc_ = kExitError;
      }
    }
  }

  int finish() const {
    if (!dry_run_) std::printf("gc: removed %zu, kept %zu\n", removed_, kept_);
    return rc_;
  }

 private:
  void remove(const std::string& name, bool force_it, const std::string& why) {
    if (dry_run_) {
      std::printf("would remove %s (%s)\n", name.c_str(), why.c_str());
      return;
    }
    try {
      if (ipcring::remove_channel(name, force_it)) {
        std::printf("removed %s (%s)\n", name.c_str(), why.c_str());
        ++removed_;
      }
    } catch (const ipcring::Error& e) {
      // Came back to life meanwhile (a new producer took it over), or cannot be checked.
      std::fprintf(stderr, "ringdump: kept %s: %s [%s]\n", name.c_str(), e.what(),
                   ipcring::to_string(e.code()));
      ++kept_;
    }
  }

  bool force_;
  bool dry_run_;
  std::size_t removed_ = 0;
  std::size_t kept_ = 0;
  int rc_ = kExitOk;
};

}  // namespace

int cmd_gc(const std::vector<std::string>& patterns, bool force, bool dry_run) {
  Gc gc(force, dry_run);
  for (const auto& c : list_all()) {
    if (selected(c.name, patterns)) gc.channel(c);
  }
  gc.serve_status_files();
  return gc.finish();
}

}  // namespace ringdump
