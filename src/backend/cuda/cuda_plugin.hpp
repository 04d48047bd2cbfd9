// cuda_plugin.hpp — how libipcring finds the CUDA runtime binding at run time.
//
// libipcring itself never links the CUDA runtime: host users need no CUDA Toolkit to build against
// it and no libcudart to run (docs/cuda.md, "Host users need no CUDA"). The binding of CudaApi to
// the runtime (cuda_api_cudart.cpp) is built into a separate module, libipcring_cuda.so, which
// links the CUDA runtime statically (so a GPU machine needs only the NVIDIA driver, not the
// Toolkit) and exports exactly one C symbol, kCudaPluginEntry. The first Backend::cuda pool loads
// the module with dlopen (cuda_loader.cpp) and asks it for its CudaApi.
#pragma once

#include "backend/cuda/cuda_api.hpp"

namespace ipcring::detail {

// Incremented whenever CudaApi (its virtual functions, their order or meaning) or the types it
// passes change: a module of another ABI is refused with both numbers in the message.
inline constexpr unsigned kCudaPluginAbi = 2;  // 2: the VMM calls, page-locked host memory, MIG

// File name of the module (installed beside libipcring, in the library directory).
inline constexpr const char* kCudaPluginFile = "libipcring_cuda.so";

// extern "C" CudaApi* ipcring_cuda_plugin_api(unsigned abi, const char** why) noexcept:
// the module's CudaApi when `abi` is the module's kCudaPluginAbi, else nullptr with *why set to a
// static message. The CudaApi lives as long as the module stays loaded (which is forever: the
// loader never unloads it).
inline constexpr const char* kCudaPluginEntry = "ipcring_cuda_plugin_api";
using CudaPluginEntry = CudaApi* (*)(unsigned abi, const char** why) noexcept;

// Where the loader looks, in order (the first that loads wins):
//   1. $IPCRING_CUDA_PLUGIN, a full path (tests and carried builds use it);
//   2. beside the object that contains libipcring (a shared libipcring, or the executable or
//      Python extension a static libipcring was linked into), then ../lib and ../../lib from there
//      and ../../.. (the build tree's layout: build/lib/, executables in build/tools/,
//      build/tests/...; an installed Python extension in lib/python3.X/dist-packages/ipcring/);
//   3. the installed library directory (compiled in);
//   4. the bare file name (the dynamic linker's search path: LD_LIBRARY_PATH, ld.so.cache).
// Returns the API, or nullptr and a message that lists what was tried and why each failed.
std::shared_ptr<CudaApi> load_cuda_plugin(std::string& why) noexcept;

}  // namespace ipcring::detail
