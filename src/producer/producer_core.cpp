// producer_core.cpp — the producer's core: create or take over a channel, loan, publish, reap,
// close. The ring algorithms it runs are src/ring/writer.hpp's; this file is the object's lifetime
// (the facade, Producer and Loan, is producer.cpp).
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
#include <utility>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/process.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/producer.hpp"
#include "lease/lease.hpp"
#include "ring/ring.hpp"
#include "wait/futex.hpp"

namespace ipcring {

namespace detail {

static_assert(static_cast<std::uint32_t>(Backend::host) == kBackendHost &&
                  static_cast<std::uint32_t>(Backend::cuda) == kBackendCuda,
              "the segment's backend codes are ipcring::Backend's values");

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

static std::unique_ptr<ProducerPool> make_producer_pool(const PoolRequest& req, Backend backend) {
  return backend == Backend::cuda ? make_cuda_producer_pool(req) : make_host_producer_pool(req);
}

ProducerCore::ProducerCore(std::string_view name, const ChannelConfig& config,
                           std::uint64_t instance_id)
    : name_(name),
      config_(config),
      instance_id_(instance_id != 0 ? instance_id : random_instance_id()),
      fork_gen_(fork_generation()),
      reap_period_ns_(static_cast<std::uint64_t>(config.reap_period.count())) {}

std::unique_ptr<ProducerCore> ProducerCore::create_new(std::string_view name,
                                                       const ChannelConfig& config,
                                                       const Geometry& geo,
                                                       std::uint64_t instance_id) {
  const std::string ch = channel_prefix(name);
  std::unique_ptr<ProducerCore> core(new ProducerCore(name, config, instance_id));
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
    core->holds_lease_ = true;
    core->mapping_ = mapping;
    core->view_ = view;
    core->writer_.epoch = 1;
    PoolRequest req{std::string(name), view, config.mode, config.cuda_device, true, false, {}};
    req.reap = reaper_for(view);
    core->pool_ = make_producer_pool(req, config.backend);
    p.instance_id.store(core->instance_id_, std::memory_order_relaxed);
    p.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
    p.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
    p.lease_word.store(LeaseWord::make(1, LeaseState::active), std::memory_order_release);
    publish_header(view.header());  // (H1) last
    fault_point("create.published");
    if (link_segment(*mapping, name)) {
      core->last_reap_ns_ = monotonic_ns();
      return core;
    }
  } catch (...) {
    core->pool_.reset();
    if (core->holds_lease_) keeper_give(p.lease);  // nobody else ever saw this object
    core->holds_lease_ = false;
    throw;
  }
  // Someone named a channel meanwhile: ours was never seen; drop it and look at theirs.
  core->pool_.reset();
  keeper_give(p.lease);
  core->holds_lease_ = false;
  core->mapping_.reset();
  return nullptr;
}

std::unique_ptr<ProducerCore> ProducerCore::open_existing(std::string_view name,
                                                          const ChannelConfig& config,
                                                          const Geometry& geo,
                                                          const OpenedSegment& opened,
                                                          std::uint64_t instance_id) {
  const std::string ch = channel_prefix(name);
  // The name exists: a live producer (refuse) or a dead or closed one (take over).
  SegmentView view = opened.mapping->view;
  ProducerBlock& p = view.producer();
  RepairLock lock;
  if (!lock.acquire(view.fd, std::chrono::milliseconds(2000))) {
    throw Error(Errc::channel_busy,
                ch + "its repair lock (flock) stayed taken for 2 s; another process is "
                     "attaching, reaping or taking it over and is stalled (stopped?)");
  }
  if (!still_named(name, opened.mapping->device(), opened.mapping->inode())) return nullptr;
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
    replace_unattached(name, geo, opened);
    return nullptr;
  }
  return take_over(name, config, opened, instance_id);
}

// Another geometry was asked for, and we hold the old channel's lease and repair lock: refuse
// while live readers are attached, else remove the old name so that the caller creates anew.
void ProducerCore::replace_unattached(std::string_view name, const Geometry& geo,
                                      const OpenedSegment& opened) {
  const std::string ch = channel_prefix(name);
  SegmentView view = opened.mapping->view;
  ProducerBlock& p = view.producer();
  const SegmentHeader& h = view.header();
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
                ch + "cannot take over with slots=" + std::to_string(geo.slots) + " max_readers=" +
                    std::to_string(geo.max_readers) + " max_held=" + std::to_string(geo.max_held) +
                    " frame_bytes=" + std::to_string(geo.frame_bytes) + ": the channel has slots=" +
                    std::to_string(h.slots) + " max_readers=" + std::to_string(h.max_readers) +
                    " max_held=" + std::to_string(h.max_held) +
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
}

