// cuda_producer_pool.cpp — the producer side of the CUDA backend (docs/cuda.md is the long form).
//
// Objects. One cudaMalloc per slot (frame_bytes rounded up to 2 MiB), exported once into the
// slot's CudaSlot; one write-done IPC event per slot (cudaEventInterprocess | DisableTiming),
// recorded only by the producer, at publish; the control segment host-registered, so the readers'
// release fence words (cuda_fence.hpp) can be waited on by our streams. Our device's UUID goes
// into the header.
//
// Fences, producer side. prepare_write(slot) runs after the claim (P1), which is ordered after
// every holder's R5, so its acquire load of release_recorded (F2) sees the bit each holder set
// after queueing its fence write (F1). For each bit: target = FenceWord(e, q) on word e & 1, e the
// recorder's epoch (fence_epoch, stored before F1), q the slot's last sequence. Word already
// >= target: done. Otherwise the plain loan reports Status::no_free_slot (after one run of the
// owner's reaper, which completes the fences of dead readers), and loan(stream) makes `stream` wait
// on the word (cuStreamWaitValue64, GEQ).
//
// Why this cannot hang on a dead reader (invariant 12): every wait is on a word in host memory
// that the CPU can write. Whoever reaps a dead reader writes FenceWord::reaped(e) into its words
// (reader_fences_reaped, called by the reaper while it holds the entry), which satisfies every
// target of that incarnation. While a GPU wait of ours is pending on a word not yet reached, a
// watchdog thread runs the owner's reaper every tick, so a reader that dies is reaped even if the
// producer's own thread is blocked (e.g. in cudaStreamSynchronize). No step relies on an IPC event
// being recorded by another process.
//
// Close order. ~CudaProducerPool runs after the core marked the epoch closed (readers stop
// claiming and skip our events). It stops the watchdog, then waits (kTeardownWait at most) until,
// per slot: no reader holds it, no reader maps it (the slot's `mapped` bits: readers close their
// mappings when they see the end, CudaReaderPool::producer_ended; a dead reader's bits go with its
// reap), every recorded fence and every GPU wait we queued reached its target, and our last
// write-done record completed. Slots that got there have their event
// destroyed and their buffer freed (when the last same-process reader lets go of the resources);
// the others stay allocated for the life of the process, and so does the segment registration when
// a queued wait may still read it.
//
// The VMM path (header cuda_path == vmm; docs/cuda.md "Two ways to share a buffer"). The buffers
// are VMM allocations (cuda_vmm.hpp) exported once as descriptors, which the channel's socket
// hands to every reader it lets in; nothing goes into the slots' handle fields, and there is no
// IPC event: the write-done signal is the stream's write of the frame's sequence into the slot's
// `filled` word (before_publish), which readers' streams wait on. Release fences are the same as
// on the legacy path. Close differs in one point: a VMM allocation outlives our release while a
// reader maps it (the driver frees it with the last mapping), so close does not wait for the
// `mapped` bits (VMM readers set none); it waits for holders, fences, our queued waits and our own
// last fill (`filled` reached the slot's sequence).
//
// Hot path. prepare_write when no fence is running, before_publish: no lock, no allocation; CUDA
// calls only (and none at all for a fence found complete: it is a load of a word).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_capability.hpp"
#include "backend/cuda/cuda_common.hpp"
#include "backend/cuda/cuda_fence.hpp"
#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/cuda_import.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "backend/cuda/cuda_vmm.hpp"
#include "common/clock.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

namespace {

using namespace cuda;

class CudaProducerPool final : public ProducerPool {
 public:
  CudaProducerPool(const PoolRequest& req, std::shared_ptr<CudaApi> api);
  ~CudaProducerPool() override;
  CudaProducerPool(const CudaProducerPool&) = delete;
  CudaProducerPool& operator=(const CudaProducerPool&) = delete;

  std::byte* buffer(std::uint32_t slot) noexcept override {
    return static_cast<std::byte*>(res_->buffers[slot]);
  }
  Status prepare_write(std::uint32_t slot, CudaStream stream) noexcept override;
  Status before_publish(std::uint32_t slot, CudaStream stream,
                        std::uint64_t sequence) noexcept override;
  std::vector<int> device_descriptors() const override { return device_fds_.fds; }
  bool close() noexcept override;

