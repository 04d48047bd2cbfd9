// host_pool.cpp — the host backend: `slots` page-aligned frame buffers in the channel's frame pool
// (a memfd of its own, segment.hpp). The producer maps it read-write before it is sealed against
// writes; readers receive a read-only description and map it read-only, so no reader can change
// what the producer or other readers see.
// Slot i uses buffer i.
//
// A reader attached with ReaderOptions::copy_on_write maps the frame range MAP_PRIVATE and
// writable instead (the frame pool's descriptor is still read-only): reads see the shared
// pages, a write copies the touched page into the reader's process only, and releasing a frame
// discards those copies (MADV_DONTNEED on a private file mapping refills the range from the
// object), so the next frame of the slot shows the producer's bytes again. That lets a consumer
// that writes into a frame (an in-place tensor op from Python) change its own view without a
// fault and without touching what the producer and the other readers see. The control segment
// stays a shared mapping of its own.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "backend/pool.hpp"
#include "ipcring/error.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

namespace {

class HostMapping {
 public:
  HostMapping(const PoolRequest& req, bool writable, bool copy_on_write = false)
      : bytes_(req.view.geo.frames_segment_bytes) {
    const std::string ch = channel_prefix(req.name);
    if (req.view.frames_fd < 0) {
      throw Error(Errc::invalid_argument,
                  ch + "the host frame pool needs the channel's frame pool");
    }
    // Mapped where every mapping of the channel's memory is made (segment.hpp).
    base_ = map_frame_pool(req.name, req.view,
                           writable        ? FrameAccess::read_write
                           : copy_on_write ? FrameAccess::copy_on_write
                                           : FrameAccess::read_only);
    stride_ = req.view.geo.frame_stride;
  }
  ~HostMapping() {
    munmap(base_, bytes_);
    if (pagemap_fd_ >= 0) close(pagemap_fd_);
  }
  HostMapping(const HostMapping&) = delete;
  HostMapping& operator=(const HostMapping&) = delete;

  std::byte* at(std::uint32_t slot) const noexcept {
    return static_cast<std::byte*>(base_) + std::uint64_t{slot} * stride_;
  }
  // Copy-on-write mappings: drop this process's private copies of slot's pages, if it has any.
  // /proc/self/pagemap tells, per page, whether it is present and file-backed (bit 61); a
  // private copy is a present page that is not, or a swapped one (bit 62). Most frames are only
  // read: then one pread finds no copy and the pages stay mapped (no refaults for the next frame
  // of the slot). Without pagemap (no /proc), or when it cannot be read, always discard.
  void discard_private_copies(std::uint32_t slot) const noexcept {
    if (!has_private_copy(slot)) return;
    madvise(at(slot), stride_, MADV_DONTNEED);
  }
  void open_pagemap() noexcept {
    pagemap_fd_ = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    page_bytes_ = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  }

 private:
  bool has_private_copy(std::uint32_t slot) const noexcept {
    if (pagemap_fd_ < 0 || page_bytes_ == 0) return true;
    constexpr std::uint64_t kPresent = 1ULL << 63;
    constexpr std::uint64_t kSwapped = 1ULL << 62;
    constexpr std::uint64_t kFileOrShared = 1ULL << 61;
    const auto first = reinterpret_cast<std::uintptr_t>(at(slot)) / page_bytes_;
    const std::uint64_t pages = stride_ / page_bytes_;
    std::uint64_t entries[512];
    for (std::uint64_t done = 0; done < pages;) {
      const std::uint64_t n = std::min<std::uint64_t>(pages - done, 512);
      const ssize_t got =
          pread(pagemap_fd_, entries, n * 8, static_cast<off_t>((first + done) * 8));
      if (got != static_cast<ssize_t>(n * 8)) return true;
      for (std::uint64_t k = 0; k < n; ++k) {
        const std::uint64_t e = entries[k];
        if ((e & kSwapped) != 0 || ((e & kPresent) != 0 && (e & kFileOrShared) == 0)) return true;
      }
      done += n;
    }
    return false;
  }

  std::uint64_t bytes_;
  std::uint64_t stride_ = 0;
  void* base_ = nullptr;
  int pagemap_fd_ = -1;  // copy-on-write readers only
  std::uint64_t page_bytes_ = 0;
};

class HostProducerPool final : public ProducerPool {
 public:
  explicit HostProducerPool(const PoolRequest& req) : map_(req, true) {}
  std::byte* buffer(std::uint32_t slot) noexcept override { return map_.at(slot); }

 private:
  HostMapping map_;
};

class HostReaderPool final : public ReaderPool {
 public:
  explicit HostReaderPool(const PoolRequest& req)
      : map_(req, false, req.copy_on_write), copy_on_write_(req.copy_on_write) {
    if (copy_on_write_) map_.open_pagemap();
  }
  const std::byte* buffer(std::uint32_t slot, std::uint64_t, std::uint64_t) noexcept override {
    return map_.at(slot);
  }
  // Called at every release, before the reader's bit is cleared: the private copies go while the
  // slot is still held, so no later frame of the slot can show them. A system call per release
  // (a pagemap read, and madvise when something was written), only for copy-on-write readers
  // (the option documents it).
  void release_fence(std::uint32_t slot, std::uint32_t, CudaStream) noexcept override {
    if (copy_on_write_) map_.discard_private_copies(slot);
  }

 private:
  HostMapping map_;
  bool copy_on_write_;
};

}  // namespace

std::unique_ptr<ProducerPool> make_host_producer_pool(const PoolRequest& request) {
  return std::make_unique<HostProducerPool>(request);
}

std::unique_ptr<ReaderPool> make_host_reader_pool(const PoolRequest& request) {
  return std::make_unique<HostReaderPool>(request);
}

}  // namespace ipcring::detail
