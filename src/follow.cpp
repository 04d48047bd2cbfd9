// follow.cpp — readers follow their channel by name; a running producer defends its name
// (follow.hpp has the overview, docs/protocol.md "Following a channel by name" the argument).
//
// Concurrency: follow_after and read_following run on the Reader's one thread; defend_name on the
// Producer's one thread. The watcher thread shares only NameWatch objects with producers: their
// fixed fields are written before registration (published by the registry mutex), `changed` is an
// atomic, next_check_ns is touched only under the watcher's mutex.
#include "follow.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

namespace {

std::uint64_t probe_ns(const ReaderOptions& o) noexcept {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(1'000'000, o.producer_probe.count()));
}

// True when `path` names another object than (dev, ino), or nothing at all (`missing`).
bool name_moved(const std::string& path, dev_t dev, ino_t ino, bool& missing) noexcept {
  struct stat st {};
  missing = stat(path.c_str(), &st) != 0;
  return !missing && (st.st_dev != dev || st.st_ino != ino);
}

}  // namespace

// ---- readers -----------------------------------------------------------------------------------

Result<Frame> follow_after(std::shared_ptr<ReaderCore>& core, Result<Frame> result) noexcept {
  ReaderCore& c = *core;
  const bool reported_now = result.status() == Status::producer_gone;
  if (c.forked()) return result;
  // Rate: at once when the core has just reported the end of its producer (a restart's new object
  // is usually there already), otherwise at most once per probe period.
  const std::uint64_t now = monotonic_ns();
  if (!reported_now && now < c.follow_next_ns) return result;
  c.follow_next_ns = now + probe_ns(c.options);
  // A live producer (this epoch's, or one that took the object over) keeps the reader here: the
  // name is looked at only once the object's producer has ended. Loads only.
  if (producer_lease_alive(c.view)) return result;
  std::shared_ptr<ReaderCore> next;
  try {
    bool missing = false;
    if (!name_moved(object_path(c.name), c.mapping->device(), c.mapping->inode(), missing)) {
      return result;  // no name (yet), or still this object: a takeover may come here
    }
    ReaderOptions o = c.options;
    o.wait_for_channel = std::chrono::nanoseconds(0);
    next = attach_reader_core(c.name, o);
  } catch (const Error& e) {
    // Not there or not finished yet: look again next period. Anything else (permissions, layout
    // version, every reader entry taken, a corrupt object) is reported once, as evicted, with the
    // message (naming the channel and the values) in Reader::follow_error().
    if (e.code() == Errc::not_found || e.code() == Errc::not_ready) return result;
    if (reported_now) {  // the end of our producer first; the refusal on the next look
      c.follow_next_ns = now;
      return result;
    }
    const std::string text =
        std::string("cannot follow the channel to its new object: ") + e.what();
    if (c.follow_error == text) return result;
    c.follow_error = text;
    return Status::evicted;
  } catch (...) {
    return result;  // out of memory: try again next period
  }
  // The same producer (instance id) moved to a fresh object to restore its name: no producer
  // ended, the sequence numbers go on, and nothing is reported.
  const std::uint64_t old_instance = c.view.producer().instance_id.load(std::memory_order_relaxed);
  const std::uint64_t new_instance =
      next->view.producer().instance_id.load(std::memory_order_relaxed);
  const bool moved = old_instance != 0 && old_instance == new_instance;
  if (moved) {
    // Go on from the last frame read (a sequential reader then reads what the new object
    // published before we came, and counts what the old one published unread as overruns).
    const std::uint64_t head =
        LogWord::sequence(next->view.producer().head.load(std::memory_order_acquire));
    if (c.last_sequence <= head) next->last_sequence = c.last_sequence;
    next->overruns = c.overruns;
    next->view.reader(next->index)
        .last_sequence.store(next->last_sequence, std::memory_order_relaxed);
  }
  // producer_gone exactly once per ended producer: now, unless the core reported it already.
  const bool report = !moved && !c.gone_reported;
  c.gone_reported = true;
  // The old core lives on in the frames still held (their mapping and lease stay valid).
  core = std::move(next);
  if (report) return Status::producer_gone;
  if (reported_now && !moved) return result;
  return core->try_read(core);
}

