// fake_cuda.hpp — a simulated CUDA machine for the CPU tests of the CUDA pool.
//
// FakeGpuWorld is the machine: devices (with UUIDs, attributes and a peer-access matrix), device
// allocations (host memory), events and streams. FakeCuda is one simulated process's view of it
// and implements detail::CudaApi, so a test can run a producer in "process" A and a reader in
// "process" B inside one real process, and kill B.
//
// What is simulated, and how:
//  * IPC handles encode (exporting process, object id). Opening a handle of one's own process
//    fails (as in CUDA); opening one twice in a process either returns the same pointer with a
//    reference count (CUDA 11+) or cudaErrorAlreadyMapped (older drivers), per
//    `already_mapped_mode`. A mapping returns the exporter's host pointer, so data written by one
//    "process" is read by the other. A mapping must be closed with the device that was current at
//    open, else the close fails and `wrong_device_closes` counts it.
//  * Streams are ordered queues of operations: work (a "kernel" the test launches and may hold
//    until it calls finish()), event records and waits, and stream memory operations (64-bit
//    write, and wait until (int64_t)(*addr - value) >= 0). An operation runs when everything
//    before it in its stream ran (and, for the legacy default stream, the work queued before it in
//    the process's blocking streams; and the other way round).
//  * Events follow the runtime's documentation and nothing more: cudaStreamWaitEvent and
//    cudaEventQuery use the record captured at the time of the call ("the most recently captured
//    state at the time of the API call ... not affected by later calls to cudaEventRecord"), so a
//    later record never releases a wait queued on an earlier one. A record on a stream that never
//    runs again never completes.
//  * Stream memory operations need registered host memory (host_register) and the device address
//    host_device_pointer gave; a write that runs after its range was unregistered is a fault and
//    counts in `unregistered_writes`. A wait reads the word whenever the world advances, so a CPU
//    store to the word (a reaper's) releases it at the next API call or done().
//  * Contexts are per thread, as in the driver: set_device makes a device's primary context
//    current; a thread with no current context that makes a device-dependent call gets device 0's
//    primary context implicitly (counted in `implicit_inits`: the pool must never cause one);
//    make_context() gives a non-primary context a test can make current. A runtime call on a
//    given stream needs a current context too (one is bound implicitly, and counted); a driver
//    entry point (the stream memory operations) on a thread with none fails with
//    CUDA_ERROR_INVALID_CONTEXT (reported as device_uninitialized, the runtime's spelling).
//  * A killed process's streams never run again (its pending records and writes never happen);
//    its events are destroyed, its mappings and registrations dropped, as when the driver tears a
//    context down. kill_leaving_writes() models the interval the kernel leaves between a dying
//    process's release of its robust futexes (its lease reads dead) and the close of its device
//    files (its context torn down): its queued stream writes may still land, in stream order, when
//    the test calls land_late_writes(), into memory that stays registered until then.
//  * Anything that would block forever (synchronising on work that waits for another process)
//    returns CudaErr::unknown and counts in `hangs`, so a test fails instead of hanging.
//  * CUDA VMM: an allocation (cuMemCreate) is a memfd labelled "ipcring-fake-vmm" of its size;
//    exporting it gives a new descriptor of that memfd (the caller's), so it can travel to
//    another real process over a socket; importing accepts only such a memfd (anything else:
//    invalid_value), keeps its own reference and leaves the caller's descriptor open. A reserved
//    range is real address space (PROT_NONE); cuMemMap maps the memfd there, still inaccessible,
//    and cuMemSetAccess makes it readable or read-write, so a write through a read-only mapping
//    faults as on a GPU. Sizes must be multiples of the device's granularity; an allocation goes
//    once its handles are released and its mappings unmapped (vmm_allocations counts them).
//  * fail(op, err, times) injects errors.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_api.hpp"
#include "backend/cuda/cuda_pool.hpp"

