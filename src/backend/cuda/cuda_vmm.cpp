// cuda_vmm.cpp — see cuda_vmm.hpp.
#include "backend/cuda/cuda_vmm.hpp"

#include <unistd.h>

#include <limits>
#include <utility>

#include "backend/cuda/cuda_common.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail::cuda {

namespace {

void close_all(std::vector<int>& fds) noexcept {
  for (int& fd : fds) {
    if (fd >= 0) close(fd);
    fd = -1;
  }
}

std::uint64_t granularity(CudaApi& api, int device, const std::string& ch) {
  std::size_t g = 0;
  if (const CudaErr e = api.vmm_granularity(device, g); e != CudaErr::success) {
    throw_call(api, ch,
               "cuMemGetAllocationGranularity (POSIX file descriptors, device " +
                   std::to_string(device) + ")",
               e);
  }
  if (g == 0 || (g & (g - 1)) != 0) {
    throw Error(Errc::cuda_error, ch + "cuMemGetAllocationGranularity gave " + std::to_string(g) +
                                      " bytes for device " + std::to_string(device) +
                                      ", not a power of two");
  }
  return g;
}

// Unmaps, frees the range and releases the handle of `b` (whatever of it was done).
void unmake(CudaApi& api, VmmBuffer& b, bool mapped, bool reserved) noexcept {
  if (mapped) (void)api.vmm_unmap(b.ptr, b.bytes);
  if (reserved) (void)api.vmm_free_address(b.ptr, b.bytes);
  if (b.handle != 0) (void)api.vmm_release(b.handle);
  (void)api.get_last_error();
  b = VmmBuffer{};
}

// Reserves a range for `b.handle`, maps it and grants `device` access; undoes all of it and
// throws when a step fails.
void map_buffer(CudaApi& api, int device, VmmBuffer& b, std::uint64_t alignment, bool read_write,
                const std::string& ch, const std::string& which) {
  if (const CudaErr e = api.vmm_reserve(&b.ptr, b.bytes, alignment); e != CudaErr::success) {
    unmake(api, b, false, false);
    throw_call(api, ch, "cuMemAddressReserve of " + std::to_string(b.bytes) + " bytes for " + which,
               e);
  }
  if (const CudaErr e = api.vmm_map(b.ptr, b.bytes, b.handle); e != CudaErr::success) {
    unmake(api, b, false, true);
    throw_call(api, ch, "cuMemMap of " + which, e);
  }
  if (const CudaErr e = api.vmm_set_access(b.ptr, b.bytes, device, read_write);
      e != CudaErr::success) {
    unmake(api, b, true, true);
    throw_call(api, ch,
               std::string("cuMemSetAccess (") + (read_write ? "read-write" : "read-only") +
                   ", device " + std::to_string(device) + ") of " + which,
               e);
  }
}

}  // namespace

std::uint64_t vmm_buffer_bytes(CudaApi& api, int device, std::uint64_t frame_bytes,
                               const std::string& ch) {
  const std::uint64_t g = granularity(api, device, ch);
  const std::uint64_t want = frame_bytes == 0 ? 1 : frame_bytes;
  if (want > std::numeric_limits<std::uint64_t>::max() - (g - 1)) {
    throw Error(Errc::invalid_argument,
                ch + "frame_bytes " + std::to_string(frame_bytes) + " is too large");
  }
  return (want + g - 1) / g * g;
}

// ---- the producer's side ------------------------------------------------------------------

VmmExporter::VmmExporter(std::shared_ptr<CudaApi> api, int device, std::uint32_t count,
                         std::uint64_t frame_bytes, std::string ch)
    : api_(std::move(api)), device_(device), ch_(std::move(ch)) {
  CudaApi& a = *api_;
  buffer_bytes_ = vmm_buffer_bytes(a, device_, frame_bytes, ch_);
  const std::uint64_t g = granularity(a, device_, ch_);
  buffers_.reserve(count);
  try {
    for (std::uint32_t i = 0; i < count; ++i) {
      VmmBuffer b;
      b.bytes = buffer_bytes_;
      const std::string which = "frame buffer " + std::to_string(i);
      if (const CudaErr e = a.vmm_create(b.handle, b.bytes, device_); e != CudaErr::success) {
        throw_call(a, ch_,
                   "cuMemCreate of " + std::to_string(b.bytes) + " bytes (" + which +
                       ", POSIX file descriptor handles, device " + std::to_string(device_) + ")",
                   e);
      }
      map_buffer(a, device_, b, g, true, ch_, which);
      buffers_.push_back(b);
    }
  } catch (...) {
    undo();
    throw;
  }
}

