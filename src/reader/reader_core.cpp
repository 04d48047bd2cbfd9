// reader_core.cpp — the reader's core: attach (take a lease), read frames (latest or sequential),
// release, wait, and the end of a core whose last frame outlived its Reader. The ring algorithms
// it runs are src/ring/cursor.hpp's; this file is the object's lifetime (the facade, Reader and
// Frame, is reader.cpp).
// Concurrency: a Reader is used by one thread at a time; Frames may be released from any thread
// (release touches only the slot word, an atomic counter and telemetry counters). The reader's
// lease (its entry's robust mutex) is held by this process's lease keeper thread from attach until
// the ReaderCore is destroyed, which happens when the Reader and every Frame it returned are gone
// (src/core.hpp, "Lifetime").
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "common/clock.hpp"
#include "common/process.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/reader.hpp"
#include "lease/lease.hpp"
#include "wait/futex.hpp"

namespace ipcring {

namespace detail {

// ---- retirement: the end of a core whose last frame outlived its Reader ------------------------

// Release is noexcept, lock-free and may run on any thread, while ending a core detaches the
// reader (the pool's teardown, the repair lock, a round trip to the lease keeper thread). So the
// last Frame::release() of a core whose Reader is gone only pushes it here (a lock-free push and a
// futex wake: a system call on this path only, never while the Reader lives); a library thread,
// started by the first attach, ends it. A core still queued when the process exits is never
// detached: its lease dies with the process, and the next reaper frees the entry (as for any
// reader that exits without detaching).
class Retirer {
 public:
  static Retirer& instance() {
    static Retirer* retirer = new Retirer();  // NOLINT: lives until exit, its thread with it
    return *retirer;
  }
  // Slow path (attach): makes sure the thread runs in this process (a fork child starts its own).
  // No mutex: a fork while another thread starts the thread would copy it locked. The thread
  // that moves started_gen_ to this generation's "starting" mark starts it; others wait for it.
  void start() {
    const std::uint64_t want = fork_generation() + 1;
    const std::uint64_t starting = want | kStarting;
    for (;;) {
      std::uint64_t seen = started_gen_.load(std::memory_order_acquire);
      if (seen == want) return;
      if (seen == starting) {
        std::this_thread::yield();
        continue;
      }
      if (started_gen_.compare_exchange_weak(seen, starting, std::memory_order_acq_rel)) break;
    }
    // A fork child: the parent's queue and its counts are not ours.
    head_.store(nullptr, std::memory_order_relaxed);
    ended_.store(pushed_.load(std::memory_order_relaxed), std::memory_order_relaxed);
    try {
      std::thread([this] { run(); }).detach();
    } catch (...) {
      started_gen_.store(0, std::memory_order_release);  // the next attach tries again
      throw;
    }
    started_gen_.store(want, std::memory_order_release);
  }
  void push(ReaderCore* core) noexcept {
    // Counted before it is linked, so that ended_ (cores deleted, each linked after its count)
    // never runs ahead of pushed_: counted after, another thread's core linked but not yet counted
    // could be deleted first and stand in for this one in a concurrent drain(), which would then
    // return before this core has ended.
    pushed_.fetch_add(1, std::memory_order_release);
    core->next_retired_ = head_.load(std::memory_order_relaxed);
    // release: the core's last uses (and its frame count's acq_rel) happen-before the thread's
    // acquire exchange below.
    while (!head_.compare_exchange_weak(core->next_retired_, core, std::memory_order_release,
                                        std::memory_order_relaxed)) {
    }
    // The thread sleeps on linked_, counted after the link: a thread that missed the core in the
    // list sees the count changed (or is woken), so no wake-up is lost.
    linked_.fetch_add(1, std::memory_order_release);
    futex_wake_all(linked_);
  }
  // Waits (at most `timeout_ns`) until every core pushed before the call is ended.
  void drain(std::uint64_t timeout_ns) noexcept {
    // No thread in this process (nothing attached here since fork): nothing of ours is pending.
    if (started_gen_.load(std::memory_order_acquire) != fork_generation() + 1) return;
    const std::uint32_t target = pushed_.load(std::memory_order_acquire);
    const std::uint64_t deadline = monotonic_ns() + timeout_ns;
    for (;;) {
      const std::uint32_t done = ended_.load(std::memory_order_acquire);
      if (static_cast<std::int32_t>(done - target) >= 0) return;  // wrap-safe
      const std::uint64_t now = monotonic_ns();
      if (now >= deadline) return;
      futex_wait(ended_, done, deadline - now);
    }
  }