namespace ipcring::test {

using detail::CudaErr;
using detail::CudaEvent;

enum class FakeOp {
  get_device_count,
  get_device,
  set_device,
  device_uuid,
  device_attribute,
  can_access_peer,
  malloc,
  free,
  ipc_get_mem_handle,
  ipc_open_mem_handle,
  ipc_close_mem_handle,
  create_ipc_event,
  destroy_event,
  record_event,
  query_event,
  synchronize_event,
  ipc_get_event_handle,
  ipc_open_event_handle,
  create_stream,
  destroy_stream,
  stream_wait_event,
  stream_synchronize,
  get_context,
  set_context,
  host_register,
  host_unregister,
  host_device_pointer,
  stream_write_value64,
  stream_wait_value64,
  vmm_granularity,
  vmm_create,
  vmm_release,
  vmm_reserve,
  vmm_free_address,
  vmm_map,
  vmm_unmap,
  vmm_set_access,
  vmm_export_fd,
  vmm_import_fd,
  host_alloc,
  free_host,
  memcpy_to_host,
  count_
};

struct FakeDevice {
  std::array<unsigned char, 16> uuid{};
  bool integrated = false;
  bool unified_addressing = true;
  bool ipc_events = true;
  bool host_register = true;
  bool stream_mem_ops = true;
  int compute_mode = 0;      // cudaComputeMode: 0 default, 2 prohibited, 3 exclusive-process
  bool mig = false;          // a MIG compute instance (NVML knows it as MIG-<uuid>)
  bool vmm_posix_fd = true;  // VMM allocations shareable as descriptors
  std::size_t vmm_granularity = std::size_t{2} << 20;  // cuMemGetAllocationGranularity
};

class FakeCuda;

class FakeGpuWorld : public std::enable_shared_from_this<FakeGpuWorld> {
 public:
  // `driver` false: every call reports cudaErrorInsufficientDriver.
  static std::shared_ptr<FakeGpuWorld> make(std::vector<FakeDevice> devices, bool driver = true);
  // A device whose UUID bytes are all `tag`.
  static FakeDevice device(unsigned char tag);

  // A new simulated process seeing `visible` (world device indices, in ordinal order; empty:
  // all devices), with device 0 current.
  std::shared_ptr<FakeCuda> process(std::vector<int> visible = {});

  void set_peer_access(int a, int b, bool can);
  bool already_mapped_mode = false;

  // Counters (read them with the world quiescent).
  int wrong_device_closes() const;
  int hangs() const;
  int freed_while_mapped() const;
  int use_after_destroy() const;
  int unregistered_writes() const;
  int implicit_inits() const;
  std::uint64_t bytes_allocated(void* ptr) const;  // size of the allocation at `ptr` (0: none)
  int vmm_allocations() const;                     // VMM allocations of this world not yet gone

 private:
  friend class FakeCuda;
  FakeGpuWorld() = default;

  struct Allocation {
    int owner = 0;
    int device = 0;  // world index
    std::unique_ptr<std::byte[]> storage;
    std::uint64_t bytes = 0;
    bool freed = false;
    int mappings = 0;  // opens in other processes not yet closed
  };
  struct EventState {
    int owner = 0;
    int device = 0;  // world index
    bool destroyed = false;
    std::uint64_t latest_record = 0;  // op id of the newest record (0: never recorded)
  };
  struct Op {
    enum class Kind { work, record, wait, write_value, wait_value, copy } kind = Kind::work;
    void* dst = nullptr;  // copy: bytes from src to dst when it runs
    const void* src = nullptr;
    std::size_t bytes = 0;
    std::uint64_t event = 0;
    std::uint64_t record = 0;       // wait: the record op it captured
    std::uint64_t* addr = nullptr;  // write_value / wait_value
    std::uint64_t value = 0;
    int process = 0;
    bool held = false;
    bool done = false;
    std::vector<std::uint64_t> deps;
  };
  struct Stream {
    int process = 0;
    int device = 0;  // world index
    bool nonblocking = false;
    bool legacy = false;
    bool destroyed = false;
    std::deque<std::uint64_t> ops;
  };
  struct Handle {  // an event handle as seen by one process
    int process = 0;
    std::uint64_t event = 0;
    int device = 0;  // world index of the context it belongs to
    bool imported = false;
  };

  struct VmmAllocation {
    int fd = -1;  // the memfd that stands in for the memory (the driver's reference)
    std::uint64_t bytes = 0;
    int handles = 0;   // handles not yet released, in every process
    int mappings = 0;  // mapped ranges, in every process
  };
  void vmm_forget_if_unused(std::uint64_t allocation);  // with mutex_ held

  // Called with mutex_ held.
  void advance();
  bool runnable(const Op& op) const;
  std::uint64_t push(std::uint64_t stream, Op op);
  std::uint64_t legacy_stream(int process, int device);
  bool finish_local_work_before(std::uint64_t stream, std::uint64_t op_id, int process);

