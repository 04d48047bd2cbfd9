// loan.cpp — the Python class Loan (and _LoanView, what its buffer views refer to): a slot the
// producer fills through the buffer protocol, numpy, torch or write(), then publishes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "state.hpp"
#include "tensors.hpp"
#include "views.hpp"

namespace ipcring::python {

using namespace pybind11::literals;

namespace {

// Loan.set_tensor / ndarray / tensor: describe the loan's bytes; returns the descriptor.
TensorDesc describe_loan(PyLoan& l, const py::handle& shape, const py::handle& dtype,
                         const py::object& strides, std::uint64_t byte_offset) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "describing a loan that was " +
                                           (l.published ? "published" : "discarded"));
  }
  const DtypeInfo& d = parse_dtype(dtype, l.channel);
  const std::vector<std::int64_t> dims = parse_shape(shape, l.channel);
  TensorDesc t = make_contiguous(d, dims);
  t.byte_offset = byte_offset;
  if (!strides.is_none()) {
    const std::vector<std::int64_t> st = parse_shape(strides, l.channel);
    if (st.size() != dims.size()) {
      raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + std::to_string(st.size()) +
                                             " strides for " + std::to_string(dims.size()) +
                                             " dimensions");
    }
    for (std::size_t k = 0; k < st.size(); ++k) t.strides[k] = st[k];
  }
  const auto span = tensor_span(t);
  if (!span || *span > l.capacity) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(l.channel) + "a " + std::string(d.name) + " tensor of shape " +
                   t.shape_text() +
                   (span ? " needs " + std::to_string(*span) + " bytes" : " is too large") +
                   "; the frame capacity is " + std::to_string(l.capacity) + " bytes");
  }
  auto lock = lock_state(l.state->producer->mutex);
  if (!l.state->loan.set_tensor(t)) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(l.channel) + "set_tensor() refused (forked child?)");
  }
  l.tensor = t;
  return t;
}

std::string loan_repr(const PyLoan& l) {
  return "<ipcring.Loan channel='" + l.channel + "' sequence=" + std::to_string(l.sequence) +
         " capacity=" + std::to_string(l.capacity) + " slot=" + std::to_string(l.slot) +
         (l.state ? ">" : (l.published ? " published>" : " discarded>"));
}

}  // namespace

void set_loan_metadata(PyLoan& l, const py::bytes& metadata) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) +
                                           "set_metadata() on a loan "
                                           "that was published or discarded");
  }
  const std::string m = metadata;
  auto lock = lock_state(l.state->producer->mutex);
  if (m.size() > l.state->loan.metadata_capacity()) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "metadata of " +
                                           std::to_string(m.size()) +
                                           " bytes exceeds the channel's metadata_bytes = " +
                                           std::to_string(l.state->loan.metadata_capacity()));
  }
  if (!l.state->loan.set_metadata(
          std::span(reinterpret_cast<const std::byte*>(m.data()), m.size()))) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(l.channel) + "set_metadata() refused (forked child?)");
  }
}

py::object loan_tensor(PyLoan& l, const py::object& shape, const py::object& dtype) {
  const TensorDesc t = describe_loan(l, shape, dtype, py::none(), 0);
  const py::module_ torch = py::module_::import("torch");
  if (l.device.kind == DeviceKind::cuda) {
    // torch fills the tensor on its current stream of the channel's device: publish() records
    // the write-done event there.
    const py::object stream = torch.attr("cuda").attr("current_stream")(l.device.index);
    const auto s = stream.attr("cuda_stream").cast<std::uintptr_t>();
    set_write_stream(l, s == 0 ? 1 : s);  // 0: torch's name for the legacy default stream
  }
  const py::object capsule = loan_dlpack_typed(l, t);
  return torch.attr("utils").attr("dlpack").attr("from_dlpack")(capsule);
}