Result<Frame> read_following(std::shared_ptr<ReaderCore>& core, std::uint64_t timeout_ns) noexcept {
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t slice =
        std::min(deadline - std::min(deadline, now), probe_ns(core->options));
    Result<Frame> r = core->read(core, slice);
    if (r) return r;
    const Status st = r.status();
    if (st != Status::timeout && st != Status::no_frame && st != Status::producer_gone) return r;
    const ReaderCore* before = core.get();
    r = follow_after(core, st == Status::timeout ? Result<Frame>(Status::no_frame) : std::move(r));
    if (r || r.status() != Status::no_frame) return r;
    if (core.get() != before) continue;  // followed: read the new object at once
    if (monotonic_ns() >= deadline) return Status::timeout;
  }
}

// ---- producers ---------------------------------------------------------------------------------

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

void report_name_problem(ProducerCore& c, const std::string& text) {
  if (c.name_problem == text) return;
  c.name_problem = text;
  std::fprintf(stderr, "%s\n", text.c_str());
}

}  // namespace

static void report_failed_restore(ProducerCore& c, const Error& e, bool missing);

void watch_name(ProducerCore& core) {
  auto w = std::make_shared<NameWatch>();
  w->path = object_path(core.name);
  w->device = core.mapping->device();
  w->inode = core.mapping->inode();
  w->period_ns = std::max<std::uint64_t>(core.reap_period_ns, 1'000'000);
  w->next_check_ns = monotonic_ns() + w->period_ns;
  Watcher& wt = watcher();
  {
    std::lock_guard lock(wt.mutex);
    wt.watches.push_back(w);
  }
  core.watch = std::move(w);
}

void defend_name(std::shared_ptr<ProducerCore>& core) noexcept {
  ProducerCore& c = *core;
  // The hot path's whole cost: a null check and one relaxed load.
  if (!c.watch || !c.watch->changed.load(std::memory_order_relaxed)) return;
  if (c.loan_out || c.forked() || !c.holds_lease) return;
  const std::uint64_t now = monotonic_ns();
  if (now < c.next_defend_ns) return;
  c.next_defend_ns = now + std::max<std::uint64_t>(c.reap_period_ns, 1'000'000);
  bool missing = false;
  if (!name_moved(c.watch->path, c.watch->device, c.watch->inode, missing) && !missing) {
    c.watch->changed.store(false, std::memory_order_relaxed);  // ours again (a false alarm)
    return;
  }
  try {
    // A fresh object under the name (or a takeover of a dead producer's object found there), with
    // our configuration, our instance id and our token; a live producer there refuses us.
    std::shared_ptr<ProducerCore> fresh =
        create_producer_core(c.name, c.config, c.token, c.instance_id);
    fresh->next_sequence = std::max(fresh->next_sequence, c.next_sequence);
    fresh->published += c.published;
    fresh->readers_reaped += c.readers_reaped;
    fresh->loan_failures += c.loan_failures;
    fresh->view.producer().published.store(fresh->published, std::memory_order_relaxed);
    fresh->name_restores = c.name_restores + 1;
    watch_name(*fresh);
    // The old core closes when its last reference goes (now: no loan is out): its readers see
    // it closed, find our instance id under the name and follow without a producer_gone.
    core = std::move(fresh);
  } catch (const Error& e) {
    try {
      report_failed_restore(c, e, missing);
    } catch (...) {  // out of memory while saying so: say nothing
    }
  } catch (...) {
  }
}

static void report_failed_restore(ProducerCore& c, const Error& e, bool missing) {
  {
    std::string text = channel_prefix(c.name) + "its name " + c.watch->path +
                       (missing ? " was removed" : " now refers to another object") +
                       " and this producer (pid " + std::to_string(getpid()) +
                       ") could not restore it: " + e.what();
    if (e.code() == Errc::producer_exists) {
      // A producer refused by our token holds the name for a moment before it closes again:
      // report only a refusal that persists over two tries.
      if (++c.name_refusals < 2) return;
      c.name_taken = true;
      text +=
          ". This producer keeps publishing to the readers attached to it and does not fight "
          "over the name (the other producer could not see its liveness token " +
          name_token_address(c.name) + ": another network namespace?)";
    }
    report_name_problem(c, text);
  }
}

}  // namespace ipcring::detail
