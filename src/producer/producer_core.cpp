// producer_core.cpp — the producer's core: create a channel, loan, publish, reap, close. The ring
// algorithms it runs are src/ring/writer.hpp's; this file is the object's lifetime (the facade,
// Producer and Loan, is producer.cpp).
//
// Concurrency: a Producer is used by one thread at a time. It shares the segment with readers in
// other processes through the atomics of ring.hpp (P1-P6) and the leases of lease.hpp. The
// producer lease (the header's robust mutex) is held by this process's lease keeper thread from
// create until the Producer is destroyed, so that readers see its death as a kernel fact; the name
// is the name lock's (channel/name_lock.hpp), which a second producer finds held. Probing and
// reaping are the liveness module's (src/lease/lease.hpp).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "channel/directory.hpp"
#include "channel/name_lock.hpp"
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
  if (c.backend != Backend::host && !is_cuda(c.backend)) {
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
  return is_cuda(backend) ? make_cuda_producer_pool(req) : make_host_producer_pool(req);
}

ProducerCore::ProducerCore(std::string_view name, const ChannelConfig& config)
    : name_(name),
      config_(config),
      instance_id_(random_instance_id()),
      fork_gen_(fork_generation()),
      reap_period_ns_(static_cast<std::uint64_t>(config.reap_period.count())) {}

std::unique_ptr<ProducerCore> ProducerCore::create(std::string_view name,
                                                   const ChannelConfig& config,
                                                   const Geometry& geo) {
  const std::string ch = channel_prefix(name);
  // The name first: nothing of the channel exists before its lock is ours, and the lock is
  // refused while another producer lives (in whatever namespace).
  ChannelDirectory dir = ChannelDirectory::open(name, config.dir, true);
  NameLock lock = NameLock::take(dir, name, config.mode);
  // The channel's epochs go on across producers: the previous one recorded its own in the file.
  const std::uint64_t epoch =
      std::max<std::uint64_t>(1, lock.previous_epoch() + 1) & 0xffffffffffffULL;
  lock.record_epoch(epoch);
  fault_point("create.locked");
  std::unique_ptr<ProducerCore> core(new ProducerCore(name, config));
  // Fresh memory, reachable by nobody until the server hands it out.
  auto mapping = create_segment(name, geo);
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
    core->writer_.epoch = epoch;
    PoolRequest req;
    req.name = std::string(name);
    req.view = view;
    req.mode = config.mode;
    req.cuda_device = config.cuda_device;
    req.create = true;
    req.reap = reaper_for(view);
    req.backend = config.backend;
    core->pool_ = make_producer_pool(req, config.backend);
    // The CUDA pool chose its path and wrote it into the header: our mapping's geometry says it
    // too (a Reader of this process is handed this mapping, and reads the path from it).
    mapping->view.geo.cuda_path = view.header().cuda_path;
    mapping->view.geo.cuda_buffer_bytes = view.header().cuda_buffer_bytes;
    core->view_ = mapping->view;
    // The producer's read-write mapping of the frames exists now: seal them against every other.
    const int frames_ro = seal_frame_pool(name, *mapping);
    p.instance_id.store(core->instance_id_, std::memory_order_relaxed);
    p.pid.store(static_cast<std::uint32_t>(getpid()), std::memory_order_relaxed);
    p.started_ns.store(monotonic_ns(), std::memory_order_relaxed);
    p.lease_word.store(LeaseWord::make(epoch, LeaseState::active), std::memory_order_release);
    publish_header(view.header());  // (H1) last
    fault_point("create.published");
    AccessPolicy policy;
    policy.producer_uid = geteuid();
    policy.uids = config.allow_uids;
    policy.gids = config.allow_gids;
    policy.directory = dir.trust();
    ChannelServer::Memory memory;
    memory.control_fd = mapping->fd();
    memory.frames_fd = frames_ro;
    memory.control_bytes = geo.segment_bytes;
    memory.frames_bytes = geo.frames_segment_bytes;
    memory.instance_id = core->instance_id_;
    memory.device_fds = core->pool_->device_descriptors();  // CUDA VMM: the buffers' descriptors
    core->server_ =
        std::make_unique<ChannelServer>(std::string(name), std::move(dir), std::move(lock),
                                        config.mode, policy, memory, config.reap_period);
    fault_point("create.served");
  } catch (...) {
    core->pool_.reset();
    if (core->holds_lease_) keeper_give(p.lease);  // nobody else ever saw this memory
    core->holds_lease_ = false;
    throw;
  }
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
  const bool keep_lease = pool_->close();
  pool_.reset();
  // The names next (socket, then lock file), if still ours: no new reader finds this producer,
  // and a new producer may start; readers that still map this memory keep it until they detach.
  server_.reset();
  fault_point("close.unnamed");
  if (keep_lease) {
    // GPU work of ours may still be about to write what readers wait on: the lease stays ours
    // until this process ends, so that its end tells them (OWNER_DIED), and so does the mapping.
    keep_until_exit(mapping_);
    return;
  }
  // Under the repair lock, so that no attacher locks the lease while glibc's unlock still has it
  // on the keeper's list_op_pending.
  RepairLock lock;
  if (!lock.acquire(view_.fd, std::chrono::milliseconds(2000))) {
    // Cannot give the lease back safely: keep it, and the mapping, until this process exits.
    new std::shared_ptr<Mapping>(mapping_);  // NOLINT: deliberately leaked
    return;
  }
  if (!keeper_give(p.lease)) new std::shared_ptr<Mapping>(mapping_);  // NOLINT: abandoned lease
}

std::unique_ptr<ProducerCore> create_producer_core(std::string_view name,
                                                   const ChannelConfig& config) {
  validate_name(name);
  check_config(name, config);
  self_test_robust_mutexes();
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const Geometry geo = compute_geometry(
      config.slots, config.max_readers, config.max_held, config.frame_bytes,
      is_cuda(config.backend) ? kBackendCuda : kBackendHost, page, config.metadata_bytes);
  return ProducerCore::create(name, config, geo);
}

}  // namespace detail

}  // namespace ipcring