 private:
  std::size_t index(std::uint32_t slot, std::uint32_t reader) const noexcept {
    return std::size_t{slot} * readers_ + reader;
  }
  // The word a target of ours is on: the target's epoch picks it (cuda_fence.hpp).
  std::atomic<std::uint64_t>& fence(std::uint32_t slot, std::uint32_t reader,
                                    std::uint64_t target) const noexcept {
    return fence_word(view_.cuda_slot(slot), reader, target >> FenceWord::kSequenceBits);
  }
  void check_device(bool create, Backend requested, const std::string& ch);
  void allocate_vmm(const std::string& ch);
  bool own_fill_done(std::uint32_t slot) const noexcept;
  void allocate_own_words(const std::string& ch);
  std::vector<SlotHandles> allocate_slots(const std::string& ch);
  void export_handles(const std::vector<SlotHandles>& handles) noexcept;
  void publish_handles() noexcept;
  void add_pending(std::uint32_t slot, std::uint32_t reader, std::uint64_t target) noexcept;
  bool pending_reached(std::size_t i) const noexcept;
  bool slot_quiet(std::uint32_t slot) const noexcept;
  void watchdog() noexcept;

  std::shared_ptr<CudaApi> api_;
  SegmentView view_;
  std::string name_;
  int device_;
  std::uint32_t slots_;
  std::uint32_t readers_;
  std::uint64_t fork_gen_;
  std::function<void()> reap_;
  std::shared_ptr<ProducerResources> res_;
  bool handles_published_ = false;
  std::uint64_t instance_ = 0;  // ours, as published in memory_generation
  CudaPath path_ = CudaPath::legacy_ipc;
  DescriptorSet device_fds_;  // VMM: one exported descriptor per buffer (closed with the pool)
  // VMM: what our own streams wrote, in producer-private host-registered memory (never the
  // shared `filled` word, which every reader may write): own_words_[slot] is written by the same
  // stream right after the slot's `filled`, and last_signalled_[slot] is the sequence it was
  // told to write. Close and the per-slot order of the writes are judged by these only.
  std::unique_ptr<void, decltype(&std::free)> own_mem_{nullptr, &std::free};  // before: freed last
  std::atomic<std::uint64_t>* own_words_ = nullptr;
  std::size_t own_bytes_ = 0;
  std::shared_ptr<SegmentRegistration> own_registration_;
  std::vector<std::uint64_t> last_signalled_;
  bool closed_ = false;
  bool outstanding_ = false;  // close found a fill of ours whose words were not written yet
  bool untracked_ = false;    // a write of `filled` was queued without its private copy
  ErrorLog log_;