// We hold the lease of a dead or closed producer of the same geometry (and the repair lock):
// recover the slots and start a new epoch.
std::unique_ptr<ProducerCore> ProducerCore::take_over(std::string_view name,
                                                      const ChannelConfig& config,
                                                      const OpenedSegment& opened,
                                                      std::uint64_t instance_id) {
  SegmentView view = opened.mapping->view;
  ProducerBlock& p = view.producer();
  std::unique_ptr<ProducerCore> core(new ProducerCore(name, config, instance_id));
  // Takeover: new epoch.
  core->holds_lease_ = true;
  core->mapping_ = opened.mapping;
  core->view_ = view;
  const std::uint64_t old = p.lease_word.load(std::memory_order_acquire);
  core->writer_.epoch = LeaseWord::generation(old) + 1;
  try {
    recover_after_producer_death(view);
    PoolRequest req{std::string(name), view, config.mode, config.cuda_device, false, false, {}};
    req.reap = reaper_for(view);
    core->pool_ = make_producer_pool(req, config.backend);
  } catch (...) {
    if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(opened.mapping);  // NOLINT
    core->holds_lease_ = false;
    throw;
  }
  core->writer_.next_sequence = LogWord::sequence(p.head.load(std::memory_order_relaxed)) + 1;
  core->writer_.published = p.published.load(std::memory_order_relaxed);
  core->readers_reaped_ = p.readers_reaped.load(std::memory_order_relaxed);
  core->writer_.loan_failures = p.loan_failures.load(std::memory_order_relaxed);
  p.instance_id.store(core->instance_id_, std::memory_order_relaxed);
  p.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
  p.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
  // (L2) release: readers that see the new epoch see the recovered slots.
  p.lease_word.store(LeaseWord::make(core->writer_.epoch, LeaseState::active),
                     std::memory_order_release);
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(p.wake);  // sleepers re-check and report the epoch change
  const std::size_t n = reap_dead_readers_locked(view);
  core->readers_reaped_ += n;
  if (n != 0) p.readers_reaped.fetch_add(n, std::memory_order_relaxed);
  core->last_reap_ns_ = monotonic_ns();
  return core;
}

void ProducerCore::drop_handle(ProducerCore* core) noexcept {
  if (core == nullptr) return;
  if (core->loan_out_) {
    core->handle_gone_ = true;  // Loan::~Loan (drop) ends it
    return;
  }
  delete core;
}

bool ProducerCore::forked() const noexcept {
  return fork_gen_ != fork_generation();
}

void ProducerCore::reap_hook(void* self) noexcept {
  auto* core = static_cast<ProducerCore*>(self);
  core->reap();
  core->last_reap_ns_ = monotonic_ns();
}

Result<Loan> ProducerCore::loan(CudaStream stream) noexcept {
  if (forked()) return Status::forked;
  if (loan_out_) return Status::loan_outstanding;
  const std::uint64_t now = monotonic_ns();
  if (now - last_reap_ns_ >= reap_period_ns_) {
    reap();  // bounded period: a probe is a load of each lease's lock word
    last_reap_ns_ = now;
  }
  // The search (ring/writer.cpp): one pass keeping the newest frame, then a reap and the sizing
  // rule's passes.
  const std::uint32_t i = claim_free_slot(view_, writer_, ReapHook{&ProducerCore::reap_hook, this});
  if (i == kNoSlot) return Status::no_free_slot;
  if (const Status st = prepare_slot(view_, *pool_, writer_, i, stream); st != Status::ok) {
    return st;
  }
  Loan l;
  l.core_ = this;
  l.fields_.data = pool_->buffer(i);
  l.fields_.capacity = config_.frame_bytes;
  l.fields_.sequence = writer_.next_sequence;
  l.fields_.slot = i;
  loan_out_ = true;
  return Result<Loan>(std::move(l));
}

