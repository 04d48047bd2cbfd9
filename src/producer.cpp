// producer.cpp — Producer: create or take over a channel, loan, publish, reap, close.
//
// Concurrency: a Producer is used by one thread at a time. It shares the segment with readers in
// other processes through the atomics of ring.hpp (P1-P6) and the leases of lease.hpp. The
// producer lease (the header's robust mutex) is held by this process's lease keeper thread from
// create until the Producer is destroyed; a second producer finds its lock word held. Probing,
// reaping and takeover are the liveness module's (src/lease/lease.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>

#include "backend/cuda/cuda_fence.hpp"
#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/producer.hpp"
#include "lease/lease.hpp"
#include "ring/ring.hpp"
#include "wait/futex.hpp"

namespace ipcring {

namespace detail {

namespace {

void check_config(std::string_view name, const ChannelConfig& c) {
  const std::string ch = channel_prefix(name);
  auto bad = [&](const std::string& what) { throw Error(Errc::invalid_config, ch + what); };
  if (c.slots < 1 || c.slots > kMaxSlots) {
    bad("slots = " + std::to_string(c.slots) + "; must be 1.." + std::to_string(kMaxSlots));
  }
  if (c.max_readers < 1 || c.max_readers > kMaxReaders) {
    bad("max_readers = " + std::to_string(c.max_readers) + "; must be 1.." +
        std::to_string(kMaxReaders));
  }
  if (c.max_held < 1 || c.max_held > kMaxHeld) {
    bad("max_held = " + std::to_string(c.max_held) + "; must be 1.." + std::to_string(kMaxHeld));
  }
  if (c.frame_bytes < 1 || c.frame_bytes > kMaxFrameBytes) {
    bad("frame_bytes = " + std::to_string(c.frame_bytes) + "; must be 1.." +
        std::to_string(kMaxFrameBytes));
  }
  if (c.backend != Backend::host && c.backend != Backend::cuda) {
    bad("backend = " + std::to_string(static_cast<unsigned>(c.backend)) + " is unknown");
  }
  if ((c.mode & ~0777U) != 0 || (c.mode & 0600) != 0600 || (c.mode & 0002) != 0) {
    bad("mode = " + format_mode(c.mode) +
        "; must include owner read/write (0600) and must not be world-writable");
  }
  if (c.reap_period.count() <= 0) bad("reap_period must be positive");
  if (c.metadata_bytes > kMaxFrameMetadataBytes) {
    bad("metadata_bytes = " + std::to_string(c.metadata_bytes) + "; must be 0.." +
        std::to_string(kMaxFrameMetadataBytes));
  }
  if (c.backend == Backend::host && c.frame_bytes * c.slots / c.slots != c.frame_bytes) {
    bad("slots * frame_bytes overflows");
  }
}

void init_segment(const SegmentView& view) {
  ProducerBlock& p = view.producer();
  if (int rc = init_robust_mutex(p.lease); rc != 0) {
    throw Error(Errc::system_error, "ipcring: pthread_mutex_init: " + std::string(errno_text(rc)));
  }
  p.lease_word.store(LeaseWord::make(0, LeaseState::free), std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < view.geo.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    if (int rc = init_robust_mutex(e.lease); rc != 0) {
      throw Error(Errc::system_error,
                  "ipcring: pthread_mutex_init: " + std::string(errno_text(rc)));
    }
    e.lease_word.store(LeaseWord::make(0, LeaseState::free), std::memory_order_relaxed);
  }
  // Everything else is zero: a new object's pages are zeroed, and zero is the empty state of every
  // slot (generation 0, not W, mask 0, sequence 0) and log entry.
}

}  // namespace

// The reaper a pool may run on its own thread (the CUDA pool does, while GPU waits on readers'
// fences are pending): probes and reaps like Producer::reap_dead_readers, counting in the segment.
static std::function<void()> reaper_for(const SegmentView& view) {
  return [view] {
    const std::size_t n = reap_dead_readers(view);
    if (n != 0) view.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
  };
}

bool ProducerCore::forked() const noexcept {
  return fork_gen != fork_generation();
}

std::uint32_t ProducerCore::find_free(bool allow_newest, std::uint64_t* observed) noexcept {
  // Round-robin from the slot after the last one claimed: the oldest frames go first, and the
  // newest frame stays readable for latest-policy readers as long as another slot is free.
  const std::uint32_t n = view.geo.slots;
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (std::uint32_t k = 1; k <= n; ++k) {
    const std::uint32_t i = (cursor + k) % n;
    if (i == newest_slot && !allow_newest) continue;
    if (claim_for_write(view.slot(i))) return i;  // (P1)
    if (observed != nullptr) {
      // A hash of the busy words this pass saw (relaxed: only compared with the next pass).
      h = (h ^ (view.slot(i).state.load(std::memory_order_relaxed) + i)) * 0xbf58476d1ce4e5b9ULL;
      h ^= h >> 31;
    }
  }
  if (observed != nullptr) *observed = h;
  return UINT32_MAX;
}

Result<Loan> ProducerCore::loan(const std::shared_ptr<ProducerCore>& self,
                                CudaStream stream) noexcept {
  if (forked()) return Status::forked;
  if (loan_out) return Status::loan_outstanding;
  const std::uint64_t now = monotonic_ns();
  if (now - last_reap_ns >= reap_period_ns) {
    reap();  // bounded period: a probe is a load of each lease's lock word
    last_reap_ns = now;
  }
  std::uint32_t i = find_free(false);
  if (i == UINT32_MAX) {
    reap();
    last_reap_ns = monotonic_ns();
    i = find_free(false);
    // A scan is not atomic: readers can release a slot behind it and claim one ahead of it, so
    // a pass can see every slot busy although one was free at every instant (the model finds
    // this with three readers; model/ipcring.pml, case loan-three-scans-three-readers). Each
    // further failing pass needs a reader to claim (perhaps only transiently) a frame it had not
    // read; without new publications a reader walks at most the publication log, so there are at
    // most max_readers * (log_size + 1) such claims: scanning that many more times keeps the sizing
    // rule's promise. Normally the first pass succeeds.
    // Where the sizing rule does not hold (no promise is made), a pass that sees exactly the
    // words of the previous one ends the search, so an undersized channel fails fast. Not where
    // it holds: a scan is no snapshot, and a lagging reader can make two passes see the same
    // words (the model refutes that early end: docs/model.md, finding 1).
    const bool sizing_holds = std::uint64_t{view.geo.slots} >=
                              std::uint64_t{view.geo.max_readers} * view.geo.max_held + 2;
    const std::uint64_t passes =
        std::uint64_t{view.geo.max_readers} * (std::uint64_t{view.geo.log_size} + 1) + 1;
    std::uint64_t previous = 0;
    for (std::uint64_t pass = 0; i == UINT32_MAX && pass < passes; ++pass) {
      std::uint64_t seen = 0;
      i = find_free(true, &seen);
      if (i == UINT32_MAX && !sizing_holds && pass > 0 && seen == previous) break;
      previous = seen;
    }
  }
  ProducerBlock& p = view.producer();
  if (i == UINT32_MAX) {
    ++loan_failures;
    p.loan_failures.store(loan_failures, std::memory_order_relaxed);
    return Status::no_free_slot;
  }
  cursor = i;
  Slot& slot = view.slot(i);
  // Before the descriptor is touched: a slot refused here (CUDA: a reader's GPU work may still
  // read it) keeps its published frame.
  if (const Status st = pool->prepare_write(i, stream); st != Status::ok) {
    unclaim(slot);
    return st;
  }
  // The slot is ours (W): nobody reads the descriptor until we publish. Zero the sequence so a
  // dropped loan leaves an empty slot.
  slot.sequence.store(0, std::memory_order_relaxed);
  // The frame header starts empty: no tensor, no capture time, no metadata (relaxed: ordered
  // before readers by (P2), like the descriptor).
  FrameHeader& fh = view.frame_header(i);
  fh.sequence.store(0, std::memory_order_relaxed);
  fh.capture_time_ns.store(0, std::memory_order_relaxed);
  fh.tensor_word.store(0, std::memory_order_relaxed);
  fh.metadata_bytes.store(0, std::memory_order_relaxed);
  if (newest_slot == i) newest_slot = UINT32_MAX;
  Loan l;
  l.core_ = self;
  l.data_ = pool->buffer(i);
  l.capacity_ = config.frame_bytes;
  l.sequence_ = next_sequence;
  l.slot_ = i;
  loan_out = true;
  return Result<Loan>(std::move(l));
}

bool ProducerCore::set_metadata(std::uint32_t slot_index, const void* bytes,
                                std::size_t size) noexcept {
  if (size > view.geo.metadata_bytes) return false;
  // Plain bytes, like the payload: written only while the slot is W, ordered by (P2).
  if (size != 0) std::memcpy(view.frame_metadata(slot_index), bytes, size);
  view.frame_header(slot_index)
      .metadata_bytes.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);
  return true;
}

bool ProducerCore::set_tensor(std::uint32_t slot_index, const TensorDesc& t) noexcept {
  if (!tensor_fits(t, config.frame_bytes)) return false;
  FrameHeader& fh = view.frame_header(slot_index);
  for (std::uint8_t d = 0; d < kMaxTensorDims; ++d) {  // relaxed, ordered by (P2)
    fh.shape[d].store(d < t.ndim ? t.shape[d] : 0, std::memory_order_relaxed);
    fh.strides[d].store(d < t.ndim ? t.strides[d] : 0, std::memory_order_relaxed);
  }
  fh.byte_offset.store(t.byte_offset, std::memory_order_relaxed);
  fh.tensor_word.store(TensorWord::make(t.dtype_code, t.dtype_bits, t.ndim),
                       std::memory_order_relaxed);
  return true;
}

void ProducerCore::set_capture_time_ns(std::uint32_t slot_index, std::uint64_t ns) noexcept {
  view.frame_header(slot_index).capture_time_ns.store(ns, std::memory_order_relaxed);
}

std::uint64_t ProducerCore::publish(Loan& l, std::size_t bytes, CudaStream stream) {
  if (forked()) {
    throw Error(Errc::forked, channel_prefix(name) +
                                  "publish() in a child process: this Producer belongs to the "
                                  "process that created it");
  }
  if (bytes > l.capacity_) {
    throw Error(Errc::invalid_argument, channel_prefix(name) + "publish of " +
                                            std::to_string(bytes) +
                                            " bytes exceeds the frame capacity of " +
                                            std::to_string(l.capacity_) + " bytes");
  }
  const std::uint32_t i = l.slot_;
  if (const Status st = pool->before_publish(i, stream); st != Status::ok) {
    throw Error(Errc::cuda_error, channel_prefix(name) + "recording the write-done event of slot " +
                                      std::to_string(i) + " failed: " + to_string(st));
  }
  const std::uint64_t seq = next_sequence++;
  Slot& slot = view.slot(i);
  // Descriptor: relaxed stores, made visible by the release store (P2) that follows.
  slot.sequence.store(seq, std::memory_order_relaxed);
  slot.epoch.store(epoch, std::memory_order_relaxed);
  slot.bytes.store(bytes, std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  slot.timestamp_ns.store(now, std::memory_order_relaxed);
  slot.buffer_index.store(i, std::memory_order_relaxed);
  // The frame header names the publication it belongs to; readers take it only on a match, and
  // read its line only if the descriptor says it was written (our own recent stores: no transfer).
  FrameHeader& fh = view.frame_header(i);
  const bool header = fh.capture_time_ns.load(std::memory_order_relaxed) != 0 ||
                      fh.tensor_word.load(std::memory_order_relaxed) != 0 ||
                      fh.metadata_bytes.load(std::memory_order_relaxed) != 0;
  slot.flags.store(header ? DescriptorFlags::kHeader : 0, std::memory_order_relaxed);
  fh.sequence.store(seq, std::memory_order_relaxed);
  publish_slot(slot);  // (P2) release, pairs with (R3)
  ProducerBlock& p = view.producer();
  // (P3) release, pairs with (R2): a reader that finds this log entry finds the slot published.
  view.log(seq).store(LogWord::make(seq, i), std::memory_order_release);
  // (P4) release, pairs with (R1): a reader that sees head = (seq, i) finds the slot published
  // (P2) and the log entry (P3).
  p.head.store(LogWord::make(seq, i), std::memory_order_release);
  ++published;
  p.published.store(published, std::memory_order_relaxed);  // telemetry; only we write it
  p.last_publish_ns.store(now, std::memory_order_relaxed);
  // (P5) seq_cst RMW, then (P6) seq_cst load: with the reader's (W1) seq_cst setting of its bit
  // in `waiting` before its (W2) load of `wake`, either the reader sees the new wake value (and
  // does not sleep) or we see waiters > 0 (and wake it). No system call when nobody sleeps.
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  if (p.waiting.load(std::memory_order_seq_cst) != 0) futex_wake_all(p.wake);
  newest_slot = i;
  loan_out = false;
  l.reset();
  return seq;
}

void ProducerCore::drop(Loan& l) noexcept {
  if (!forked()) unclaim(view.slot(l.slot_));
  loan_out = false;
}

std::size_t ProducerCore::reap() noexcept {
  if (forked()) return 0;
  const std::size_t n = reap_dead_readers(view);
  if (n != 0) {
    readers_reaped += n;
    view.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
  }
  return n;
}

ProducerCore::~ProducerCore() {
  if (forked() || !holds_lease) return;  // a forked child owns nothing of the channel
  ProducerBlock& p = view.producer();
  // Clean exit: mark the epoch closed and wake sleepers first, so readers report producer_gone,
  // stop claiming our frames and stop using our CUDA events; then the pool waits (bounded) for what
  // readers still hold before it frees buffers and events. Only the lease's owner writes this word
  // while it holds the lease mutex (a takeover needs the mutex dead or unowned), so the store needs
  // no repair lock; the pool's wait is kept out of the repair lock, which attachers need.
  p.lease_word.store(LeaseWord::make(epoch, LeaseState::closed), std::memory_order_release);
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(p.wake);
  fault_point("close.closed");
  pool.reset();
  // Under the repair lock, so that a takeover never finds the lease between these steps.
  RepairLock lock;
  if (!lock.acquire(view.fd, std::chrono::milliseconds(2000))) {
    // Cannot give the lease back safely (a takeover could lock it while glibc's unlock still has
    // it on the keeper's list_op_pending): keep it, and the mapping, until this process exits.
    new std::shared_ptr<Mapping>(mapping);  // NOLINT: deliberately leaked
    return;
  }
  // Remove the name if it still refers to our object (ringdump rm --force and a new producer may
  // have replaced it): processes that still map the object keep it until they detach.
  unlink_name_if(object_name(name), mapping->device(), mapping->inode());
  fault_point("close.unlinked");
  if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(mapping);  // NOLINT: abandoned lease
}

}  // namespace detail

// ---- public API ------------------------------------------------------------------------------

Producer::Producer(std::shared_ptr<detail::ProducerCore> core) noexcept : core_(std::move(core)) {}
Producer::Producer(Producer&&) noexcept = default;
Producer& Producer::operator=(Producer&&) noexcept = default;
Producer::~Producer() = default;

namespace detail {

std::shared_ptr<ProducerCore> create_producer_core(std::string_view name,
                                                   const ChannelConfig& config, NameToken& token,
                                                   std::uint64_t instance_id) {
  validate_name(name);
  check_config(name, config);
  self_test_robust_mutexes();
  const std::string ch = channel_prefix(name);
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const Geometry geo =
      compute_geometry(config.slots, config.max_readers, config.max_held, config.frame_bytes,
                       static_cast<std::uint32_t>(config.backend), page, config.metadata_bytes);
  auto core = std::make_shared<ProducerCore>();
  core->name = std::string(name);
  core->config = config;
  core->instance_id = instance_id != 0 ? instance_id : random_instance_id();
  core->fork_gen = fork_generation();
  core->reap_period_ns = static_cast<std::uint64_t>(config.reap_period.count());

  for (int attempt = 0; attempt < 8; ++attempt) {
    OpenedSegment opened;
    try {
      opened = open_segment(name);
    } catch (const Error& e) {
      if (e.code() != Errc::not_found) throw;
    }
    if (!opened.mapping) {
      // A new channel, made nameless and named only once complete (segment.hpp): nobody can find
      // it before it is finished, and naming it never replaces anything.
      auto mapping = create_segment(name, geo, config.mode);
      fault_point("create.made");
      SegmentView view = mapping->view;
      ProducerBlock& p = view.producer();
      try {
        write_header(view.header(), name, geo, config);
        init_segment(view);
        if (keeper_take(p.lease) != TakeResult::taken) {
          throw Error(Errc::system_error, ch + "cannot lock the new producer lease");
        }
        core->holds_lease = true;
        core->mapping = mapping;
        core->view = view;
        core->epoch = 1;
        PoolRequest req{std::string(name), view, config.mode, config.cuda_device, true, false, {}};
        req.reap = reaper_for(view);
        core->pool = config.backend == Backend::cuda ? make_cuda_producer_pool(req)
                                                     : make_host_producer_pool(req);
        p.instance_id.store(core->instance_id, std::memory_order_relaxed);
        p.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
        p.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
        p.lease_word.store(LeaseWord::make(1, LeaseState::active), std::memory_order_release);
        publish_header(view.header());  // (H1) last
        fault_point("create.published");
        if (link_segment(*mapping, name)) {
          core->last_reap_ns = monotonic_ns();
          core->token = std::move(token);
          return core;
        }
      } catch (...) {
        core->pool.reset();
        if (core->holds_lease) keeper_give(p.lease);  // nobody else ever saw this object
        core->holds_lease = false;
        throw;
      }
      // Someone named a channel meanwhile: ours was never seen; drop it and look at theirs.
      core->pool.reset();
      keeper_give(p.lease);
      core->holds_lease = false;
      core->mapping.reset();
      continue;
    }

    // The name exists: a live producer (refuse) or a dead or closed one (take over).
    SegmentView view = opened.mapping->view;
    ProducerBlock& p = view.producer();
    RepairLock lock;
    if (!lock.acquire(view.fd, std::chrono::milliseconds(2000))) {
      throw Error(Errc::channel_busy,
                  ch + "its repair lock (flock) stayed taken for 2 s; another process is "
                       "attaching, reaping or taking it over and is stalled (stopped?)");
    }
    if (!still_named(name, opened.mapping->device(), opened.mapping->inode())) continue;
    if (!lease_mutex_plausible(p.lease)) {
      throw Error(Errc::corrupt_segment, ch + "the producer lease is not a robust mutex (kind " +
                                             std::to_string(lease_mutex_kind(p.lease)) + ")");
    }
    // Read-only: a live producer's lock word has its thread id and no OWNER_DIED.
    if (probe_lease(p.lease) == LeaseProbe::held) {
      throw Error(Errc::producer_exists, ch + "already has a live producer (pid " +
                                             std::to_string(p.pid.load(std::memory_order_relaxed)) +
                                             "); only one producer may publish into a channel");
    }
    fault_point("takeover.locked");
    const TakeResult taken = keeper_take(p.lease);
    if (taken != TakeResult::taken && taken != TakeResult::owner_died) {
      throw Error(Errc::corrupt_segment, ch + "the producer lease is not a usable mutex");
    }
    fault_point("takeover.taken");
    const SegmentHeader& h = view.header();
    const bool same_geometry = h.slots == geo.slots && h.max_readers == geo.max_readers &&
                               h.max_held == geo.max_held && h.frame_bytes == geo.frame_bytes &&
                               h.backend == geo.backend && h.metadata_bytes == geo.metadata_bytes;
    if (!same_geometry) {
      reap_dead_readers_locked(view);
      std::uint32_t live = 0;
      for (std::uint32_t r = 0; r < view.geo.max_readers; ++r) {
        if (LeaseWord::state(view.reader(r).lease_word.load(std::memory_order_acquire)) ==
            static_cast<std::uint8_t>(LeaseState::active)) {
          ++live;
        }
      }
      if (live != 0) {
        if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(opened.mapping);  // NOLINT
        throw Error(Errc::config_mismatch,
                    ch + "cannot take over with slots=" + std::to_string(geo.slots) +
                        " max_readers=" + std::to_string(geo.max_readers) +
                        " max_held=" + std::to_string(geo.max_held) +
                        " frame_bytes=" + std::to_string(geo.frame_bytes) +
                        ": the channel has slots=" + std::to_string(h.slots) + " max_readers=" +
                        std::to_string(h.max_readers) + " max_held=" + std::to_string(h.max_held) +
                        " frame_bytes=" + std::to_string(h.frame_bytes) + " and " +
                        std::to_string(live) + " live reader(s) attached");
      }
      // Nobody is attached: replace the channel with one of the requested shape. Its name is
      // removed only while we hold its lease and its repair lock, checked to be this object.
      p.lease_word.store(
          LeaseWord::make(LeaseWord::generation(p.lease_word.load()), LeaseState::closed),
          std::memory_order_release);
      unlink_name_if(object_name(name), opened.mapping->device(), opened.mapping->inode());
      if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(opened.mapping);  // NOLINT
      continue;
    }
    // Takeover: new epoch.
    core->holds_lease = true;
    core->mapping = opened.mapping;
    core->view = view;
    const std::uint64_t old = p.lease_word.load(std::memory_order_acquire);
    core->epoch = LeaseWord::generation(old) + 1;
    try {
      recover_after_producer_death(view);
      PoolRequest req{std::string(name), view, config.mode, config.cuda_device, false, false, {}};
      req.reap = reaper_for(view);
      core->pool = config.backend == Backend::cuda ? make_cuda_producer_pool(req)
                                                   : make_host_producer_pool(req);
    } catch (...) {
      if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(opened.mapping);  // NOLINT
      core->holds_lease = false;
      throw;
    }
    core->next_sequence = LogWord::sequence(p.head.load(std::memory_order_relaxed)) + 1;
    core->published = p.published.load(std::memory_order_relaxed);
    core->readers_reaped = p.readers_reaped.load(std::memory_order_relaxed);
    core->loan_failures = p.loan_failures.load(std::memory_order_relaxed);
    p.instance_id.store(core->instance_id, std::memory_order_relaxed);
    p.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
    p.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
    // (L2) release: readers that see the new epoch see the recovered slots.
    p.lease_word.store(LeaseWord::make(core->epoch, LeaseState::active), std::memory_order_release);
    p.wake.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(p.wake);  // sleepers re-check and report the epoch change
    const std::size_t n = reap_dead_readers_locked(view);
    core->readers_reaped += n;
    if (n != 0) p.readers_reaped.fetch_add(n, std::memory_order_relaxed);
    core->last_reap_ns = monotonic_ns();
    core->token = std::move(token);
    return core;
  }
  throw Error(Errc::system_error, ch + "could not create or take over the channel: its "
                                       "segment kept changing under us");
}

}  // namespace detail

Producer Producer::create(std::string_view name, const ChannelConfig& config) {
  using namespace detail;
  NameToken none;
  std::shared_ptr<ProducerCore> core = create_producer_core(name, config, none, 0);
  // The name is ours (a new object linked under it, or a dead producer's taken over): now its
  // liveness token (follow.hpp), which is bound while another producer lives whose object's name
  // was removed under it. Claimed after the name, so that a creator stalled half-way holds nothing
  // a second creator could stumble on; refused, we close at once, which removes the name again.
  try {
    core->token = NameToken::claim(name);
  } catch (const Error& e) {
    core.reset();
    throw Error(e.code(), std::string(e.what()) +
                              " (its object's name was removed under it; it restores the name "
                              "within its reap period)");
  }
  watch_name(*core);
  return Producer(std::move(core));
}

Result<Loan> Producer::loan() noexcept {
  detail::defend_name(core_);
  return core_->loan(core_);
}
Result<Loan> Producer::loan(CudaStream stream) noexcept {
  detail::defend_name(core_);
  return core_->loan(core_, stream);
}

Result<Loan> Producer::loan(std::chrono::nanoseconds timeout) noexcept {
  return loan(timeout, nullptr);
}

Result<Loan> Producer::loan(std::chrono::nanoseconds timeout, CudaStream stream) noexcept {
  const std::uint64_t deadline =
      detail::monotonic_ns() +
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count()));
  for (;;) {
    detail::defend_name(core_);
    Result<Loan> r = core_->loan(core_, stream);
    if (r || r.status() != Status::no_free_slot) return r;
    if (detail::monotonic_ns() >= deadline) return Status::timeout;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    core_->last_reap_ns = 0;  // reap again on the next try
  }
}