  // GPU waits we queued on readers' fence words: pending_[slot * readers + reader] is the target
  // plus one (0: none); the target's epoch says which word of the pair it is on. Written by the
  // producer thread; read and cleared by the watchdog.
  std::unique_ptr<std::atomic<std::uint64_t>[]> pending_;
  std::atomic<std::uint32_t> pending_count_{0};
  std::unique_ptr<std::thread> watchdog_;
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_cv_;
  bool stop_ = false;  // guarded by watchdog_mutex_
  std::chrono::nanoseconds tick_;
};

CudaProducerPool::CudaProducerPool(const PoolRequest& req, std::shared_ptr<CudaApi> api)
    : api_(std::move(api)),
      view_(req.view),
      name_(req.name),
      device_(req.cuda_device),
      slots_(req.view.geo.slots),
      readers_(req.view.geo.max_readers),
      fork_gen_(fork_generation()),
      reap_(req.reap),
      log_(req.name) {
  const std::string ch = channel_prefix(name_);
  check_device(req.create, is_cuda(req.backend) ? req.backend : Backend::cuda, ch);
  res_ = std::make_shared<ProducerResources>();
  res_->api = api_;
  res_->device = device_;
  res_->fork_gen = fork_gen_;
  res_->buffers.assign(slots_, nullptr);
  res_->write_done.assign(slots_, nullptr);
  // Until the constructor succeeds, everything allocated is released on failure (nothing else can
  // have used it yet).
  res_->releasable.assign(slots_, true);
  res_->registration = SegmentRegistration::acquire(api_, view_, device_, name_);
  std::vector<SlotHandles> handles;
  if (path_ == CudaPath::vmm) {
    allocate_vmm(ch);
    allocate_own_words(ch);
  } else {
    handles = allocate_slots(ch);
  }
  pending_.reset(new std::atomic<std::uint64_t>[std::size_t{slots_} * readers_]());
  const auto period = std::chrono::nanoseconds(view_.header().reap_period_ns);
  tick_ = std::clamp<std::chrono::nanoseconds>(period / 4, std::chrono::milliseconds(1),
                                               std::chrono::milliseconds(20));
  if (path_ == CudaPath::legacy_ipc) export_handles(handles);
  res_->releasable.assign(slots_, false);  // from now on, close decides
}

// The VMM buffers, their size in the header (before H1, like the UUID) and one exported
// descriptor per buffer for the channel's socket.
void CudaProducerPool::allocate_vmm(const std::string& ch) {
  DeviceGuard guard(*api_, device_);
  if (!guard.ok())
    throw_call(*api_, ch, "cudaSetDevice(" + std::to_string(device_) + ")", guard.error());
  res_->vmm = std::make_shared<VmmExporter>(api_, device_, slots_, view_.geo.frame_bytes, ch);
  for (std::uint32_t i = 0; i < slots_; ++i) res_->buffers[i] = res_->vmm->buffers()[i].ptr;
  view_.header().cuda_buffer_bytes = res_->vmm->buffer_bytes();
  device_fds_.fds = res_->vmm->export_descriptors();
}

void CudaProducerPool::allocate_own_words(const std::string& ch) {
  last_signalled_.assign(slots_, 0);
  own_bytes_ = round_up(std::uint64_t{slots_} * sizeof(std::uint64_t), 4096);
  std::unique_ptr<void, decltype(&std::free)> mem(std::aligned_alloc(4096, own_bytes_), &std::free);
  if (!mem) throw Error(Errc::system_error, ch + "out of memory (write-done words)");
  std::memset(mem.get(), 0, own_bytes_);
  SegmentView own;  // registered like a control segment: only its base and size are used
  own.base = static_cast<unsigned char*>(mem.get());
  own.geo.segment_bytes = own_bytes_;
  own_registration_ = SegmentRegistration::acquire(api_, own, device_, name_);
  own_words_ = static_cast<std::atomic<std::uint64_t>*>(mem.get());
  own_mem_ = std::move(mem);
}

// The device exists here, supports the path asked for (or, Backend::cuda, one of the two:
// choose_path), and (a takeover) is the GPU the channel's frames live on.
void CudaProducerPool::check_device(bool create, Backend requested, const std::string& ch) {
  CudaApi& api_ref = *api_;
  const int count = probe_device_count(api_ref, ch);
  if (device_ < 0 || device_ >= count) {
    throw Error(Errc::invalid_config,
                ch + "cuda_device = " + std::to_string(device_) + ", but this process sees " +
                    std::to_string(count) + " CUDA device(s) (ordinals 0.." +
                    std::to_string(count - 1) + "; see CUDA_VISIBLE_DEVICES)");
  }
  const PathChoice choice = choose_path(api_ref, device_, requested, slots_);
  if (choice.path == CudaPath::none) {
    const bool slots_only = requested == Backend::cuda_vmm && slots_ > kMaxVmmBuffers &&
                            choice.vmm_refusals.size() == 1;
    throw Error(slots_only ? Errc::invalid_config : Errc::unsupported, ch + choice.reason);
  }
  path_ = choice.path;
  CudaUuid uuid{};
  if (const CudaErr e = api_ref.device_uuid(device_, uuid); e != CudaErr::success) {
    throw_call(api_ref, ch, "reading the UUID of CUDA device " + std::to_string(device_), e);
  }
  SegmentHeader& header = view_.header();
  if (create) {
    // Plain header fields: written before the creator's release store of magic (H1).
    std::memcpy(header.cuda_uuid, uuid.bytes, sizeof uuid.bytes);
    header.cuda_path = path_ == CudaPath::vmm ? kCudaPathVmm : kCudaPathLegacy;
  } else if (std::memcmp(header.cuda_uuid, uuid.bytes, sizeof uuid.bytes) != 0) {
    throw Error(Errc::config_mismatch,
                ch + "its frames live on " + device_text(api_ref, header.cuda_uuid) +
                    ", but this producer's cuda_device " + std::to_string(device_) + " is " +
                    device_text(api_ref, uuid) +
                    "; a takeover must use the same GPU (or remove the channel first)");
  }
}

// A buffer and an interprocess write-done event per slot, and their IPC handles.
std::vector<SlotHandles> CudaProducerPool::allocate_slots(const std::string& ch) {
  CudaApi& api_ref = *api_;
  DeviceGuard guard(api_ref, device_);
  if (!guard.ok())
    throw_call(api_ref, ch, "cudaSetDevice(" + std::to_string(device_) + ")", guard.error());
  const std::uint64_t bytes = round_up(view_.geo.frame_bytes, kCudaBufferAlignment);
  std::vector<SlotHandles> handles(slots_);
  for (std::uint32_t i = 0; i < slots_; ++i) {
    const std::string what = "slot " + std::to_string(i) + ": ";
    if (const CudaErr e = api_ref.malloc(&res_->buffers[i], bytes); e != CudaErr::success) {
      res_->buffers[i] = nullptr;
      throw_call(api_ref, ch, what + "cudaMalloc of " + std::to_string(bytes) + " bytes", e);
    }
    if (const CudaErr e = api_ref.ipc_get_mem_handle(handles[i].memory, res_->buffers[i]);
        e != CudaErr::success) {
      throw_call(api_ref, ch, what + "cudaIpcGetMemHandle", e);
    }
    if (const CudaErr e = api_ref.create_ipc_event(res_->write_done[i]); e != CudaErr::success) {
      res_->write_done[i] = nullptr;
      throw_call(api_ref, ch, what + "cudaEventCreateWithFlags(interprocess)", e);
    }
    if (const CudaErr e = api_ref.ipc_get_event_handle(handles[i].write_done, res_->write_done[i]);
        e != CudaErr::success) {
      throw_call(api_ref, ch, what + "cudaIpcGetEventHandle", e);
    }
  }
  return handles;
}

void CudaProducerPool::export_handles(const std::vector<SlotHandles>& handles) noexcept {
  // Export: the writer half of the sequence lock (cuda_handles.hpp). Readers accept the handles
  // only once publish_handles() stores our instance id, at the first loan, after our epoch began.
  for (std::uint32_t i = 0; i < slots_; ++i) {
    CudaSlot& cs = view_.cuda_slot(i);
    cs.memory_generation.store(0, std::memory_order_relaxed);
    store_handle(cs.memory_handle, handles[i].memory.bytes);
    store_handle(cs.write_done_handle, handles[i].write_done.bytes);
    // Our control segment is fresh memory (a new producer never reuses another's), so these are
    // zero already; stored anyway, as the empty state of the words we read.
    cs.release_recorded.store(0, std::memory_order_relaxed);
  }
}

CudaProducerPool::~CudaProducerPool() {
  if (!closed_) (void)close();
  if (own_words_ == nullptr || !outstanding_) return;  // the members unregister, then free
  // A queued write of ours may still land in the private words: they stay, registered, for the
  // life of the process.
  std::lock_guard lock(registry_mutex());
  own_registration_->leak();
  keep_until_exit(std::shared_ptr<void>(own_mem_.release(), &std::free));
}

bool CudaProducerPool::close() noexcept {
  if (closed_) return outstanding_;
  closed_ = true;
  if (fork_gen_ != fork_generation()) {
    // A child of fork(): the watchdog thread is the parent's (leak its handle: joining it here
    // would wait forever); the CUDA objects are the parent's too (~ProducerResources leaves them).
    (void)watchdog_.release();
    return false;
  }
  if (watchdog_) {
    {
      std::lock_guard lock(watchdog_mutex_);
      stop_ = true;
    }
    watchdog_cv_.notify_all();
    watchdog_->join();
  }
  // Readers saw the epoch close (the core marks it before destroying the pool); wait, bounded, for
  // what may still use each slot's buffer and event.
  const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
  DeviceGuard guard(*api_, device_);  // the event queries below, on whatever thread closes us
  std::vector<bool> quiet(slots_, false);
  auto next_reap = std::chrono::steady_clock::now();
  (void)wait_until(
      [&] {
        // A reader that dies while we wait takes its mappings with it: the reaper clears its
        // `mapped` bits (reader_fences_reaped), so a dead reader costs no wait.
        if (reap_ && std::chrono::steady_clock::now() >= next_reap) {
          reap_();
          next_reap = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
        }
        bool all = true;
        for (std::uint32_t i = 0; i < slots_; ++i) {
          if (!quiet[i]) quiet[i] = slot_quiet(i);
          all = all && quiet[i];
        }
        return all;
      },
      deadline);
  bool waits_done = true;
  for (std::size_t k = 0; k < std::size_t{slots_} * readers_; ++k) {
    if (!pending_reached(k)) waits_done = false;
  }
  // VMM: a fill of ours whose write-done words are not written yet means readers may still wait
  // for it, and its stream will still write `filled` into the registered segment: the core keeps
  // the lease until our process ends, which then tells the readers (V3), and we keep the
  // registration.
  if (path_ == CudaPath::vmm) {
    for (std::uint32_t i = 0; i < slots_; ++i) outstanding_ = outstanding_ || !own_fill_done(i);
  }
  std::size_t kept = 0;
  {
    std::lock_guard lock(registry_mutex());
    for (std::uint32_t i = 0; i < slots_; ++i) {
      res_->releasable[i] = quiet[i];
      if (!quiet[i]) ++kept;
      // Decided: no reader may import the handles any more, and a reader that lets go of a kept
      // slot later treats our event as possibly destroyed (our process may exit at any time).
      view_.cuda_slot(i).memory_generation.store(0, std::memory_order_release);
    }
    // A queued wait of ours still reads a word, or a queued write of ours still writes one.
    if (!waits_done || outstanding_) res_->registration->leak();
    if (handles_published_) local_producers().erase({api_.get(), instance_});
  }
  if (kept != 0) {
    log_.note(
        "closing: readers or queued GPU work still used some buffers after the teardown wait; "
        "they stay allocated until this process exits (first such slot shown as 0)",
        0);
  }
  return outstanding_;
}

// Our last fill of `slot` completed: legacy, the write-done event's last record; VMM, our
// private word reached the sequence our stream was last told to write for the slot (never the
// shared `filled` word: any reader may write that one).
bool CudaProducerPool::own_fill_done(std::uint32_t slot) const noexcept {
  if (path_ == CudaPath::legacy_ipc) return event_done(*api_, res_->write_done[slot]);
  if (untracked_) return false;  // a write we cannot follow may still be queued
  // Acquire, pairs with the release of our stream's write (after the fill and `filled`).
  const std::uint64_t own = own_words_[slot].load(std::memory_order_acquire);
  return static_cast<std::int64_t>(own - last_signalled_[slot]) >= 0;
}

bool CudaProducerPool::slot_quiet(std::uint32_t slot) const noexcept {
  // No reader holds the slot's frame.
  if (SlotWord::mask(view_.slot(slot).state.load(std::memory_order_acquire)) != 0) return false;
  CudaSlot& cs = view_.cuda_slot(slot);
  // No reader process maps the buffer any more (freeing memory another process maps is undefined
  // by cudaIpcOpenMemHandle's documentation). (M3) an acq_rel RMW, not a load: it reads the last
  // value in `mapped`'s modification order, and against a reader's (M1) in CudaReaderPool::
  // open_slot one of the two sees the other (there); acquire also pairs with the release of
  // drop_import (the mapping was closed first).
  // VMM readers set no bit: an allocation they map outlives our release (the driver frees it
  // with the last mapping).
  if (path_ == CudaPath::legacy_ipc && cs.mapped.fetch_or(0, std::memory_order_acq_rel) != 0) {
    return false;
  }
  // Every fence recorded for it, and every wait we queued on it, reached its target.
  const std::uint32_t bits = cs.release_recorded.load(std::memory_order_acquire);
  const std::uint64_t seq = view_.slot(slot).sequence.load(std::memory_order_relaxed);
  for (std::uint32_t r = 0; r < readers_; ++r) {
    if (!pending_reached(index(slot, r))) return false;
    if ((bits & (1U << r)) == 0) continue;
    const FenceTarget t = recorded_target(view_.cuda_slot(slot), r, seq);
    if (!FenceWord::reached(t.word->load(std::memory_order_acquire), t.value)) return false;
  }
  // Our own last write (the producer's queued kernels) finished: readers may still be told to
  // wait on it, and freeing memory a queued kernel writes is undefined.
  return own_fill_done(slot);
}

void CudaProducerPool::publish_handles() noexcept {
  handles_published_ = true;
  // The core stored our instance id before the first loan; relaxed: we wrote it.
  const std::uint64_t instance = view_.producer().instance_id.load(std::memory_order_relaxed);
  instance_ = instance;
  try {
    std::lock_guard lock(registry_mutex());
    local_producers()[{api_.get(), instance}] = res_;
  } catch (...) {
    // Without the entry, a Reader in this process cannot use the shortcut: its open of our
    // handles fails and it reports backend_error. Nothing else depends on it.
  }
  for (std::uint32_t i = 0; i < slots_; ++i) {
    // Release: a reader that reads this id reads the handles written in the constructor.
    view_.cuda_slot(i).memory_generation.store(instance, std::memory_order_release);
  }
}

bool CudaProducerPool::pending_reached(std::size_t i) const noexcept {
  const std::uint64_t p = pending_[i].load(std::memory_order_acquire);
  if (p == 0) return true;
  const auto slot = static_cast<std::uint32_t>(i / readers_);
  const auto reader = static_cast<std::uint32_t>(i % readers_);
  return FenceWord::reached(fence(slot, reader, p - 1).load(std::memory_order_acquire), p - 1);
}

void CudaProducerPool::add_pending(std::uint32_t slot, std::uint32_t reader,
                                   std::uint64_t target) noexcept {
  // A newer wait on the same word supersedes an older one: its target is at least as far.
  if (pending_[index(slot, reader)].exchange(target + 1, std::memory_order_acq_rel) == 0) {
    pending_count_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (!watchdog_ && reap_) {
    try {
      watchdog_ = std::make_unique<std::thread>([this] { watchdog(); });
    } catch (...) {
      // No watchdog: a dead reader's word is completed when someone reaps it (the producer's own
      // loans reap on their period; ringdump reap; an attaching reader).
      return;
    }
  }
  watchdog_cv_.notify_one();
}

Status CudaProducerPool::prepare_write(std::uint32_t slot, CudaStream stream) noexcept {
  if (!handles_published_) publish_handles();
  CudaSlot& cs = view_.cuda_slot(slot);
  // (F2) acquire, pairs with (F1) in the reader's release_fence: the fence write was queued before.
  std::uint32_t bits = cs.release_recorded.load(std::memory_order_acquire);
  if (bits == 0) return Status::ok;
  // Relaxed: the slot's descriptor is ours (W); this is the sequence of its last frame.
  const std::uint64_t seq = view_.slot(slot).sequence.load(std::memory_order_relaxed);
  std::uint64_t targets[kMaxReaders] = {};
  std::uint32_t running = 0;
  for (int pass = 0; pass < 2; ++pass) {
    running = 0;
    for (std::uint32_t r = 0; r < readers_; ++r) {
      const std::uint32_t bit = 1U << r;
      if ((bits & bit) == 0) continue;
      // The recorder's epoch, stored before its F1 (so visible after our F2).
      const std::uint64_t target = recorded_target(cs, r, seq).value;
      // (F4) acquire, pairs with the release of the word's writer: the reader's stream (after its
      // kernels) or a reaper (F3).
      if (FenceWord::reached(fence(slot, r, target).load(std::memory_order_acquire), target)) {
        // Relaxed: the bit is only a hint to look at the word; the word says what is done.
        cs.release_recorded.fetch_and(~bit, std::memory_order_relaxed);
        continue;
      }
      running |= bit;
      targets[r] = target;
    }
    if (running == 0) return Status::ok;
    if (pass == 1 || !reap_) break;
    reap_();  // a recorder that died is reaped now: its words complete (reader_fences_reaped)
    bits = running & cs.release_recorded.load(std::memory_order_acquire);
  }
  if (stream == nullptr) return Status::no_free_slot;  // a GPU may still read the buffer
  StreamCallGuard guard(*api_, device_);  // a thread with no context: ours, for the calls
  if (!guard.ok()) {
    log_.report(*api_, "making a context current for cuStreamWaitValue64", slot, guard.error());
    return Status::backend_error;
  }
  for (std::uint32_t r = 0; r < readers_; ++r) {
    const std::uint32_t bit = 1U << r;
    if ((running & bit) == 0) continue;
    void* addr = res_->registration->device_address(&fence(slot, r, targets[r]));
    const CudaErr e = api_->stream_wait_value64(stream, addr, targets[r]);
    if (e != CudaErr::success) {
      (void)api_->get_last_error();
      log_.report(*api_, "cuStreamWaitValue64 on a reader's release fence", slot, e);
      return Status::backend_error;
    }
    add_pending(slot, r, targets[r]);
    cs.release_recorded.fetch_and(~bit, std::memory_order_relaxed);  // the stream carries it now
  }
  return Status::ok;
}

Status CudaProducerPool::before_publish(std::uint32_t slot, CudaStream stream,
                                        std::uint64_t sequence) noexcept {
  if (!handles_published_) publish_handles();
  const bool vmm = path_ == CudaPath::vmm;
  const auto signal = [&](CudaStream s) -> std::pair<CudaErr, const char*> {
    if (!vmm) {
      return {api_->record_event(res_->write_done[slot], s),
              "cudaEventRecord of the write-done event"};
    }
    void* own = own_registration_->device_address(&own_words_[slot]);
    // Per slot, our writes land in publication order, whichever streams publish: a previous
    // frame's write still queued on another stream goes first (else `filled` could go back, and
    // a reader waiting for the newer frame would wait for a write already done).
    const std::uint64_t prev = last_signalled_[slot];
    if (prev != 0 &&
        static_cast<std::int64_t>(own_words_[slot].load(std::memory_order_acquire) - prev) < 0) {
      if (const CudaErr e = api_->stream_wait_value64(s, own, prev); e != CudaErr::success) {
        return {e, "cuStreamWaitValue64 on the slot's previous write-done"};
      }
    }
    // V1: after the fill queued on `s`, with a fence before each write: `filled` (the readers'),
    // then our private copy.
    void* filled = res_->registration->device_address(&view_.cuda_slot(slot).filled);
    if (const CudaErr e = api_->stream_write_value64(s, filled, sequence); e != CudaErr::success) {
      return {e, "cuStreamWriteValue64 of the write-done word"};
    }
    // From here a write of `filled` is queued: the slot counts as not done until our private
    // word says so, and if that write cannot be queued, it never will (the close then keeps the
    // buffers, the registration and the lease).
    last_signalled_[slot] = sequence;
    if (const CudaErr e = api_->stream_write_value64(s, own, sequence); e != CudaErr::success) {
      untracked_ = true;
      return {e, "cuStreamWriteValue64 of the private write-done word"};
    }
    return {CudaErr::success, nullptr};
  };
  std::pair<CudaErr, const char*> r{CudaErr::success, nullptr};
  if (stream != nullptr) {
    StreamCallGuard guard(*api_, device_);  // a thread with no context: ours, for the call
    r = guard.ok() ? signal(stream) : std::pair{guard.error(), "making a context current"};
  } else {
    DeviceGuard guard(*api_, device_);  // the legacy stream of our device's primary context
    r = guard.ok() ? signal(nullptr) : std::pair{guard.error(), "cudaSetDevice"};
  }
  if (r.first != CudaErr::success) {
    (void)api_->get_last_error();
    log_.report(*api_, r.second, slot, r.first);
    return Status::backend_error;
  }
  return Status::ok;
}

void CudaProducerPool::watchdog() noexcept {
  // No CUDA call on this thread: it reads fence words and runs the owner's reaper.
  std::unique_lock lock(watchdog_mutex_);
  for (;;) {
    if (stop_) return;
    if (pending_count_.load(std::memory_order_acquire) == 0) {
      watchdog_cv_.wait_for(lock, std::chrono::milliseconds(100));
      continue;
    }
    watchdog_cv_.wait_for(lock, tick_);
    if (stop_) return;
    lock.unlock();
    bool waiting = false;
    for (std::size_t k = 0; k < std::size_t{slots_} * readers_; ++k) {
      std::uint64_t p = pending_[k].load(std::memory_order_acquire);
      if (p == 0) continue;
      if (pending_reached(k)) {
        if (pending_[k].compare_exchange_strong(p, 0, std::memory_order_acq_rel)) {
          pending_count_.fetch_sub(1, std::memory_order_acq_rel);
        }
        continue;
      }
      waiting = true;
    }
    if (waiting) reap_();  // a dead reader found here has its words completed by the reaper
    lock.lock();
  }
}

}  // namespace

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request,
                                                      std::shared_ptr<CudaApi> api) {
  return std::make_unique<CudaProducerPool>(request, std::move(api));
}

}  // namespace ipcring::detail
