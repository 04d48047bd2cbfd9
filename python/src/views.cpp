// views.cpp — buffer protocol and DLPack exports of frames and loans (see views.hpp).
#include "views.hpp"

#include <dlpack/dlpack.h>

#include <limits>

#include "errors.hpp"
#include "tensors.hpp"

namespace ipcring::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// One DLPack export: the tensor, its shape and strides (DLTensor points at them), and the reference
// that keeps the memory valid. Deleted by the consumer through DLManagedTensor::deleter, on any
// thread, possibly without the GIL: nothing here touches Python.
struct DlpackExport {
  DLManagedTensor managed{};
  std::int64_t shape[8] = {0};
  std::int64_t strides[8] = {1};
  std::shared_ptr<FrameHold> frame;  // frame exports: the slot stays held while the tensor lives
  std::unique_ptr<LoanExport> loan;  // loan exports: counted in LoanState::exports
};

void dlpack_deleter(DLManagedTensor* self) {
  delete static_cast<DlpackExport*>(self->manager_ctx);
}

// Capsule destructor: a capsule nobody consumed still owns its tensor. A consumer renames the
// capsule to "used_dltensor" and calls the deleter itself when its tensor dies.
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kUsedCapsuleName)) return;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kCapsuleName));
  if (managed == nullptr) {
    PyErr_WriteUnraisable(capsule);
  } else if (managed->deleter != nullptr) {
    managed->deleter(managed);
  }
  PyErr_Restore(type, value, traceback);
}

DLDevice to_dl(const Device& d) {
  DLDevice dev{};
  dev.device_type = d.kind == DeviceKind::cuda ? kDLCUDA : kDLCPU;
  dev.device_id = d.index;
  return dev;
}

// The stream argument of __dlpack__: None (or absent) for host memory, as the array API says.
void check_stream(const Device& device, const py::object& stream, const std::string& channel) {
  if (device.kind == DeviceKind::cpu) {
    if (!stream.is_none()) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(channel) +
                     "__dlpack__(stream=" + std::string(py::str(py::repr(stream))) +
                     "): host frames take stream=None (there is no stream to order against)");
    }
    return;
  }
  // CUDA (future): make `stream` wait on the frame's write-done event (Frame::wait_on) before
  // handing out the pointer; stream 1 is the legacy default stream, 2 the per-thread one.
  raise_errc(Errc::unsupported, channel_prefix(channel) +
                                    "DLPack export of CUDA frames is not implemented in this "
                                    "build of the Python module");
}