std::uint64_t Producer::publish(Loan&& loan, std::size_t bytes) {
  return publish(std::move(loan), bytes, nullptr);
}

std::uint64_t Producer::publish(Loan&& loan, std::size_t bytes, CudaStream stream) {
  if (loan.core_ != core_ || !core_) {
    throw Error(Errc::invalid_argument,
                channel_prefix(core_ ? core_->name : std::string("?")) +
                    "publish() of a loan that " +
                    (loan.core_ ? "belongs to another producer" : "is empty or already published"));
  }
  return core_->publish(loan, bytes, stream);
}

std::size_t Producer::reap_dead_readers() noexcept {
  return core_->reap();
}
std::string_view Producer::name() const noexcept {
  return core_->name;
}
std::uint64_t Producer::epoch() const noexcept {
  return core_->epoch;
}
const ChannelConfig& Producer::config() const noexcept {
  return core_->config;
}
bool Producer::owns_name() const noexcept {
  return !core_->watch || !core_->watch->changed.load(std::memory_order_relaxed);
}
std::uint64_t Producer::name_restores() const noexcept {
  return core_->name_restores;
}

// ---- Loan ----------------------------------------------------------------------------------

Loan::Loan(Loan&& other) noexcept
    : core_(std::move(other.core_)),
      data_(other.data_),
      capacity_(other.capacity_),
      sequence_(other.sequence_),
      slot_(other.slot_) {
  other.data_ = nullptr;
}

Loan& Loan::operator=(Loan&& other) noexcept {
  if (this != &other) {
    if (core_) core_->drop(*this);
    core_ = std::move(other.core_);
    data_ = other.data_;
    capacity_ = other.capacity_;
    sequence_ = other.sequence_;
    slot_ = other.slot_;
    other.data_ = nullptr;
  }
  return *this;
}

Loan::~Loan() {
  if (core_) core_->drop(*this);
}

void Loan::reset() noexcept {
  core_.reset();
  data_ = nullptr;
}

bool Loan::set_metadata(std::span<const std::byte> bytes) noexcept {
  if (!core_ || core_->forked()) return false;
  return core_->set_metadata(slot_, bytes.data(), bytes.size());
}

bool Loan::set_tensor(const TensorDesc& tensor) noexcept {
  if (!core_ || core_->forked()) return false;
  return core_->set_tensor(slot_, tensor);
}

void Loan::set_capture_time_ns(std::uint64_t ns) noexcept {
  if (!core_ || core_->forked()) return;
  core_->set_capture_time_ns(slot_, ns);
}

std::size_t Loan::metadata_capacity() const noexcept {
  return core_ ? core_->view.geo.metadata_bytes : 0;
}

}  // namespace ipcring
