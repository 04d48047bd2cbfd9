// cuda_api_cudart.cpp — CudaApi over the CUDA runtime: the only source of the module
// libipcring_cuda.so (cuda_plugin.hpp), and the only file that includes a CUDA header. The module
// links the runtime statically and never links libcuda: the runtime loads the driver itself and
// reports cudaErrorInsufficientDriver / cudaErrorNoDevice when there is none, so the module loads
// and answers on machines without a GPU.
#include <cuda.h>  // driver types and enums only: the driver is reached through entry points
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_plugin.hpp"

namespace ipcring::detail {

namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CudaIpcMemHandle));
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(CudaIpcEventHandle));
static_assert(sizeof(cudaUUID_t) == sizeof(CudaUuid));
static_assert(static_cast<int>(CudaErr::success) == cudaSuccess);
static_assert(static_cast<int>(CudaErr::invalid_value) == cudaErrorInvalidValue);
static_assert(static_cast<int>(CudaErr::memory_allocation) == cudaErrorMemoryAllocation);
static_assert(static_cast<int>(CudaErr::initialization_error) == cudaErrorInitializationError);
static_assert(static_cast<int>(CudaErr::insufficient_driver) == cudaErrorInsufficientDriver);
static_assert(static_cast<int>(CudaErr::no_device) == cudaErrorNoDevice);
static_assert(static_cast<int>(CudaErr::invalid_device) == cudaErrorInvalidDevice);
static_assert(static_cast<int>(CudaErr::device_uninitialized) == cudaErrorDeviceUninitialized);
static_assert(static_cast<int>(CudaErr::map_buffer_object_failed) ==
              cudaErrorMapBufferObjectFailed);
static_assert(static_cast<int>(CudaErr::already_mapped) == cudaErrorAlreadyMapped);
static_assert(static_cast<int>(CudaErr::peer_access_unsupported) == cudaErrorPeerAccessUnsupported);
static_assert(static_cast<int>(CudaErr::invalid_resource_handle) == cudaErrorInvalidResourceHandle);
static_assert(static_cast<int>(CudaErr::not_ready) == cudaErrorNotReady);
static_assert(static_cast<int>(CudaErr::host_memory_already_registered) ==
              cudaErrorHostMemoryAlreadyRegistered);
static_assert(static_cast<int>(CudaErr::host_memory_not_registered) ==
              cudaErrorHostMemoryNotRegistered);
static_assert(static_cast<int>(CudaAttr::host_register_supported) ==
              cudaDevAttrHostRegisterSupported);
static_assert(static_cast<int>(CudaAttr::stream_mem_ops_64) - 0x10000 ==
              CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS);
static_assert(static_cast<int>(CudaAttr::vmm_posix_fd) - 0x10000 ==
              CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED);
static_assert(sizeof(CUdeviceptr) == sizeof(void*));
static_assert(static_cast<int>(CudaErr::not_supported) == cudaErrorNotSupported);
static_assert(static_cast<int>(CudaErr::unknown) == cudaErrorUnknown);
static_assert(static_cast<int>(CudaAttr::integrated) == cudaDevAttrIntegrated);
static_assert(static_cast<int>(CudaAttr::compute_mode) == cudaDevAttrComputeMode);
static_assert(cudaComputeModeProhibited == 2 && cudaComputeModeExclusiveProcess == 3);
static_assert(static_cast<int>(CudaAttr::unified_addressing) == cudaDevAttrUnifiedAddressing);
static_assert(static_cast<int>(CudaAttr::ipc_event_support) == cudaDevAttrIpcEventSupport);
static_assert(std::is_same_v<CudaEvent, cudaEvent_t>);
static_assert(std::is_same_v<CudaStream, cudaStream_t>);

CudaErr wrap(cudaError_t e) noexcept {
  return static_cast<CudaErr>(static_cast<int>(e));
}
cudaError_t unwrap(CudaErr e) noexcept {
  return static_cast<cudaError_t>(static_cast<int>(e));
}

// nullptr means the legacy default stream, whatever the default-stream mode of the caller's code
// (ipcring is compiled without --default-stream per-thread, but say it explicitly).
cudaStream_t legacy_if_null(CudaStream s) noexcept {
  return s != nullptr ? s : cudaStreamLegacy;
}