// A capsule of `bytes` bytes at `data`, typed by `tensor` when given (its byte offset is folded
// into the data pointer, which older consumers such as torch 1.13 handle best), else 1-D uint8.
py::object make_capsule(DlpackExport* e, std::byte* data, std::size_t bytes, const Device& device,
                        const TensorDesc* tensor = nullptr) {
  DLTensor& t = e->managed.dl_tensor;
  t.device = to_dl(device);
  t.dtype.lanes = 1;
  if (tensor != nullptr) {
    t.data = data + tensor->byte_offset;
    t.ndim = tensor->ndim;
    t.dtype.code = tensor->dtype_code;
    t.dtype.bits = tensor->dtype_bits;
    for (std::uint8_t d = 0; d < tensor->ndim; ++d) {
      e->shape[d] = tensor->shape[d];
      e->strides[d] = tensor->stride(d);
    }
  } else {
    t.data = data;
    t.ndim = 1;
    t.dtype.code = kDLUInt;
    t.dtype.bits = 8;
    e->shape[0] = static_cast<std::int64_t>(bytes);
    e->strides[0] = 1;
  }
  t.shape = e->shape;
  t.strides = e->strides;
  t.byte_offset = 0;
  e->managed.manager_ctx = e;
  e->managed.deleter = &dlpack_deleter;
  PyObject* capsule = PyCapsule_New(&e->managed, kCapsuleName, &capsule_destructor);
  if (capsule == nullptr) {
    delete e;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(capsule);
}

Py_ssize_t checked_length(std::size_t bytes) {
  if (bytes > static_cast<std::size_t>(std::numeric_limits<Py_ssize_t>::max())) {
    raise_buffer_error("ipcring: buffer too large for the buffer protocol");
  }
  return static_cast<Py_ssize_t>(bytes);
}

// ---- buffer protocol -----------------------------------------------------------------------

int frame_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  try {
    auto& f = py::handle(self).cast<PyFrame&>();
    if (!f.hold) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(f.channel) + "frame " + std::to_string(f.sequence) +
                     " was released; its memory may be rewritten by the producer");
    }
    if (f.device.kind != DeviceKind::cpu) {
      raise_buffer_error(channel_prefix(f.channel) +
                         "CUDA frames have no buffer protocol; use __dlpack__");
    }
    if ((flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
      raise_buffer_error(channel_prefix(f.channel) +
                         "frames are read-only (mapped PROT_READ); copy to modify, e.g. "
                         "numpy.array(frame) or bytearray(frame)");
    }
    // The view refers to a FrameView that owns a reference to the hold: the slot stays held
    // until the view is released, even if the Frame is released or collected first.
    py::object keeper = py::cast(FrameView{f.hold, f.sequence, {}, {}, {}});
    const DtypeInfo* dtype =
        f.tensor ? dtype_info(f.tensor->dtype_code, f.tensor->dtype_bits) : nullptr;
    const bool typed = dtype != nullptr && dtype->format != nullptr &&
                       (flags & PyBUF_FORMAT) == PyBUF_FORMAT && (flags & PyBUF_ND) == PyBUF_ND;
    if (!typed) {
      // The frame's bytes: frames without a tensor, bfloat16 (no buffer format), and consumers
      // that ask for plain bytes (numpy.frombuffer).
      // PyBuffer_FillInfo takes its own reference to `keeper` (view->obj).
      return PyBuffer_FillInfo(view, keeper.ptr(), const_cast<std::byte*>(f.data),
                               checked_length(f.size), 1, flags);
    }
    const TensorDesc& t = *f.tensor;
    const bool contiguous = t.is_contiguous();
    if (!contiguous && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
      raise_buffer_error(channel_prefix(f.channel) + "frame " + std::to_string(f.sequence) +
                         " holds a strided tensor: its buffer needs a consumer that takes "
                         "strides (memoryview, numpy)");
    }
    auto& kv = keeper.cast<FrameView&>();
    kv.format = dtype->format;
    const auto item = static_cast<Py_ssize_t>(t.element_bytes());
    for (std::uint8_t d = 0; d < t.ndim; ++d) {
      kv.shape[d] = static_cast<Py_ssize_t>(t.shape[d]);
      kv.strides[d] = static_cast<Py_ssize_t>(t.stride(d)) * item;
    }
    view->buf = const_cast<std::byte*>(f.data) + t.byte_offset;
    view->len = static_cast<Py_ssize_t>(t.elements()) * item;
    view->itemsize = item;
    view->readonly = 1;
    view->ndim = t.ndim;
    view->format = kv.format.data();
    view->shape = t.ndim == 0 ? nullptr : kv.shape;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES && t.ndim != 0 ? kv.strides : nullptr;
    view->suboffsets = nullptr;
    view->internal = nullptr;
    view->obj = keeper.release().ptr();  // the view's reference
    return 0;
  } catch (...) {
    set_python_error_from_current_exception();
    view->obj = nullptr;
    return -1;
  }
}

int loan_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  view->obj = nullptr;
  try {
    auto& l = py::handle(self).cast<PyLoan&>();
    if (!l.state) {
      raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "loan of sequence " +
                                             std::to_string(l.sequence) +
                                             (l.published ? " was published" : " was discarded") +
                                             "; its buffer is no longer yours to write");
    }
    if (l.device.kind != DeviceKind::cpu) {
      raise_buffer_error(channel_prefix(l.channel) +
                         "CUDA loans have no buffer protocol; use __dlpack__");
    }
    // The keeper counts as a live view of the loan for as long as it exists.
    py::object keeper = py::cast(LoanView{std::make_shared<LoanExport>(l.state), l.sequence});
    return PyBuffer_FillInfo(view, keeper.ptr(), l.data, checked_length(l.capacity), 0, flags);
  } catch (...) {
    set_python_error_from_current_exception();
    view->obj = nullptr;
    return -1;
  }
}

