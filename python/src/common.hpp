// common.hpp — helpers shared by the bindings: timeouts and signal checks, option parsing,
// names of enums, tensor descriptors as Python values, bytes-like arguments, state locks.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ipcring/ipcring.hpp"

namespace ipcring::python {

namespace py = pybind11;

// Longest wait with the GIL released before signals are checked.
constexpr std::chrono::nanoseconds kSignalSlice = std::chrono::milliseconds(50);

std::uint64_t now_ns();
std::string seconds_text(double s);

// A timeout in seconds: None (or +inf) waits forever; 0 tries once.
struct Deadline {
  bool forever = true;
  std::uint64_t end_ns = 0;

  std::chrono::nanoseconds next_slice() const;
  bool passed() const { return !forever && now_ns() >= end_ns; }
};

// InvalidArgument naming the channel and `what` for a negative or NaN timeout.
Deadline make_deadline(const std::optional<double>& timeout, const std::string& channel,
                       const char* what);
// A seconds option in [0, 1e6]; InvalidArgument otherwise.
std::chrono::nanoseconds seconds_option(double s, const std::string& channel, const char* what);
// Raises the pending Python exception (KeyboardInterrupt) when a signal handler asks.
void check_signals();
// A list of uids or gids (Python ints), each checked: ChannelConfig::allow_uids and friends.
std::vector<std::uint32_t> id_list(const std::vector<std::int64_t>& ids, const std::string& channel,
                                   const char* what);
std::uint32_t config_u32(std::int64_t v, const std::string& channel, const char* what);
Backend parse_backend(const std::string& s, const std::string& channel);

// A descriptor's shape and strides (in elements) as tuples and its dtype's name; None without one.
py::object shape_tuple(const std::optional<TensorDesc>& t);
py::object strides_tuple(const std::optional<TensorDesc>& t);
py::object dtype_name(const std::optional<TensorDesc>& t);

// A C-contiguous read-only view of a bytes-like object. A strided one (a transposed numpy array)
// is an InvalidArgument: copy it with numpy.ascontiguousarray first.
class ContiguousBuffer {
 public:
  ContiguousBuffer(const py::handle& obj, const std::string& channel);
  ContiguousBuffer(const ContiguousBuffer&) = delete;
  ContiguousBuffer& operator=(const ContiguousBuffer&) = delete;
  ~ContiguousBuffer() { PyBuffer_Release(&view_); }
  const void* data() const { return view_.buf; }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

// Locks a state mutex; waits for it with the GIL released when another thread holds it (that
// thread may be blocked in a read slice and needs no GIL to finish it).
std::unique_lock<std::mutex> lock_state(std::mutex& m);

}  // namespace ipcring::python
