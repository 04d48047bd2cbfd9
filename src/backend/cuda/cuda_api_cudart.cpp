// cuda_api_cudart.cpp — CudaApi over the CUDA runtime: the only source of the module
// libipcring_cuda.so (cuda_plugin.hpp), and the only file that includes a CUDA header. The module
// links the runtime statically and never links libcuda: the runtime loads the driver itself and
// reports cudaErrorInsufficientDriver / cudaErrorNoDevice when there is none, so the module loads
// and answers on machines without a GPU.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
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
static_assert(static_cast<int>(CudaErr::not_supported) == cudaErrorNotSupported);
static_assert(static_cast<int>(CudaErr::unknown) == cudaErrorUnknown);
static_assert(static_cast<int>(CudaAttr::integrated) == cudaDevAttrIntegrated);
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
  CudaErr device_attribute(CudaAttr attr, int device, int& value) noexcept override {
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
  CudaErr get_last_error() noexcept override { return wrap(cudaGetLastError()); }
  const char* error_name(CudaErr err) noexcept override {
    const char* name = cudaGetErrorName(unwrap(err));
    return name != nullptr ? name : "unknown CUDA error";
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
