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

// The cores' friend: what following and the name's restore read and hand on of their state.
class Follow {
 public:
  static Result<Frame> after(ReaderCore*& core, Result<Frame> result) noexcept;
  static void watch(ProducerCore& core);
  static void defend(ProducerCore*& core) noexcept;

 private:
  static void report_failed_restore(ProducerCore& c, const Error& e, bool missing);
  static void report_name_problem(ProducerCore& c, const std::string& text);
};

Result<Frame> follow_after(ReaderCore*& core, Result<Frame> result) noexcept {
  return Follow::after(core, std::move(result));
}

Result<Frame> Follow::after(ReaderCore*& core, Result<Frame> result) noexcept {
  ReaderCore& c = *core;
  const bool reported_now = result.status() == Status::producer_gone;
  if (c.forked()) return result;
  // Rate: at once when the core has just reported the end of its producer (a restart's new object
  // is usually there already), otherwise at most once per probe period.
  const std::uint64_t now = monotonic_ns();
  if (!reported_now && now < c.follow_next_ns_) return result;
  c.follow_next_ns_ = now + probe_ns(c.options_);
  // A live producer (this epoch's, or one that took the object over) keeps the reader here: the
  // name is looked at only once the object's producer has ended. Loads only.
  if (producer_lease_alive(c.view_)) return result;
  ReaderCore* next = nullptr;
  try {
    bool missing = false;
    if (!name_moved(object_path(c.name_), c.mapping_->device(), c.mapping_->inode(), missing)) {
      return result;  // no name (yet), or still this object: a takeover may come here
    }
    ReaderOptions o = c.options_;
    o.wait_for_channel = std::chrono::nanoseconds(0);
    next = attach_reader_core(c.name_, o);
  } catch (const Error& e) {
    // Not there or not finished yet: look again next period. Anything else (permissions, layout
    // version, every reader entry taken, a corrupt object) is reported once, as evicted, with the
    // message (naming the channel and the values) in Reader::follow_error().
    if (e.code() == Errc::not_found || e.code() == Errc::not_ready) return result;
    if (reported_now) {  // the end of our producer first; the refusal on the next look
      c.follow_next_ns_ = now;
      return result;
    }
    try {
      std::string text = std::string("cannot follow the channel to its new object: ") + e.what();
      if (c.follow_error_ == text) return result;
      c.follow_error_ = std::move(text);
    } catch (...) {
      return result;  // out of memory while saying so
    }
    return Status::evicted;
  } catch (...) {
    return result;  // out of memory: try again next period
  }
  // The same producer (instance id) moved to a fresh object to restore its name: no producer
  // ended, the sequence numbers go on, and nothing is reported.
  const std::uint64_t old_instance = c.view_.producer().instance_id.load(std::memory_order_relaxed);
  const std::uint64_t new_instance =
      next->view_.producer().instance_id.load(std::memory_order_relaxed);
  const bool moved = old_instance != 0 && old_instance == new_instance;
  if (moved) {
    // Go on from the last frame read (a sequential reader then reads what the new object
    // published before we came, and counts what the old one published unread as overruns).
    const std::uint64_t head =
        LogWord::sequence(next->view_.producer().head.load(std::memory_order_acquire));
    if (c.cursor_.last_sequence <= head) next->cursor_.last_sequence = c.cursor_.last_sequence;
    next->cursor_.overruns = c.cursor_.overruns;
    next->view_.reader(next->cursor_.index)
        .last_sequence.store(next->cursor_.last_sequence, std::memory_order_relaxed);
  }
  // producer_gone exactly once per ended producer: now, unless the core reported it already.
  const bool report = !moved && !c.cursor_.gone_reported;
  c.cursor_.gone_reported = true;
  // The old core lives on in the frames still held (their mapping and lease stay valid) and ends
  // with the last of them; with none held it ends (detaches) here.
  ReaderCore::drop_handle(core);
  core = next;
  if (report) return Status::producer_gone;
  if (reported_now && !moved) return result;
  return core->try_read();
}

Result<Frame> read_following(ReaderCore*& core, std::uint64_t timeout_ns) noexcept {
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t slice =
        std::min(deadline - std::min(deadline, now), probe_ns(core->options()));
    Result<Frame> r = core->read(slice);
    if (r) return r;
    const Status st = r.status();
    if (st != Status::timeout && st != Status::no_frame && st != Status::producer_gone) return r;
    const ReaderCore* before = core;
    r = follow_after(core, st == Status::timeout ? Result<Frame>(Status::no_frame) : std::move(r));
    if (r || r.status() != Status::no_frame) return r;
    if (core != before) continue;  // followed: read the new object at once
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

}  // namespace

void Follow::report_name_problem(ProducerCore& c, const std::string& text) {
  if (c.name_problem_ == text) return;
  c.name_problem_ = text;
  std::fprintf(stderr, "%s\n", text.c_str());
}

void watch_name(ProducerCore& core) {
  Follow::watch(core);
}

void Follow::watch(ProducerCore& core) {
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
  Follow::defend(core);
}

void Follow::defend(ProducerCore*& core) noexcept {
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
    watch_name(*fresh);
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

void Follow::report_failed_restore(ProducerCore& c, const Error& e, bool missing) {
  {
    std::string text = channel_prefix(c.name_) + "its name " + c.watch_->path +
                       (missing ? " was removed" : " now refers to another object") +
                       " and this producer (pid " + std::to_string(getpid()) +
                       ") could not restore it: " + e.what();
    if (e.code() == Errc::producer_exists) {
      // A producer refused by our token holds the name for a moment before it closes again:
      // report only a refusal that persists over two tries.
      if (++c.name_refusals_ < 2) return;
      c.name_taken_ = true;
      text +=
          ". This producer keeps publishing to the readers attached to it and does not fight "
          "over the name (the other producer could not see its liveness token " +
          name_token_address(c.name_) + ": another network namespace?)";
    }
    report_name_problem(c, text);
  }
}

}  // namespace ipcring::detail
