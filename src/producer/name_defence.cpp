// name_defence.cpp — a running producer defends its channel's name: a watcher thread notices
// the name removed or replaced, the next loan restores it (name_defence.hpp has the overview,
// docs/protocol.md "Following a channel by name" the argument).
//
// Concurrency: defend_name runs on the Producer's one thread. The watcher thread shares only
// NameWatch objects with producers: their fixed fields are written before registration (published
// by the registry mutex), `changed` is an atomic, next_check_ns is touched only under the
// watcher's mutex.
#include "producer/name_defence.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/naming.hpp"
#include "lease/lease.hpp"
#include "lease/name_token.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

// ProducerCore's friend: what the name's restore reads of the old core and hands on to the fresh
// one.
class NameDefence {
 public:
  static void watch(ProducerCore& core);
  static void defend(ProducerCore*& core) noexcept;

 private:
  static void report_failed_restore(ProducerCore& c, const Error& e, bool missing);
  static void report_name_problem(ProducerCore& c, const std::string& text);
};

namespace {

// One watcher per process (a fork child starts its own: threads do not survive fork, and the
// parent's mutex may have been copied locked, so the child's watcher is a new object).
struct Watcher {
  explicit Watcher(pid_t p) : pid(p) {}
  pid_t pid;
  std::mutex mutex;
  std::vector<std::weak_ptr<NameWatch>> watches;

  void run() {
    constexpr std::uint64_t kMaxSleepNs = 50'000'000;
    std::vector<std::shared_ptr<NameWatch>> due;
    for (;;) {
      const std::uint64_t now = monotonic_ns();
      std::uint64_t wake = now + kMaxSleepNs;
      {
        std::lock_guard lock(mutex);
        std::erase_if(watches, [](const std::weak_ptr<NameWatch>& w) { return w.expired(); });
        for (const auto& w : watches) {
          auto s = w.lock();
          if (!s) continue;
          if (s->next_check_ns <= now) {
            s->next_check_ns = now + s->period_ns;
            due.push_back(std::move(s));
            continue;
          }
          wake = std::min(wake, s->next_check_ns);
        }
      }
      for (const auto& s : due) {
        bool missing = false;
        if (name_moved(s->path, s->device, s->inode, missing) || missing) {
          s->changed.store(true, std::memory_order_release);
        }
      }
      due.clear();
      const std::uint64_t after = monotonic_ns();
      const std::uint64_t sleep = wake > after ? wake - after : 0;
      std::this_thread::sleep_for(
          std::chrono::nanoseconds(std::max<std::uint64_t>(sleep, 1'000'000)));
    }
  }
};

std::atomic<Watcher*> g_watcher{nullptr};

Watcher& watcher() {
  const pid_t me = getpid();
  Watcher* current = g_watcher.load(std::memory_order_acquire);
  if (current != nullptr && current->pid == me) return *current;
  auto* fresh = new Watcher(me);  // NOLINT: lives as long as the process (a fork's is leaked)
  if (!g_watcher.compare_exchange_strong(current, fresh, std::memory_order_acq_rel)) {
    delete fresh;  // another thread of this process installed one first
    return *current;
  }
  std::thread([fresh] { fresh->run(); }).detach();
  return *fresh;
}

}  // namespace

void NameDefence::report_name_problem(ProducerCore& c, const std::string& text) {
  if (c.name_problem_ == text) return;
  c.name_problem_ = text;
  std::fprintf(stderr, "%s\n", text.c_str());
}

void watch_name(ProducerCore& core) {
  NameDefence::watch(core);
}

void NameDefence::watch(ProducerCore& core) {
  auto w = std::make_shared<NameWatch>();
  w->path = object_path(core.name_);
  w->device = core.mapping_->device();
  w->inode = core.mapping_->inode();
  w->period_ns = std::max<std::uint64_t>(core.reap_period_ns_, 1'000'000);
  w->next_check_ns = monotonic_ns() + w->period_ns;
  Watcher& wt = watcher();
  {
    std::lock_guard lock(wt.mutex);
    wt.watches.push_back(w);
  }
  core.watch_ = std::move(w);
}

void defend_name(ProducerCore*& core) noexcept {
  NameDefence::defend(core);
}

void NameDefence::defend(ProducerCore*& core) noexcept {
  ProducerCore& c = *core;
  // The hot path's whole cost: a null check and one relaxed load.
  if (!c.watch_ || !c.watch_->changed.load(std::memory_order_relaxed)) return;
  if (c.loan_out_ || c.forked() || !c.holds_lease_) return;
  const std::uint64_t now = monotonic_ns();
  if (now < c.next_defend_ns_) return;
  c.next_defend_ns_ = now + std::max<std::uint64_t>(c.reap_period_ns_, 1'000'000);
  bool missing = false;
  if (!name_moved(c.watch_->path, c.watch_->device, c.watch_->inode, missing) && !missing) {
    c.watch_->changed.store(false, std::memory_order_relaxed);  // ours again (a false alarm)
    return;
  }
  try {
    // A fresh object under the name (or a takeover of a dead producer's object found there), with
    // our configuration, our instance id and our token; a live producer there refuses us.
    std::unique_ptr<ProducerCore> fresh =
        create_producer_core(c.name_, c.config_, c.token_, c.instance_id_);
    WriterState& w = fresh->writer_;
    w.next_sequence = std::max(w.next_sequence, c.writer_.next_sequence);
    w.published += c.writer_.published;
    fresh->readers_reaped_ += c.readers_reaped_;
    w.loan_failures += c.writer_.loan_failures;
    fresh->view_.producer().published.store(w.published, std::memory_order_relaxed);
    fresh->name_restores_ = c.name_restores_ + 1;
    try {
      watch_name(*fresh);
    } catch (...) {
      // Out of memory or threads: keep the old object, and our token, and try again next period
      // (the fresh object closes and its name goes with it).
      c.token_ = std::move(fresh->token_);
      return;
    }
    // The old core closes now (no loan is out): its readers see it closed, find our instance id
    // under the name and follow without a producer_gone.
    ProducerCore::drop_handle(core);
    core = fresh.release();
  } catch (const Error& e) {
    try {
      report_failed_restore(c, e, missing);
    } catch (...) {  // out of memory while saying so: say nothing
    }
  } catch (...) {
  }
}

void NameDefence::report_failed_restore(ProducerCore& c, const Error& e, bool missing) {
  {
    std::string text = channel_prefix(c.name_) + "its name " + c.watch_->path +
                       (missing ? " was removed" : " now refers to another object") +
                       " and this producer (pid " + std::to_string(getpid()) +
                       ") could not restore it: " + e.what();
    if (e.code() != Errc::producer_exists) c.name_refusals_ = 0;  // a run of refusals ended
    if (e.code() == Errc::producer_exists) {
      // A producer refused by our token holds the name for a moment before it closes again:
      // report only a refusal that persists over two tries.
      if (++c.name_refusals_ < 2) return;
      text +=
          ". This producer keeps publishing to the readers attached to it and does not fight "
          "over the name (the other producer could not see its liveness token " +
          name_token_address(c.name_) + ": another network namespace?)";
    }
    report_name_problem(c, text);
  }
}

}  // namespace ipcring::detail
