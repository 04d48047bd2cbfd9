// cuda_capability.cpp — see cuda_capability.hpp.
#include "backend/cuda/cuda_capability.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail::cuda {

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

namespace {

// A capability the device must have: attribute `attr` nonzero. An attribute the driver cannot
// report is treated as present (the call that needs it then fails with its own error).
void require(CudaApi& api, CudaAttr attr, int device, bool want_nonzero,
             std::vector<std::string>& refusals, const std::string& why) {
  int value = want_nonzero ? 1 : 0;
  if (api.device_attribute(attr, device, value) != CudaErr::success) {
    (void)api.get_last_error();
    return;
  }
  if ((value != 0) != want_nonzero) {
    refusals.push_back("CUDA device " + std::to_string(device) + " " + why);
  }
}

}  // namespace

std::vector<std::string> ipc_support_refusals(CudaApi& api, int device) {
  std::vector<std::string> refusals;
  // A channel needs a context on the device in the producer and in every reader: a device no
  // process may use, or only one, cannot carry one (the runtime would fail later with
  // cudaErrorDevicesUnavailable, naming neither the mode nor the fix).
  int mode = 0;
  if (api.device_attribute(CudaAttr::compute_mode, device, mode) != CudaErr::success) {
    (void)api.get_last_error();
    mode = 0;
  }
  if (mode == 2 || mode == 3) {
    refusals.push_back("CUDA device " + std::to_string(device) + " is in compute mode " +
                       (mode == 2 ? "prohibited (no process may use it)"
                                  : "exclusive-process (one process at a time may use it, and a "
                                    "channel needs the producer and its readers on it together)") +
                       "; set the default mode (nvidia-smi -c DEFAULT) or use another GPU" +
                       kUseHost);
  }
  require(api, CudaAttr::integrated, device, false, refusals,
          std::string("is an integrated GPU (Jetson/Orin/DRIVE class), where legacy CUDA IPC "
                      "(cudaIpcGetMemHandle) is not supported") +
              kUseHost + " (a CUDA VMM backend for these devices is planned)");
  require(api, CudaAttr::unified_addressing, device, true, refusals,
          std::string("lacks unified addressing, which CUDA IPC requires") + kUseHost);
  require(api, CudaAttr::ipc_event_support, device, true, refusals,
          std::string("does not support IPC events") + kUseHost);
  require(api, CudaAttr::host_register_supported, device, true, refusals,
          std::string("does not support cudaHostRegister, which the release fences need "
                      "(cudaDevAttrHostRegisterSupported = 0)") +
              kUseHost);
  require(api, CudaAttr::stream_mem_ops_64, device, true, refusals,
          std::string("does not support 64-bit stream memory operations "
                      "(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 0), which the release "
                      "fences need") +
              kUseHost);
  (void)api.get_last_error();
  return refusals;
}

void probe_ipc_support(CudaApi& api, int device, const std::string& ch) {
  const std::vector<std::string> refusals = ipc_support_refusals(api, device);
  if (!refusals.empty()) throw Error(Errc::unsupported, ch + refusals.front());
}

int find_device(CudaApi& api, const CudaUuid& want, int count, const std::string& ch) {
  int owner = -1;
  std::string seen;
  for (int d = 0; d < count; ++d) {
    CudaUuid u{};
    if (const CudaErr e = api.device_uuid(d, u); e != CudaErr::success) {
      throw_call(api, ch, "reading the UUID of CUDA device " + std::to_string(d), e);
    }
    seen += (d ? ", " : "") + device_text(api, u) + " (" + std::to_string(d) + ")";
    if (std::memcmp(u.bytes, want.bytes, sizeof u.bytes) == 0) owner = d;
  }
  if (owner < 0) {
    throw Error(Errc::unsupported,
                ch + "its frames live on " + device_text(api, want) +
                    ", which this process cannot see (visible: " + seen +
                    "); check CUDA_VISIBLE_DEVICES, or read the channel from a process that sees "
                    "that GPU");
  }
  return owner;
}

}  // namespace ipcring::detail::cuda
