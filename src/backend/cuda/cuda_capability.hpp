// cuda_capability.hpp — what a machine must offer before a CUDA pool allocates or opens anything;
// each refusal is an Error that names the channel, the device and the alternative (docs/cuda.md,
// "Capability probing").
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/cuda_api.hpp"

namespace ipcring::detail::cuda {

// Device count, with the errors of a machine that cannot run the CUDA backend turned into
// Errc::unsupported naming the alternative.
int probe_device_count(CudaApi& api, const std::string& ch);

// Legacy CUDA IPC and the release fences need: a discrete GPU (integrated ones, Jetson/Orin/DRIVE,
// do not support cudaIpcGetMemHandle), unified addressing, IPC events, host registration and
// 64-bit stream memory operations.
void probe_ipc_support(CudaApi& api, int device, const std::string& ch);
// Every reason probe_ipc_support would refuse `device` (it throws the first), each a sentence
// naming the device and the alternative; empty when legacy CUDA IPC can be used (ringdump doctor).
std::vector<std::string> ipc_support_refusals(CudaApi& api, int device);

// The ordinal, in this process, of the device whose UUID is `want` (the frames' GPU); throws
// Errc::unsupported listing the visible devices when this process cannot see it.
int find_device(CudaApi& api, const CudaUuid& want, int count, const std::string& ch);

}  // namespace ipcring::detail::cuda