VmmExporter::~VmmExporter() {
  undo();
}

void VmmExporter::undo() noexcept {
  for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) unmake(*api_, *it, true, true);
  buffers_.clear();
}

std::vector<int> VmmExporter::export_descriptors() const {
  std::vector<int> fds;
  fds.reserve(buffers_.size());
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    int fd = -1;
    if (const CudaErr e = api_->vmm_export_fd(fd, buffers_[i].handle); e != CudaErr::success) {
      close_all(fds);
      throw_call(*api_, ch_, "cuMemExportToShareableHandle of frame buffer " + std::to_string(i),
                 e);
    }
    fds.push_back(fd);
  }
  return fds;
}

// ---- the reader's side --------------------------------------------------------------------

VmmImporter::VmmImporter(std::shared_ptr<CudaApi> api, int device, std::vector<int> fds,
                         std::uint32_t expected, std::uint64_t buffer_bytes, std::string ch)
    : api_(std::move(api)), device_(device), ch_(std::move(ch)) {
  CudaApi& a = *api_;
  try {
    if (fds.size() != expected) {
      throw Error(Errc::corrupt_segment, ch_ + "its producer sent " + std::to_string(fds.size()) +
                                             " frame buffer descriptor(s) where the channel has " +
                                             std::to_string(expected) + " slots");
    }
    const std::uint64_t g = granularity(a, device_, ch_);
    if (buffer_bytes == 0 || buffer_bytes % g != 0) {
      throw Error(Errc::corrupt_segment,
                  ch_ + "its frame buffers are " + std::to_string(buffer_bytes) +
                      " bytes, not a nonzero multiple of the granularity " + std::to_string(g) +
                      " of device " + std::to_string(device_));
    }
    buffers_.reserve(fds.size());
    for (std::size_t i = 0; i < fds.size(); ++i) {
      VmmBuffer b;
      b.bytes = buffer_bytes;
      const std::string which = "frame buffer " + std::to_string(i);
      const CudaErr e = a.vmm_import_fd(b.handle, fds[i]);
      close(fds[i]);  // imported or not, the descriptor has done its work
      fds[i] = -1;
      if (e != CudaErr::success) {
        throw_call(a, ch_, "cuMemImportFromShareableHandle of " + which, e);
      }
      map_buffer(a, device_, b, g, false, ch_, which);
      buffers_.push_back(b);
    }
  } catch (...) {
    close_all(fds);
    undo();
    throw;
  }
}

VmmImporter::~VmmImporter() {
  undo();
}

void VmmImporter::undo() noexcept {
  for (auto it = buffers_.rbegin(); it != buffers_.rend(); ++it) unmake(*api_, *it, true, true);
  buffers_.clear();
}

// ---- ordering -----------------------------------------------------------------------------

void vmm_signal_filled(CudaApi& api, CudaStream stream, void* word, std::uint64_t sequence,
                       const std::string& ch) {
  if (const CudaErr e = api.stream_write_value64(stream, word, sequence); e != CudaErr::success) {
    throw_call(api, ch, "cuStreamWriteValue64 of frame " + std::to_string(sequence), e);
  }
}

void vmm_wait_filled(CudaApi& api, CudaStream stream, void* word, std::uint64_t sequence,
                     const std::string& ch) {
  if (const CudaErr e = api.stream_wait_value64(stream, word, sequence); e != CudaErr::success) {
    throw_call(api, ch, "cuStreamWaitValue64 for frame " + std::to_string(sequence), e);
  }
}

}  // namespace ipcring::detail::cuda
