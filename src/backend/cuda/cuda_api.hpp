// cuda_api.hpp — the narrow CUDA interface of the CUDA frame pool.
//
// The pools (cuda_producer_pool.cpp, cuda_reader_pool.cpp) make these calls and no others, and
// ringdump record's copy of CUDA frames to host memory (tools/ringdump/device_copy.cpp) the
// page-locked ones (host_alloc, free_host, memcpy_to_host_async, with streams).
// Two implementations exist: cuda_api_cudart.cpp forwards each call to the CUDA runtime, linked
// statically into the module libipcring_cuda.so (driver functions through entry points loaded at
// run time: never a link against libcuda), and tests/unit/fake_cuda.cpp simulates devices,
// contexts, IPC handles, events, streams and stream memory operations in host memory, with only
// the documented semantics, so the import cache, the fences and the lifetime rules are tested on
// machines without a GPU.
//
// This header does not include any CUDA header: the types below mirror the runtime's
// (cuda_api_cudart.cpp checks the sizes and the error values with static_assert), so the pool and
// the fake compile without the CUDA Toolkit.
//
// Every call is noexcept and reports a CudaErr; none throws. The current device is per thread,
// as in the runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ipcring/frame.hpp"  // CudaStream

struct CUevent_st;  // cudaEvent_t without including CUDA headers

namespace ipcring::detail {

// cudaError_t values the pool tells apart (the numbers are the runtime's; any other value is
// passed through unchanged and named by CudaApi::error_name).
enum class CudaErr : int {
  success = 0,
  invalid_value = 1,
  memory_allocation = 2,
  initialization_error = 3,
  insufficient_driver = 35,
  no_device = 100,
  invalid_device = 101,
  device_uninitialized = 201,
  map_buffer_object_failed = 205,
  already_mapped = 208,
  peer_access_unsupported = 217,
  invalid_resource_handle = 400,
  host_memory_already_registered = 712,
  host_memory_not_registered = 713,
  not_ready = 600,
  not_supported = 801,
  unknown = 999,
};

using CudaEvent = CUevent_st*;

inline constexpr std::size_t kIpcHandleBytes = 64;

struct CudaIpcMemHandle {
  unsigned char bytes[kIpcHandleBytes];
};
struct CudaIpcEventHandle {
  unsigned char bytes[kIpcHandleBytes];
};
struct CudaUuid {
  unsigned char bytes[16];
};

// Device attributes the capability probe reads (values are cudaDeviceAttr's).
enum class CudaAttr : int {
  integrated = 18,          // cudaDevAttrIntegrated: shares memory with the host (Jetson, DRIVE)
  compute_mode = 20,        // cudaDevAttrComputeMode: 0 default, 2 prohibited, 3 exclusive-process
  unified_addressing = 41,  // cudaDevAttrUnifiedAddressing: required by CUDA IPC
  ipc_event_support = 125,  // cudaDevAttrIpcEventSupport
  host_register_supported = 99,  // cudaDevAttrHostRegisterSupported: cudaHostRegister works
  // The driver's CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS (122), read through the driver
  // entry point cuDeviceGetAttribute (the runtime has no name for it): cuStreamWriteValue64 and
  // cuStreamWaitValue64 are supported. Offset so it cannot collide with a runtime attribute.
  stream_mem_ops_64 = 0x10000 + 122,
  // The driver's CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED (103), read the
  // same way: VMM allocations can be exported as POSIX file descriptors (cuda_vmm.hpp).
  vmm_posix_fd = 0x10000 + 103,
};

// An opaque CUcontext (the calling thread's current context; nullptr: none).
using CudaContext = void*;

// A CUmemGenericAllocationHandle (CUDA virtual memory management; 0: none).
using CudaMemHandle = std::uint64_t;

class CudaApi {
 public:
  virtual ~CudaApi() = default;

  // Devices.
  virtual CudaErr get_device_count(int& count) noexcept = 0;
  virtual CudaErr get_device(int& device) noexcept = 0;  // current device of the calling thread
  virtual CudaErr set_device(int device) noexcept = 0;
  virtual CudaErr device_uuid(int device, CudaUuid& uuid) noexcept = 0;
  // Whether `uuid` names a MIG compute instance rather than a whole GPU: the runtime's UUID
  // bytes carry no marker, NVML knows the instance as "MIG-<uuid>" (nvmlDeviceGetHandleByUUID).
  // Spelling only (messages): devices are matched by the bytes. false when NVML is not there.
  virtual bool mig_instance(const CudaUuid& uuid) noexcept {
    (void)uuid;
    return false;
  }
  virtual CudaErr device_attribute(CudaAttr attr, int device, int& value) noexcept = 0;
  virtual CudaErr can_access_peer(int device, int peer, int& can) noexcept = 0;

  // Memory (on the current device).
  virtual CudaErr malloc(void** ptr, std::size_t bytes) noexcept = 0;
  virtual CudaErr free(void* ptr) noexcept = 0;
  virtual CudaErr ipc_get_mem_handle(CudaIpcMemHandle& handle, void* ptr) noexcept = 0;
  // Opens with cudaIpcMemLazyEnablePeerAccess in the current device's context.
  virtual CudaErr ipc_open_mem_handle(void** ptr, const CudaIpcMemHandle& handle) noexcept = 0;
  virtual CudaErr ipc_close_mem_handle(void* ptr) noexcept = 0;

