// device_copy.cpp — see device_copy.hpp.
#include "ringdump/device_copy.hpp"

#include <stdexcept>
#include <utility>

namespace ringdump {

using ipcring::detail::CudaErr;
using ipcring::detail::DeviceGuard;

namespace {

std::string cuda_text(ipcring::detail::CudaApi& api, CudaErr e) {
  return std::string(api.error_name(e)) + " (" + std::to_string(static_cast<int>(e)) + ")";
}

}  // namespace

DeviceCopy::DeviceCopy(std::shared_ptr<ipcring::detail::CudaApi> api, std::string channel,
                       std::size_t capacity, int device)
    : api_(std::move(api)), channel_(std::move(channel)), device_(device) {
  if (!api_) {
    throw std::runtime_error(channel_ + ": a CUDA channel, and this ringdump has no CUDA runtime " +
                             "(libipcring_cuda.so not loaded)");
  }
  DeviceGuard guard(*api_, device_);
  if (!guard.ok()) {
    throw std::runtime_error(channel_ + ": cannot make CUDA device " + std::to_string(device_) +
                             " current: " + cuda_text(*api_, guard.error()));
  }
  if (const CudaErr e = api_->create_stream(stream_); e != CudaErr::success) {
    stream_ = nullptr;
    throw std::runtime_error(channel_ + ": cannot create a CUDA stream: " + cuda_text(*api_, e));
  }
  if (!grow(capacity == 0 ? 1 : capacity)) {
    (void)api_->destroy_stream(stream_);
    throw std::runtime_error(error_);
  }
}

DeviceCopy::~DeviceCopy() {
  if (!api_) return;
  DeviceGuard guard(*api_, device_);
  if (pinned_ != nullptr) (void)api_->free_host(pinned_);
  if (stream_ != nullptr) (void)api_->destroy_stream(stream_);
}

bool DeviceCopy::grow(std::size_t bytes) {
  if (bytes <= capacity_) return true;
  DeviceGuard guard(*api_, device_);
  if (pinned_ != nullptr) (void)api_->free_host(pinned_);
  pinned_ = nullptr;
  capacity_ = 0;
  if (const CudaErr e = api_->host_alloc(&pinned_, bytes); e != CudaErr::success) {
    pinned_ = nullptr;
    error_ = channel_ + ": cannot allocate " + std::to_string(bytes) +
             " bytes of page-locked host memory: " + cuda_text(*api_, e);
    return false;
  }
  capacity_ = bytes;
  return true;
}

bool DeviceCopy::fail(ipcring::Frame& f, const std::string& what) {
  (void)api_->get_last_error();  // a failed call must not make the next, unrelated one report it
  const std::uint64_t sequence = f.sequence();
  f.release();
  ++failures_;
  error_ = channel_ + ": frame " + std::to_string(sequence) + " dropped: " + what;
  return false;
}

bool DeviceCopy::copy_then_release(ipcring::Frame& f, const Use& use) {
  const std::size_t bytes = f.size();
  if (!grow(bytes)) {
    const std::string why = error_;
    return fail(f, why);
  }
  DeviceGuard guard(*api_, device_);
  if (!guard.ok()) {
    return fail(f, "cannot make CUDA device " + std::to_string(device_) +
                       " current: " + cuda_text(*api_, guard.error()));
  }
  // (1) after the producer's writes; producer_gone: its writes may never complete.
  if (const ipcring::Status st = f.wait_on(stream_); st != ipcring::Status::ok) {
    return fail(f, std::string("waiting for the producer's writes: ") + ipcring::to_string(st));
  }
  if (bytes != 0) {
    // (2) the copy, (3) its completion, on this thread.
    if (const CudaErr e = api_->memcpy_to_host_async(pinned_, f.data(), bytes, stream_);
        e != CudaErr::success) {
      return fail(
          f, "copy to host memory (" + std::to_string(bytes) + " bytes): " + cuda_text(*api_, e));
    }
  }
  if (const CudaErr e = api_->stream_synchronize(stream_); e != CudaErr::success) {
    return fail(f, "waiting for the copy to host memory: " + cuda_text(*api_, e));
  }
  // (4) the copy is complete: use it, then give the frame back.
  use(f, {static_cast<const std::byte*>(pinned_), bytes});
  f.release();
  return true;
}

}  // namespace ringdump