// Never called for our views (their `obj` is a keeper, whose class has no buffer slots); present
// so that numpy.frombuffer keeps a memoryview (and so the keeper) rather than the bare object.
void noop_releasebuffer(PyObject* /*self*/, Py_buffer* /*view*/) {}

PyBufferProcs* buffer_procs(py::handle type) {
  // pybind11 classes made with py::buffer_protocol() point tp_as_buffer at their heap type's
  // as_buffer; we replace pybind11's generic slots with ours.
  auto* heap = reinterpret_cast<PyHeapTypeObject*>(type.ptr());
  if (heap->ht_type.tp_as_buffer != &heap->as_buffer) {
    throw std::logic_error("ipcring: class was not created with py::buffer_protocol()");
  }
  return &heap->as_buffer;
}

}  // namespace

void install_frame_buffer(py::handle frame_type) {
  PyBufferProcs* procs = buffer_procs(frame_type);
  procs->bf_getbuffer = &frame_getbuffer;
  procs->bf_releasebuffer = &noop_releasebuffer;
}

void install_loan_buffer(py::handle loan_type) {
  PyBufferProcs* procs = buffer_procs(loan_type);
  procs->bf_getbuffer = &loan_getbuffer;
  procs->bf_releasebuffer = &noop_releasebuffer;
}

py::object frame_dlpack(const PyFrame& f, const py::object& stream) {
  if (!f.hold) {
    raise_errc(Errc::invalid_argument, channel_prefix(f.channel) + "frame " +
                                           std::to_string(f.sequence) +
                                           " was released; __dlpack__ needs a held frame");
  }
  check_stream(f.device, stream, f.channel);
  auto* e = new DlpackExport();
  e->frame = f.hold;
  // DLPack 0.6 has no read-only flag: the consumer gets a mutable pointer. Python readers map the
  // pool copy-on-write (ReaderOptions::copy_on_write), so a write changes this process's copy of
  // the touched pages only, and the copies are discarded when the frame is released.
  return make_capsule(e, const_cast<std::byte*>(f.data), f.size, f.device,
                      f.tensor ? &*f.tensor : nullptr);
}

py::object loan_dlpack(PyLoan& l, const py::object& stream) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "loan of sequence " +
                                           std::to_string(l.sequence) +
                                           (l.published ? " was published" : " was discarded"));
  }
  check_stream(l.device, stream, l.channel);
  auto* e = new DlpackExport();
  e->loan = std::make_unique<LoanExport>(l.state);
  return make_capsule(e, l.data, l.capacity, l.device);
}

py::object loan_dlpack_typed(PyLoan& l, const TensorDesc& tensor) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "loan of sequence " +
                                           std::to_string(l.sequence) +
                                           (l.published ? " was published" : " was discarded"));
  }
  check_stream(l.device, py::none(), l.channel);
  auto* e = new DlpackExport();
  e->loan = std::make_unique<LoanExport>(l.state);
  return make_capsule(e, l.data, l.capacity, l.device, &tensor);
}

py::tuple dlpack_device(const Device& device) {
  const DLDevice d = to_dl(device);
  return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
}

Device device_for_backend(Backend backend, int cuda_device, const std::string& channel) {
  if (backend == Backend::host) return Device{DeviceKind::cpu, 0};
#ifdef IPCRING_PYTHON_CUDA
  return Device{DeviceKind::cuda, cuda_device};
#else
  (void)cuda_device;
  throw Error(Errc::unsupported,
              channel_prefix(channel) +
                  "CUDA frames are not supported by this build of the ipcring Python module "
                  "(no kDLCUDA / __cuda_array_interface__ export yet); use backend='host'");
#endif
}

}  // namespace ipcring::python