  // Events. create_ipc_event: cudaEventInterprocess | cudaEventDisableTiming, current device.
  virtual CudaErr create_ipc_event(CudaEvent& event) noexcept = 0;
  virtual CudaErr destroy_event(CudaEvent event) noexcept = 0;
  // stream nullptr: the legacy default stream of the current device (cudaStreamLegacy).
  virtual CudaErr record_event(CudaEvent event, CudaStream stream) noexcept = 0;
  virtual CudaErr query_event(CudaEvent event) noexcept = 0;  // success or not_ready
  virtual CudaErr synchronize_event(CudaEvent event) noexcept = 0;
  virtual CudaErr ipc_get_event_handle(CudaIpcEventHandle& handle, CudaEvent event) noexcept = 0;
  virtual CudaErr ipc_open_event_handle(CudaEvent& event,
                                        const CudaIpcEventHandle& handle) noexcept = 0;

  // Streams. create_stream: cudaStreamNonBlocking on the current device (the pools' private
  // streams must not be serialised with the legacy stream).
  virtual CudaErr create_stream(CudaStream& stream) noexcept = 0;
  virtual CudaErr destroy_stream(CudaStream stream) noexcept = 0;
  // stream nullptr: the legacy default stream of the current device.
  virtual CudaErr stream_wait_event(CudaStream stream, CudaEvent event) noexcept = 0;
  virtual CudaErr stream_synchronize(CudaStream stream) noexcept = 0;

  // Contexts (driver entry points cuCtxGetCurrent / cuCtxSetCurrent). DeviceGuard saves the
  // thread's current context and restores exactly it, so a caller's non-primary context, or a
  // thread with no context at all, is left as it was.
  virtual CudaErr get_context(CudaContext& context) noexcept = 0;
  virtual CudaErr set_context(CudaContext context) noexcept = 0;

  // Host memory registration (page-locks memory the process already mapped, for every context:
  // cudaHostRegisterMapped | cudaHostRegisterPortable), and the device address of registered
  // memory (cudaHostGetDevicePointer, flags 0) for the current device.
  virtual CudaErr host_register(void* ptr, std::size_t bytes) noexcept = 0;
  virtual CudaErr host_unregister(void* ptr) noexcept = 0;
  virtual CudaErr host_device_pointer(void** device_ptr, void* host_ptr) noexcept = 0;

  // Stream memory operations, through driver entry points loaded at run time
  // (cudaGetDriverEntryPointByVersion; libcuda is never linked). stream nullptr: the legacy
  // default stream of the current device.
  //   write: cuStreamWriteValue64(stream, addr, value, CU_STREAM_WRITE_VALUE_DEFAULT): after the
  //          work queued before it in `stream`, with a memory fence before the write;
  //   wait:  cuStreamWaitValue64(stream, addr, value, CU_STREAM_WAIT_VALUE_GEQ): work queued
  //          after it waits until (int64_t)(*addr - value) >= 0.
  virtual CudaErr stream_write_value64(CudaStream stream, void* device_ptr,
                                       std::uint64_t value) noexcept = 0;
  virtual CudaErr stream_wait_value64(CudaStream stream, void* device_ptr,
                                      std::uint64_t value) noexcept = 0;

  // CUDA virtual memory management (cuda_vmm.hpp), through driver entry points. Allocations are
  // pinned device memory on `device` (CU_MEM_LOCATION_TYPE_DEVICE) made shareable as POSIX file
  // descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR).
  //   granularity:  cuMemGetAllocationGranularity(CU_MEM_ALLOC_GRANULARITY_MINIMUM) for them;
  //   create:       cuMemCreate of `bytes` (a multiple of the granularity);
  //   release:      cuMemRelease (the memory goes once every handle is released and every
  //                 mapping of it unmapped);
  //   reserve/free_address: cuMemAddressReserve / cuMemAddressFree of a virtual range;
  //   map/unmap:    cuMemMap (offset 0) / cuMemUnmap of a whole reserved range;
  //   set_access:   cuMemSetAccess for `device`: read-write, or read-only;
  //   export_fd:    cuMemExportToShareableHandle: a new descriptor the caller owns;
  //   import_fd:    cuMemImportFromShareableHandle: a new handle; `fd` stays the caller's.
  virtual CudaErr vmm_granularity(int device, std::size_t& bytes) noexcept = 0;
  virtual CudaErr vmm_create(CudaMemHandle& handle, std::size_t bytes, int device) noexcept = 0;
  virtual CudaErr vmm_release(CudaMemHandle handle) noexcept = 0;
  virtual CudaErr vmm_reserve(void** ptr, std::size_t bytes, std::size_t alignment) noexcept = 0;
  virtual CudaErr vmm_free_address(void* ptr, std::size_t bytes) noexcept = 0;
  virtual CudaErr vmm_map(void* ptr, std::size_t bytes, CudaMemHandle handle) noexcept = 0;
  virtual CudaErr vmm_unmap(void* ptr, std::size_t bytes) noexcept = 0;
  virtual CudaErr vmm_set_access(void* ptr, std::size_t bytes, int device,
                                 bool read_write) noexcept = 0;
  virtual CudaErr vmm_export_fd(int& fd, CudaMemHandle handle) noexcept = 0;
  virtual CudaErr vmm_import_fd(CudaMemHandle& handle, int fd) noexcept = 0;