bool ProducerCore::set_metadata(std::uint32_t slot_index, const void* bytes,
                                std::size_t size) noexcept {
  if (size > view_.geo.metadata_bytes) return false;
  // Plain bytes, like the payload: written only while the slot is W, ordered by (P2).
  if (size != 0) std::memcpy(view_.frame_metadata(slot_index), bytes, size);
  view_.frame_header(slot_index)
      .metadata_bytes.store(static_cast<std::uint32_t>(size), std::memory_order_relaxed);
  return true;
}

bool ProducerCore::set_tensor(std::uint32_t slot_index, const TensorDesc& t) noexcept {
  if (!tensor_fits(t, config_.frame_bytes)) return false;
  FrameHeader& fh = view_.frame_header(slot_index);
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
  view_.frame_header(slot_index).capture_time_ns.store(ns, std::memory_order_relaxed);
}

Status ProducerCore::publish(Loan& l, std::size_t bytes, CudaStream stream,
                             std::uint64_t& sequence) noexcept {
  // A child of fork() owns nothing of the channel: a Status, like loan() (the loan stays as it is).
  if (forked()) return Status::forked;
  // The publication (ring/writer.cpp): the pool's before_publish (CUDA: the write-done event;
  // a failure leaves the slot claimed and the loan with the caller), descriptor, (P2)...(P6).
  if (const Status st =
          publish_frame(view_, *pool_, writer_, l.fields_.slot, bytes, stream, sequence);
      st != Status::ok) {
    return st;
  }
  loan_out_ = false;
  l.reset();
  return Status::ok;
}

void ProducerCore::drop(Loan& l) noexcept {
  if (!forked()) unclaim(view_.slot(l.fields_.slot));
  loan_out_ = false;
  if (handle_gone_) delete this;  // the Producer went first: the last loan ends the core
}

std::size_t ProducerCore::reap() noexcept {
  if (forked()) return 0;
  const std::size_t n = reap_dead_readers(view_);
  if (n != 0) {
    readers_reaped_ += n;
    view_.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
  }
  return n;
}

ProducerCore::~ProducerCore() {
  if (forked() || !holds_lease_) return;  // a forked child owns nothing of the channel
  ProducerBlock& p = view_.producer();
  // Clean exit: mark the epoch closed and wake sleepers first, so readers report producer_gone,
  // stop claiming our frames and stop using our CUDA events; then the pool waits (bounded) for what
  // readers still hold before it frees buffers and events. Only the lease's owner writes this word
  // while it holds the lease mutex (a takeover needs the mutex dead or unowned), so the store needs
  // no repair lock; the pool's wait is kept out of the repair lock, which attachers need.
  p.lease_word.store(LeaseWord::make(writer_.epoch, LeaseState::closed), std::memory_order_release);
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(p.wake);
  fault_point("close.closed");
  pool_.reset();
  // Under the repair lock, so that a takeover never finds the lease between these steps.
  RepairLock lock;
  if (!lock.acquire(view_.fd, std::chrono::milliseconds(2000))) {
    // Cannot give the lease back safely (a takeover could lock it while glibc's unlock still has
    // it on the keeper's list_op_pending): keep it, and the mapping, until this process exits.
    new std::shared_ptr<Mapping>(mapping_);  // NOLINT: deliberately leaked
    return;
  }
  // Remove the name if it still refers to our object (ringdump rm --force and a new producer may
  // have replaced it): processes that still map the object keep it until they detach.
  unlink_name_if(object_name(name_), mapping_->device(), mapping_->inode());
  fault_point("close.unlinked");
  if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(mapping_);  // NOLINT: abandoned lease
}

std::unique_ptr<ProducerCore> create_producer_core(std::string_view name,
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

  for (int attempt = 0; attempt < 8; ++attempt) {
    OpenedSegment opened;
    try {
      opened = open_segment(name);
    } catch (const Error& e) {
      if (e.code() != Errc::not_found) throw;
    }
    if (!opened.mapping) {
      // A new channel; nullptr: someone named one meanwhile, look at theirs.
      if (auto core = ProducerCore::create_new(name, config, geo, instance_id)) {
        core->take_token(token);
        return core;
      }
      continue;
    }
    // The name exists: a live producer (refuse), a dead or closed one (take over), or one of
    // another geometry nobody is attached to (replace); nullptr: look again.
    if (auto core = ProducerCore::open_existing(name, config, geo, opened, instance_id)) {
      core->take_token(token);
      return core;
    }
  }
  throw Error(Errc::system_error, ch + "could not create or take over the channel: its "
                                       "segment kept changing under us");
}

}  // namespace detail

}  // namespace ipcring
