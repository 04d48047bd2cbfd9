// cuda_pool.cpp — the CUDA backend (legacy CUDA IPC): frame buffers in device memory, shared
// through cudaIpc memory handles, ordered by IPC events in both directions. docs/cuda.md is the
// prose version of this essay.
//
// Roles and objects.
//  * The producer allocates one buffer per slot (cudaMalloc of frame_bytes rounded up to 2 MiB)
//    and two kinds of interprocess events (cudaEventInterprocess | cudaEventDisableTiming):
//      write_done[slot]         recorded by the producer on its stream at publish;
//      release[slot][reader]    recorded by reader `reader` on its stream when it releases the
//                               frame of `slot` (its release fence).
//    It owns all of them: a reader's death can never invalidate an event the producer waits on
//    (an exporter's death would: using an imported event after the exporter destroyed it is
//    undefined). Handles are exported once, into the segment's CudaSlot, and the producer writes
//    its device's UUID into the header.
//  * A reader maps a buffer lazily, on its first frame in that slot, and keeps the mapping in an
//    import cache keyed by (producer instance, epoch, slot): mapped once per process (a registry
//    shared by every Reader of the process, because a context may open a given handle only once),
//    closed on detach, or when the slot's frames come from another producer instance/epoch, with
//    the device that was current at open (DeviceGuard). Devices are matched by UUID, never by
//    ordinal, so CUDA_VISIBLE_DEVICES cannot make a reader open the wrong GPU.
//
// Fences both ways.
//  * Reader waits for the producer: Frame::wait_on(stream) = cudaStreamWaitEvent(stream,
//    write_done[slot]). The slot word's publication (ring.hpp P2/R3) orders the CPU side; the event
//    orders the GPU side (invariant 3).
//  * Producer waits for readers: Frame::release(stream) records release[slot][reader] on the
//    reader's stream, then (F1) sets bit `reader` of CudaSlot::release_recorded, then clears its
//    bit in the slot word (R5). When the producer claims the slot again (P1) it sees the bit (F2)
//    and, in prepare_write, checks the fence: already complete (the usual case) -> nothing to do;
//    still running -> Producer::loan(stream) makes `stream` wait for it on the GPU
//    (cudaStreamWaitEvent), while the plain Producer::loan() reports the slot as not free
//    (Status::no_free_slot) so it never hands out a buffer a GPU may still be reading (invariant
//    2).
//
// The dead-reader rule. A reader that dies before its release fence is recorded never set the bit:
// nothing waits for it. A reader that dies after recording, with its kernels still queued, leaves
// a fence that will never complete (its context is torn down with its queued work; CUDA documents
// nothing that would complete it). So:
//   (1) whoever reaps a dead reader clears its release_recorded bits in every slot before its entry
//       is freed (ring.hpp clear_reader_bits), so a later loan never waits for those fences;
//   (2) prepare_write reaps before it waits on a fence still running, so a dead recorder found then
//       is forgotten at once;
//   (3) a GPU wait already queued on the fence of a reader that dies afterwards is released by
//       recording that event again, on the producer's private stream ("rescue"): a newer completed
//       record of an event satisfies waits on its earlier records. The producer does it when it
//       reaps the reader (reader_reaped), and a watchdog thread does it for readers reaped by
//       someone else (while any such GPU wait is pending only). A reader re-records its release
//       events once when it opens them, which releases waits its predecessor in the same entry
//       left behind.
// Hot path. buffer() on a cache hit, wait_on, release_fence, prepare_write when the fence is done
// and before_publish take no lock and allocate nothing; they make the CUDA calls named above.
#include "backend/cuda/cuda_pool.hpp"
#include "backend/cuda/cuda_plugin.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

