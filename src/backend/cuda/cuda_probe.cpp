// cuda_probe.cpp — ipcring::probe_cuda (ipcring/cuda_probe.hpp): the capability probe of
// cuda_capability.cpp, reported instead of thrown.
#include "ipcring/cuda_probe.hpp"

#include <exception>
#include <memory>
#include <string>

#include "backend/cuda/cuda_capability.hpp"
#include "backend/cuda/cuda_plugin.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "ipcring/error.hpp"

namespace ipcring {

namespace {

std::optional<int> attribute(detail::CudaApi& api, detail::CudaAttr attr, int device) {
  int value = 0;
  if (api.device_attribute(attr, device, value) != detail::CudaErr::success) {
    (void)api.get_last_error();
    return std::nullopt;
  }
  return value;
}

std::optional<bool> flag(detail::CudaApi& api, detail::CudaAttr attr, int device) {
  const auto v = attribute(api, attr, device);
  if (!v) return std::nullopt;
  return *v != 0;
}

}  // namespace

CudaProbe probe_cuda() noexcept {
  CudaProbe probe;
  try {
    std::shared_ptr<detail::CudaApi> api = detail::cuda_api_for_testing();
    if (!api) api = detail::load_cuda_plugin(probe.module_problem);
    if (!api) return probe;
    probe.module_loaded = true;
    probe.module_problem.clear();
    int count = 0;
    try {
      count = detail::cuda::probe_device_count(*api, std::string());
    } catch (const Error& e) {
      probe.device_problem = e.what();
      return probe;
    }
    using detail::CudaAttr;
    for (int d = 0; d < count; ++d) {
      CudaDeviceProbe dev;
      dev.ordinal = d;
      detail::CudaUuid uuid{};
      if (api->device_uuid(d, uuid) == detail::CudaErr::success) {
        dev.uuid = detail::format_uuid(uuid);
      } else {
        (void)api->get_last_error();
      }
      dev.integrated = flag(*api, CudaAttr::integrated, d);
      dev.unified_addressing = flag(*api, CudaAttr::unified_addressing, d);
      dev.ipc_events = flag(*api, CudaAttr::ipc_event_support, d);
      dev.host_register = flag(*api, CudaAttr::host_register_supported, d);
      dev.stream_mem_ops_64 = flag(*api, CudaAttr::stream_mem_ops_64, d);
      dev.compute_mode = attribute(*api, CudaAttr::compute_mode, d);
      dev.vmm_posix_fd = flag(*api, CudaAttr::vmm_posix_fd, d);
      detail::cuda::PathChoice choice = detail::cuda::choose_path(*api, d, Backend::cuda);
      dev.legacy_ipc_refusals = std::move(choice.legacy_refusals);
      dev.vmm_refusals = std::move(choice.vmm_refusals);
      dev.path = choice.path;
      dev.path_reason = std::move(choice.reason);
      probe.devices.push_back(std::move(dev));
    }
  } catch (const std::exception& e) {
    probe.device_problem = std::string("probing CUDA failed: ") + e.what();
  } catch (...) {
    probe.device_problem = "probing CUDA failed";
  }
  return probe;
}

}  // namespace ipcring