  // Returns and clears the calling thread's last non-sticky error (cudaGetLastError), so one
  // failed call does not make later, unrelated calls report it.
  virtual CudaErr get_last_error() noexcept = 0;
  // "cudaErrorNoDevice" etc.; never null.
  virtual const char* error_name(CudaErr err) noexcept = 0;

  // Page-locked host memory for copies out of device memory (cudaHostAlloc with
  // cudaHostAllocPortable: usable from every context), and its release (cudaFreeHost).
  virtual CudaErr host_alloc(void** ptr, std::size_t bytes) noexcept = 0;
  virtual CudaErr free_host(void* ptr) noexcept = 0;
  // cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream): runs after the work queued
  // before it in `stream`; complete once stream_synchronize(stream) returned success. stream
  // nullptr: the legacy default stream of the current device.
  virtual CudaErr memcpy_to_host_async(void* dst, const void* src, std::size_t bytes,
                                       CudaStream stream) noexcept = 0;
};

// Makes the primary context of `device` current for a scope and restores the thread's previous
// context exactly (cuCtxGetCurrent before, cuCtxSetCurrent after): a caller's non-primary context
// stays current, and a thread that had no context (an internal thread, a destructor run on a
// user's thread that never used CUDA) gets none back, so the runtime never binds device 0's
// primary context implicitly on ipcring's behalf. Every pool call whose meaning depends on the
// current context (allocation, registration, IPC open and close, event creation and destruction,
// the legacy stream) runs under one; so do all calls on internal threads and in destructors.
class DeviceGuard {
 public:
  DeviceGuard(CudaApi& api, int device) noexcept : api_(api) {
    err_ = api_.get_context(previous_);
    if (err_ != CudaErr::success) return;
    err_ = api_.set_device(device);
    restore_ = err_ == CudaErr::success;
  }
  ~DeviceGuard() {
    if (restore_) (void)api_.set_context(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  bool ok() const noexcept { return err_ == CudaErr::success; }
  CudaErr error() const noexcept { return err_; }

 private:
  CudaApi& api_;
  CudaErr err_ = CudaErr::success;
  CudaContext previous_ = nullptr;
  bool restore_ = false;
};

// For calls on a caller's stream (Producer::loan(stream)/publish(stream), Frame::wait_on(stream)/
// release(stream)): the stream belongs to a context of the caller's, so a context the caller made
// current stays current (the stream may be its own). But the driver's stream memory operations and
// the runtime still need some context current on the calling thread, and a thread that never
// touched CUDA (a garbage collector's, a pool of the caller's) has none: the driver call fails, and
// a runtime call binds device 0's primary context to the thread for good. So: when no context is
// current, make `device`'s primary context current for the call, and restore "none" after.
class StreamCallGuard {
 public:
  StreamCallGuard(CudaApi& api, int device) noexcept : api_(api) {
    CudaContext current = nullptr;
    err_ = api_.get_context(current);
    if (err_ != CudaErr::success || current != nullptr) return;
    err_ = api_.set_device(device);
    restore_ = err_ == CudaErr::success;
  }
  ~StreamCallGuard() {
    if (restore_) (void)api_.set_context(nullptr);
  }
  StreamCallGuard(const StreamCallGuard&) = delete;
  StreamCallGuard& operator=(const StreamCallGuard&) = delete;

  bool ok() const noexcept { return err_ == CudaErr::success; }
  CudaErr error() const noexcept { return err_; }

 private:
  CudaApi& api_;
  CudaErr err_ = CudaErr::success;
  bool restore_ = false;
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (or "MIG-..." for a MIG compute instance), the
// form nvidia-smi -L prints and CUDA_VISIBLE_DEVICES takes.
inline std::string format_uuid(const unsigned char (&b)[16], bool mig = false) {
  static const char* const kHex = "0123456789abcdef";
  std::string s = mig ? "MIG-" : "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[b[i] >> 4];
    s += kHex[b[i] & 0xf];
  }
  return s;
}
inline std::string format_uuid(const CudaUuid& u, bool mig = false) {
  return format_uuid(u.bytes, mig);
}
// As nvidia-smi spells the device `u` names, asking `api` whether it is a MIG instance.
inline std::string device_text(CudaApi& api, const CudaUuid& u) {
  return format_uuid(u, api.mig_instance(u));
}
inline std::string device_text(CudaApi& api, const unsigned char (&b)[16]) {
  CudaUuid u{};
  for (int i = 0; i < 16; ++i) u.bytes[i] = b[i];
  return device_text(api, u);
}

}  // namespace ipcring::detail
