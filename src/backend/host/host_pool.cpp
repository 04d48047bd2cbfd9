// host_pool.cpp — the host backend: `slots` page-aligned frame buffers in the channel's one
// shared-memory object, at frames_offset after the control segment. The producer maps that range
// read-write; readers map it read-only, so a buggy reader cannot corrupt what other readers see.
// Slot i uses buffer i.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "backend/pool.hpp"
#include "common/errno_text.hpp"
#include "ipcring/error.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

namespace {

class HostMapping {
 public:
  HostMapping(const PoolRequest& req, bool writable) : bytes_(req.view.geo.frames_segment_bytes) {
    const std::string ch = "ipcring: channel '" + req.name + "': ";
    if (req.view.fd < 0) {
      throw Error(Errc::invalid_argument, ch + "the host frame pool needs the channel's object");
    }
    // The frame pool is a range of the channel's one object (no second name). The opener checked
    // the object's size and backing against the validated geometry before we get here.
    base_ = mmap(nullptr, bytes_, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                 req.view.fd, static_cast<off_t>(req.view.geo.frames_offset));
    if (base_ == MAP_FAILED) {
      const int err = errno;
      throw Error(Errc::system_error,
                  ch + "mmap of the frame pool (" + std::to_string(bytes_) + " bytes at offset " +
                      std::to_string(req.view.geo.frames_offset) + "): " + errno_text(err));
    }
    stride_ = req.view.geo.frame_stride;
  }
  ~HostMapping() { munmap(base_, bytes_); }
  HostMapping(const HostMapping&) = delete;
  HostMapping& operator=(const HostMapping&) = delete;

  std::byte* at(std::uint32_t slot) const noexcept {
    return static_cast<std::byte*>(base_) + std::uint64_t{slot} * stride_;
  }

 private:
  std::uint64_t bytes_;
  std::uint64_t stride_ = 0;
  void* base_ = nullptr;
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
  explicit HostReaderPool(const PoolRequest& req) : map_(req, false) {}
  const std::byte* buffer(std::uint32_t slot, std::uint64_t, std::uint64_t) noexcept override {
    return map_.at(slot);
  }

 private:
  HostMapping map_;
};

}  // namespace

std::unique_ptr<ProducerPool> make_host_producer_pool(const PoolRequest& request) {
  return std::make_unique<HostProducerPool>(request);
}

std::unique_ptr<ReaderPool> make_host_reader_pool(const PoolRequest& request) {
  return std::make_unique<HostReaderPool>(request);
}

}  // namespace ipcring::detail
