// device_copy.hpp — ringdump record's copy of CUDA frames into page-locked host memory.
//
// A CUDA channel's frames are device memory: observers cannot copy them (they copy with the CPU),
// so record reads such a channel as a reader that holds each frame while it is copied. Per frame,
// on the recorder's thread:
//   1. Frame::wait_on(stream): the copy is ordered after the producer's writes to the frame;
//   2. memcpy_to_host_async into a page-locked buffer (host_alloc) on the recorder's own stream;
//   3. stream_synchronize(stream): the copy is complete (or has failed);
//   4. the caller's `use` runs on the completed copy (record encodes it into the writer's buffer,
//      the frame's metadata and tensor still valid), then the frame is released.
// The frame is never released before the copy completed or failed; a failed step drops the frame
// (released, counted in failures(), error() naming the channel and the CUDA error) and `use` is
// not called. Through the project's CUDA layer (backend/cuda/cuda_api.hpp), so the unit tests
// drive it with the fake CUDA (tests/unit/fake_cuda.*).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "backend/cuda/cuda_api.hpp"
#include "ipcring/frame.hpp"

namespace ringdump {

class DeviceCopy {
 public:
  using Use = std::function<void(const ipcring::Frame&, std::span<const std::byte> payload)>;

  // Makes the stream (on `device`, the current context restored after) and a page-locked buffer
  // of `capacity` bytes. Throws std::runtime_error naming the channel and the CUDA error.
  DeviceCopy(std::shared_ptr<ipcring::detail::CudaApi> api, std::string channel,
             std::size_t capacity, int device = 0);
  ~DeviceCopy();
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;

  // Copies f's payload (steps 1-4 above) and releases f. True when `use` ran on the copy; false
  // when the frame was dropped (error() says why).
  bool copy_then_release(ipcring::Frame& f, const Use& use);

  std::uint64_t failures() const noexcept { return failures_; }
  const std::string& error() const noexcept { return error_; }  // the last failure

 private:
  bool fail(ipcring::Frame& f, const std::string& what);
  bool grow(std::size_t bytes);

  std::shared_ptr<ipcring::detail::CudaApi> api_;
  std::string channel_;
  int device_ = 0;
  ipcring::CudaStream stream_ = nullptr;
  void* pinned_ = nullptr;
  std::size_t capacity_ = 0;
  std::uint64_t failures_ = 0;
  std::string error_;
};

}  // namespace ringdump
