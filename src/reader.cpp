// reader.cpp — Reader: attach (take a lease), read frames (latest or sequential), release, wait.
//
// Concurrency: a Reader is used by one thread at a time; Frames may be released from any thread
// (release touches only the slot word, an atomic counter and telemetry counters). The reader's
// lease (its entry's robust mutex) is held by this process's lease keeper thread from attach until
// the ReaderCore is destroyed, which happens when the Reader and every Frame it returned are gone.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/reader.hpp"
#include "lease/lease.hpp"
#include "ring/ring.hpp"
#include "wait/futex.hpp"

namespace ipcring {

namespace detail {

bool ReaderCore::forked() const noexcept {
  return fork_gen != fork_generation();
}

bool ReaderCore::evicted() const noexcept {
  // (L4) acquire, pairs with the reaper's (L3): a reader that still sees its own generation active
  // has not been reaped.
  return view.reader(index).lease_word.load(std::memory_order_acquire) !=
         LeaseWord::make(entry_generation, LeaseState::active);
}

bool ReaderCore::producer_alive() noexcept {
  ProducerBlock& p = view.producer();
  const std::uint64_t w = p.lease_word.load(std::memory_order_acquire);
  if (LeaseWord::state(w) != static_cast<std::uint8_t>(LeaseState::active)) return false;
  if (LeaseWord::generation(w) != epoch) return true;  // a new producer: try_read reports it
  return producer_lease_alive(view);  // a load of the lease's lock word; nothing is written
}

// Takes slot i's frame header into `f` if it belongs to publication `seq`. Runs after the claim
// (R3) synchronised with the publication (P2), so relaxed loads see the producer's writes; every
// value is copied once and validated on the copy (a hostile producer may change the segment at any
// time, but never the copy): the metadata size against the segment's metadata_bytes, the tensor
// against the published size. The sequence is loaded first and compared last, after the copies, so
// a header being rewritten under us (only a broken producer does that while our bit is set) is not
// taken either.
void ReaderCore::read_frame_header(const SegmentView& view, std::uint32_t i, std::uint64_t seq,
                                   Frame& f) noexcept {
  const FrameHeader& fh = view.frame_header(i);
  if (fh.sequence.load(std::memory_order_relaxed) != seq) return;
  const std::uint64_t capture = fh.capture_time_ns.load(std::memory_order_relaxed);
  const std::uint32_t mb = fh.metadata_bytes.load(std::memory_order_relaxed);
  const std::uint64_t tw = fh.tensor_word.load(std::memory_order_relaxed);
  TensorDesc t;
  bool has_tensor = false;
  bool invalid = false;
  if (TensorWord::present(tw)) {
    t.dtype_code = TensorWord::code(tw);
    t.dtype_bits = TensorWord::bits(tw);
    t.ndim = TensorWord::ndim(tw);
    t.byte_offset = fh.byte_offset.load(std::memory_order_relaxed);
    static_assert(kTensorDims == kMaxTensorDims, "the frame header holds every dimension");
    if (t.ndim <= kMaxTensorDims) {
      for (std::uint8_t d = 0; d < t.ndim; ++d) {
        t.shape[d] = fh.shape[d].load(std::memory_order_relaxed);
        t.strides[d] = fh.strides[d].load(std::memory_order_relaxed);
      }
      has_tensor = tensor_fits(t, f.size_);
    }
    invalid = !has_tensor;
  }
  if (fh.sequence.load(std::memory_order_relaxed) != seq) return;
  f.capture_time_ns_ = capture;
  if (mb <= view.geo.metadata_bytes) {
    f.metadata_bytes_ = mb;
    f.metadata_ = reinterpret_cast<const std::byte*>(view.frame_metadata(i));
  }
  f.has_tensor_ = has_tensor;
  f.tensor_invalid_ = invalid;
  if (has_tensor) f.tensor_ = t;
}

Result<Frame> ReaderCore::claim(const std::shared_ptr<ReaderCore>& self, std::uint64_t target,
                                std::uint64_t head, bool& lost) noexcept {
  lost = true;
  // The newest frame's slot travels in head itself; older ones are found in the log.
  std::uint64_t e = head;
  if (LogWord::sequence(head) != target) {
    // (R2) acquire, pairs with (P3).
    e = view.log(target).load(std::memory_order_acquire);
    if (LogWord::sequence(e) != target) return Status::no_frame;  // overwritten in the log
  }
  const std::uint32_t i = LogWord::slot(e);
  if (i >= view.geo.slots) return Status::no_frame;  // corrupt entry: never index with it
  Slot& slot = view.slot(i);
  std::uint64_t generation = 0;
  // Host frames: start fetching the payload's first line now, so that its transfer overlaps the
  // claim's instead of following it (a prefetch is a hint, not an access: it loads no value,
  // cannot fault, and a failed claim only wasted it). Not for CUDA: buffer() may import a handle
  // there, and the bytes are device memory.
  if (view.geo.backend != 2) __builtin_prefetch(pool->buffer(i, epoch, 0));
  const ClaimResult c = claim_for_read(slot, bit, generation);  // (R3)
  if (c != ClaimResult::claimed) return Status::no_frame;
  // The claim synchronised with the publication (P2) of generation `generation`: relaxed loads
  // of the descriptor see what was written before it, and it cannot change while our bit is set.
  // (R4) re-check: the claim may have landed on a later publication of the slot.
  const std::uint64_t seq = slot.sequence.load(std::memory_order_relaxed);
  const std::uint64_t frame_epoch = slot.epoch.load(std::memory_order_relaxed);
  const std::uint64_t bytes = slot.bytes.load(std::memory_order_relaxed);
  const std::uint32_t buffer = slot.buffer_index.load(std::memory_order_relaxed);
  const std::uint32_t flags = slot.flags.load(std::memory_order_relaxed);
  if (seq != target || frame_epoch != epoch || bytes > view.geo.frame_bytes || buffer != i) {
    release_read(slot, bit, generation);  // (R5)
    return Status::no_frame;
  }
  // A takeover may have completed since try_read read the epoch: a frame of an ended epoch is
  // never returned once the new epoch is visible (the model's epoch-recheck-removed case). The
  // producer's lease line is read-mostly, so this load costs little.
  if (LeaseWord::generation(view.producer().lease_word.load(std::memory_order_acquire)) != epoch) {
    release_read(slot, bit, generation);
    return Status::no_frame;  // the next try_read reports producer_gone
  }
  const std::byte* data =
      pool->buffer(i, epoch, view.producer().instance_id.load(std::memory_order_relaxed));
  if (data == nullptr) {
    release_read(slot, bit, generation);
    lost = false;
    return Status::backend_error;
  }
  lost = false;
  Frame f;
  f.core_ = self;
  f.data_ = data;
  f.size_ = bytes;
  f.sequence_ = seq;
  f.epoch_ = frame_epoch;
  f.timestamp_ns_ = slot.timestamp_ns.load(std::memory_order_relaxed);
  f.generation_ = generation;
  f.slot_ = i;
  // The frame header's line only when the producer wrote one for this frame: a plain frame
  // (no capture time, tensor or metadata) costs no transfer for it.
  if ((flags & DescriptorFlags::kHeader) != 0) read_frame_header(view, i, seq, f);
  return Result<Frame>(std::move(f));
}

Result<Frame> ReaderCore::try_read(const std::shared_ptr<ReaderCore>& self) noexcept {
  if (forked()) return Status::forked;
  if (evicted()) return Status::evicted;
  ProducerBlock& p = view.producer();
  const std::uint64_t pw = p.lease_word.load(std::memory_order_acquire);
  if (LeaseWord::generation(pw) != epoch) {
    // A new producer took the channel over: report the end of the old epoch once (unless the
    // probe or the closed state reported it already). Frames of the old epoch are never returned
    // again (the descriptor's epoch is checked at every claim).
    const bool reported = gone_reported;
    epoch = LeaseWord::generation(pw);
    gone_reported = false;
    if (!reported) return Status::producer_gone;
  }
  if (LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed)) {
    if (!gone_reported) {
      gone_reported = true;
      return Status::producer_gone;
    }
    return Status::no_frame;
  }
  if (held.load(std::memory_order_relaxed) >= view.geo.max_held) return Status::max_held;
  ReaderEntry& entry = view.reader(index);
  // Latest: a bounded number of tries (head moves while we claim). Sequential: walk forward from
  // the next sequence, counting frames that are gone as overruns; at most log_size steps.
  for (int attempt = 0; attempt < 8; ++attempt) {
    // (R1) acquire, pairs with (P4): the slot of `head` is published and the log entries up to
    // it are visible.
    const std::uint64_t head_word = p.head.load(std::memory_order_acquire);
    const std::uint64_t head = LogWord::sequence(head_word);
    if (head <= last_sequence) return Status::no_frame;
    std::uint64_t target = options.policy == ReadPolicy::latest ? head : last_sequence + 1;
    if (options.policy == ReadPolicy::sequential && head - target >= view.geo.log_size) {
      target = head - view.geo.log_size + 1;  // older entries are certainly overwritten
    }
    // Counted, so that no value of head (read from shared memory) can make this loop long.
    for (std::uint64_t left = head - target + 1; left-- > 0; ++target) {
      bool lost = false;
      Result<Frame> r = claim(self, target, head_word, lost);
      if (r) {
        const std::uint64_t skipped = target - last_sequence - 1;
        r->skipped_ = last_sequence == 0 ? 0 : skipped;
        if (options.policy == ReadPolicy::sequential && last_sequence != 0) {
          overruns += skipped;
          entry.overruns.store(overruns, std::memory_order_relaxed);
        }
        last_sequence = target;
        held.fetch_add(1, std::memory_order_relaxed);
        const std::uint64_t now = monotonic_ns();
        r->acquired_ns_ = now;
        // Delay publish -> claim: the publish time is the producer's monotonic_ns() (same clock,
        // same machine); a timestamp in the future (hostile, or another boot) counts as 0.
        const std::uint64_t published_ns = r->timestamp_ns_;
        // Only this reader writes the histogram: a relaxed load and store, no locked RMW.
        std::atomic<std::uint64_t>& bucket =
            entry.delay_histogram[DelayBucket::of(now > published_ns ? now - published_ns : 0)];
        bucket.store(bucket.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        // Telemetry: only this reader writes these (relaxed; read as estimates by inspect).
        entry.frames_read.store(entry.frames_read.load(std::memory_order_relaxed) + 1,
                                std::memory_order_relaxed);
        entry.last_sequence.store(target, std::memory_order_relaxed);
        entry.last_read_ns.store(now, std::memory_order_relaxed);
        entry.held.store(held.load(std::memory_order_relaxed), std::memory_order_relaxed);
        return r;
      }
      if (!lost) return r;                              // backend error
      if (options.policy == ReadPolicy::latest) break;  // re-read head
    }
    if (options.policy == ReadPolicy::sequential) {
      // Everything up to head was gone: count it and wait for the next publication.
      const std::uint64_t skipped = head - last_sequence;
      if (last_sequence != 0) {
        overruns += skipped;
        entry.overruns.store(overruns, std::memory_order_relaxed);
      }
      last_sequence = head;
      return Status::no_frame;
    }
  }
  return Status::no_frame;
}

Result<Frame> ReaderCore::read(const std::shared_ptr<ReaderCore>& self,
                               std::uint64_t timeout_ns) noexcept {
  Result<Frame> r = try_read(self);
  if (r || r.status() != Status::no_frame) return r;
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = start + timeout_ns;
  ProducerBlock& p = view.producer();
  // Spin phase: poll head (a shared cache line read; no system call).
  const std::uint64_t spin_end =
      start + static_cast<std::uint64_t>(std::max<std::int64_t>(0, options.spin.count()));
  while (monotonic_ns() < std::min(spin_end, deadline)) {
    for (int k = 0; k < 64; ++k) {
      if (LogWord::sequence(p.head.load(std::memory_order_relaxed)) > last_sequence) break;
      cpu_relax();
    }
    r = try_read(self);
    if (r || r.status() != Status::no_frame) return r;
  }
  // Block phase: futex sleeps of at most producer_probe each.
  const std::uint64_t probe_ns =
      static_cast<std::uint64_t>(std::max<std::int64_t>(1'000'000, options.producer_probe.count()));
  std::uint64_t next_probe = 0;
  for (;;) {
    std::uint64_t now = monotonic_ns();
    if (now >= next_probe) {
      if (!producer_alive()) {
        r = try_read(self);  // report an epoch change, or the frames left
        if (r || r.status() != Status::no_frame) return r;
        // Report a dead or closed producer once per epoch; afterwards wait (bounded by the
        // timeout) for a new producer to take over, which try_read reports as an epoch change.
        if (!gone_reported) {
          gone_reported = true;
          return Status::producer_gone;
        }
      }
      next_probe = now + probe_ns;
    }
    if (now >= deadline) return Status::timeout;
    // (W1) seq_cst: announce the sleep before the final check; pairs with (P6). Our own bit, not
    // a shared count: if we die asleep, the reap clears it.
    const std::uint32_t my_bit = 1U << index;
    p.waiting.fetch_or(my_bit, std::memory_order_seq_cst);
    // (W2) seq_cst, pairs with (P5): if the publication came first we see its wake value.
    const std::uint32_t w = p.wake.load(std::memory_order_seq_cst);
    r = try_read(self);
    if (r || r.status() != Status::no_frame) {
      p.waiting.fetch_and(~my_bit, std::memory_order_relaxed);
      return r;
    }
    now = monotonic_ns();
    const std::uint64_t sleep =
        std::min(deadline - std::min(deadline, now), next_probe - std::min(next_probe, now));
    if (sleep > 0) futex_wait(p.wake, w, sleep);  // EINTR: loop and re-check
    p.waiting.fetch_and(~my_bit, std::memory_order_relaxed);
    r = try_read(self);
    if (r || r.status() != Status::no_frame) return r;
  }
}

void ReaderCore::release(Frame& f, CudaStream stream) noexcept {
  if (forked()) return;  // the parent's bits are not ours to clear
  pool->release_fence(f.slot_, index, stream);
  if (!evicted()) {
    release_read(view.slot(f.slot_), bit, f.generation_);  // (R5)
  }
  const std::uint32_t now_held = held.fetch_sub(1, std::memory_order_relaxed) - 1;
  ReaderEntry& entry = view.reader(index);
  entry.held.store(now_held, std::memory_order_relaxed);
  const std::uint64_t hold = monotonic_ns() - f.acquired_ns_;
  const unsigned bucket =
      hold == 0 ? 0
                : static_cast<unsigned>(std::min<std::uint64_t>(
                      kHoldBuckets - 1, static_cast<std::uint64_t>(std::bit_width(hold)) - 1));
  entry.hold_histogram[bucket].fetch_add(1, std::memory_order_relaxed);
}

ReaderCore::~ReaderCore() {
  if (forked() || !holds_lease) return;
  pool.reset();
  // Detach (the liveness module): bits cleared, lease given back, entry freed. A lease that had to
  // be abandoned stays locked in this process: its mapping must then never go away.
  if (!give_back_reader_entry(view, index, entry_generation)) {
    new std::shared_ptr<Mapping>(mapping);  // NOLINT: deliberately leaked
  }
}

}  // namespace detail

// ---- public API ------------------------------------------------------------------------------

Reader::Reader(std::shared_ptr<detail::ReaderCore> core) noexcept : core_(std::move(core)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

namespace {

// Reader::attach with options.wait_for_channel > 0: attaches with no wait until the channel exists
// and its creator has finished it (not_found and not_ready are retried every few milliseconds),
// or the wait runs out (the last refusal is thrown, saying how long it waited). Any other refusal
// is thrown at once.
Reader attach_waiting(std::string_view name, ReaderOptions options) {
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
      return Reader::attach(name, options);
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

Reader Reader::attach(std::string_view name, ReaderOptions options) {
  return Reader(detail::attach_reader_core(name, options));
}

namespace detail {

std::shared_ptr<ReaderCore> attach_reader_core(std::string_view name,
                                               const ReaderOptions& options) {
  validate_name(name);
  if (options.wait_for_channel.count() < 0) {
    throw Error(Errc::invalid_argument, channel_prefix(name) + "wait_for_channel is negative (" +
                                            std::to_string(options.wait_for_channel.count()) +
                                            " ns)");
  }
  if (options.wait_for_channel.count() > 0) return attach_waiting(name, options).core_;
  if (options.policy != ReadPolicy::latest && options.policy != ReadPolicy::sequential) {
    throw Error(Errc::invalid_argument, channel_prefix(name) + "unknown read policy " +
                                            std::to_string(static_cast<unsigned>(options.policy)));
  }
  OpenedSegment opened = open_segment(name);
  auto core = std::make_shared<ReaderCore>();
  core->name = std::string(name);
  core->options = options;
  core->mapping = opened.mapping;
  core->view = opened.mapping->view;
  core->fork_gen = fork_generation();
  core->instance_id = random_instance_id();
  const SegmentView& view = core->view;
  {
    PoolRequest req{std::string(name), view, opened.mode, 0, false, options.copy_on_write, {}};
    core->pool = view.geo.backend == 2 ? make_cuda_reader_pool(req) : make_host_reader_pool(req);
  }
  // Take a free entry, or one whose owner the kernel declared dead (under the repair lock; the
  // liveness module never locks a mutex a live owner may hold).
  if (auto taken = take_reader_entry(view, name, core->instance_id, options.policy)) {
    core->index = taken->index;
    core->bit = SlotWord::bit(taken->index);
    core->holds_lease = true;
    core->entry_generation = taken->generation;
    core->pool->attached(taken->index);
  }
  if (!core->holds_lease) {
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
  core->epoch = LeaseWord::generation(pw);
  core->gone_reported = LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed);
  // Both policies start with the newest frame present at attach.
  const std::uint64_t head = LogWord::sequence(p.head.load(std::memory_order_acquire));
  core->last_sequence = head > 0 ? head - 1 : 0;
  view.reader(core->index).last_sequence.store(core->last_sequence, std::memory_order_relaxed);
  return core;
}

}  // namespace detail

Result<Frame> Reader::try_read() noexcept {
  Result<Frame> r = core_->try_read(core_);
  if (r || (r.status() != Status::no_frame && r.status() != Status::producer_gone)) return r;
  return detail::follow_after(core_, std::move(r));  // follow.hpp: rate-limited, loads only
}
Result<Frame> Reader::read(std::chrono::nanoseconds timeout) noexcept {
  return detail::read_following(
      core_, static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count())));
}
std::string_view Reader::follow_error() const noexcept {
  return core_->follow_error;
}
std::uint32_t Reader::index() const noexcept {
  return core_->index;
}
std::uint32_t Reader::held() const noexcept {
  return core_->held.load(std::memory_order_relaxed);
}
std::uint64_t Reader::overruns() const noexcept {
  return core_->overruns;
}
std::uint64_t Reader::epoch() const noexcept {
  return core_->epoch;
}
std::string_view Reader::name() const noexcept {
  return core_->name;
}
std::size_t Reader::frame_bytes() const noexcept {
  return core_->view.geo.frame_bytes;
}
std::uint32_t Reader::max_held() const noexcept {
  return core_->view.geo.max_held;
}
Backend Reader::backend() const noexcept {
  return core_->view.geo.backend == 2 ? Backend::cuda : Backend::host;
}

// ---- Frame ---------------------------------------------------------------------------------

Frame::Frame(Frame&& other) noexcept {
  *this = std::move(other);
}

Frame& Frame::operator=(Frame&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::move(other.core_);
    data_ = other.data_;
    size_ = other.size_;
    sequence_ = other.sequence_;
    epoch_ = other.epoch_;
    timestamp_ns_ = other.timestamp_ns_;
    generation_ = other.generation_;
    skipped_ = other.skipped_;
    acquired_ns_ = other.acquired_ns_;
    capture_time_ns_ = other.capture_time_ns_;
    slot_ = other.slot_;
    metadata_bytes_ = other.metadata_bytes_;
    metadata_ = other.metadata_;
    has_tensor_ = other.has_tensor_;
    tensor_invalid_ = other.tensor_invalid_;
    tensor_ = other.tensor_;
    other.data_ = nullptr;
    other.metadata_ = nullptr;
  }
  return *this;
}

Frame::~Frame() {
  release();
}

bool Frame::held() const noexcept {
  // A fork child inherits the parent's Frame objects, not its bits: it holds nothing.
  return core_ != nullptr && !core_->forked();
}

const std::byte* Frame::data() const noexcept {
  return held() ? data_ : nullptr;
}

void Frame::release() noexcept {
  release(nullptr);
}

void Frame::release(CudaStream stream) noexcept {
  if (!core_) return;
  core_->release(*this, stream);
  reset();
}

void Frame::reset() noexcept {
  core_.reset();  // may detach the reader if this was the last reference
  data_ = nullptr;
}

Status Frame::wait_on(CudaStream stream) noexcept {
  if (!core_) return Status::no_frame;
  if (core_->forked()) return Status::forked;
  return core_->pool->wait_on(slot_, stream);
}

}  // namespace ipcring
