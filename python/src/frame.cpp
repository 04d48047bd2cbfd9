// frame.cpp — the Python class Frame (and _FrameView, what its buffer views refer to).
//
// Release of frames never depends on the garbage collector: a Frame's slot is released when the
// last reference to its FrameHold goes (the Frame object, or a view); CPython's reference counting
// does that at once. Only a reference cycle defers it to the collector (documented, tested).
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "state.hpp"
#include "tensors.hpp"
#include "views.hpp"

namespace ipcring::python {

namespace {

std::string frame_repr(const PyFrame& f) {
  std::string tensor;
  if (f.tensor) {
    tensor = " " + std::string(py::str(dtype_name(f.tensor))) + f.tensor->shape_text();
  }
  return "<ipcring.Frame channel='" + f.channel + "' sequence=" + std::to_string(f.sequence) +
         tensor + " size=" + std::to_string(f.size) + " slot=" + std::to_string(f.slot) +
         (f.hold ? " held>" : (f.watch.expired() ? " released>" : " released, views alive>"));
}

}  // namespace

void bind_frame(py::module_& m) {
  py::class_<FrameView>(m, "_FrameView",
                        "Internal: what a frame's memoryview refers to; holds the frame's slot.")
      .def_property_readonly("sequence", [](const FrameView& v) { return v.sequence; })
      .def("__repr__", [](const FrameView& v) {
        return "<ipcring._FrameView sequence=" + std::to_string(v.sequence) + ">";
      });

  py::class_<PyFrame> frame(m, "Frame", py::buffer_protocol(), R"doc(
A published frame held by a Reader. Not constructible from Python: Reader.read()/try_read() make
them.

The slot stays held (the producer cannot reuse its buffer) until the last of these goes: this
object's reference (release(), the end of a `with` block, or the object dying), and every view
made from it (memoryview(frame), numpy.asarray(frame), torch.from_dlpack(frame)). The views are
read-only memory: writing through a DLPack tensor faults (DLPack 0.6 cannot mark it read-only).
)doc");
  install_frame_buffer(frame);
  frame.def_property_readonly("sequence", [](const PyFrame& f) { return f.sequence; })
      .def_property_readonly("size", [](const PyFrame& f) { return f.size; })
      .def_property_readonly("epoch", [](const PyFrame& f) { return f.epoch; })
      .def_property_readonly(
          "timestamp_ns", [](const PyFrame& f) { return f.timestamp_ns; },
          "CLOCK_MONOTONIC at publish (time.monotonic_ns() scale)")
      .def_property_readonly(
          "skipped", [](const PyFrame& f) { return f.skipped; },
          "frames skipped since the previous read (overruns for sequential)")
      .def_property_readonly("slot", [](const PyFrame& f) { return f.slot; })
      .def_property_readonly(
          "metadata", [](const PyFrame& f) { return py::bytes(f.metadata); },
          "the producer's metadata (bytes; empty when it set none)")
      .def_property_readonly(
          "shape", [](const PyFrame& f) { return shape_tuple(f.tensor); },
          "the producer's tensor shape (tuple), or None for a frame of plain bytes")
      .def_property_readonly(
          "dtype", [](const PyFrame& f) { return dtype_name(f.tensor); },
          "the element type's NumPy name ('uint8', 'float32', 'bfloat16' ...), or None")
      .def_property_readonly(
          "strides", [](const PyFrame& f) { return strides_tuple(f.tensor); },
          "strides in elements (tuple), or None")
      .def_property_readonly(
          "byte_offset",
          [](const PyFrame& f) {
            return f.tensor ? py::object(py::int_(f.tensor->byte_offset)) : py::none();
          },
          "offset of the tensor's first element in the frame, or None")
      .def_property_readonly(
          "tensor_invalid", [](const PyFrame& f) { return f.tensor_invalid; },
          "the producer's tensor descriptor did not describe this frame and was dropped")
      .def_property_readonly(
          "capture_time_ns",
          [](const PyFrame& f) {
            return f.capture_time_ns != 0 ? py::object(py::int_(f.capture_time_ns)) : py::none();
          },
          "the producer's capture time (send(capture_time_ns=...)), or None")
      .def_property_readonly("channel", [](const PyFrame& f) { return f.channel; })
      .def_property_readonly(
          "address", [](const PyFrame& f) { return reinterpret_cast<std::uintptr_t>(f.data); },
          "address of the payload in this process (compare with tensor.data_ptr())")
      .def_property_readonly(
          "held", [](const PyFrame& f) { return static_cast<bool>(f.hold); },
          "this object still holds its reference (not released)")
      .def_property_readonly(
          "slot_held", [](const PyFrame& f) { return !f.watch.expired(); },
          "the slot is still held, by this object or by views of it")
      .def(
          "release",
          [](PyFrame& f, const py::object& stream) {
            set_frame_release_stream(f, stream);
            f.hold.reset();
          },
          py::arg("stream") = py::none(),
          "Drop this object's hold on the slot (idempotent). Views made from the frame keep "
          "the slot held until they die. CUDA frames: the release fence is queued on `stream` "
          "(DLPack numbering: 1 legacy default, 2 per-thread default, else a cudaStream_t) when "
          "given, else on the stream the frame was exported to (__dlpack__(stream)), else on "
          "the legacy default stream. After a __cuda_array_interface__ export that bound no "
          "stream, a release without `stream` (and the end of a `with` block) raises "
          "InvalidArgument: name the stream the consumer's last work ran on (1 for the legacy "
          "default or a blocking stream).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyFrame& f, const py::args& exc) {
             // Leaving the block normally is a release() without a stream, which a frame used
             // through __cuda_array_interface__ refuses (say release(stream=...) inside the block).
             if (!exc.empty() && exc[0].is_none()) set_frame_release_stream(f, py::none());
             f.hold.reset();
             return false;
           })
      .def(
          "__dlpack__",
          [](const PyFrame& f, const py::object& stream, const py::object& max_version,
             const py::object& dl_device, const py::object& copy) {
            check_dlpack_request(f.device, f.channel, dl_device, copy);
            return frame_dlpack(f, stream, max_version);
          },
          py::arg("stream") = py::none(), py::kw_only(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "DLPack capsule of the frame (typed with the producer's dtype/shape/strides, else 1-D "
          "uint8) sharing its memory. CUDA frames: kDLCUDA; `stream` (1 legacy default, 2 "
          "per-thread default, a cudaStream_t, -1 no synchronisation; None: legacy) is made to "
          "wait for the producer's write before the capsule is returned, and the release fence "
          "is queued on it.")
      .def("__dlpack_device__", [](const PyFrame& f) { return dlpack_device(f.device); })
      .def(
          "__array__",
          [](const py::object& self, const py::object& dtype, const py::object& /*copy*/) {
            // NumPy asks the buffer protocol first (host frames never get here); without this, a
            // CUDA frame (no buffer) would silently become a 0-d object array.
            const auto& f = self.cast<const PyFrame&>();
            if (f.device.kind != DeviceKind::cpu) {
              throw py::type_error(channel_prefix(f.channel) + "frame " +
                                   std::to_string(f.sequence) + " is in CUDA memory (device " +
                                   std::to_string(f.device.index) +
                                   "): numpy arrays live on the host; use torch.from_dlpack(frame) "
                                   "or cupy.asarray(frame), then .cpu() / .get() to copy");
            }
            const py::module_ np = py::module_::import("numpy");
            const py::object view =
                py::reinterpret_steal<py::object>(PyMemoryView_FromObject(self.ptr()));
            if (!view) throw py::error_already_set();
            return dtype.is_none() ? np.attr("asarray")(view) : np.attr("asarray")(view, dtype);
          },
          py::arg("dtype") = py::none(), py::kw_only(), py::arg("copy") = py::none())
      .def_property_readonly(
          "__cuda_array_interface__",
          [](const PyFrame& f) -> py::object {
            // Host frames have none (so consumers fall back to DLPack or the buffer protocol).
            if (f.device.kind == DeviceKind::cpu) {
              throw py::attribute_error("host frames have no __cuda_array_interface__");
            }
            return frame_cuda_array_interface(f);
          },
          "CUDA frames: the CUDA array interface v3 (read-only data; `stream`: the stream the "
          "producer's write is visible on, the frame's consumer stream or 1)")
      .def("__repr__", &frame_repr);
}

}  // namespace ipcring::python
