// cuda_import.cpp — see cuda_import.hpp.
#include "backend/cuda/cuda_import.hpp"

#include "common/clock.hpp"
#include "common/process.hpp"

namespace ipcring::detail::cuda {

ProducerResources::~ProducerResources() {
  if (fork_gen != fork_generation()) return;  // inherited through fork: not ours to free
  DeviceGuard guard(*api, device);
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
  if (fork_gen != fork_generation() || local) return;  // local: the producer owns everything
  DeviceGuard guard(*api, device);
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