  mutable std::mutex mutex_;
  std::vector<FakeDevice> devices_;
  bool driver_ = true;
  std::set<std::pair<int, int>> peers_;
  int next_process_ = 1;
  std::set<int> dead_;
  std::set<int> dying_;  // killed, context not torn down yet (kill_leaving_writes)
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Allocation> allocations_;
  std::map<std::uint64_t, EventState> events_;
  std::map<std::uint64_t, Op> ops_;
  std::map<std::uint64_t, Stream> streams_;  // key: the CudaStream value
  std::map<std::uint64_t, Handle> handles_;  // key: the CudaEvent value
  std::map<std::pair<int, int>, std::uint64_t> legacy_;
  std::map<std::uint64_t, VmmAllocation> vmm_;
  int wrong_device_closes_ = 0;
  int hangs_ = 0;
  int freed_while_mapped_ = 0;
  int use_after_destroy_ = 0;
  int unregistered_writes_ = 0;
  int implicit_inits_ = 0;
  // Registered host ranges: (process, base) -> bytes.
  std::map<std::pair<int, std::uintptr_t>, std::size_t> registered_;
  bool registered(int process, const void* p, std::size_t bytes) const;
};

class FakeCuda final : public detail::CudaApi {
 public:
  // ---- CudaApi
  CudaErr get_device_count(int& count) noexcept override;
  CudaErr get_device(int& device) noexcept override;
  CudaErr set_device(int device) noexcept override;
  CudaErr device_uuid(int device, detail::CudaUuid& uuid) noexcept override;
  CudaErr device_attribute(detail::CudaAttr attr, int device, int& value) noexcept override;
  bool mig_instance(const detail::CudaUuid& uuid) noexcept override;
  CudaErr can_access_peer(int device, int peer, int& can) noexcept override;
  CudaErr malloc(void** ptr, std::size_t bytes) noexcept override;
  CudaErr free(void* ptr) noexcept override;
  CudaErr ipc_get_mem_handle(detail::CudaIpcMemHandle& handle, void* ptr) noexcept override;
  CudaErr ipc_open_mem_handle(void** ptr, const detail::CudaIpcMemHandle& handle) noexcept override;
  CudaErr ipc_close_mem_handle(void* ptr) noexcept override;
  CudaErr create_ipc_event(CudaEvent& event) noexcept override;
  CudaErr destroy_event(CudaEvent event) noexcept override;
  CudaErr record_event(CudaEvent event, CudaStream stream) noexcept override;
  CudaErr query_event(CudaEvent event) noexcept override;
  CudaErr synchronize_event(CudaEvent event) noexcept override;
  CudaErr ipc_get_event_handle(detail::CudaIpcEventHandle& handle,
                               CudaEvent event) noexcept override;
  CudaErr ipc_open_event_handle(CudaEvent& event,
                                const detail::CudaIpcEventHandle& handle) noexcept override;
  CudaErr create_stream(CudaStream& stream) noexcept override;
  CudaErr destroy_stream(CudaStream stream) noexcept override;
  CudaErr stream_wait_event(CudaStream stream, CudaEvent event) noexcept override;
  CudaErr stream_synchronize(CudaStream stream) noexcept override;
  CudaErr get_context(detail::CudaContext& context) noexcept override;
  CudaErr set_context(detail::CudaContext context) noexcept override;
  CudaErr host_register(void* ptr, std::size_t bytes) noexcept override;
  CudaErr host_unregister(void* ptr) noexcept override;
  CudaErr host_device_pointer(void** device_ptr, void* host_ptr) noexcept override;
  CudaErr stream_write_value64(CudaStream stream, void* device_ptr,
                               std::uint64_t value) noexcept override;
  CudaErr stream_wait_value64(CudaStream stream, void* device_ptr,
                              std::uint64_t value) noexcept override;
  CudaErr vmm_granularity(int device, std::size_t& bytes) noexcept override;
  CudaErr vmm_create(detail::CudaMemHandle& handle, std::size_t bytes,
                     int device) noexcept override;
  CudaErr vmm_release(detail::CudaMemHandle handle) noexcept override;
  CudaErr vmm_reserve(void** ptr, std::size_t bytes, std::size_t alignment) noexcept override;
  CudaErr vmm_free_address(void* ptr, std::size_t bytes) noexcept override;
  CudaErr vmm_map(void* ptr, std::size_t bytes, detail::CudaMemHandle handle) noexcept override;
  CudaErr vmm_unmap(void* ptr, std::size_t bytes) noexcept override;
  CudaErr vmm_set_access(void* ptr, std::size_t bytes, int device,
                         bool read_write) noexcept override;
  CudaErr vmm_export_fd(int& fd, detail::CudaMemHandle handle) noexcept override;
  CudaErr vmm_import_fd(detail::CudaMemHandle& handle, int fd) noexcept override;
  CudaErr get_last_error() noexcept override;
  const char* error_name(CudaErr err) noexcept override;
  CudaErr host_alloc(void** ptr, std::size_t bytes) noexcept override;
  CudaErr free_host(void* ptr) noexcept override;
  // Queues a copy op on the stream (it runs in stream order, when the world advances); dst must lie
  // in a host_alloc allocation of this process.
  CudaErr memcpy_to_host_async(void* dst, const void* src, std::size_t bytes,
                               CudaStream stream) noexcept override;
  int pinned_allocations() const;  // host_alloc allocations not freed

  // cudaStreamPerThread: the per-thread default stream of the calling thread (a blocking stream,
  // made on first use), wherever a stream is taken.
  static inline const CudaStream kPerThreadStream = reinterpret_cast<CudaStream>(std::uintptr_t{2});

