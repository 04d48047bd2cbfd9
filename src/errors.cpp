#include "ipcring/config.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "ipcring/result.hpp"
#include "ipcring/version.hpp"
#include "segment/layout.hpp"

namespace ipcring {

const char* to_string(Errc code) noexcept {
  switch (code) {
    case Errc::invalid_name:
      return "invalid_name";
    case Errc::invalid_config:
      return "invalid_config";
    case Errc::not_found:
      return "not_found";
    case Errc::producer_exists:
      return "producer_exists";
    case Errc::version_mismatch:
      return "version_mismatch";
    case Errc::permission_denied:
      return "permission_denied";
    case Errc::corrupt_segment:
      return "corrupt_segment";
    case Errc::too_many_readers:
      return "too_many_readers";
    case Errc::config_mismatch:
      return "config_mismatch";
    case Errc::system_error:
      return "system_error";
    case Errc::unsupported:
      return "unsupported";
    case Errc::forked:
      return "forked";
    case Errc::invalid_argument:
      return "invalid_argument";
    case Errc::channel_busy:
      return "channel_busy";
    case Errc::cuda_error:
      return "cuda_error";
    case Errc::not_ready:
      return "not_ready";
    case Errc::no_space:
      return "no_space";
  }
  return "unknown";
}

const char* to_string(Status s) noexcept {
  switch (s) {
    case Status::ok:
      return "ok";
    case Status::no_free_slot:
      return "no_free_slot";
    case Status::timeout:
      return "timeout";
    case Status::no_frame:
      return "no_frame";
    case Status::producer_gone:
      return "producer_gone";
    case Status::evicted:
      return "evicted";
    case Status::max_held:
      return "max_held";
    case Status::loan_outstanding:
      return "loan_outstanding";
    case Status::forked:
      return "forked";
    case Status::backend_error:
      return "backend_error";
    case Status::invalid_loan:
      return "invalid_loan";
  }
  return "unknown";
}

const char* to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::host:
      return "host";
    case Backend::cuda:
      return "cuda";
    case Backend::cuda_legacy:
      return "cuda_legacy";
    case Backend::cuda_vmm:
      return "cuda_vmm";
  }
  return "unknown";
}

const char* to_string(CudaPath path) noexcept {
  switch (path) {
    case CudaPath::none:
      return "none";
    case CudaPath::legacy_ipc:
      return "legacy_ipc";
    case CudaPath::vmm:
      return "vmm";
  }
  return "unknown";
}

const char* to_string(ReadPolicy policy) noexcept {
  switch (policy) {
    case ReadPolicy::latest:
      return "latest";
    case ReadPolicy::sequential:
      return "sequential";
  }
  return "unknown";
}

const char* to_string(SlotState s) noexcept {
  switch (s) {
    case SlotState::empty:
      return "empty";
    case SlotState::ready:
      return "ready";
    case SlotState::held:
      return "held";
    case SlotState::writing:
      return "writing";
  }
  return "unknown";
}

std::uint32_t layout_version() noexcept {
  return detail::kLayoutVersion;
}

}  // namespace ipcring