 private:
  Retirer() = default;
  [[noreturn]] void run() {
    for (;;) {
      const std::uint32_t seen = linked_.load(std::memory_order_acquire);
      ReaderCore* list = head_.exchange(nullptr, std::memory_order_acquire);
      std::uint32_t n = 0;
      while (list != nullptr) {
        ReaderCore* next = list->next_retired_;
        delete list;
        list = next;
        ++n;
      }
      if (n != 0) {
        ended_.fetch_add(n, std::memory_order_release);
        futex_wake_all(ended_);
      }
      if (head_.load(std::memory_order_acquire) == nullptr) {
        futex_wait(linked_, seen, 1'000'000'000);  // woken by push; the timeout is a safety net
      }
    }
  }
  std::atomic<ReaderCore*> head_{nullptr};
  std::atomic<std::uint32_t> pushed_{0};  // cores pushed so far, counted before their link
  std::atomic<std::uint32_t> linked_{0};  // cores linked so far (the thread's futex word)
  std::atomic<std::uint32_t> ended_{0};   // cores ended so far (a futex word)
  static constexpr std::uint64_t kStarting = std::uint64_t{1} << 63;
  std::atomic<std::uint64_t> started_gen_{0};  // fork_generation() + 1 of the running thread
                                               // (| kStarting while it is being started)
};

void finish_retired_readers() noexcept {
  Retirer::instance().drain(2'000'000'000);
}

// ---- ReaderCore --------------------------------------------------------------------------------

ReaderCore::ReaderCore(std::string_view name, const ReaderOptions& options,
                       const OpenedSegment& opened)
    : name_(name),
      options_(options),
      mapping_(opened.mapping),
      view_(opened.mapping->view),
      instance_id_(random_instance_id()),
      fork_gen_(fork_generation()) {
  cursor_.policy = options.policy;
  cursor_.clock.init(tsc_clock_usable());
}

ReaderCore* ReaderCore::attach(std::string_view name, const ReaderOptions& options,
                               const OpenedSegment& opened) {
  std::unique_ptr<ReaderCore> core(new ReaderCore(name, options, opened));
  const SegmentView& view = core->view_;
  if (options.observer) {
    // An observer copies frames with the CPU: device memory cannot be read that way.
    if (view.geo.backend == kBackendCuda) {
      throw Error(Errc::unsupported,
                  channel_prefix(name) +
                      "observers read host channels only; this channel's frames are in CUDA "
                      "memory (backend cuda, frame_bytes " +
                      std::to_string(view.geo.frame_bytes) + "): attach without observer");
    }
    core->observer_ = true;
    const std::size_t capacity = view.geo.frame_bytes + view.geo.metadata_bytes;
    core->observer_bytes_ = std::make_unique<std::byte[]>(capacity == 0 ? 1 : capacity);
    core->observer_buffer_ = {core->observer_bytes_.get(), view.geo.frame_bytes,
                              view.geo.metadata_bytes};
    core->cursor_.index = Reader::kObserverIndex;
  }
  {
    PoolRequest req;
    req.name = std::string(name);
    req.view = view;
    req.mode = opened.mode;
    req.copy_on_write = options.copy_on_write;
    req.device_fds = opened.device_fds ? opened.device_fds->fds : std::vector<int>{};
    req.producer_pid = opened.producer_pid;
    req.producer_died = [view](std::uint64_t epoch) { return producer_lease_dead(view, epoch); };
    core->pool_ =
        view.geo.backend == kBackendCuda ? make_cuda_reader_pool(req) : make_host_reader_pool(req);
  }
  // Take a free entry, or one whose owner the kernel declared dead (under the repair lock; the
  // liveness module never locks a mutex a live owner may hold).
  if (core->observer_) {
    // No entry: nothing in the reader table or the slot words is ours.
  } else if (auto taken = take_reader_entry(view, name, core->instance_id_, options.policy)) {
    core->cursor_.index = taken->index;
    core->cursor_.bit = SlotWord::bit(taken->index);
    core->holds_lease_ = true;
    core->cursor_.entry_generation = taken->generation;
    core->pool_->attached(taken->index);
  }
  // After take_reader_entry, whose lease keeper thread this process may have started just now:
  // thread creation order (and with it the keeper's thread id) stays as it was.
  Retirer::instance().start();
  if (!core->holds_lease_ && !core->observer_) {
    std::string pids;
    for (std::uint32_t i = 0; i < view.geo.max_readers && i < 8; ++i) {
      if (i != 0) pids += ',';
      pids += std::to_string(view.reader(i).pid.load(std::memory_order_relaxed));
    }
    throw Error(Errc::too_many_readers,
                channel_prefix(name) + "all " + std::to_string(view.geo.max_readers) +
                    " reader entries (max_readers) are held by live readers (pids " + pids +
                    (view.geo.max_readers > 8 ? ",..." : "") + ")");
  }
  ProducerBlock& p = view.producer();
  const std::uint64_t pw = p.lease_word.load(std::memory_order_acquire);
  core->cursor_.epoch = LeaseWord::generation(pw);
  core->cursor_.gone_reported =
      LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed);
  // Both policies start with the newest frame present at attach.
  const std::uint64_t head = LogWord::sequence(p.head.load(std::memory_order_acquire));
  core->cursor_.last_sequence = head > 0 ? head - 1 : 0;
  if (!core->observer_) {
    view.reader(core->cursor_.index)
        .last_sequence.store(core->cursor_.last_sequence, std::memory_order_relaxed);
  }
  return core.release();
}

void ReaderCore::drop_handle(ReaderCore* core) noexcept {
  if (core == nullptr) return;
  // acq_rel pairs with release_frame's decrement: every frame's last use happens-before the end.
  if (frames_held(core->held_.fetch_sub(kHandleBit, std::memory_order_acq_rel)) == 0) delete core;
}

bool ReaderCore::forked() const noexcept {
  return fork_gen_ != fork_generation();
}

bool ReaderCore::evicted() const noexcept {
  return !observer_ && reader_evicted(view_, cursor_);
}

bool ReaderCore::producer_alive() noexcept {
  ProducerBlock& p = view_.producer();
  const std::uint64_t w = p.lease_word.load(std::memory_order_acquire);
  if (LeaseWord::state(w) != static_cast<std::uint8_t>(LeaseState::active)) return false;
  if (LeaseWord::generation(w) != cursor_.epoch) return true;  // a new producer: try_read says
  return producer_lease_alive(view_);  // a load of the lease's lock word; nothing is written
}

Result<Frame> ReaderCore::try_read() noexcept {
  if (forked()) return Status::forked;
  Frame f;
  if (observer_) {
    // One private buffer: the frame held points into it, so the next copy waits for its release.
    if (frames_held(held_.load(std::memory_order_relaxed)) >= 1) return Status::max_held;
    if (const Status st = next_observed(view_, *pool_, cursor_, observer_buffer_, f.fields_);
        st != Status::ok) {
      return st;
    }
    held_.fetch_add(1, std::memory_order_relaxed);
    f.core_ = this;
    return Result<Frame>(std::move(f));
  }
  // The policy's walk, the claim and its re-check (ring/cursor.cpp); counts the frame in held_.
  if (const Status st = next_frame(view_, *pool_, cursor_, held_, f.fields_); st != Status::ok) {
    // The producer ended: let the pool close what it maps of it (a closing CUDA producer waits,
    // bounded, for that before it frees its buffers). A live producer's polls skip it.
    if (st == Status::producer_gone || cursor_.gone_reported) pool_->producer_ended();
    return st;
  }
  f.core_ = this;
  return Result<Frame>(std::move(f));
}

Result<Frame> ReaderCore::read(std::uint64_t timeout_ns) noexcept {
  Result<Frame> r = try_read();
  if (r || r.status() != Status::no_frame) return r;
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = start + timeout_ns;
  ProducerBlock& p = view_.producer();
  // Spin phase: poll head (a shared cache line read; no system call).
  const std::uint64_t spin_end =
      start + static_cast<std::uint64_t>(std::max<std::int64_t>(0, options_.spin.count()));
  while (monotonic_ns() < std::min(spin_end, deadline)) {
    for (int k = 0; k < 64; ++k) {
      if (LogWord::sequence(p.head.load(std::memory_order_relaxed)) > cursor_.last_sequence) break;
      cpu_relax();
    }
    r = try_read();
    if (r || r.status() != Status::no_frame) return r;
  }
  // Block phase: futex sleeps of at most producer_probe each.
  const std::uint64_t probe_ns = probe_period_ns();
  std::uint64_t next_probe = 0;
  for (;;) {
    std::uint64_t now = monotonic_ns();
    if (now >= next_probe) {
      if (!producer_alive()) {
        r = try_read();  // report an epoch change, or the frames left
        if (r || r.status() != Status::no_frame) return r;
        // Report a dead or closed producer once per epoch; afterwards wait (bounded by the
        // timeout) for a new producer to take over, which try_read reports as an epoch change.
        if (!cursor_.gone_reported) {
          cursor_.gone_reported = true;
          return Status::producer_gone;
        }
      }
      next_probe = now + probe_ns;
    }
    if (now >= deadline) return Status::timeout;
    if (observer_) {
      // No entry, so no waiter bit: publish does not wake us. Sleep on the wake word for at most
      // 1 ms (a publication changes it, which ends the sleep early when it comes first): at most
      // ~1 ms of latency and ~1000 futex calls a second while nothing is published.
      const std::uint32_t w = p.wake.load(std::memory_order_acquire);
      r = try_read();
      if (r || r.status() != Status::no_frame) return r;
      now = monotonic_ns();
      const std::uint64_t sleep =
          std::min({deadline - std::min(deadline, now), next_probe - std::min(next_probe, now),
                    std::uint64_t{1'000'000}});
      if (sleep > 0) futex_wait(p.wake, w, sleep);
      r = try_read();
      if (r || r.status() != Status::no_frame) return r;
      continue;
    }
    // (W1) seq_cst: announce the sleep before the final check; pairs with (P6). Our own bit, not
    // a shared count: if we die asleep, the reap clears it.
    const std::uint32_t my_bit = 1U << cursor_.index;
    p.waiting.fetch_or(my_bit, std::memory_order_seq_cst);
    // (W2) seq_cst, pairs with (P5): if the publication came first we see its wake value.
    const std::uint32_t w = p.wake.load(std::memory_order_seq_cst);
    r = try_read();
    if (r || r.status() != Status::no_frame) {
      p.waiting.fetch_and(~my_bit, std::memory_order_relaxed);
      return r;
    }
    now = monotonic_ns();
    const std::uint64_t sleep =
        std::min(deadline - std::min(deadline, now), next_probe - std::min(next_probe, now));
    if (sleep > 0) futex_wait(p.wake, w, sleep);  // EINTR: loop and re-check
    p.waiting.fetch_and(~my_bit, std::memory_order_relaxed);
    r = try_read();
    if (r || r.status() != Status::no_frame) return r;
  }
}

void ReaderCore::release(Frame& f, CudaStream stream) noexcept {
  std::uint32_t before = 0;
  if (forked() || observer_) {
    // Forked: the parent's bits are not ours to clear, only our count of the inherited frame goes.
    // An observer's frame is a copy: nothing in the segment to give back. acq_rel as
    // release_frame's decrement.
    before = held_.fetch_sub(1, std::memory_order_acq_rel);
  } else {
    before = release_frame(view_, *pool_, cursor_, held_, f.fields_, stream);
  }
  if (before != 1) return;  // the Reader, or another frame, still holds the core
  // The last frame of a core whose Reader is gone. A fork child's core owns nothing of the channel
  // (its destructor detaches nothing): end it here. Otherwise the library thread detaches it.
  if (forked()) {
    delete this;
  } else {
    Retirer::instance().push(this);
  }
}

Status ReaderCore::wait_on(std::uint32_t slot, CudaStream stream) noexcept {
  return pool_->wait_on(slot, stream);
}

ReaderCore::~ReaderCore() {
  if (forked() || !holds_lease_) return;
  pool_.reset();
  // Detach (the liveness module): bits cleared, lease given back, entry freed. A lease that had to
  // be abandoned stays locked in this process: its mapping must then never go away.
  if (!give_back_reader_entry(view_, cursor_.index, cursor_.entry_generation)) {
    new std::shared_ptr<Mapping>(mapping_);  // NOLINT: deliberately leaked
  }
}

namespace {

// attach_reader_core with options.wait_for_channel > 0: attaches with no wait until the channel
// exists and its creator has finished it (not_found and not_ready are retried every few
// milliseconds), or the wait runs out (the last refusal is thrown, saying how long it waited). Any
// other refusal is thrown at once.
ReaderCore* attach_waiting(std::string_view name, ReaderOptions options) {
  using Clock = std::chrono::steady_clock;
  const std::chrono::nanoseconds wait = options.wait_for_channel;
  options.wait_for_channel = std::chrono::nanoseconds(0);
  const Clock::time_point start = Clock::now();
  // Saturate: a wait of nanoseconds::max() means "for ever", not an overflowed deadline.
  const Clock::time_point deadline =
      wait >= Clock::time_point::max() - start
          ? Clock::time_point::max()
          : start + std::chrono::duration_cast<Clock::duration>(wait);
  for (;;) {
    try {
      return attach_reader_core(name, options);
    } catch (const Error& e) {
      if (e.code() != Errc::not_found && e.code() != Errc::not_ready) throw;
      const Clock::time_point now = Clock::now();
      if (now >= deadline) {
        const double waited = std::chrono::duration<double>(now - start).count();
        char text[64];
        std::snprintf(text, sizeof text, "%.3f", waited);
        throw Error(e.code(), std::string(e.what()) + " (waited " + text +
                                  " s for it: ReaderOptions::wait_for_channel)");
      }
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(10), deadline - now));
    }
  }
}

}  // namespace

ReaderCore* attach_reader_core(std::string_view name, const ReaderOptions& options) {
  validate_name(name);
  if (options.wait_for_channel.count() < 0) {
    throw Error(Errc::invalid_argument, channel_prefix(name) + "wait_for_channel is negative (" +
                                            std::to_string(options.wait_for_channel.count()) +
                                            " ns)");
  }
  if (options.wait_for_channel.count() > 0) return attach_waiting(name, options);
  if (options.policy != ReadPolicy::latest && options.policy != ReadPolicy::sequential) {
    throw Error(Errc::invalid_argument, channel_prefix(name) + "unknown read policy " +
                                            std::to_string(static_cast<unsigned>(options.policy)));
  }
  OpenedSegment opened = open_channel(name, options.dir, options.trust_uids);
  // This process's readers whose last frame was released just now are still being detached by
  // the retirement thread: their entries are ours to reuse, so wait for them (returns at once
  // when none is pending) instead of refusing with too_many_readers.
  finish_retired_readers();
  // The pool, a reader entry, the cursor at the newest frame (throws too_many_readers).
  return ReaderCore::attach(name, options, opened);
}

}  // namespace detail

}  // namespace ipcring
