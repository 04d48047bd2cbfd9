// cuda_common.hpp — what the parts of the CUDA pool share: messages, the hot-path error log,
// bounded teardown waits, the process-wide registry lock, and the host registration of control
// segments (the release fence words live there: cuda_fence.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/cuda/cuda_api.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail::cuda {

std::string describe(CudaApi& api, CudaErr e);
inline constexpr const char* kUseHost = "; use Backend::host for this channel";

// Throws the Error for a failed CUDA call at create/attach: Errc::unsupported for
// cudaErrorNotSupported (naming the alternative), Errc::cuda_error otherwise.
[[noreturn]] void throw_call(CudaApi& api, const std::string& ch, const std::string& what,
                             CudaErr e);

// Hot-path failures are reported through Status::backend_error; the reason goes to stderr, at
// most kMaxReports times per pool so a broken device cannot flood the log.
class ErrorLog {
 public:
  explicit ErrorLog(const std::string& channel) : prefix_(channel_prefix(channel)) {}
  void report(CudaApi& api, const char* what, std::uint32_t slot, CudaErr e) noexcept;
  void note(const char* what, std::uint32_t slot) noexcept;

 private:
  static constexpr int kMaxReports = 16;
  std::string prefix_;
  std::atomic<int> reports_{0};
};

// How long teardown waits for GPU work that may still use what it is about to release (readers'
// frames and fences, the producer's own writes). Past it, teardown leaves those resources
// allocated, mapped and registered for the life of the process instead of freeing them under
// running work.
inline constexpr std::chrono::seconds kTeardownWait{2};

// Polls `done` until it returns true or `deadline` passes. Teardown only.
template <class Done>
bool wait_until(Done done, std::chrono::steady_clock::time_point deadline) noexcept {
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// Whether `event`'s most recent record completed (cudaEventQuery); errors count as complete (a
// broken event cannot be waited for).
bool event_done(CudaApi& api, CudaEvent event) noexcept;

bool lease_active(std::uint64_t w) noexcept;

// Negative controls for the GPU tests, never for production: IPCRING_CUDA_TEST_BREAK=wait_on makes
// Frame::wait_on a no-op; =release_fence makes a reader's release write its fence word from the
// CPU at once instead of from its stream after its kernels. With either, the GPU tests that check
// the corresponding ordering must fail (tests/gpu/README.md). Read when a pool is made.
enum class TestBreak { none, wait_on, release_fence };
TestBreak test_break() noexcept;

// Guards the process-wide registries: the producers of this process, the import cache, the
// segment registrations.
std::mutex& registry_mutex();

// A control segment mapping page-locked for the GPU (cudaHostRegister, mapped and portable), once
// per (API, mapping address) in the process: a range may be registered only once
// (cudaErrorHostMemoryAlreadyRegistered), so every pool of the process that uses the mapping shares
// the registration. The last owner unregisters it, unless leak() was called because GPU work that
// may still write into the segment (a fence write) did not finish in time.
class SegmentRegistration : public std::enable_shared_from_this<SegmentRegistration> {
 public:
  // Registers, or shares, the mapping of `view`; throws Error (naming the channel).
  static std::shared_ptr<SegmentRegistration> acquire(const std::shared_ptr<CudaApi>& api,
                                                      const SegmentView& view, int device,
                                                      const std::string& channel);
  SegmentRegistration() = default;
  ~SegmentRegistration();
  SegmentRegistration(const SegmentRegistration&) = delete;
  SegmentRegistration& operator=(const SegmentRegistration&) = delete;

  // The device address of a word of the segment (for stream memory operations).
  void* device_address(const void* host) const noexcept {
    return device_base_ + (static_cast<const unsigned char*>(host) - host_base_);
  }
  // Keeps the registration for the life of the process. Call with registry_mutex() held.
  void leak();

 private:
  std::shared_ptr<CudaApi> api_;
  unsigned char* host_base_ = nullptr;
  unsigned char* device_base_ = nullptr;
  int device_ = 0;
  std::uint64_t fork_gen_ = 0;
};

}  // namespace ipcring::detail::cuda
