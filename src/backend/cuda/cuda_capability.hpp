// cuda_capability.hpp — what a machine must offer before a CUDA pool allocates or opens anything;
// each refusal is an Error that names the channel, the device and the alternative (docs/cuda.md,
// "Capability probing").
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/cuda_api.hpp"
#include "ipcring/config.hpp"

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

// The VMM path (cuda_vmm.hpp) with its write-done word and the release fences needs: VMM
// allocations exportable as POSIX file descriptors, host registration, 64-bit stream memory
// operations, and a compute mode that lets the producer and its readers use the device together.
// Every reason it cannot be used on `device`; empty when it can.
std::vector<std::string> vmm_support_refusals(CudaApi& api, int device);

// Which path a producer asking for `requested` (Backend::cuda, cuda_legacy or cuda_vmm) takes on
// `device`, and why. Backend::cuda takes VMM wherever the device offers it (its descriptors reach
// readers in any PID namespace or container that shares the channel directory, and it is the only
// path on integrated GPUs), legacy IPC otherwise (readers then must share the producer's PID
// namespace). A pinned path is taken or refused, never replaced.
struct PathChoice {
  CudaPath path = CudaPath::none;  // none: the request cannot be served (`reason` says why)
  std::string reason;              // one sentence: why this path, or why none
  std::vector<std::string> legacy_refusals;
  std::vector<std::string> vmm_refusals;
};
// `slots`: the channel's slot count (0: not known yet, as for ringdump doctor); more than a VMM
// channel carries (kMaxVmmBuffers) is a VMM refusal.
PathChoice choose_path(CudaApi& api, int device, Backend requested, std::uint32_t slots = 0);

// The ordinal, in this process, of the device whose UUID is `want` (the frames' GPU); throws
// Errc::unsupported listing the visible devices when this process cannot see it.
int find_device(CudaApi& api, const CudaUuid& want, int count, const std::string& ch);

}  // namespace ipcring::detail::cuda