  // ---- test controls
  // A blocking (default) or non-blocking stream of this process on its current device.
  CudaStream make_stream(bool nonblocking = false);
  // Queues a kernel on `stream` (nullptr: the legacy stream). A held kernel runs only after
  // finish(id). Returns its id.
  std::uint64_t launch(CudaStream stream, bool held = true);
  void finish(std::uint64_t work);
  bool done(std::uint64_t work) const;
  // The process dies: its streams stop, its events and mappings go away.
  void kill();
  // The process dies, but its context is not torn down yet: its streams stop and their queued
  // 64-bit writes stay pending until land_late_writes() performs them (the kernels before them
  // run to their end), after which the context is gone as with kill(). Returns how many writes
  // landed.
  void kill_leaving_writes();
  int land_late_writes();
  // Injects `err` into the next `times` calls of `op` (times < 0: every call).
  void fail(FakeOp op, CudaErr err, int times = 1);
  // The next `skip` calls of `op` succeed, the one after reports `err`.
  void fail_after(FakeOp op, int skip, CudaErr err);
  int calls(FakeOp op) const;
  int open_mappings() const;  // memory handles this process has open
  int process_id() const { return id_; }
  // The calling thread's current device (-1: no current context).
  int current_device() const;
  // A non-primary context on `ordinal` (as cuCtxCreate would make); make it current with
  // set_context().
  detail::CudaContext make_context(int ordinal);
  int registrations() const;  // host ranges this process has registered
  int vmm_handles() const;    // VMM handles this process holds (made or imported)
  int vmm_ranges() const;     // virtual ranges it reserved and has not freed
  int vmm_mappings() const;   // of those, the mapped ones

 private:
  friend class FakeGpuWorld;
  FakeCuda(std::shared_ptr<FakeGpuWorld> world, int id, std::vector<int> visible)
      : world_(std::move(world)), id_(id), visible_(std::move(visible)) {}
  // Counts the call and applies injected errors and the driver/death checks. Called with the
  // world mutex held. Returns success when the call should proceed.
  CudaErr enter(FakeOp op);
  CudaErr ret(CudaErr e);  // remembers e as the last error
  int world_device(int ordinal) const { return visible_[static_cast<std::size_t>(ordinal)]; }
  // The calling thread's current ordinal; a thread without a context gets device 0's primary
  // context implicitly (and the world counts it). Called with the world mutex held.
  int cur();
  std::uint64_t legacy(CudaStream stream);       // stream id; nullptr: the current legacy stream
  std::uint64_t per_thread_stream(int ordinal);  // the calling thread's, made on first use

  std::shared_ptr<FakeGpuWorld> world_;
  int id_;
  std::vector<int> visible_;
  // Per thread: the current context id (primary context of ordinal d: d + 1; others from
  // make_context) and its ordinal.
  struct Ctx {
    std::uint64_t id = 0;
    int ordinal = 0;
  };
  std::map<std::thread::id, Ctx> ctx_;
  std::map<std::uint64_t, int> user_contexts_;  // id -> ordinal
  std::uint64_t next_context_ = 1000;
  CudaErr last_error_ = CudaErr::success;
  std::array<int, static_cast<std::size_t>(FakeOp::count_)> calls_{};
  std::map<FakeOp, std::pair<CudaErr, int>> inject_;
  std::map<FakeOp, int> skip_;
  struct Mapping {
    std::uint64_t allocation = 0;
    int device = 0;  // ordinal current at open
    int refs = 0;
  };
  std::map<std::pair<void*, int>, Mapping> mappings_;  // key: (pointer, ordinal of the context)
  std::map<std::pair<std::thread::id, int>, std::uint64_t> per_thread_;  // (thread, ordinal)
  std::map<detail::CudaMemHandle, std::uint64_t> vmm_handles_;  // handle -> world allocation
  struct VmmRange {
    std::size_t bytes = 0;
    std::uint64_t allocation = 0;  // mapped: the allocation (0: not mapped)
  };
  std::map<std::uintptr_t, VmmRange> vmm_ranges_;  // key: the range's start
  detail::CudaMemHandle next_vmm_handle_ = 0x100;
  void vmm_drop();  // at death: handles released, mappings gone (with the world mutex held)
  std::map<void*, std::unique_ptr<unsigned char[]>> pinned_;  // host_alloc: base -> storage
  std::map<void*, std::size_t> pinned_bytes_;
};

// The public API's factories use `api` while this lives.
class UseApi {
 public:
  explicit UseApi(std::shared_ptr<FakeCuda> api) {
    detail::set_cuda_api_for_testing(std::move(api));
  }
  ~UseApi() { detail::set_cuda_api_for_testing(nullptr); }
  UseApi(const UseApi&) = delete;
  UseApi& operator=(const UseApi&) = delete;
};

}  // namespace ipcring::test
