// cuda_import.hpp — the process-wide state of the CUDA backend: a producer's resources (shared
// with Readers of the same process, which use them directly: a process cannot open its own IPC
// handles) and the import cache (one mapping of a buffer per process and device: the driver counts
// the opens of a handle in a context, or refuses a second one on drivers before CUDA 11.1, so each
// mapping has one owner that closes it once). Both registries are guarded by registry_mutex().
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_api.hpp"
#include "backend/cuda/cuda_common.hpp"
#include "backend/cuda/cuda_handles.hpp"
#include "backend/cuda/cuda_vmm.hpp"

namespace ipcring::detail::cuda {

// Everything a producer allocated. Freed when the producer pool and every same-process import are
// done with it; the producer pool's close decides, per slot, whether freeing is safe
// (`releasable`): a slot whose readers or own writes did not finish in time stays allocated.
struct ProducerResources {
  std::shared_ptr<CudaApi> api;
  int device = 0;
  std::uint64_t fork_gen = 0;
  std::vector<void*> buffers;
  std::vector<CudaEvent> write_done;
  std::vector<bool> releasable;  // set by the producer pool's close; default: keep
  std::shared_ptr<SegmentRegistration> registration;
  // VMM channels: the allocations behind `buffers` (write_done is empty). Released as a whole,
  // when every slot is releasable; otherwise kept for the life of the process.
  std::shared_ptr<VmmExporter> vmm;

  ProducerResources() = default;
  ~ProducerResources();
  ProducerResources(const ProducerResources&) = delete;
  ProducerResources& operator=(const ProducerResources&) = delete;
};

using ProducerKey = std::pair<const CudaApi*, std::uint64_t>;
// Producers of this process by (API, instance id), for the same-process shortcut.
std::map<ProducerKey, std::weak_ptr<ProducerResources>>& local_producers();

// One producer buffer (and its write-done event) as mapped into this process on one device.
// Shared by every Reader of the process that reads that buffer on that device.
struct Import {
  std::shared_ptr<CudaApi> api;
  std::shared_ptr<ProducerResources> local;  // set: same-process producer, nothing was opened
  int device = 0;                            // the device whose primary context opened it
  std::uint64_t fork_gen = 0;
  std::byte* ptr = nullptr;
  CudaEvent write_done = nullptr;
  // VMM channels: the reader's imported allocations `ptr` lies in (nothing else to close; they
  // are unmapped with the last Import and the reader pool that hold them).
  std::shared_ptr<VmmImporter> vmm;
  // Set (under registry_mutex) by a Reader that lets go of this import after its producer stopped
  // being current: the exporter may have destroyed the event, after which destroying our copy is
  // undefined too; ~Import then leaves the copy (a small leak until the process exits).
  std::atomic<bool> exporter_gone{false};

  Import() = default;
  ~Import();  // closes the mapping and the event copy, in the context that opened them
  Import(const Import&) = delete;
  Import& operator=(const Import&) = delete;
};

// The cache key: the buffer (producer instance, epoch, slot) and the device it is mapped on (two
// Readers of one process on different devices need two mappings, each in its own context).
struct ImportKey {
  const CudaApi* api;
  std::uint64_t instance;
  std::uint64_t epoch;
  std::uint32_t slot;
  int device;
  bool operator<(const ImportKey& o) const noexcept {
    return std::tie(api, instance, epoch, slot, device) <
           std::tie(o.api, o.instance, o.epoch, o.slot, o.device);
  }
};
std::map<ImportKey, std::weak_ptr<Import>>& imports();

// Keeps `import` mapped for the life of the process: a kernel of this process may still read it
// (its release fence did not complete in time). Call with registry_mutex() held.
void keep_mapped(std::shared_ptr<Import> import);

// Counters for tests and diagnostics (read with registry_mutex() held).
std::size_t kept_mappings() noexcept;

}  // namespace ipcring::detail::cuda
