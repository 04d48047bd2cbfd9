// common.cpp — see common.hpp.
#include "common.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "errors.hpp"
#include "tensors.hpp"

namespace ipcring::python {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

std::chrono::nanoseconds Deadline::next_slice() const {
  if (forever) return kSignalSlice;
  const std::uint64_t now = now_ns();
  const std::uint64_t left = end_ns > now ? end_ns - now : 0;
  return std::min<std::chrono::nanoseconds>(kSignalSlice, std::chrono::nanoseconds(left));
}

Deadline make_deadline(const std::optional<double>& timeout, const std::string& channel,
                       const char* what) {
  Deadline d;
  if (!timeout || (std::isinf(*timeout) && *timeout > 0)) return d;
  const double s = *timeout;
  if (std::isnan(s) || s < 0) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + what +
                                           "(timeout=" + seconds_text(s) +
                                           "): timeout must be None or a number of seconds >= 0");
  }
  if (s > 1e9) return d;  // ~31 years: forever
  d.forever = false;
  d.end_ns = now_ns() + static_cast<std::uint64_t>(std::llround(s * 1e9));
  return d;
}

std::chrono::nanoseconds seconds_option(double s, const std::string& channel, const char* what) {
  if (std::isnan(s) || s < 0 || s > 1e6) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + what + "=" + seconds_text(s) +
                                           ": must be a number of seconds in [0, 1e6]");
  }
  return std::chrono::nanoseconds(std::llround(s * 1e9));
}

void check_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

std::vector<std::uint32_t> id_list(const std::vector<std::int64_t>& ids, const std::string& channel,
                                   const char* what) {
  std::vector<std::uint32_t> out;
  out.reserve(ids.size());
  for (const std::int64_t id : ids) {
    // (uid_t)-1 is "no id" to the kernel (setresuid): never a real user or group.
    if (id < 0 || id >= std::numeric_limits<std::uint32_t>::max()) {
      raise_errc(Errc::invalid_config, channel_prefix(channel) + what + " holds " +
                                           std::to_string(id) +
                                           ", which is not a user or group id");
    }
    out.push_back(static_cast<std::uint32_t>(id));
  }
  return out;
}

std::uint32_t config_u32(std::int64_t v, const std::string& channel, const char* what) {
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    raise_errc(Errc::invalid_config,
               channel_prefix(channel) + what + "=" + std::to_string(v) + " is out of range");
  }
  return static_cast<std::uint32_t>(v);
}

Backend parse_backend(const std::string& s, const std::string& channel) {
  if (s == "host") return Backend::host;
  if (s == "cuda") return Backend::cuda;
  if (s == "cuda_legacy") return Backend::cuda_legacy;
  if (s == "cuda_vmm") return Backend::cuda_vmm;
  raise_errc(Errc::invalid_config, channel_prefix(channel) + "backend='" + s +
                                       "': expected 'host', 'cuda' (the producer chooses the "
                                       "CUDA path), 'cuda_legacy' or 'cuda_vmm'");
}

py::object shape_tuple(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  py::tuple out(t->ndim);
  for (std::uint8_t d = 0; d < t->ndim; ++d) out[d] = t->shape[d];
  return out;
}

py::object strides_tuple(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  py::tuple out(t->ndim);
  for (std::uint8_t d = 0; d < t->ndim; ++d) out[d] = t->stride(d);
  return out;
}

py::object dtype_name(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  const DtypeInfo* d = dtype_info(t->dtype_code, t->dtype_bits);
  return py::str(d != nullptr ? std::string(d->name) : t->dtype_name());
}

ContiguousBuffer::ContiguousBuffer(const py::handle& obj, const std::string& channel) {
  if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
    py::error_already_set original;
    raise_errc(Errc::invalid_argument,
               channel_prefix(channel) + "data must be a C-contiguous bytes-like object (" +
                   original.what() + "); numpy.ascontiguousarray() makes one");
  }
}

std::unique_lock<std::mutex> lock_state(std::mutex& m) {
  std::unique_lock lock(m, std::try_to_lock);
  if (!lock.owns_lock()) {
    py::gil_scoped_release nogil;
    lock.lock();
  }
  return lock;
}

}  // namespace ipcring::python