namespace {

static_assert(sizeof(CudaIpcMemHandle) == kCudaHandleBytes &&
                  sizeof(CudaIpcEventHandle) == kCudaHandleBytes,
              "CudaSlot reserves kCudaHandleBytes per IPC handle");
static_assert(kMaxReaders <= 32, "release_recorded has one bit per reader");

std::string channel_prefix(const std::string& name) {
  return "ipcring: channel '" + name + "': ";
}

std::string describe(CudaApi& api, CudaErr e) {
  return std::string(api.error_name(e)) + " (" + std::to_string(static_cast<int>(e)) + ")";
}

constexpr const char* kUseHost = "; use Backend::host for this channel";

// Hot-path failures are reported through Status::backend_error; the reason goes to stderr, at
// most kMaxReports times per pool so a broken device cannot flood the log.
class ErrorLog {
 public:
  explicit ErrorLog(std::string channel) : prefix_(channel_prefix(channel)) {}
  void report(CudaApi& api, const char* what, std::uint32_t slot, CudaErr e) noexcept {
    if (reports_.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
    std::fprintf(stderr, "%s%s (slot %u) failed: %s (%d)\n", prefix_.c_str(), what, slot,
                 api.error_name(e), static_cast<int>(e));
  }
  void note(const char* what, std::uint32_t slot) noexcept {
    if (reports_.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
    std::fprintf(stderr, "%s%s (slot %u)\n", prefix_.c_str(), what, slot);
  }

 private:
  static constexpr int kMaxReports = 16;
  std::string prefix_;
  std::atomic<int> reports_{0};
};

// ---- capability probe -------------------------------------------------------------------------

// Device count, with the errors of a machine that cannot run the CUDA backend turned into
// Errc::unsupported naming the alternative.
int probe_device_count(CudaApi& api, const std::string& ch) {
  int count = 0;
  const CudaErr e = api.get_device_count(count);
  (void)api.get_last_error();
  if (e == CudaErr::insufficient_driver) {
    throw Error(Errc::unsupported,
                ch +
                    "the CUDA backend needs an NVIDIA driver, and none usable by the CUDA "
                    "runtime was found (" +
                    describe(api, e) + ")" + kUseHost);
  }
  if (e == CudaErr::no_device || (e == CudaErr::success && count == 0)) {
    throw Error(Errc::unsupported, ch +
                                       "the CUDA backend needs a CUDA device, and this process "
                                       "sees none (cudaErrorNoDevice; check "
                                       "CUDA_VISIBLE_DEVICES)" +
                                       kUseHost);
  }
  if (e != CudaErr::success) {
    throw Error(Errc::cuda_error, ch + "cudaGetDeviceCount failed: " + describe(api, e));
  }
  return count;
}

// Legacy CUDA IPC needs unified addressing and a discrete GPU: on integrated GPUs (Jetson, Orin,
// DRIVE) cudaIpcGetMemHandle is not supported.
void probe_ipc_support(CudaApi& api, int device, const std::string& ch) {
  int integrated = 0;
  if (api.device_attribute(CudaAttr::integrated, device, integrated) == CudaErr::success &&
      integrated != 0) {
    throw Error(Errc::unsupported,
                ch + "CUDA device " + std::to_string(device) +
                    " is an integrated GPU (Jetson/Orin/DRIVE class), where legacy CUDA IPC "
                    "(cudaIpcGetMemHandle) is not supported" +
                    kUseHost + " (a CUDA VMM backend for these devices is planned)");
  }
  int unified = 1;
  if (api.device_attribute(CudaAttr::unified_addressing, device, unified) == CudaErr::success &&
      unified == 0) {
    throw Error(Errc::unsupported, ch + "CUDA device " + std::to_string(device) +
                                       " lacks unified addressing, which CUDA IPC requires" +
                                       kUseHost);
  }
  int ipc_events = 1;
  if (api.device_attribute(CudaAttr::ipc_event_support, device, ipc_events) == CudaErr::success &&
      ipc_events == 0) {
    throw Error(Errc::unsupported, ch + "CUDA device " + std::to_string(device) +
                                       " does not support IPC events" + kUseHost);
  }
  (void)api.get_last_error();
}

[[noreturn]] void throw_call(CudaApi& api, const std::string& ch, const std::string& what,
                             CudaErr e) {
  (void)api.get_last_error();
  if (e == CudaErr::not_supported) {
    throw Error(Errc::unsupported, ch + what + " is not supported on this machine (" +
                                       describe(api, e) + ")" + kUseHost);
  }
  throw Error(Errc::cuda_error, ch + what + " failed: " + describe(api, e));
}

// ---- handles in the segment -----------------------------------------------------------------
//
// The producer rewrites a slot's handles when it takes a channel over, while readers of the old
// epoch may still read them, so they are accessed as 64-bit atomics under a sequence lock keyed by
// CudaSlot::memory_generation (the exporting producer's instance id, 0 while being rewritten):
//   writer: generation = 0; handle words (release stores); ... generation = id (release);
//   reader: g1 = generation (acquire); handle words (acquire loads); g2 = generation;
//           the copy is valid when g1 == g2 == the instance the reader expects.
// A reader that loads any word of a rewrite synchronises with its release store, so it then sees
// generation 0 (or the new id) in g2. (No fences: ThreadSanitizer does not model them.)

std::atomic_ref<std::uint64_t> word(unsigned char* base, std::size_t i) noexcept {
  return std::atomic_ref<std::uint64_t>(reinterpret_cast<std::uint64_t*>(base)[i]);
}

void store_handle(unsigned char (&dst)[kCudaHandleBytes], const unsigned char* src) noexcept {
  for (std::size_t i = 0; i < kCudaHandleBytes / 8; ++i) {
    std::uint64_t w;
    std::memcpy(&w, src + i * 8, 8);
    word(dst, i).store(w, std::memory_order_release);
  }
}

void load_handle(unsigned char* dst, unsigned char (&src)[kCudaHandleBytes]) noexcept {
  for (std::size_t i = 0; i < kCudaHandleBytes / 8; ++i) {
    const std::uint64_t w = word(src, i).load(std::memory_order_acquire);
    std::memcpy(dst + i * 8, &w, 8);
  }
}

struct SlotHandles {
  CudaIpcMemHandle memory;
  CudaIpcEventHandle write_done;
  CudaIpcEventHandle release[kMaxReaders];
};

// Copies a slot's handles if they were exported by producer `instance`.
bool read_handles(CudaSlot& cs, std::uint32_t readers, std::uint64_t instance,
                  SlotHandles& out) noexcept {
  const std::uint64_t g1 = cs.memory_generation.load(std::memory_order_acquire);
  if (g1 != instance || instance == 0) return false;
  load_handle(out.memory.bytes, cs.memory_handle);
  load_handle(out.write_done.bytes, cs.write_done_handle);
  for (std::uint32_t r = 0; r < readers; ++r)
    load_handle(out.release[r].bytes, cs.release_handle[r]);
  return cs.memory_generation.load(std::memory_order_relaxed) == g1;
}

// Waits for an event on the CPU, at most until `deadline` (teardown only). Unbounded waits are
// never used: a peer that died may have left the event's last record unable to complete.
bool wait_event(CudaApi& api, CudaEvent e,
                std::chrono::steady_clock::time_point deadline) noexcept {
  for (;;) {
    const CudaErr q = api.query_event(e);
    if (q != CudaErr::not_ready) {
      (void)api.get_last_error();
      return q == CudaErr::success;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// How long teardown waits for queued GPU work before destroying what it uses.
constexpr std::chrono::seconds kTeardownWait{2};

bool lease_active(std::uint64_t w) noexcept {
  return LeaseWord::state(w) == static_cast<std::uint8_t>(LeaseState::active);
}

// ---- producer resources -------------------------------------------------------------------------

// Everything a producer allocated. Shared with the imports of Readers in the producer's own
// process (which use the producer's pointers and events directly: a process cannot open its own
// IPC handles), so it is freed when both are done with it.
struct ProducerResources {
  std::shared_ptr<CudaApi> api;
  int device = 0;
  std::uint32_t slots = 0;
  std::uint32_t readers = 0;
  std::uint64_t fork_gen = 0;
  std::vector<void*> buffers;
  std::vector<CudaEvent> write_done;
  std::vector<CudaEvent> release;  // [slot * readers + reader]
  CudaStream rescue = nullptr;     // private non-blocking stream for rescue records

  CudaEvent release_event(std::uint32_t slot, std::uint32_t reader) const noexcept {
    return release[std::size_t{slot} * readers + reader];
  }

  ~ProducerResources() {
    if (fork_gen != fork_generation()) return;  // inherited through fork: not ours to free
    DeviceGuard guard(*api, device);
    // Our own queued writes finish before their events and buffers go away: a reader waiting on
    // write_done must not wait on a destroyed event. Bounded: work stuck behind something that
    // will never complete must not keep the process from closing.
    const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
    for (CudaEvent e : write_done) {
      if (e != nullptr) (void)wait_event(*api, e, deadline);
    }
    for (CudaEvent e : write_done) {
      if (e != nullptr) (void)api->destroy_event(e);
    }
    for (CudaEvent e : release) {
      if (e != nullptr) (void)api->destroy_event(e);
    }
    if (rescue != nullptr) (void)api->destroy_stream(rescue);
    // Freeing memory that another process still has mapped is undefined by CUDA's documentation;
    // in practice the driver keeps the pages until the importer closes them. Readers close their
    // mappings on detach and when they see a new producer instance (docs/cuda.md).
    for (void* p : buffers) {
      if (p != nullptr) (void)api->free(p);
    }
    (void)api->get_last_error();
  }
};

using ProducerKey = std::pair<const CudaApi*, std::uint64_t>;

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

// Producers of this process by (API, instance id), for the same-process shortcut.
std::map<ProducerKey, std::weak_ptr<ProducerResources>>& local_producers() {
  static std::map<ProducerKey, std::weak_ptr<ProducerResources>> m;
  return m;
}

// ---- imports -----------------------------------------------------------------------------------

// One producer buffer (and its events) as mapped into this process. Shared by every Reader of the
// process that reads that buffer: a context may open a given IPC memory handle only once.
struct Import {
  std::shared_ptr<CudaApi> api;
  std::shared_ptr<ProducerResources> local;  // set: same-process producer, nothing was opened
  int device = 0;                            // current device at open; used again at close
  std::uint64_t fork_gen = 0;
  std::byte* ptr = nullptr;
  CudaEvent write_done = nullptr;
  CudaEvent release[kMaxReaders] = {};
  bool release_opened[kMaxReaders] = {};
  SlotHandles handles{};  // release handles are opened lazily, per reader index

  ~Import() {
    if (fork_gen != fork_generation() || local) return;  // local: the producer owns everything
    DeviceGuard guard(*api, device);
    // The Readers that recorded fences on these events waited for them first (~CudaReaderPool).
    for (std::uint32_t r = 0; r < kMaxReaders; ++r) {
      if (release_opened[r]) (void)api->destroy_event(release[r]);
    }
    if (write_done != nullptr) (void)api->destroy_event(write_done);
    if (ptr != nullptr) (void)api->ipc_close_mem_handle(ptr);
    (void)api->get_last_error();
  }
};

struct ImportKey {
  const CudaApi* api;
  std::uint64_t instance;
  std::uint64_t epoch;
  std::uint32_t slot;
  bool operator<(const ImportKey& o) const noexcept {
    return std::tie(api, instance, epoch, slot) < std::tie(o.api, o.instance, o.epoch, o.slot);
  }
};

std::map<ImportKey, std::weak_ptr<Import>>& imports() {
  static std::map<ImportKey, std::weak_ptr<Import>> m;
  return m;
}

std::shared_ptr<CudaApi>& testing_api() {
  static std::shared_ptr<CudaApi> api;
  return api;
}
std::mutex& testing_mutex() {
  static std::mutex m;
  return m;
}

// =================================================================================================
// Producer pool
// =================================================================================================

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
  Status before_publish(std::uint32_t slot, CudaStream stream) noexcept override;
  void reader_reaped(std::uint32_t reader) noexcept override;

 private:
  std::size_t index(std::uint32_t slot, std::uint32_t reader) const noexcept {
    return std::size_t{slot} * readers_ + reader;
  }
  void publish_handles() noexcept;
  void reap_now() noexcept;
  void add_pending(std::uint32_t slot, std::uint32_t reader, std::uint64_t lease) noexcept;
  bool take_pending(std::size_t i, std::uint64_t expected) noexcept;
  void rescue(std::uint32_t slot, std::uint32_t reader) noexcept;
  void watchdog() noexcept;

  std::shared_ptr<CudaApi> api_;
  SegmentView view_;
  std::string name_;
  int device_;
  std::uint32_t slots_;
  std::uint32_t readers_;
  std::uint64_t fork_gen_;
  std::shared_ptr<ProducerResources> res_;
  bool handles_published_ = false;
  std::uint64_t instance_ = 0;  // ours, as published in memory_generation
  ErrorLog log_;

  // GPU waits queued on fences that were still running: pending_[slot * readers + reader] holds
  // the reader entry's lease word at the time (the recorder's incarnation), 0 when none. Written
  // by the producer thread (add) and cleared by whoever resolves it (CAS), on any thread.
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
      log_(req.name) {
  const std::string ch = channel_prefix(name_);
  CudaApi& api_ref = *api_;
  const int count = probe_device_count(api_ref, ch);
  if (device_ < 0 || device_ >= count) {
    throw Error(Errc::invalid_config,
                ch + "cuda_device = " + std::to_string(device_) + ", but this process sees " +
                    std::to_string(count) + " CUDA device(s) (ordinals 0.." +
                    std::to_string(count - 1) + "; see CUDA_VISIBLE_DEVICES)");
  }
  probe_ipc_support(api_ref, device_, ch);
  CudaUuid uuid{};
  if (const CudaErr e = api_ref.device_uuid(device_, uuid); e != CudaErr::success) {
    throw_call(api_ref, ch, "reading the UUID of CUDA device " + std::to_string(device_), e);
  }
  SegmentHeader& header = view_.header();
  if (req.create) {
    // Plain header field: written before the creator's release store of magic (H1).
    std::memcpy(header.cuda_uuid, uuid.bytes, sizeof uuid.bytes);
  } else if (std::memcmp(header.cuda_uuid, uuid.bytes, sizeof uuid.bytes) != 0) {
    throw Error(Errc::config_mismatch,
                ch + "its frames live on " + format_uuid(header.cuda_uuid) +
                    ", but this producer's cuda_device " + std::to_string(device_) + " is " +
                    format_uuid(uuid) +
                    "; a takeover must use the same GPU (or remove the channel first)");
  }

  DeviceGuard guard(api_ref, device_);
  if (!guard.ok())
    throw_call(api_ref, ch, "cudaSetDevice(" + std::to_string(device_) + ")", guard.error());
  res_ = std::make_shared<ProducerResources>();
  res_->api = api_;
  res_->device = device_;
  res_->slots = slots_;
  res_->readers = readers_;
  res_->fork_gen = fork_gen_;
  res_->buffers.assign(slots_, nullptr);
  res_->write_done.assign(slots_, nullptr);
  res_->release.assign(std::size_t{slots_} * readers_, nullptr);
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
    for (std::uint32_t r = 0; r < readers_; ++r) {
      CudaEvent& ev = res_->release[index(i, r)];
      if (const CudaErr e = api_ref.create_ipc_event(ev); e != CudaErr::success) {
        ev = nullptr;
        throw_call(api_ref, ch,
                   what + "cudaEventCreateWithFlags(interprocess) for reader " + std::to_string(r),
                   e);
      }
      if (const CudaErr e = api_ref.ipc_get_event_handle(handles[i].release[r], ev);
          e != CudaErr::success) {
        throw_call(api_ref, ch, what + "cudaIpcGetEventHandle", e);
      }
    }
  }
  if (const CudaErr e = api_ref.create_stream(res_->rescue); e != CudaErr::success) {
    res_->rescue = nullptr;
    throw_call(api_ref, ch, "cudaStreamCreateWithFlags(non-blocking)", e);
  }
  pending_.reset(new std::atomic<std::uint64_t>[std::size_t{slots_} * readers_]());
  const auto period = std::chrono::nanoseconds(view_.header().reap_period_ns);
  tick_ = std::clamp<std::chrono::nanoseconds>(period / 4, std::chrono::milliseconds(1),
                                               std::chrono::milliseconds(20));

  // Export: the writer half of the sequence lock. Readers accept the handles only once
  // publish_handles() stores our instance id, at the first loan, after this producer's epoch began.
  for (std::uint32_t i = 0; i < slots_; ++i) {
    CudaSlot& cs = view_.cuda_slot(i);
    cs.memory_generation.store(0, std::memory_order_relaxed);
    store_handle(cs.memory_handle, handles[i].memory.bytes);
    store_handle(cs.write_done_handle, handles[i].write_done.bytes);
    for (std::uint32_t r = 0; r < readers_; ++r) {
      store_handle(cs.release_handle[r], handles[i].release[r].bytes);
    }
    // Fences of an earlier producer's events mean nothing for ours.
    cs.release_recorded.store(0, std::memory_order_relaxed);
  }
}

CudaProducerPool::~CudaProducerPool() {
  if (fork_gen_ != fork_generation()) {
    // A child of fork(): the watchdog thread is the parent's (leak its handle: joining it here
    // would wait forever); the CUDA objects are the parent's too, and ~ProducerResources leaves
    // them alone in a child.
    (void)watchdog_.release();
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
  // We are closing: no buffer will be reused, so releasing every queued wait is harmless and lets
  // our own queued work (and the synchronisation in ~ProducerResources) finish.
  for (std::uint32_t i = 0; i < slots_ && pending_; ++i) {
    for (std::uint32_t r = 0; r < readers_; ++r) {
      if (pending_[index(i, r)].exchange(0, std::memory_order_acq_rel) != 0 &&
          api_->query_event(res_->release_event(i, r)) != CudaErr::success) {
        rescue(i, r);
      }
    }
  }
  std::lock_guard lock(registry_mutex());
  if (handles_published_) local_producers().erase({api_.get(), instance_});
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

void CudaProducerPool::reap_now() noexcept {
  const std::size_t n = reap_dead_readers(view_, this);
  if (n != 0) view_.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
}

void CudaProducerPool::add_pending(std::uint32_t slot, std::uint32_t reader,
                                   std::uint64_t lease) noexcept {
  if (pending_[index(slot, reader)].exchange(lease, std::memory_order_acq_rel) == 0) {
    pending_count_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (!watchdog_) {
    try {
      watchdog_ = std::make_unique<std::thread>([this] { watchdog(); });
    } catch (...) {
      // No watchdog: waits of readers reaped by other processes are released only when the
      // producer reaps them itself (reader_reaped) or a new reader takes over the entry.
      return;
    }
  }
  watchdog_cv_.notify_one();
}

bool CudaProducerPool::take_pending(std::size_t i, std::uint64_t expected) noexcept {
  if (!pending_[i].compare_exchange_strong(expected, 0, std::memory_order_acq_rel)) return false;
  pending_count_.fetch_sub(1, std::memory_order_acq_rel);
  return true;
}

void CudaProducerPool::rescue(std::uint32_t slot, std::uint32_t reader) noexcept {
  // A newer, immediately complete record of the same event releases every wait on its earlier
  // records; the private stream is non-blocking and idle, so it completes at once.
  const CudaErr e = api_->record_event(res_->release_event(slot, reader), res_->rescue);
  if (e != CudaErr::success) {
    (void)api_->get_last_error();
    log_.report(*api_, "releasing a GPU wait on a dead reader's fence (rescue record)", slot, e);
  }
}

Status CudaProducerPool::prepare_write(std::uint32_t slot, CudaStream stream) noexcept {
  if (!handles_published_) publish_handles();
  CudaSlot& cs = view_.cuda_slot(slot);
  // (F2) acquire, pairs with (F1) in the reader's release_fence: the record happened before.
  std::uint32_t bits = cs.release_recorded.load(std::memory_order_acquire);
  if (bits == 0) return Status::ok;
  std::uint32_t running = 0;
  for (std::uint32_t r = 0; r < readers_; ++r) {
    const std::uint32_t bit = 1U << r;
    if ((bits & bit) == 0) continue;
    const CudaErr q = api_->query_event(res_->release_event(slot, r));
    if (q == CudaErr::success) {
      // Relaxed: the bit is only a hint to look at the event; the event says what is done.
      cs.release_recorded.fetch_and(~bit, std::memory_order_relaxed);
    } else if (q == CudaErr::not_ready) {
      running |= bit;
    } else {
      (void)api_->get_last_error();
      log_.report(*api_, "cudaEventQuery of a reader's release fence", slot, q);
      return Status::backend_error;
    }
  }
  if (running == 0) return Status::ok;
  // Still running: forget fences of readers that died (reaping clears their bits, rule 1).
  reap_now();
  running &= cs.release_recorded.load(std::memory_order_acquire);
  if (running == 0) return Status::ok;
  if (stream == nullptr) return Status::no_free_slot;  // a GPU may still read the buffer
  for (std::uint32_t r = 0; r < readers_; ++r) {
    const std::uint32_t bit = 1U << r;
    if ((running & bit) == 0) continue;
    // The recorder's incarnation: the lease word read while its bit is still set. A reaper clears
    // the bit before the entry changes hands (clear_reader_bits, then L3), so if the bit is still
    // set after this load, the load did not see a later owner.
    const std::uint64_t lease = view_.reader(r).lease_word.load(std::memory_order_acquire);
    if ((cs.release_recorded.load(std::memory_order_acquire) & bit) == 0) continue;
    const CudaErr e = api_->stream_wait_event(stream, res_->release_event(slot, r));
    if (e != CudaErr::success) {
      (void)api_->get_last_error();
      log_.report(*api_, "cudaStreamWaitEvent on a reader's release fence", slot, e);
      return Status::backend_error;
    }
    add_pending(slot, r, lease);
    cs.release_recorded.fetch_and(~bit, std::memory_order_relaxed);  // the stream carries it now
  }
  return Status::ok;
}

Status CudaProducerPool::before_publish(std::uint32_t slot, CudaStream stream) noexcept {
  if (!handles_published_) publish_handles();
  CudaErr e;
  if (stream != nullptr) {
    e = api_->record_event(res_->write_done[slot], stream);
  } else {
    DeviceGuard guard(*api_, device_);  // the legacy stream of our device
    e = guard.ok() ? api_->record_event(res_->write_done[slot], nullptr) : guard.error();
  }
  if (e != CudaErr::success) {
    (void)api_->get_last_error();
    log_.report(*api_, "cudaEventRecord of the write-done event", slot, e);
    return Status::backend_error;
  }
  return Status::ok;
}

void CudaProducerPool::reader_reaped(std::uint32_t reader) noexcept {
  // The reaper holds the dead reader's entry: nobody can record its events until the entry is
  // freed after this returns, so a rescue record here cannot overtake a successor's fence.
  if (reader >= readers_ || !pending_) return;
  for (std::uint32_t i = 0; i < slots_; ++i) {
    const std::size_t k = index(i, reader);
    const std::uint64_t lease = pending_[k].load(std::memory_order_acquire);
    if (lease == 0 || !take_pending(k, lease)) continue;
    if (api_->query_event(res_->release_event(i, reader)) != CudaErr::success) rescue(i, reader);
  }
}

void CudaProducerPool::watchdog() noexcept {
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
    bool probe = false;
    for (std::uint32_t i = 0; i < slots_; ++i) {
      for (std::uint32_t r = 0; r < readers_; ++r) {
        const std::size_t k = index(i, r);
        const std::uint64_t lease = pending_[k].load(std::memory_order_acquire);
        if (lease == 0) continue;
        const CudaErr q = api_->query_event(res_->release_event(i, r));
        if (q == CudaErr::success) {
          (void)take_pending(k, lease);
          continue;
        }
        const std::uint64_t now = view_.reader(r).lease_word.load(std::memory_order_acquire);
        if (now == lease) {
          probe = true;  // same incarnation: alive, or dead and not yet reaped
        } else if (!lease_active(now)) {
          // Reaped (or detached) by someone else and the entry is free: no successor can be
          // recording this event, so the rescue is safe.
          if (take_pending(k, lease)) rescue(i, r);
        }
        // Otherwise a successor holds the entry; its first use of the event re-records it.
      }
    }
    if (probe) reap_now();  // a dead recorder is reaped here; reader_reaped rescues its waits
    (void)api_->get_last_error();
    lock.lock();
  }
}

// =================================================================================================
// Reader pool
// =================================================================================================

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
  void attached(std::uint32_t reader) noexcept override { reader_ = reader; }

 private:
  struct SlotCache {
    std::shared_ptr<Import> import;
    std::uint64_t instance = 0;
    std::uint64_t epoch = 0;
    CudaEvent release = nullptr;    // this reader's release event of the slot
    std::atomic<bool> held{false};  // a Frame of this slot is out (cleared by release_fence)
  };

  const std::byte* open_slot(std::uint32_t slot, std::uint64_t epoch,
                             std::uint64_t instance) noexcept;
  std::shared_ptr<Import> acquire_import(std::uint32_t slot, std::uint64_t epoch,
                                         std::uint64_t instance, const SlotHandles& handles,
                                         CudaEvent& release);
  bool producer_current(std::uint64_t epoch) const noexcept {
    return view_.producer().lease_word.load(std::memory_order_acquire) ==
           LeaseWord::make(epoch, LeaseState::active);
  }

  std::shared_ptr<CudaApi> api_;
  SegmentView view_;
  std::string name_;
  int device_ = 0;  // the device this reader maps buffers into (current at attach)
  std::uint32_t slots_;
  std::uint32_t readers_;
  std::uint32_t reader_ = UINT32_MAX;
  std::uint64_t fork_gen_;
  std::unique_ptr<SlotCache[]> cache_;
  std::uint64_t last_instance_ = 0;
  std::uint64_t last_epoch_ = 0;
  CudaStream private_stream_ = nullptr;  // for the re-record of freshly opened release events
  ErrorLog log_;
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
  int owner = -1;
  std::string seen;
  for (int d = 0; d < count; ++d) {
    CudaUuid u{};
    if (const CudaErr e = api_ref.device_uuid(d, u); e != CudaErr::success) {
      throw_call(api_ref, ch, "reading the UUID of CUDA device " + std::to_string(d), e);
    }
    seen += (d ? ", " : "") + format_uuid(u) + " (" + std::to_string(d) + ")";
    if (std::memcmp(u.bytes, want.bytes, sizeof u.bytes) == 0) owner = d;
  }
  if (owner < 0) {
    throw Error(Errc::unsupported,
                ch + "its frames live on " + format_uuid(want) +
                    ", which this process cannot see (visible: " + seen +
                    "); check CUDA_VISIBLE_DEVICES, or read the channel from a process that sees "
                    "that GPU");
  }
  if (const CudaErr e = api_ref.get_device(device_); e != CudaErr::success) {
    throw_call(api_ref, ch, "cudaGetDevice", e);
  }
  if (device_ != owner) {
    int can = 0;
    const CudaErr e = api_ref.can_access_peer(device_, owner, can);
    (void)api_ref.get_last_error();
    if (e != CudaErr::success || can == 0) {
      throw Error(Errc::unsupported,
                  ch + "its frames live on " + format_uuid(want) + " (CUDA device " +
                      std::to_string(owner) +
                      " in this process), but this reader's current "
                      "device is " +
                      std::to_string(device_) +
                      ", which cannot access it peer-to-peer; call cudaSetDevice(" +
                      std::to_string(owner) + ") before Reader::attach");
    }
  }
  probe_ipc_support(api_ref, device_, ch);
  last_epoch_ = 0;
}

CudaReaderPool::~CudaReaderPool() {
  if (fork_gen_ != fork_generation()) return;  // a child of fork(): ~Import leaves them alone
  // Our fences should complete before their events are destroyed: a waiter on a record whose
  // recording copy was destroyed may never be released. Bounded, because our streams may be stuck
  // behind a dead producer's write-done event; a producer still waiting on a fence we abandon sees
  // our entry change and releases its wait (rescue).
  const auto deadline = std::chrono::steady_clock::now() + kTeardownWait;
  for (std::uint32_t i = 0; i < slots_; ++i) {
    if (cache_[i].import && cache_[i].release != nullptr) {
      (void)wait_event(*api_, cache_[i].release, deadline);
    }
  }
  {
    std::lock_guard lock(registry_mutex());
    for (std::uint32_t i = 0; i < slots_; ++i) cache_[i].import.reset();  // may close (~Import)
  }
  if (private_stream_ != nullptr) {
    DeviceGuard guard(*api_, device_);
    (void)api_->destroy_stream(private_stream_);
  }
}

std::shared_ptr<Import> CudaReaderPool::acquire_import(std::uint32_t slot, std::uint64_t epoch,
                                                       std::uint64_t instance,
                                                       const SlotHandles& handles,
                                                       CudaEvent& release) {
  // Called with registry_mutex held.
  const ImportKey key{api_.get(), instance, epoch, slot};
  std::shared_ptr<Import> imp = imports()[key].lock();
  if (!imp) {
    imp = std::make_shared<Import>();
    imp->api = api_;
    imp->fork_gen = fork_gen_;
    imp->device = device_;
    imp->handles = handles;
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
        // Every open in this process goes through this registry, which opens a handle once; an
        // already-mapped handle means someone else in the process (user code, another library)
        // opened it and owns that mapping, which we must not close.
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
  }
  release = nullptr;
  if (reader_ < readers_) {
    if (imp->local) {
      release = imp->local->release_event(slot, reader_);
    } else if (imp->release_opened[reader_]) {
      release = imp->release[reader_];
    } else {
      DeviceGuard guard(*api_, device_);
      CudaEvent ev = nullptr;
      CudaErr e = guard.ok() ? api_->ipc_open_event_handle(ev, imp->handles.release[reader_])
                             : guard.error();
      if (e != CudaErr::success) {
        (void)api_->get_last_error();
        log_.report(*api_, "cudaIpcOpenEventHandle (release fence)", slot, e);
        return nullptr;
      }
      imp->release[reader_] = ev;
      imp->release_opened[reader_] = true;
      release = ev;
      // Re-record the event once before our first fence: it releases any producer wait a dead
      // predecessor in our reader entry left on it (rule 3 of the essay).
      if (private_stream_ == nullptr && api_->create_stream(private_stream_) != CudaErr::success) {
        private_stream_ = nullptr;
      }
      e = private_stream_ != nullptr ? api_->record_event(ev, private_stream_) : CudaErr::unknown;
      if (e != CudaErr::success) {
        (void)api_->get_last_error();
        log_.report(*api_, "re-recording a freshly opened release event", slot, e);
      }
    }
  }
  return imp;
}

const std::byte* CudaReaderPool::open_slot(std::uint32_t slot, std::uint64_t epoch,
                                           std::uint64_t instance) noexcept {
  SlotCache& c = cache_[slot];
  try {
    std::lock_guard lock(registry_mutex());
    c.import.reset();  // another instance or epoch: close it (with its device, in ~Import)
    c.release = nullptr;
    if (instance != last_instance_ || epoch != last_epoch_) {
      // A new producer instance or epoch: mappings of the old one are useless; close those no
      // Frame holds (held ones are closed when their slot is read again, or at detach).
      for (std::uint32_t i = 0; i < slots_; ++i) {
        SlotCache& o = cache_[i];
        if (o.import && (o.instance != instance || o.epoch != epoch) &&
            !o.held.load(std::memory_order_acquire)) {
          o.import.reset();
          o.release = nullptr;
        }
      }
      last_instance_ = instance;
      last_epoch_ = epoch;
    }
    SlotHandles handles;
    if (!read_handles(view_.cuda_slot(slot), readers_, instance, handles)) {
      log_.note(
          "the slot's CUDA handles belong to another producer instance (takeover in "
          "progress); frame dropped",
          slot);
      return nullptr;
    }
    // The handles are this producer's; the frame must be of its epoch too (a reader that has not
    // yet noticed a takeover may claim a frame of the previous producer).
    if (!producer_current(epoch)) return nullptr;
    CudaEvent release = nullptr;
    std::shared_ptr<Import> imp = acquire_import(slot, epoch, instance, handles, release);
    if (!imp) return nullptr;
    c.import = std::move(imp);
    c.instance = instance;
    c.epoch = epoch;
    c.release = release;
    c.held.store(true, std::memory_order_relaxed);
    return c.import->ptr;
  } catch (...) {
    log_.note("out of memory while mapping a buffer", slot);
    return nullptr;
  }
}

Status CudaReaderPool::wait_on(std::uint32_t slot, CudaStream stream) noexcept {
  const SlotCache& c = cache_[slot];
  if (!c.import) return Status::backend_error;
  // A producer that closed synchronised its writes before destroying its events; one that was
  // replaced is gone with its events. Either way there is nothing left to wait for, and its event
  // must not be used.
  if (!producer_current(c.epoch)) return Status::ok;
  CudaErr e;
  if (stream != nullptr) {
    e = api_->stream_wait_event(stream, c.import->write_done);
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
  if (c.import && reader < readers_ && producer_current(c.epoch)) {
    // stream nullptr (Frame::release()): the fence goes on the legacy default stream of our
    // device, which orders it after the work queued so far on the legacy stream and on every
    // blocking stream of this process. Work on non-blocking streams needs release(stream).
    CudaErr e = CudaErr::invalid_resource_handle;  // no release event: fall back below
    if (c.release != nullptr && stream != nullptr) {
      e = api_->record_event(c.release, stream);
    } else if (c.release != nullptr) {
      DeviceGuard guard(*api_, device_);
      e = guard.ok() ? api_->record_event(c.release, nullptr) : guard.error();
    }
    if (e == CudaErr::success) {
      // (F1) release, pairs with (F2) in prepare_write: the record happens before the producer
      // looks at the event. Then the caller clears our bit in the slot word (R5).
      view_.cuda_slot(slot).release_recorded.fetch_or(1U << reader, std::memory_order_release);
    } else {
      // No fence (e.g. `stream` belongs to another device than the event): make our work done
      // instead, so the producer may reuse the buffer as soon as we clear our bit.
      (void)api_->get_last_error();
      log_.report(*api_, "cudaEventRecord of the release fence; synchronising instead", slot, e);
      if (stream != nullptr) {
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

// ---- factories ---------------------------------------------------------------------------------

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request,
                                                      std::shared_ptr<CudaApi> api) {
  return std::make_unique<CudaProducerPool>(request, std::move(api));
}

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request,
                                                  std::shared_ptr<CudaApi> api) {
  return std::make_unique<CudaReaderPool>(request, std::move(api));
}

void set_cuda_api_for_testing(std::shared_ptr<CudaApi> api) noexcept {
  std::lock_guard lock(testing_mutex());
  testing_api() = std::move(api);
}

std::shared_ptr<CudaApi> cuda_api_for_testing() noexcept {
  std::lock_guard lock(testing_mutex());
  return testing_api();
}

namespace {
std::shared_ptr<CudaApi> api_or_throw(const PoolRequest& request, bool producer) {
  if (auto api = cuda_api_for_testing()) return api;
  std::string why;
  if (auto api = load_cuda_plugin(why)) return api;
  throw Error(Errc::unsupported,
              channel_prefix(request.name) +
                  (producer ? "Backend::cuda is not available: " + why + "\nUse Backend::host"
                            : "the channel carries CUDA frames, but the CUDA backend is not "
                              "available: " +
                                  why));
}
}  // namespace

std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request) {
  return make_cuda_producer_pool(request, api_or_throw(request, true));
}

std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request) {
  return make_cuda_reader_pool(request, api_or_throw(request, false));
}

}  // namespace ipcring::detail
