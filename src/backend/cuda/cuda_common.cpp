// cuda_common.cpp — see cuda_common.hpp.
#include "backend/cuda/cuda_common.hpp"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "common/clock.hpp"
#include "common/process.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail::cuda {

std::string describe(CudaApi& api, CudaErr e) {
  return std::string(api.error_name(e)) + " (" + std::to_string(static_cast<int>(e)) + ")";
}

void throw_call(CudaApi& api, const std::string& ch, const std::string& what, CudaErr e) {
  (void)api.get_last_error();
  if (e == CudaErr::not_supported) {
    throw Error(Errc::unsupported, ch + what + " is not supported on this machine (" +
                                       describe(api, e) + ")" + kUseHost);
  }
  throw Error(Errc::cuda_error, ch + what + " failed: " + describe(api, e));
}

void ErrorLog::report(CudaApi& api, const char* what, std::uint32_t slot, CudaErr e) noexcept {
  if (reports_.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
  std::fprintf(stderr, "%s%s (slot %u) failed: %s (%d)\n", prefix_.c_str(), what, slot,
               api.error_name(e), static_cast<int>(e));
}

void ErrorLog::note(const char* what, std::uint32_t slot) noexcept {
  if (reports_.fetch_add(1, std::memory_order_relaxed) >= kMaxReports) return;
  std::fprintf(stderr, "%s%s (slot %u)\n", prefix_.c_str(), what, slot);
}

bool event_done(CudaApi& api, CudaEvent event) noexcept {
  const CudaErr q = api.query_event(event);
  if (q == CudaErr::not_ready) return false;
  (void)api.get_last_error();
  return true;
}

bool lease_active(std::uint64_t w) noexcept {
  return LeaseWord::state(w) == static_cast<std::uint8_t>(LeaseState::active);
}

TestBreak test_break() noexcept {
  // Read when a pool is made; nothing in ipcring writes the environment.
  const char* v = std::getenv("IPCRING_CUDA_TEST_BREAK");  // NOLINT(concurrency-mt-unsafe)
  if (v == nullptr) return TestBreak::none;
  const std::string s(v);
  if (s == "wait_on") return TestBreak::wait_on;
  if (s == "release_fence") return TestBreak::release_fence;
  return TestBreak::none;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

namespace {

using RegistrationKey = std::pair<const CudaApi*, const unsigned char*>;

std::map<RegistrationKey, std::weak_ptr<SegmentRegistration>>& registrations() {
  static std::map<RegistrationKey, std::weak_ptr<SegmentRegistration>> m;
  return m;
}

std::vector<std::shared_ptr<SegmentRegistration>>& leaked_registrations() {
  static std::vector<std::shared_ptr<SegmentRegistration>> v;
  return v;
}

}  // namespace

std::shared_ptr<SegmentRegistration> SegmentRegistration::acquire(
    const std::shared_ptr<CudaApi>& api, const SegmentView& view, int device,
    const std::string& channel) {
  const std::string ch = channel_prefix(channel);
  std::lock_guard lock(registry_mutex());
  auto& slot = registrations()[{api.get(), view.base}];
  if (auto existing = slot.lock()) return existing;
  auto reg = std::make_shared<SegmentRegistration>();
  DeviceGuard guard(*api, device);
  if (!guard.ok()) {
    throw_call(*api, ch, "cudaSetDevice(" + std::to_string(device) + ")", guard.error());
  }
  if (const CudaErr e = api->host_register(view.base, view.geo.segment_bytes);
      e != CudaErr::success) {
    throw_call(*api, ch,
               "cudaHostRegister of the control segment (" +
                   std::to_string(view.geo.segment_bytes) + " bytes, for the release fences)",
               e);
  }
  reg->api_ = api;
  reg->host_base_ = view.base;
  reg->device_ = device;
  reg->fork_gen_ = fork_generation();
  void* dptr = nullptr;
  if (const CudaErr e = api->host_device_pointer(&dptr, view.base); e != CudaErr::success) {
    (void)api->host_unregister(view.base);
    reg->host_base_ = nullptr;
    throw_call(*api, ch, "cudaHostGetDevicePointer of the control segment", e);
  }
  reg->device_base_ = static_cast<unsigned char*>(dptr);
  slot = reg;
  return reg;
}

SegmentRegistration::~SegmentRegistration() {
  if (host_base_ == nullptr || fork_gen_ != fork_generation()) return;
  DeviceGuard guard(*api_, device_);
  (void)api_->host_unregister(host_base_);
  (void)api_->get_last_error();
}

void SegmentRegistration::leak() {
  leaked_registrations().push_back(shared_from_this());
  // A later mapping at the same address is other memory: it must not find this registration
  // (registering it fails cleanly instead, as the range is still registered).
  auto it = registrations().find({api_.get(), host_base_});
  if (it != registrations().end() && it->second.lock().get() == this) registrations().erase(it);
}

}  // namespace ipcring::detail::cuda