void bind_loan(py::module_& m) {
  py::class_<LoanView>(m, "_LoanView",
                       "Internal: what a loan's memoryview refers to; counts as a live view.")
      .def_property_readonly("sequence", [](const LoanView& v) { return v.sequence; })
      .def("__repr__", [](const LoanView& v) {
        return "<ipcring._LoanView sequence=" + std::to_string(v.sequence) + ">";
      });

  py::class_<PyLoan> loan(m, "Loan", py::buffer_protocol(), R"doc(
A slot the producer is filling: a writable buffer of `capacity` bytes (buffer protocol and
__dlpack__). Producer.publish(loan, nbytes) publishes it; discard() (or the end of a `with` block
without publish, or the object dying) returns the slot. publish() refuses with BufferError while
a view of the loan (memoryview, numpy array, tensor) is alive.
)doc");
  install_loan_buffer(loan);
  loan.def_property_readonly("capacity", [](const PyLoan& l) { return l.capacity; })
      .def_property_readonly(
          "sequence", [](const PyLoan& l) { return l.sequence; },
          "the sequence number publish() will give this frame")
      .def_property_readonly("slot", [](const PyLoan& l) { return l.slot; })
      .def_property_readonly("channel", [](const PyLoan& l) { return l.channel; })
      .def_property_readonly(
          "address", [](const PyLoan& l) { return reinterpret_cast<std::uintptr_t>(l.data); })
      .def_property_readonly("published", [](const PyLoan& l) { return l.published; })
      .def_property_readonly(
          "valid", [](const PyLoan& l) { return static_cast<bool>(l.state); },
          "not yet published or discarded")
      .def("set_metadata", &set_loan_metadata, py::arg("metadata"),
           "Up to metadata_capacity bytes published with the frame (Frame.metadata).")
      .def_property_readonly(
          "metadata_capacity",
          [](PyLoan& l) -> std::size_t {
            if (!l.state) return 0;
            auto lock = lock_state(l.state->producer->mutex);
            return l.state->loan.metadata_capacity();
          },
          "the channel's metadata_bytes")
      .def(
          "set_tensor",
          [](PyLoan& l, const py::object& shape, const py::object& dtype, const py::object& strides,
             std::uint64_t byte_offset) { describe_loan(l, shape, dtype, strides, byte_offset); },
          py::arg("shape"), py::arg("dtype"), py::arg("strides") = py::none(),
          py::arg("byte_offset") = 0,
          "Describe the loan's bytes as a tensor (strides in elements; None: C order); "
          "publish() then defaults to the tensor's size.")
      .def(
          "set_capture_time_ns",
          [](PyLoan& l, std::int64_t ns) {
            if (!l.state || ns < 0) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "set_capture_time_ns(" + std::to_string(ns) +
                             "): " + (l.state ? "must be >= 0" : "the loan is gone"));
            }
            auto lock = lock_state(l.state->producer->mutex);
            l.state->loan.set_capture_time_ns(static_cast<std::uint64_t>(ns));
          },
          py::arg("ns"), "When the frame's content was captured (any clock; Frame.capture_time_ns)")
      .def(
          "ndarray",
          [](const py::object& self, const py::object& shape, const py::object& dtype) {
            auto& l = self.cast<PyLoan&>();
            if (l.device.kind != DeviceKind::cpu) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "loan.ndarray() on a CUDA channel (device " +
                             std::to_string(l.device.index) +
                             "): numpy arrays live on the host; use loan.tensor(shape, dtype)");
            }
            const TensorDesc t = describe_loan(l, shape, dtype, py::none(), 0);
            const DtypeInfo* d = dtype_info(t.dtype_code, t.dtype_bits);
            if (d == nullptr || d->format == nullptr) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "numpy has no " + t.dtype_name() +
                             " arrays; use loan.tensor(shape, dtype) with torch");
            }
            const py::module_ np = py::module_::import("numpy");
            // A memoryview of the loan: counted as a live view, writable, zero-copy.
            const py::object bytes =
                py::reinterpret_steal<py::object>(PyMemoryView_FromObject(self.ptr()));
            if (!bytes) throw py::error_already_set();
            py::tuple dims(t.ndim);
            for (std::uint8_t k = 0; k < t.ndim; ++k) dims[k] = t.shape[k];
            return np
                .attr("frombuffer")(bytes, "dtype"_a = d->name,
                                    "count"_a = static_cast<std::int64_t>(t.elements()))
                .attr("reshape")(dims);
          },
          py::arg("shape"), py::arg("dtype"),
          "A writable numpy array of `shape` and `dtype` over the loan's memory (zero-copy); "
          "also describes the frame (set_tensor). Delete it before publish().")
      .def("tensor", &loan_tensor, py::arg("shape"), py::arg("dtype"),
           "A writable torch tensor of `shape` and `dtype` (a torch.dtype or a name) over the "
           "loan's memory (zero-copy; a CUDA tensor on a CUDA channel, and publish() then records "
           "the write-done event on torch's current stream); also describes the frame. Delete it "
           "before publish().")
      .def(
          "write",
          [](PyLoan& l, const py::buffer& data, std::int64_t offset) {
            if (!l.state) {
              raise_errc(Errc::invalid_argument, channel_prefix(l.channel) +
                                                     "write() to a loan that was " +
                                                     (l.published ? "published" : "discarded"));
            }
            const ContiguousBuffer source(data, l.channel);
            const std::uint64_t bytes = source.size();
            if (offset < 0 || static_cast<std::uint64_t>(offset) > l.capacity ||
                bytes > l.capacity - static_cast<std::uint64_t>(offset)) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "write of " + std::to_string(bytes) +
                             " bytes at offset " + std::to_string(offset) +
                             " exceeds the capacity of " + std::to_string(l.capacity));
            }
            {
              py::gil_scoped_release nogil;
              std::memcpy(l.data + offset, source.data(), bytes);
            }
            return static_cast<std::uint64_t>(offset) + bytes;
          },
          py::arg("data"), py::arg("offset") = 0,
          "Copy a bytes-like object in at `offset`; returns offset + its length.")
      .def(
          "discard", [](PyLoan& l) { l.state.reset(); },
          "Return the slot without publishing (idempotent; views keep it until they die).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyLoan& l, const py::args&) {
             l.state.reset();
             return false;
           })
      .def(
          "__dlpack__",
          [](PyLoan& l, const py::object& stream, const py::object& max_version,
             const py::object& dl_device, const py::object& copy) {
            check_dlpack_request(l.device, l.channel, dl_device, copy);
            return loan_dlpack(l, stream, max_version);
          },
          py::arg("stream") = py::none(), py::kw_only(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "DLPack capsule of a writable 1-D uint8 tensor of `capacity` bytes.")
      .def("__dlpack_device__", [](const PyLoan& l) { return dlpack_device(l.device); })
      .def("__repr__", &loan_repr);
}

}  // namespace ipcring::python