// Driver entry points, loaded once with cudaGetDriverEntryPointByVersion for the ABI of CUDA 12.0
// (the v2 stream memory operations; any driver new enough for this runtime has them). Never a
// link against libcuda.
using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
using CtxGetFn = CUresult (*)(CUcontext*);
using CtxSetFn = CUresult (*)(CUcontext);
using DeviceGetFn = CUresult (*)(CUdevice*, int);
using DeviceAttrFn = CUresult (*)(int*, CUdevice_attribute, CUdevice);

struct DriverEntryPoints {
  StreamValueFn write_value64 = nullptr;
  StreamValueFn wait_value64 = nullptr;
  CtxGetFn ctx_get_current = nullptr;
  CtxSetFn ctx_set_current = nullptr;
  DeviceGetFn device_get = nullptr;
  DeviceAttrFn device_get_attribute = nullptr;
  cudaError_t error = cudaSuccess;  // of the first lookup that failed
};

// The VMM entry points (cuda_vmm.hpp), looked up on first use by themselves: a driver without
// them fails only the VMM calls.
struct VmmEntryPoints {
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) free_address = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  cudaError_t error = cudaSuccess;
};
static_assert(sizeof(CUmemGenericAllocationHandle) == sizeof(CudaMemHandle));

template <class Fn>
void lookup(const char* symbol, Fn& fn, cudaError_t& error) noexcept {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult status{};
  const cudaError_t e =
      cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &status);
  if (e != cudaSuccess || p == nullptr || status != cudaDriverEntryPointSuccess) {
    if (error == cudaSuccess) error = e != cudaSuccess ? e : cudaErrorNotSupported;
    (void)cudaGetLastError();
    return;
  }
  fn = reinterpret_cast<Fn>(p);
}

const DriverEntryPoints& driver() noexcept {
  static DriverEntryPoints d;
  static std::once_flag once;
  std::call_once(once, [] {
    lookup("cuStreamWriteValue64", d.write_value64, d.error);
    lookup("cuStreamWaitValue64", d.wait_value64, d.error);
    lookup("cuCtxGetCurrent", d.ctx_get_current, d.error);
    lookup("cuCtxSetCurrent", d.ctx_set_current, d.error);
    lookup("cuDeviceGet", d.device_get, d.error);
    lookup("cuDeviceGetAttribute", d.device_get_attribute, d.error);
  });
  return d;
}

const VmmEntryPoints& vmm() noexcept;

// CUresult values that mean the same as a runtime error keep their number (success 0, invalid
// value 1, not supported 801, invalid handle 400); the rest are reported as unknown.
CudaErr from_driver(CUresult r) noexcept {
  switch (r) {
    case CUDA_SUCCESS:
      return CudaErr::success;
    case CUDA_ERROR_INVALID_VALUE:
      return CudaErr::invalid_value;
    case CUDA_ERROR_NOT_SUPPORTED:
      return CudaErr::not_supported;
    case CUDA_ERROR_INVALID_HANDLE:
      return CudaErr::invalid_resource_handle;
    case CUDA_ERROR_INVALID_DEVICE:
      return CudaErr::invalid_device;
    case CUDA_ERROR_NO_DEVICE:
      return CudaErr::no_device;
    default:
      return CudaErr::unknown;
  }
}

// NVML, for one question only: whether a UUID names a MIG compute instance (nvidia-smi -L spells
// those "MIG-<uuid>"; the runtime's UUID bytes are the same either way). Loaded with dlopen from
// the driver's libnvidia-ml.so.1, never linked; declared here by its documented C signatures
// (nvmlReturn_t is an int, NVML_SUCCESS 0) so no NVML header is needed to build.
using NvmlInitFn = int (*)();
using NvmlHandleByUuidFn = int (*)(const char*, void**);

struct Nvml {
  NvmlHandleByUuidFn handle_by_uuid = nullptr;  // nullptr: no NVML, or its init failed
};

const Nvml& nvml() noexcept {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto init = reinterpret_cast<NvmlInitFn>(dlsym(lib, "nvmlInit_v2"));
    auto by_uuid = reinterpret_cast<NvmlHandleByUuidFn>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    if (init == nullptr || by_uuid == nullptr || init() != 0) return;  // kept loaded: used later
    n.handle_by_uuid = by_uuid;
  });
  return n;
}

CUstream driver_stream(CudaStream s) noexcept {
  return s != nullptr ? reinterpret_cast<CUstream>(s) : CU_STREAM_LEGACY;
}

