// cuda_probe.hpp — what this machine's CUDA offers a channel, as the CUDA backend's own capability
// probe sees it (ringdump doctor).
//
// probe_cuda() loads the CUDA backend module as Backend::cuda would, counts the devices and, for
// each, reads the attributes the backend depends on and lists every reason the backend would
// refuse it. It creates no allocation, event or stream; it never throws.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace ipcring {

struct CudaDeviceProbe {
  int ordinal = 0;
  std::string uuid;  // "GPU-xxxxxxxx-...", empty when it could not be read
  // The attributes the backend reads; none when the driver could not report one.
  std::optional<bool> integrated;
  std::optional<bool> unified_addressing;
  std::optional<bool> ipc_events;
  std::optional<bool> host_register;
  std::optional<bool> stream_mem_ops_64;
  std::optional<int> compute_mode;  // 0 default, 2 prohibited, 3 exclusive-process
  // CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: CUDA VMM allocations can be
  // shared as file descriptors (what a VMM path needs; not yet a backend of this version).
  std::optional<bool> vmm_posix_fd;
  // Legacy CUDA IPC (cudaIpcGetMemHandle, IPC events, release fences): usable when empty; else
  // every reason it is not, each naming the device and the alternative.
  std::vector<std::string> legacy_ipc_refusals;
};

struct CudaProbe {
  bool module_loaded = false;  // libipcring_cuda.so (or the test API) is there
  std::string module_problem;  // why not, with what was tried
  std::string device_problem;  // no driver, no device, or the call that failed
  std::vector<CudaDeviceProbe> devices;
};

CudaProbe probe_cuda() noexcept;

}  // namespace ipcring
