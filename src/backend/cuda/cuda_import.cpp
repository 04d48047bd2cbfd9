// cuda_import.cpp — see cuda_import.hpp.
#include "backend/cuda/cuda_import.hpp"

#include <algorithm>

#include "common/clock.hpp"
#include "common/process.hpp"

namespace ipcring::detail::cuda {

ProducerResources::~ProducerResources() {
  if (fork_gen != fork_generation()) {
    // Inherited through fork: not ours to free.
    if (vmm) keep_until_exit(std::move(vmm));  // the parent's
    return;
  }
  DeviceGuard guard(*api, device);
  if (vmm) {
    const bool all = releasable.size() == buffers.size() &&
                     std::all_of(releasable.begin(), releasable.end(), [](bool r) { return r; });
    if (!all) keep_until_exit(std::move(vmm));  // work may still use it
    vmm.reset();  // unmaps and releases every allocation (the driver keeps what readers map)
    (void)api->get_last_error();
    return;
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    if (i >= releasable.size() || !releasable[i]) continue;  // work may still use it: keep
    if (write_done[i] != nullptr) (void)api->destroy_event(write_done[i]);
    if (buffers[i] != nullptr) (void)api->free(buffers[i]);
  }
  (void)api->get_last_error();
}

std::map<ProducerKey, std::weak_ptr<ProducerResources>>& local_producers() {
  static std::map<ProducerKey, std::weak_ptr<ProducerResources>> m;
  return m;
}

Import::~Import() {
  if (fork_gen != fork_generation()) {
    if (vmm) keep_until_exit(std::move(vmm));  // the parent's mappings
    return;
  }
  if (local) return;  // the producer owns everything
  DeviceGuard guard(*api, device);
  if (vmm) {
    vmm.reset();  // unmaps the allocations when we were the last to hold them
    (void)api->get_last_error();
    return;
  }
  if (write_done != nullptr && !exporter_gone.load(std::memory_order_relaxed)) {
    (void)api->destroy_event(write_done);
  }
  if (ptr != nullptr) (void)api->ipc_close_mem_handle(ptr);
  (void)api->get_last_error();
}

std::map<ImportKey, std::weak_ptr<Import>>& imports() {
  static std::map<ImportKey, std::weak_ptr<Import>> m;
  return m;
}

namespace {
std::vector<std::shared_ptr<Import>>& kept() {
  static std::vector<std::shared_ptr<Import>> v;
  return v;
}
}  // namespace

void keep_mapped(std::shared_ptr<Import> import) {
  if (import) kept().push_back(std::move(import));
}

std::size_t kept_mappings() noexcept {
  return kept().size();
}

}  // namespace ipcring::detail::cuda
