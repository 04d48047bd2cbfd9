// cuda_reader_pool.cpp — the reader side of the CUDA backend (docs/cuda.md is the long form).
//
// Import cache. A reader maps a buffer lazily, on its first frame in that slot, and keeps the
// mapping in a cache keyed by (producer instance, epoch, slot, device): mapped once per process
// and device (a registry shared by every Reader of the process: the driver reference-counts a
// handle opened twice in one context, CUDA 11.1 and later returning the same pointer, older drivers
// refusing with cudaErrorAlreadyMapped, so each open must be paired with exactly one close by its
// owner, and one owner per process and device keeps that simple), closed on detach, or when the
// slot's frames come from another producer instance/epoch, in the primary context of the device
// that opened it (DeviceGuard). Devices are matched by UUID, never by ordinal, so
// CUDA_VISIBLE_DEVICES cannot make a reader open the wrong GPU.
//
// Fences both ways.
//  * Reader waits for the producer: Frame::wait_on(stream) = cudaStreamWaitEvent(stream,
//    write_done[slot]); only the producer records that event. The slot word's publication (ring.hpp
//    P2/R3) orders the CPU side; the event orders the GPU side (invariant 3).
//  * Producer waits for readers: Frame::release(stream) queues on `stream`, after the reader's
//    kernels, the write of FenceWord(recorder epoch, frame sequence) into the slot's
//    release_fence[epoch & 1][reader] word of the host-registered control segment
//    (cuStreamWriteValue64), then stores the epoch and (F1) sets bit `reader` of release_recorded,
//    then the caller clears its bit in the slot word (R5). The producer's side is in
//    cuda_producer_pool.cpp; cuda_fence.hpp defines the word.
//
// Detach. ~CudaReaderPool waits (kTeardownWait at most) for the fence words it wrote to be reached,
// i.e. for its kernels on the released frames to finish. A slot whose fence did not complete keeps
// its mapping open for the life of the process (never unmapped under a running kernel), and the
// segment registration stays too (the queued fence write still targets it).
//
// The VMM path (header cuda_path == vmm). The attach imports every buffer from the descriptors the
// producer's socket handed us (VmmImporter: duplicates of them, read-only access for our device),
// or, with the producer in this process, uses its buffers. Frames take no `mapped` bit (the
// allocation outlives the producer's release while we map it). Frame::wait_on(stream): the frame
// is complete when the slot's `filled` word reached its sequence (a CPU load: then nothing is
// queued); otherwise `stream` waits for the word (cuStreamWaitValue64, GEQ), and the wait is
// watched: when the producer dies with the fill still queued (its context is gone, the word will
// never be written), the watchdog, or the reading thread, stores kFilledAbandoned into the word so
// our stream goes on instead of waiting forever (the frame it was told to wait for is then
// incomplete: it came from a producer that died while writing it).
//
// Hot path. buffer() on a cache hit, wait_on, release_fence: no lock, no allocation; CUDA calls
// only (a DeviceGuard's context calls for the legacy stream).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <thread>

#include "backend/cuda/cuda_capability.hpp"
#include "backend/cuda/cuda_common.hpp"
#include "backend/cuda/cuda_fence.hpp"
#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/cuda_import.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "backend/cuda/cuda_vmm.hpp"
#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

namespace {

using namespace cuda;

class CudaReaderPool final : public ReaderPool {
 public:
  CudaReaderPool(const PoolRequest& req, std::shared_ptr<CudaApi> api);
  ~CudaReaderPool() override;
  CudaReaderPool(const CudaReaderPool&) = delete;
  CudaReaderPool& operator=(const CudaReaderPool&) = delete;

  const std::byte* buffer(std::uint32_t slot, std::uint64_t epoch,
                          std::uint64_t producer_instance) noexcept override {
    SlotCache& c = cache_[slot];
    if (c.import && c.instance == producer_instance && c.epoch == epoch) {
      c.held.store(true, std::memory_order_relaxed);  // only this reader's thread sets it
      return c.import->ptr;
    }
    return open_slot(slot, epoch, producer_instance);
  }
  Status wait_on(std::uint32_t slot, CudaStream stream) noexcept override;
  void release_fence(std::uint32_t slot, std::uint32_t reader, CudaStream stream) noexcept override;
  void producer_ended() noexcept override;
  void attached(std::uint32_t reader) noexcept override {
    reader_ = reader;
    // Our own entry: we hold its lease, so its generation is ours until we detach.
    generation_ =
        LeaseWord::generation(view_.reader(reader).lease_word.load(std::memory_order_acquire));
  }