const VmmEntryPoints& vmm() noexcept {
  static VmmEntryPoints v;
  static std::once_flag once;
  std::call_once(once, [] {
    lookup("cuMemGetAllocationGranularity", v.granularity, v.error);
    lookup("cuMemCreate", v.create, v.error);
    lookup("cuMemRelease", v.release, v.error);
    lookup("cuMemAddressReserve", v.reserve, v.error);
    lookup("cuMemAddressFree", v.free_address, v.error);
    lookup("cuMemMap", v.map, v.error);
    lookup("cuMemUnmap", v.unmap, v.error);
    lookup("cuMemSetAccess", v.set_access, v.error);
    lookup("cuMemExportToShareableHandle", v.export_handle, v.error);
    lookup("cuMemImportFromShareableHandle", v.import_handle, v.error);
  });
  return v;
}

// Pinned device memory of `ordinal`, shareable as a POSIX file descriptor.
bool vmm_properties(int ordinal, CUmemAllocationProp& prop, CudaErr& err) noexcept {
  const DriverEntryPoints& d = driver();
  if (d.device_get == nullptr) {
    err = wrap(d.error);
    return false;
  }
  CUdevice dev = 0;
  if (const CUresult r = d.device_get(&dev, ordinal); r != CUDA_SUCCESS) {
    err = from_driver(r);
    return false;
  }
  prop = CUmemAllocationProp{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return true;
}

class CudartApi final : public CudaApi {
 public:
  CudaErr get_device_count(int& count) noexcept override {
    return wrap(cudaGetDeviceCount(&count));
  }
  CudaErr get_device(int& device) noexcept override { return wrap(cudaGetDevice(&device)); }
  CudaErr set_device(int device) noexcept override { return wrap(cudaSetDevice(device)); }
  CudaErr device_uuid(int device, CudaUuid& uuid) noexcept override {
    cudaDeviceProp prop{};
    const cudaError_t e = cudaGetDeviceProperties(&prop, device);
    if (e == cudaSuccess) std::memcpy(uuid.bytes, &prop.uuid, sizeof uuid.bytes);
    return wrap(e);
  }
  bool mig_instance(const CudaUuid& uuid) noexcept override {
    const Nvml& n = nvml();
    if (n.handle_by_uuid == nullptr) return false;
    try {
      std::string text = format_uuid(uuid, true);  // "MIG-...": found only for an instance
      void* device = nullptr;
      return n.handle_by_uuid(text.c_str(), &device) == 0;
    } catch (...) {
      return false;
    }
  }
  CudaErr device_attribute(CudaAttr attr, int device, int& value) noexcept override {
    if (attr == CudaAttr::stream_mem_ops_64 || attr == CudaAttr::vmm_posix_fd) {
      const DriverEntryPoints& d = driver();
      if (d.device_get == nullptr || d.device_get_attribute == nullptr) return wrap(d.error);
      CUdevice dev = 0;
      if (const CUresult r = d.device_get(&dev, device); r != CUDA_SUCCESS) return from_driver(r);
      return from_driver(d.device_get_attribute(
          &value,
          attr == CudaAttr::vmm_posix_fd
              ? CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
              : CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
          dev));
    }
    return wrap(cudaDeviceGetAttribute(&value, static_cast<cudaDeviceAttr>(attr), device));
  }
  CudaErr can_access_peer(int device, int peer, int& can) noexcept override {
    return wrap(cudaDeviceCanAccessPeer(&can, device, peer));
  }
  CudaErr malloc(void** ptr, std::size_t bytes) noexcept override {
    return wrap(cudaMalloc(ptr, bytes));
  }
  CudaErr free(void* ptr) noexcept override { return wrap(cudaFree(ptr)); }
  CudaErr ipc_get_mem_handle(CudaIpcMemHandle& handle, void* ptr) noexcept override {
    cudaIpcMemHandle_t h{};
    const cudaError_t e = cudaIpcGetMemHandle(&h, ptr);
    std::memcpy(handle.bytes, &h, sizeof handle.bytes);
    return wrap(e);
  }
  CudaErr ipc_open_mem_handle(void** ptr, const CudaIpcMemHandle& handle) noexcept override {
    cudaIpcMemHandle_t h{};
    std::memcpy(&h, handle.bytes, sizeof h);
    return wrap(cudaIpcOpenMemHandle(ptr, h, cudaIpcMemLazyEnablePeerAccess));
  }
  CudaErr ipc_close_mem_handle(void* ptr) noexcept override {
    return wrap(cudaIpcCloseMemHandle(ptr));
  }
  CudaErr create_ipc_event(CudaEvent& event) noexcept override {
    return wrap(cudaEventCreateWithFlags(&event, cudaEventInterprocess | cudaEventDisableTiming));
  }
  CudaErr destroy_event(CudaEvent event) noexcept override { return wrap(cudaEventDestroy(event)); }
  CudaErr record_event(CudaEvent event, CudaStream stream) noexcept override {
    return wrap(cudaEventRecord(event, legacy_if_null(stream)));
  }
  CudaErr query_event(CudaEvent event) noexcept override { return wrap(cudaEventQuery(event)); }
  CudaErr synchronize_event(CudaEvent event) noexcept override {
    return wrap(cudaEventSynchronize(event));
  }
  CudaErr ipc_get_event_handle(CudaIpcEventHandle& handle, CudaEvent event) noexcept override {
    cudaIpcEventHandle_t h{};
    const cudaError_t e = cudaIpcGetEventHandle(&h, event);
    std::memcpy(handle.bytes, &h, sizeof handle.bytes);
    return wrap(e);
  }
  CudaErr ipc_open_event_handle(CudaEvent& event,
                                const CudaIpcEventHandle& handle) noexcept override {
    cudaIpcEventHandle_t h{};
    std::memcpy(&h, handle.bytes, sizeof h);
    return wrap(cudaIpcOpenEventHandle(&event, h));
  }
  CudaErr create_stream(CudaStream& stream) noexcept override {
    return wrap(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  CudaErr destroy_stream(CudaStream stream) noexcept override {
    return wrap(cudaStreamDestroy(stream));
  }
  CudaErr stream_wait_event(CudaStream stream, CudaEvent event) noexcept override {
    return wrap(cudaStreamWaitEvent(legacy_if_null(stream), event, 0));
  }
  CudaErr stream_synchronize(CudaStream stream) noexcept override {
    return wrap(cudaStreamSynchronize(legacy_if_null(stream)));
  }
  CudaErr get_context(CudaContext& context) noexcept override {
    const DriverEntryPoints& d = driver();
    if (d.ctx_get_current == nullptr) return wrap(d.error);
    CUcontext c = nullptr;
    const CUresult r = d.ctx_get_current(&c);
    context = c;
    return from_driver(r);
  }
  CudaErr set_context(CudaContext context) noexcept override {
    const DriverEntryPoints& d = driver();
    if (d.ctx_set_current == nullptr) return wrap(d.error);
    return from_driver(d.ctx_set_current(static_cast<CUcontext>(context)));
  }
  CudaErr host_register(void* ptr, std::size_t bytes) noexcept override {
    return wrap(cudaHostRegister(ptr, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  }
  CudaErr host_unregister(void* ptr) noexcept override { return wrap(cudaHostUnregister(ptr)); }
  CudaErr host_device_pointer(void** device_ptr, void* host_ptr) noexcept override {
    return wrap(cudaHostGetDevicePointer(device_ptr, host_ptr, 0));
  }
  CudaErr stream_write_value64(CudaStream stream, void* device_ptr,
                               std::uint64_t value) noexcept override {
    const DriverEntryPoints& d = driver();
    if (d.write_value64 == nullptr) return wrap(d.error);
    return from_driver(d.write_value64(driver_stream(stream),
                                       reinterpret_cast<CUdeviceptr>(device_ptr), value,
                                       CU_STREAM_WRITE_VALUE_DEFAULT));
  }
  CudaErr stream_wait_value64(CudaStream stream, void* device_ptr,
                              std::uint64_t value) noexcept override {
    const DriverEntryPoints& d = driver();
    if (d.wait_value64 == nullptr) return wrap(d.error);
    return from_driver(d.wait_value64(driver_stream(stream),
                                      reinterpret_cast<CUdeviceptr>(device_ptr), value,
                                      CU_STREAM_WAIT_VALUE_GEQ));
  }
  CudaErr vmm_granularity(int device, std::size_t& bytes) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.granularity == nullptr) return wrap(v.error);
    CUmemAllocationProp prop{};
    CudaErr err = CudaErr::success;
    if (!vmm_properties(device, prop, err)) return err;
    return from_driver(v.granularity(&bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  }
  CudaErr vmm_create(CudaMemHandle& handle, std::size_t bytes, int device) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.create == nullptr) return wrap(v.error);
    CUmemAllocationProp prop{};
    CudaErr err = CudaErr::success;
    if (!vmm_properties(device, prop, err)) return err;
    CUmemGenericAllocationHandle h = 0;
    const CUresult r = v.create(&h, bytes, &prop, 0);
    if (r == CUDA_SUCCESS) handle = h;
    return from_driver(r);
  }
  CudaErr vmm_release(CudaMemHandle handle) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.release == nullptr) return wrap(v.error);
    return from_driver(v.release(handle));
  }
  CudaErr vmm_reserve(void** ptr, std::size_t bytes, std::size_t alignment) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.reserve == nullptr) return wrap(v.error);
    CUdeviceptr p = 0;
    const CUresult r = v.reserve(&p, bytes, alignment, 0, 0);
    if (r == CUDA_SUCCESS) *ptr = reinterpret_cast<void*>(p);
    return from_driver(r);
  }
  CudaErr vmm_free_address(void* ptr, std::size_t bytes) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.free_address == nullptr) return wrap(v.error);
    return from_driver(v.free_address(reinterpret_cast<CUdeviceptr>(ptr), bytes));
  }
  CudaErr vmm_map(void* ptr, std::size_t bytes, CudaMemHandle handle) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.map == nullptr) return wrap(v.error);
    return from_driver(v.map(reinterpret_cast<CUdeviceptr>(ptr), bytes, 0, handle, 0));
  }
  CudaErr vmm_unmap(void* ptr, std::size_t bytes) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.unmap == nullptr) return wrap(v.error);
    return from_driver(v.unmap(reinterpret_cast<CUdeviceptr>(ptr), bytes));
  }
  CudaErr vmm_set_access(void* ptr, std::size_t bytes, int device,
                         bool read_write) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.set_access == nullptr) return wrap(v.error);
    CUmemAllocationProp prop{};
    CudaErr err = CudaErr::success;
    if (!vmm_properties(device, prop, err)) return err;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = read_write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
    return from_driver(v.set_access(reinterpret_cast<CUdeviceptr>(ptr), bytes, &access, 1));
  }
  CudaErr vmm_export_fd(int& fd, CudaMemHandle handle) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.export_handle == nullptr) return wrap(v.error);
    int out = -1;
    const CUresult r = v.export_handle(&out, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r == CUDA_SUCCESS) fd = out;
    return from_driver(r);
  }
  CudaErr vmm_import_fd(CudaMemHandle& handle, int fd) noexcept override {
    const VmmEntryPoints& v = vmm();
    if (v.import_handle == nullptr) return wrap(v.error);
    CUmemGenericAllocationHandle h = 0;
    // The POSIX descriptor is passed by value, cast to a pointer (the driver's convention).
    const CUresult r = v.import_handle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r == CUDA_SUCCESS) handle = h;
    return from_driver(r);
  }
  CudaErr get_last_error() noexcept override { return wrap(cudaGetLastError()); }
  const char* error_name(CudaErr err) noexcept override {
    const char* name = cudaGetErrorName(unwrap(err));
    return name != nullptr ? name : "unknown CUDA error";
  }
  CudaErr host_alloc(void** ptr, std::size_t bytes) noexcept override {
    return wrap(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable));
  }
  CudaErr free_host(void* ptr) noexcept override { return wrap(cudaFreeHost(ptr)); }
  CudaErr memcpy_to_host_async(void* dst, const void* src, std::size_t bytes,
                               CudaStream stream) noexcept override {
    return wrap(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, legacy_if_null(stream)));
  }
};

}  // namespace

}  // namespace ipcring::detail

// The module's one exported symbol (cuda_plugin.hpp). Stateless API: one instance, never destroyed.
extern "C" __attribute__((visibility("default"))) ipcring::detail::CudaApi* ipcring_cuda_plugin_api(
    unsigned abi, const char** why) noexcept {
  if (abi != ipcring::detail::kCudaPluginAbi) {
    static char message[160];
    std::snprintf(message, sizeof message,
                  "ABI mismatch: the module is of CUDA module ABI %u, this libipcring asks for %u "
                  "(install the libipcring_cuda.so of the same ipcring version)",
                  ipcring::detail::kCudaPluginAbi, abi);
    if (why != nullptr) *why = message;
    return nullptr;
  }
  static ipcring::detail::CudartApi api;
  return &api;
}
