// cuda_probe.hpp — what this machine's CUDA offers a channel, as the CUDA backend's own capability
// probe sees it (ringdump doctor).
//
// probe_cuda() loads the CUDA backend module as Backend::cuda would, counts the devices and, for
// each, reads the attributes the backend depends on, lists every reason each way of sharing GPU
// memory (legacy CUDA IPC, CUDA VMM) would be refused, and says which one a Backend::cuda producer
// would take there and why. It creates no allocation, event or stream; it never throws.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ipcring/config.hpp"

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
  // shared as file descriptors (what the VMM path needs).
  std::optional<bool> vmm_posix_fd;
  // Legacy CUDA IPC (cudaIpcGetMemHandle, IPC events, release fences): usable when empty; else
  // every reason it is not, each naming the device and the alternative.
  std::vector<std::string> legacy_ipc_refusals;
  // CUDA VMM (allocations shared as file descriptors over the channel's socket): usable when
  // empty; else every reason it is not.
  std::vector<std::string> vmm_refusals;
  // The path a Backend::cuda producer would take on this device (none: it would be refused), and
  // why, in one sentence.
  CudaPath path = CudaPath::none;
  std::string path_reason;
};

struct CudaProbe {
  bool module_loaded = false;  // libipcring_cuda.so (or the test API) is there
  std::string module_problem;  // why not, with what was tried
  std::string device_problem;  // no driver, no device, or the call that failed
  std::vector<CudaDeviceProbe> devices;
};

CudaProbe probe_cuda() noexcept;

}  // namespace ipcring