 private:
  struct SlotCache {
    std::shared_ptr<Import> import;
    std::uint64_t instance = 0;
    std::uint64_t epoch = 0;
    std::uint64_t fence_written = 0;  // the last fence value our streams were told to write
    bool fence_queued = false;
    bool mapped_bit = false;  // our bit is set in the slot's `mapped` word
    // VMM: a stream of ours was told to wait on the slot's `filled` word, and no fence queued
    // after that wait on the same stream says it ran (until then the GPU may still read the word).
    bool wait_unproven = false;
    CudaStream wait_stream = nullptr;
    std::atomic<bool> held{false};  // a Frame of this slot is out (cleared by release_fence)
  };

  const std::byte* open_slot(std::uint32_t slot, std::uint64_t epoch,
                             std::uint64_t instance) noexcept;
  // Keeps `imp` as slot `c`'s mapping for frames of (instance, epoch), held by the frame being
  // returned (registry_mutex held).
  const std::byte* cache_import(SlotCache& c, std::shared_ptr<Import> imp, std::uint64_t instance,
                                std::uint64_t epoch, bool mapped_bit) noexcept {
    c.mapped_bit = mapped_bit;
    c.import = std::move(imp);
    ++imports_;
    c.instance = instance;
    c.epoch = epoch;
    c.held.store(true, std::memory_order_relaxed);
    return c.import->ptr;
  }
  void import_vmm(const PoolRequest& req, const std::string& ch);
  std::shared_ptr<Import> vmm_import(std::uint32_t slot, std::uint64_t instance);
  Status wait_filled(std::uint32_t slot, CudaStream stream) noexcept;
  // VMM: the waits our streams queued on `filled` words (per slot the target + 1; 0: none).
  // Returns whether one is still unreached after abandoning the words of a producer that died.
  bool watch_fills() noexcept;
  void watchdog() noexcept;
  std::shared_ptr<Import> acquire_import(std::uint32_t slot, std::uint64_t epoch,
                                         std::uint64_t instance, const SlotHandles& handles);
  bool producer_current(std::uint64_t epoch) const noexcept {
    return view_.producer().lease_word.load(std::memory_order_acquire) ==
           LeaseWord::make(epoch, LeaseState::active);
  }
  // Before letting go of slot `i`'s import: unless its producer is current, or closing and still
  // waiting for our `mapped` bit (it has not withdrawn the slot's handles yet, and it never
  // destroys the event of a slot whose bit is set), the exporter may have destroyed the event, and
  // then any operation on our imported copy is undefined, destroying it included
  // (cudaIpcOpenEventHandle): the last owner is told to leave it (~Import).
  void mark_if_exporter_gone(std::uint32_t i) const noexcept {
    const SlotCache& o = cache_[i];
    if (!o.import) return;
    const std::uint64_t lease = view_.producer().lease_word.load(std::memory_order_acquire);
    if (lease == LeaseWord::make(o.epoch, LeaseState::active)) return;
    if (lease == LeaseWord::make(o.epoch, LeaseState::closed) && o.mapped_bit &&
        view_.cuda_slot(i).memory_generation.load(std::memory_order_acquire) == o.instance) {
      return;
    }
    o.import->exporter_gone.store(true, std::memory_order_relaxed);  // under registry_mutex
  }
  // Lets go of slot `i`'s import (registry_mutex held). `done`: no kernel of ours can still read
  // it, so the mapping may close and our `mapped` bit goes (release: after the close, which ~Import
  // does when we were its last owner; pairs with the closing producer's acquire in slot_quiet).
  // Otherwise the mapping stays open for the life of the process and the bit stays set, so the
  // producer keeps the buffer too.
  void drop_import(std::uint32_t i, bool done) noexcept {
    SlotCache& o = cache_[i];
    if (!o.import) return;
    if (!done) keep_mapped(o.import);
    mark_if_exporter_gone(i);
    o.import.reset();  // may close the mapping (~Import, with its device)
    o.fence_queued = false;
    --imports_;
    if (o.mapped_bit && done) {
      view_.cuda_slot(i).mapped.fetch_and(~(1U << reader_), std::memory_order_release);
    }
    o.mapped_bit = false;
  }
  bool fence_done(std::uint32_t slot) const noexcept {
    const SlotCache& c = cache_[slot];
    if (!c.fence_queued || reader_ >= readers_) return true;
    return FenceWord::reached(
        fence_word(view_.cuda_slot(slot), reader_, c.fence_written >> FenceWord::kSequenceBits)
            .load(std::memory_order_acquire),
        c.fence_written);
  }

