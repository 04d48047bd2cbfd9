// cuda_capability.cpp — see cuda_capability.hpp.
#include "backend/cuda/cuda_capability.hpp"

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.hpp"
#include "backend/cuda/cuda_vmm.hpp"
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

// A channel needs a context on the device in the producer and in every reader: a device no
// process may use, or only one, cannot carry one (the runtime would fail later with
// cudaErrorDevicesUnavailable, naming neither the mode nor the fix).
void require_shared_mode(CudaApi& api, int device, std::vector<std::string>& refusals) {
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
}

// Host registration and 64-bit stream memory operations: the release fences (both paths) and
// the VMM write-done word are words of the host-registered control segment.
void require_fence_support(CudaApi& api, int device, std::vector<std::string>& refusals) {
  require(api, CudaAttr::host_register_supported, device, true, refusals,
          std::string("does not support cudaHostRegister, which the release fences need "
                      "(cudaDevAttrHostRegisterSupported = 0)") +
              kUseHost);
  require(api, CudaAttr::stream_mem_ops_64, device, true, refusals,
          std::string("does not support 64-bit stream memory operations "
                      "(CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 0), which the release "
                      "fences need") +
              kUseHost);
}

}  // namespace

std::vector<std::string> ipc_support_refusals(CudaApi& api, int device) {
  std::vector<std::string> refusals;
  require_shared_mode(api, device, refusals);
  require(api, CudaAttr::integrated, device, false, refusals,
          std::string("is an integrated GPU (Jetson/Orin/DRIVE class), where legacy CUDA IPC "
                      "(cudaIpcGetMemHandle) is not supported") +
              "; Backend::cuda_vmm (or Backend::cuda, which chooses it there) shares memory on "
              "it, or use Backend::host for this channel");
  require(api, CudaAttr::unified_addressing, device, true, refusals,
          std::string("lacks unified addressing, which CUDA IPC requires") + kUseHost);
  require(api, CudaAttr::ipc_event_support, device, true, refusals,
          std::string("does not support IPC events") + kUseHost);
  require_fence_support(api, device, refusals);
  (void)api.get_last_error();
  return refusals;
}

std::vector<std::string> vmm_support_refusals(CudaApi& api, int device) {
  std::vector<std::string> refusals;
  require_shared_mode(api, device, refusals);
  require(api, CudaAttr::vmm_posix_fd, device, true, refusals,
          std::string("cannot export CUDA VMM allocations as file descriptors "
                      "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED = 0; a "
                      "driver before CUDA 10.2, or a platform without them)"));
  require_fence_support(api, device, refusals);
  (void)api.get_last_error();
  return refusals;
}

namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : "; ") + s;
  return out;
}

}  // namespace

PathChoice choose_path(CudaApi& api, int device, Backend requested, std::uint32_t slots) {
  PathChoice c;
  c.legacy_refusals = ipc_support_refusals(api, device);
  c.vmm_refusals = vmm_support_refusals(api, device);
  if (slots > kMaxVmmBuffers) {
    c.vmm_refusals.push_back("a channel of " + std::to_string(slots) +
                             " slots has more buffers than CUDA VMM hands out (at most " +
                             std::to_string(kMaxVmmBuffers) +
                             ", one descriptor each on the channel's socket); use fewer slots");
  }
  const std::string dev = "CUDA device " + std::to_string(device);
  switch (requested) {
    case Backend::cuda_vmm:
      if (c.vmm_refusals.empty()) {
        c.path = CudaPath::vmm;
        c.reason = "Backend::cuda_vmm asked for CUDA VMM, and " + dev + " supports it";
      } else {
        c.reason =
            "Backend::cuda_vmm asked for CUDA VMM, which cannot be used: " + join(c.vmm_refusals);
      }
      break;
    case Backend::cuda_legacy:
      if (c.legacy_refusals.empty()) {
        c.path = CudaPath::legacy_ipc;
        c.reason = "Backend::cuda_legacy asked for legacy CUDA IPC, and " + dev + " supports it";
      } else {
        c.reason = "Backend::cuda_legacy asked for legacy CUDA IPC, which cannot be used: " +
                   join(c.legacy_refusals);
      }
      break;
    default:
      if (c.vmm_refusals.empty()) {
        c.path = CudaPath::vmm;
        c.reason = dev +
                   " exports CUDA VMM allocations as file descriptors, which reach readers in "
                   "any PID namespace or container that shares the channel directory";
      } else if (c.legacy_refusals.empty()) {
        c.path = CudaPath::legacy_ipc;
        c.reason =
            "legacy CUDA IPC (readers must share the producer's PID namespace), because "
            "CUDA VMM cannot be used: " +
            join(c.vmm_refusals);
      } else {
        c.reason =
            "neither way of sharing GPU memory works: legacy CUDA IPC: " + join(c.legacy_refusals) +
            "; CUDA VMM: " + join(c.vmm_refusals);
      }
      break;
  }
  return c;
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
