// cuda_vmm.hpp — frame buffers as CUDA VMM allocations, shared as POSIX file descriptors.
//
// Legacy CUDA IPC (cudaIpcGetMemHandle) does not exist on integrated GPUs (Jetson/Orin/DRIVE),
// cannot export stream-ordered pool memory and is refused between containers that do not share a
// PID namespace. The driver's virtual memory management API shares memory another way: an
// allocation made by cuMemCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is exported as a
// file descriptor (cuMemExportToShareableHandle), which travels like any other descriptor: over
// the channel's socket with SCM_RIGHTS, after the same credential checks as the channel's host
// memory (channel/handout). The reader imports it (cuMemImportFromShareableHandle), maps it into a
// range it reserved and sets read-only access for its device. Nothing here depends on PID
// namespaces: the descriptor is the capability.
//
// What the CUDA documentation states and this file relies on (and the fake CUDA models):
//  * cuMemCreate's size must be a multiple of cuMemGetAllocationGranularity for the same
//    properties; so must cuMemAddressReserve's size and cuMemMap's size and offset.
//  * memory mapped by cuMemMap is inaccessible until cuMemSetAccess grants a device read or
//    read-write access to the range.
//  * cuMemExportToShareableHandle gives a new descriptor the caller owns; importing does not take
//    it (the importer closes it once imported).
//  * an allocation is freed once its handle (and every imported handle) is released and every
//    mapping of it unmapped: release order does not matter, and a reader that dies leaves the
//    producer's allocation as it was.
// Ordering without IPC events: after the work that fills a buffer, the producer queues
// cuStreamWriteValue64 of the frame's sequence into a word of the host-registered control
// segment; a reader queues cuStreamWaitValue64 (>=) on that word before its work (the same
// stream memory operations as the release fences, cuda_fence.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_api.hpp"

namespace ipcring::detail::cuda {

// The most buffers of a VMM channel: one descriptor each in the handout, which carries at most
// channel/handout.hpp's kMaxDeviceDescriptors.
inline constexpr std::uint32_t kMaxVmmBuffers = 64;

struct VmmBuffer {
  CudaMemHandle handle = 0;  // cuMemCreate's (producer) or cuMemImportFromShareableHandle's
  void* ptr = nullptr;       // the mapped range (reserved by us)
  std::uint64_t bytes = 0;   // a multiple of the granularity
};

// frame_bytes rounded up to the device's VMM granularity; throws Error naming the channel when
// the granularity cannot be read or the product overflows.
std::uint64_t vmm_buffer_bytes(CudaApi& api, int device, std::uint64_t frame_bytes,
                               const std::string& ch);

// The producer's buffers: `count` allocations of vmm_buffer_bytes each on `device`, mapped
// read-write for it. Everything made so far is undone when a step fails (Error naming the call).
class VmmExporter {
 public:
  VmmExporter(std::shared_ptr<CudaApi> api, int device, std::uint32_t count,
              std::uint64_t frame_bytes, std::string ch);
  ~VmmExporter();
  VmmExporter(const VmmExporter&) = delete;
  VmmExporter& operator=(const VmmExporter&) = delete;

  const std::vector<VmmBuffer>& buffers() const noexcept { return buffers_; }
  std::uint64_t buffer_bytes() const noexcept { return buffer_bytes_; }
  // One new descriptor per buffer, in buffer order, for one reader; the caller owns them. Throws
  // Error (none left open) when an export fails.
  std::vector<int> export_descriptors() const;

 private:
  void undo() noexcept;
  std::shared_ptr<CudaApi> api_;
  int device_;
  std::string ch_;
  std::uint64_t buffer_bytes_ = 0;
  std::vector<VmmBuffer> buffers_;
};

// A reader's view: takes `fds` (one per buffer, as the producer sent them) and closes every one
// of them, whatever happens; imports each, maps it into a reserved range and grants `device` read
// access only. `expected` (the channel's slot count) and `buffer_bytes` come from the producer:
// the descriptors must be exactly `expected`, and `buffer_bytes` a nonzero multiple of this
// device's granularity, before anything is imported (Error corrupt_segment otherwise).
class VmmImporter {
 public:
  VmmImporter(std::shared_ptr<CudaApi> api, int device, std::vector<int> fds,
              std::uint32_t expected, std::uint64_t buffer_bytes, std::string ch);
  ~VmmImporter();
  VmmImporter(const VmmImporter&) = delete;
  VmmImporter& operator=(const VmmImporter&) = delete;

  const std::vector<VmmBuffer>& buffers() const noexcept { return buffers_; }

 private:
  void undo() noexcept;
  std::shared_ptr<CudaApi> api_;
  int device_;
  std::string ch_;
  std::vector<VmmBuffer> buffers_;
};

// Ordering by a stream-written word (where IPC events are unavailable). `word` is the device
// address of an 8-byte word of host-registered memory (host_device_pointer).
//   producer: after the work queued on `stream` that fills the frame, the word becomes `sequence`;
//   reader:   work queued on `stream` after this waits until the word is >= `sequence`.
// Throw Error naming the channel and the call.
void vmm_signal_filled(CudaApi& api, CudaStream stream, void* word, std::uint64_t sequence,
                       const std::string& ch);
void vmm_wait_filled(CudaApi& api, CudaStream stream, void* word, std::uint64_t sequence,
                     const std::string& ch);

}  // namespace ipcring::detail::cuda