  std::shared_ptr<CudaApi> api_;
  SegmentView view_;
  std::string name_;
  int device_ = 0;  // the device this reader maps buffers into (current at attach)
  std::uint32_t slots_;
  std::uint32_t readers_;
  std::uint32_t reader_ = UINT32_MAX;
  std::uint64_t generation_ = 0;
  std::uint64_t fork_gen_;
  std::unique_ptr<SlotCache[]> cache_;
  std::uint64_t last_instance_ = 0;
  std::uint64_t last_epoch_ = 0;
  std::uint32_t imports_ = 0;  // slots whose cache holds an import (registry_mutex)
  std::shared_ptr<SegmentRegistration> registration_;
  TestBreak break_ = test_break();  // negative controls of the GPU tests only
  ErrorLog log_;

  CudaPath path_ = CudaPath::legacy_ipc;
  std::shared_ptr<VmmImporter> vmm_;              // VMM, producer in another process: our imports
  std::shared_ptr<ProducerResources> local_vmm_;  // VMM, producer in this process: its buffers
  std::function<bool(std::uint64_t)> producer_died_;
  std::uint64_t epoch_ = 0;  // the producer's epoch at attach (one producer per segment)
  std::atomic<bool> watchdog_started_{false};
  bool kick_ = false;  // guarded by watchdog_mutex_: a wait was queued (no wakeup is lost)
  std::unique_ptr<std::atomic<std::uint64_t>[]> fill_waits_;
  std::unique_ptr<std::thread> watchdog_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool stop_ = false;  // guarded by watchdog_mutex_
};

CudaReaderPool::CudaReaderPool(const PoolRequest& req, std::shared_ptr<CudaApi> api)
    : api_(std::move(api)),
      view_(req.view),
      name_(req.name),
      slots_(req.view.geo.slots),
      readers_(req.view.geo.max_readers),
      fork_gen_(fork_generation()),
      cache_(new SlotCache[req.view.geo.slots]),
      log_(req.name) {
  const std::string ch = channel_prefix(name_);
  CudaApi& api_ref = *api_;
  const int count = probe_device_count(api_ref, ch);
  CudaUuid want{};
  std::memcpy(want.bytes, view_.header().cuda_uuid, sizeof want.bytes);
  if (std::all_of(std::begin(want.bytes), std::end(want.bytes),
                  [](unsigned char b) { return b == 0; })) {
    throw Error(Errc::corrupt_segment, ch + "the header names no CUDA device (zero UUID)");
  }
  const int owner = find_device(api_ref, want, count, ch);
  // The reader's device: the one current on the attaching thread (the runtime's current device;
  // a thread without a context gets device 0, as the runtime gives it).
  if (const CudaErr e = api_ref.get_device(device_); e != CudaErr::success) {
    throw_call(api_ref, ch, "cudaGetDevice", e);
  }
  if (device_ != owner) {
    int can = 0;
    const CudaErr e = api_ref.can_access_peer(device_, owner, can);
    (void)api_ref.get_last_error();
    if (e != CudaErr::success || can == 0) {
      throw Error(Errc::unsupported,
                  ch + "its frames live on " + device_text(api_ref, want) + " (CUDA device " +
                      std::to_string(owner) +
                      " in this process), but this reader's current "
                      "device is " +
                      std::to_string(device_) +
                      ", which cannot access it peer-to-peer; call cudaSetDevice(" +
                      std::to_string(owner) + ") before Reader::attach");
    }
  }
  path_ = view_.geo.cuda_path == kCudaPathVmm ? CudaPath::vmm : CudaPath::legacy_ipc;
  producer_died_ = req.producer_died;
  epoch_ = LeaseWord::generation(view_.producer().lease_word.load(std::memory_order_acquire));
  if (path_ == CudaPath::vmm) {
    const std::vector<std::string> refusals = vmm_support_refusals(api_ref, device_);
    if (!refusals.empty()) {
      throw Error(
          Errc::unsupported,
          ch + "the channel shares its buffers as CUDA VMM memory, but " + refusals.front());
    }
  } else {
    if (req.producer_pid == 0) {
      throw Error(Errc::unsupported,
                  ch +
                      "the channel shares its buffers with legacy CUDA IPC, which works only "
                      "between processes of one PID namespace, and its producer runs in a PID "
                      "namespace this reader cannot see (SO_PEERCRED pid 0); run the producer with "
                      "Backend::cuda_vmm (or Backend::cuda on a device that exports VMM memory as "
                      "file descriptors: `ringdump doctor` says), or the reader in the producer's "
                      "PID namespace");
    }
    probe_ipc_support(api_ref, device_, ch);
  }
  registration_ = SegmentRegistration::acquire(api_, view_, device_, name_);
  if (path_ == CudaPath::vmm) {
    fill_waits_.reset(new std::atomic<std::uint64_t>[slots_]());
    import_vmm(req, ch);
  }
}

// Our view of a VMM channel's buffers: the producer's own (same process), or imports of
// duplicates of the descriptors the handout gave us (the originals stay the caller's).
void CudaReaderPool::import_vmm(const PoolRequest& req, const std::string& ch) {
  const std::uint64_t instance = view_.producer().instance_id.load(std::memory_order_acquire);
  {
    std::lock_guard lock(registry_mutex());
    auto local = local_producers().find({api_.get(), instance});
    if (local != local_producers().end()) local_vmm_ = local->second.lock();
  }
  // Its own buffers only on its own device: the exporter granted access to that device alone.
  if (local_vmm_ && local_vmm_->vmm && local_vmm_->device == device_) return;
  local_vmm_.reset();
  if (req.device_fds.size() != slots_) {
    throw Error(Errc::corrupt_segment, ch + "a CUDA VMM channel of " + std::to_string(slots_) +
                                           " slots, but " + std::to_string(req.device_fds.size()) +
                                           " frame buffer descriptors came with it");
  }
  std::vector<int> fds;
  fds.reserve(req.device_fds.size());  // before any duplicate: no allocation between them
  for (const int fd : req.device_fds) {
    const int dup = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (dup < 0) {
      const int err = errno;
      for (const int d : fds) close(d);
      throw Error(Errc::system_error,
                  ch + "duplicating a frame buffer descriptor: " + errno_detail(err));
    }
    fds.push_back(dup);
  }
  DeviceGuard guard(*api_, device_);
  if (!guard.ok()) {
    for (const int d : fds) close(d);
    throw_call(*api_, ch, "cudaSetDevice(" + std::to_string(device_) + ")", guard.error());
  }
  // The importer takes the descriptors and closes every one, whatever happens; its memory comes
  // first, so that an allocation failure cannot lose them.
  void* mem = ::operator new(sizeof(VmmImporter), std::nothrow);
  if (mem == nullptr) {
    for (const int d : fds) close(d);
    throw Error(Errc::system_error, ch + "out of memory while importing the frame buffers");
  }
  VmmImporter* importer = nullptr;
  try {
    importer = new (mem)
        VmmImporter(api_, device_, std::move(fds), slots_, view_.geo.cuda_buffer_bytes, ch);
  } catch (...) {
    ::operator delete(mem);
    throw;
  }
  vmm_ = std::shared_ptr<VmmImporter>(importer);  // deletes it if its own allocation fails
}

CudaReaderPool::~CudaReaderPool() {
  if (fork_gen_ != fork_generation()) {
    // A child of fork(): ~Import leaves them alone, and so do we (the watchdog is the parent's).
    (void)watchdog_.release();
    if (vmm_) keep_until_exit(std::move(vmm_));  // the parent's
    return;
  }
  if (watchdog_) {
    {
      std::lock_guard lock(watchdog_mutex_);
      stop_ = true;
    }
    watchdog_cv_.notify_all();
    watchdog_->join();
  }
  // Our kernels on released frames must finish before their mappings close: wait for our fence
  // words. Bounded, because our streams may be stuck (behind a dead producer's write-done event,
  // or a kernel that never ends); past the bound those mappings stay open.
  const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
  bool done[kMaxSlots] = {};  // no allocation in a destructor
  const bool all = wait_until(
      [&] {
        bool ok = true;
        if (path_ == CudaPath::vmm) {
          // A dead producer's fills end our waits; a live one's are waited for like our fences.
          (void)watch_fills();
          for (std::uint32_t i = 0; i < slots_; ++i) {
            const std::uint64_t w = fill_waits_[i].load(std::memory_order_acquire);
            ok = ok && (w == 0 || static_cast<std::int64_t>(
                                      view_.cuda_slot(i).filled.load(std::memory_order_acquire) -
                                      (w - 1)) >= 0);
          }
        }
        for (std::uint32_t i = 0; i < slots_; ++i) {
          if (!done[i]) done[i] = fence_done(i);
          ok = ok && done[i];
        }
        return ok;
      },
      deadline);
  std::size_t kept = 0;
  {
    std::lock_guard lock(registry_mutex());
    for (std::uint32_t i = 0; i < slots_; ++i) {
      if (!done[i] && cache_[i].import) ++kept;  // a kernel of ours may still read it
      if (done[i] && reader_ < readers_) {
        // Our fence is complete: the producer need not look at it again (the others stay
        // recorded, under our generation, until our kernels finish).
        view_.cuda_slot(i).release_recorded.fetch_and(~(1U << reader_), std::memory_order_relaxed);
      }
      drop_import(i, done[i]);
    }
    // A wait of our streams on a `filled` word that no completed fence on the same stream
    // followed may not have run yet, and would then read the segment: it stays registered.
    bool waits_proven = true;
    for (std::uint32_t i = 0; i < slots_; ++i) {
      if (cache_[i].wait_unproven) waits_proven = false;
    }
    if (!all || !waits_proven) registration_->leak();  // a queued stream op still targets it
    registration_.reset();
  }
  if (vmm_) {
    DeviceGuard guard(*api_, device_);
    vmm_.reset();  // unmapped unless a kept Import still holds it
    (void)api_->get_last_error();
  }
  if (kept != 0) {
    log_.note(
        "detach: kernels of this reader still ran after the teardown wait; their buffers stay "
        "mapped until this process exits",
        0);
  }
}

std::shared_ptr<Import> CudaReaderPool::acquire_import(std::uint32_t slot, std::uint64_t epoch,
                                                       std::uint64_t instance,
                                                       const SlotHandles& handles) {
  // Called with registry_mutex held.
  const ImportKey key{api_.get(), instance, epoch, slot, device_};
  std::shared_ptr<Import> imp = imports()[key].lock();
  if (imp) return imp;
  imp = std::make_shared<Import>();
  imp->api = api_;
  imp->fork_gen = fork_gen_;
  imp->device = device_;
  auto local = local_producers().find({api_.get(), instance});
  if (local != local_producers().end()) imp->local = local->second.lock();
  if (imp->local) {
    imp->ptr = static_cast<std::byte*>(imp->local->buffers[slot]);
    imp->write_done = imp->local->write_done[slot];
  } else {
    DeviceGuard guard(*api_, device_);
    if (!guard.ok()) {
      log_.report(*api_, "cudaSetDevice before cudaIpcOpenMemHandle", slot, guard.error());
      return nullptr;
    }
    void* p = nullptr;
    CudaErr e = api_->ipc_open_mem_handle(&p, handles.memory);
    if (e != CudaErr::success) {
      (void)api_->get_last_error();
      // Every open by ipcring goes through this registry, which opens a handle once per device.
      // A driver that counts opens (CUDA 11.1+) gives us our own reference even when user code
      // opened the handle too (our close then drops only ours); an older one refuses with
      // cudaErrorAlreadyMapped: someone else in the process owns that mapping, which we must not
      // close, so the frame fails cleanly.
      log_.report(*api_,
                  e == CudaErr::already_mapped
                      ? "cudaIpcOpenMemHandle: the buffer is already mapped in this process "
                        "outside ipcring"
                      : "cudaIpcOpenMemHandle",
                  slot, e);
      return nullptr;
    }
    imp->ptr = static_cast<std::byte*>(p);  // from here on ~Import closes it
    e = api_->ipc_open_event_handle(imp->write_done, handles.write_done);
    if (e != CudaErr::success) {
      imp->write_done = nullptr;
      (void)api_->get_last_error();
      log_.report(*api_, "cudaIpcOpenEventHandle (write-done)", slot, e);
      return nullptr;
    }
  }
  imports()[key] = imp;
  return imp;
}

const std::byte* CudaReaderPool::open_slot(std::uint32_t slot, std::uint64_t epoch,
                                           std::uint64_t instance) noexcept {
  SlotCache& c = cache_[slot];
  try {
    std::lock_guard lock(registry_mutex());
    // Another instance or epoch: its mapping goes (closed in ~Import unless another Reader of the
    // process still uses it) once our kernels on it are done.
    drop_import(slot, fence_done(slot));
    if (instance != last_instance_ || epoch != last_epoch_) {
      // A new producer instance or epoch: mappings of the old one are useless; close those no
      // Frame holds and no running fence of ours still covers (the others are closed when their
      // slot is read again, or at detach).
      for (std::uint32_t i = 0; i < slots_; ++i) {
        SlotCache& o = cache_[i];
        if (o.import && (o.instance != instance || o.epoch != epoch) &&
            !o.held.load(std::memory_order_acquire) && fence_done(i)) {
          drop_import(i, true);
        }
      }
      last_instance_ = instance;
      last_epoch_ = epoch;
    }
    if (path_ == CudaPath::vmm) {
      // No handles to read and no `mapped` bit to take: the buffers were imported at attach.
      if (!producer_current(epoch)) return nullptr;
      std::shared_ptr<Import> imp = vmm_import(slot, instance);
      if (!imp) return nullptr;
      return cache_import(c, std::move(imp), instance, epoch, false);
    }
    SlotHandles handles;
    if (!read_handles(view_.cuda_slot(slot), instance, handles)) {
      log_.note(
          "the slot's CUDA handles belong to another producer instance (takeover in "
          "progress); frame dropped",
          slot);
      return nullptr;
    }
    // Our `mapped` bit before the import (M1, an acq_rel RMW), then the producer's state (M2).
    // The closing producer reads `mapped` with an acq_rel RMW too (M3, slot_quiet), after its
    // closed lease: the two RMWs are ordered in `mapped`'s modification order. M3 first: M1
    // reads from it, so the closed lease happens-before M2, which sees it and maps nothing. M1
    // first: M3 reads our bit and the producer keeps the buffer. The frame must be of its epoch
    // too (a reader that has not yet noticed a takeover may claim a frame of the previous one).
    CudaSlot& cs = view_.cuda_slot(slot);
    const bool ours =
        reader_ < readers_ &&
        (cs.mapped.fetch_or(1U << reader_, std::memory_order_acq_rel) & (1U << reader_)) == 0;
    const auto unset = [&] {
      if (ours) cs.mapped.fetch_and(~(1U << reader_), std::memory_order_relaxed);
    };
    if (!producer_current(epoch)) {
      unset();
      return nullptr;
    }
    std::shared_ptr<Import> imp;
    try {
      imp = acquire_import(slot, epoch, instance, handles);
    } catch (...) {
      unset();
      throw;
    }
    if (!imp || imp->local) unset();  // nothing mapped, or the producer's own memory (no IPC)
    if (!imp) return nullptr;
    const bool mapped_bit = ours && !imp->local;
    return cache_import(c, std::move(imp), instance, epoch, mapped_bit);
  } catch (...) {
    log_.note("out of memory while mapping a buffer", slot);
    return nullptr;
  }
}

std::shared_ptr<Import> CudaReaderPool::vmm_import(std::uint32_t slot, std::uint64_t instance) {
  // Called with registry_mutex held.
  auto imp = std::make_shared<Import>();
  imp->api = api_;
  imp->fork_gen = fork_gen_;
  imp->device = device_;
  if (local_vmm_) {
    if (view_.producer().instance_id.load(std::memory_order_relaxed) != instance) return nullptr;
    imp->local = local_vmm_;
    imp->ptr = static_cast<std::byte*>(local_vmm_->buffers[slot]);
  } else if (vmm_) {
    imp->vmm = vmm_;
    imp->ptr = static_cast<std::byte*>(vmm_->buffers()[slot].ptr);
  } else {
    return nullptr;
  }
  return imp;
}

bool CudaReaderPool::watch_fills() noexcept {
  bool waiting = false;
  bool died = false;
  bool asked = false;
  const auto producer_dead = [&] {
    if (!asked) {
      died = producer_died_ && producer_died_(epoch_);
      asked = true;
    }
    return died;
  };
  for (std::uint32_t i = 0; i < slots_; ++i) {
    std::uint64_t w = fill_waits_[i].load(std::memory_order_acquire);
    if (w == 0) continue;
    std::atomic<std::uint64_t>& word = view_.cuda_slot(i).filled;
    const std::uint64_t target = w - 1;
    std::uint64_t cur = word.load(std::memory_order_acquire);
    if (static_cast<std::int64_t>(cur - target) >= 0) {
      // Reached. A live producer's writes only grow the word: the wait is over. A dead one's
      // late write (of the frame before ours, still behind in its stream) may lower a raised
      // word again: keep watching (model/fill.pml, BROKEN_ONCE).
      if (!producer_dead()) (void)fill_waits_[i].compare_exchange_strong(w, 0);
      continue;
    }
    if (!producer_dead()) {
      waiting = true;
      continue;
    }
    // The producer died with this fill queued: its stream will never write the word. Raise it so
    // our stream's wait ends (release: a CPU store the GPU reads; never lowers it).
    bool raised = false;
    while (static_cast<std::int64_t>(cur - target) < 0) {
      if (word.compare_exchange_weak(cur, kFilledAbandoned, std::memory_order_release,
                                     std::memory_order_relaxed)) {
        raised = true;
        break;
      }
    }
    if (raised) {
      log_.note(
          "the producer died before its GPU finished this frame; the frame this reader's stream "
          "waited for is incomplete, and the wait was ended",
          i);
    }
  }
  return waiting;
}

void CudaReaderPool::watchdog() noexcept {
  // No CUDA call on this thread: it reads and writes words of the control segment. Every 10 ms
  // while a wait is watched, else once a second (wait_filled wakes it).
  std::unique_lock lock(watchdog_mutex_);
  bool watching = true;
  while (!stop_) {
    watchdog_cv_.wait_for(lock, watching ? std::chrono::milliseconds(10) : std::chrono::seconds(1),
                          [this] { return stop_ || kick_; });
    kick_ = false;
    if (stop_) return;
    lock.unlock();
    (void)watch_fills();
    watching = false;
    for (std::uint32_t i = 0; i < slots_ && !watching; ++i) {
      watching = fill_waits_[i].load(std::memory_order_relaxed) != 0;
    }
    lock.lock();
  }
}

void CudaReaderPool::producer_ended() noexcept {
  if (path_ == CudaPath::vmm) (void)watch_fills();
  if (imports_ == 0) return;  // the reading thread's count; nothing mapped
  try {
    std::lock_guard lock(registry_mutex());
    for (std::uint32_t i = 0; i < slots_; ++i) {
      const SlotCache& o = cache_[i];
      if (o.import && !o.held.load(std::memory_order_acquire) && fence_done(i)) {
        drop_import(i, true);
      }
    }
  } catch (...) {
    // The lock failed (system error): try again at the next read.
  }
}

Status CudaReaderPool::wait_filled(std::uint32_t slot, CudaStream stream) noexcept {
  SlotCache& c = cache_[slot];
  CudaSlot& cs = view_.cuda_slot(slot);
  // While we hold the frame the slot is not reused: the descriptor is our frame's.
  const std::uint64_t seq = view_.slot(slot).sequence.load(std::memory_order_acquire);
  if (seq == 0 || seq >= kFilledAbandoned) {  // sequences stay below 2^48: not a frame of ours
    log_.note("the frame's sequence is out of range; not waited for", slot);
    return Status::backend_error;
  }
  // Acquire, pairs with the release of the producer stream's write (its fill's writes come first).
  const std::uint64_t filled = cs.filled.load(std::memory_order_acquire);
  if (filled < kFilledAbandoned && static_cast<std::int64_t>(filled - seq) >= 0) {
    return Status::ok;  // complete already: no wait to queue
  }
  const std::uint64_t lease = view_.producer().lease_word.load(std::memory_order_acquire);
  if (filled >= kFilledAbandoned || (lease != LeaseWord::make(c.epoch, LeaseState::active) &&
                                     lease != LeaseWord::make(c.epoch, LeaseState::closed))) {
    return Status::producer_gone;  // its fill will never complete
  }
  if (break_ == TestBreak::wait_on) return Status::ok;  // negative control: no ordering
  void* addr = registration_->device_address(&cs.filled);
  CudaErr e;
  if (stream != nullptr) {
    StreamCallGuard guard(*api_, device_);  // a thread with no context: ours, for the call
    e = guard.ok() ? api_->stream_wait_value64(stream, addr, seq) : guard.error();
  } else {
    DeviceGuard guard(*api_, device_);
    e = guard.ok() ? api_->stream_wait_value64(nullptr, addr, seq) : guard.error();
  }
  if (e != CudaErr::success) {
    (void)api_->get_last_error();
    log_.report(*api_, "cuStreamWaitValue64 on the write-done word", slot, e);
    return Status::backend_error;
  }
  // Watched from now on: a producer that dies before the fill must not leave our stream waiting.
  std::uint64_t prev = fill_waits_[slot].load(std::memory_order_relaxed);
  while ((prev == 0 || prev - 1 < seq) &&
         !fill_waits_[slot].compare_exchange_weak(prev, seq + 1, std::memory_order_acq_rel)) {
  }
  c.wait_unproven = true;
  c.wait_stream = stream;
  // Frames may be waited on from several threads: the thread is started once, and told of the
  // new wait, under the lock (so the wakeup cannot be lost).
  try {
    std::lock_guard lock(watchdog_mutex_);
    if (!watchdog_) watchdog_ = std::make_unique<std::thread>([this] { watchdog(); });
    kick_ = true;
  } catch (...) {
    // No thread: the reading thread's producer_ended() and our detach still end the wait.
  }
  watchdog_cv_.notify_one();
  return Status::ok;
}

Status CudaReaderPool::wait_on(std::uint32_t slot, CudaStream stream) noexcept {
  const SlotCache& c = cache_[slot];
  if (!c.import) return Status::backend_error;
  if (path_ == CudaPath::vmm) return wait_filled(slot, stream);
  // A producer that closed keeps each slot's event until no reader holds the slot and its last
  // record completed (~CudaProducerPool), so while we hold the frame its event is there to wait
  // on. One that died or was replaced may have published this frame with its writes still queued
  // in its context, which is gone with its event: nothing can say the frame is complete, so the
  // frame is dropped (producer_gone: the caller releases it unread).
  const std::uint64_t lease = view_.producer().lease_word.load(std::memory_order_acquire);
  if (lease != LeaseWord::make(c.epoch, LeaseState::active) &&
      lease != LeaseWord::make(c.epoch, LeaseState::closed)) {
    return Status::producer_gone;
  }
  if (break_ == TestBreak::wait_on) return Status::ok;  // negative control: no ordering
  CudaErr e;
  if (stream != nullptr) {
    StreamCallGuard guard(*api_, device_);  // a thread with no context: ours, for the call
    e = guard.ok() ? api_->stream_wait_event(stream, c.import->write_done) : guard.error();
  } else {
    DeviceGuard guard(*api_, device_);
    e = guard.ok() ? api_->stream_wait_event(nullptr, c.import->write_done) : guard.error();
  }
  if (e != CudaErr::success) {
    (void)api_->get_last_error();
    log_.report(*api_, "cudaStreamWaitEvent on the write-done event", slot, e);
    return Status::backend_error;
  }
  return Status::ok;
}

void CudaReaderPool::release_fence(std::uint32_t slot, std::uint32_t reader,
                                   CudaStream stream) noexcept {
  SlotCache& c = cache_[slot];
  // Also after the producer ended: the fence word is in our registered segment, and its value is
  // what tells us (drop_import) and a closing producer (slot_quiet) when our kernels on the
  // buffer are done.
  if (c.import && reader < readers_ && reader == reader_) {
    // While we hold our bit the slot cannot be reused: its descriptor is our frame's.
    const std::uint64_t seq = view_.slot(slot).sequence.load(std::memory_order_acquire);
    CudaSlot& cs = view_.cuda_slot(slot);
    const std::uint16_t epoch = next_epoch(cs, reader, generation_);
    const std::uint64_t value = FenceWord::make(epoch, seq);
    std::atomic<std::uint64_t>& word = fence_word(cs, reader, epoch);
    void* addr = registration_->device_address(&word);
    // stream nullptr (Frame::release()): the legacy default stream of our device, which orders the
    // write after the work queued so far on the legacy stream and on every blocking stream of this
    // process. Work on non-blocking streams needs release(stream). Any stream of any device may
    // write the word (the registration is portable).
    CudaErr e;
    if (break_ == TestBreak::release_fence) {
      word.store(value, std::memory_order_release);  // negative control: not after our kernels
      e = CudaErr::success;
    } else if (stream != nullptr) {
      StreamCallGuard guard(*api_, device_);  // a thread with no context: ours, for the call
      e = guard.ok() ? api_->stream_write_value64(stream, addr, value) : guard.error();
    } else {
      DeviceGuard guard(*api_, device_);
      e = guard.ok() ? api_->stream_write_value64(nullptr, addr, value) : guard.error();
    }
    if (e == CudaErr::success) {
      c.fence_written = value;
      c.fence_queued = true;
      // The fence follows our wait on `filled` in this stream: once it is done, so is the wait.
      if (c.wait_unproven && c.wait_stream == stream) c.wait_unproven = false;
      // Relaxed: published by F1.
      cs.fence_epoch[reader].store(epoch, std::memory_order_relaxed);
      cs.fence_generation[reader].store(static_cast<std::uint32_t>(generation_),
                                        std::memory_order_relaxed);
      // (F1) release, pairs with (F2) in prepare_write: the write was queued, and our epoch and
      // generation stored, before the producer looks. Then the caller clears our bit in the slot
      // word (R5).
      cs.release_recorded.fetch_or(1U << reader, std::memory_order_release);
    } else {
      // No fence: make our work done instead, so the producer may reuse the buffer as soon as we
      // clear our bit.
      (void)api_->get_last_error();
      log_.report(*api_, "cuStreamWriteValue64 of the release fence; synchronising instead", slot,
                  e);
      if (stream != nullptr) {
        StreamCallGuard guard(*api_, device_);
        (void)api_->stream_synchronize(stream);
      } else {
        DeviceGuard guard(*api_, device_);
        (void)api_->stream_synchronize(nullptr);
      }
      (void)api_->get_last_error();
    }
  }
  c.held.store(false, std::memory_order_release);  // pairs with the acquire in open_slot
}

}  // namespace

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request,
                                                  std::shared_ptr<CudaApi> api) {
  return std::make_unique<CudaReaderPool>(request, std::move(api));
}

}  // namespace ipcring::detail
