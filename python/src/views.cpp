// views.cpp — buffer protocol and DLPack exports of frames and loans (see views.hpp).
#include "views.hpp"

#include <dlpack/dlpack.h>

#include <cstdio>
#include <limits>

#include "errors.hpp"
#include "tensors.hpp"

namespace ipcring::python {

namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// DLPack 1.0's versioned tensor (the ABI the DLPack specification fixes; Debian's dlpack.h is
// 0.6 and lacks it): a version, a flags word (bit 0: read-only), then the same DLTensor. Its
// capsule is "dltensor_versioned", renamed "used_dltensor_versioned" by the consumer.
#ifndef DLPACK_FLAG_BITMASK_READ_ONLY
struct DLPackVersion {
  std::uint32_t major;
  std::uint32_t minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t DLPACK_FLAG_BITMASK_READ_ONLY = 1ULL << 0;
#endif
constexpr std::uint32_t kDlpackVersionedMajor = 1;
constexpr std::uint32_t kDlpackVersionedMinor = 0;
constexpr const char* kVersionedCapsuleName = "dltensor_versioned";
constexpr const char* kUsedVersionedCapsuleName = "used_dltensor_versioned";

// One DLPack export: the tensor, its shape and strides (DLTensor points at them), and the reference
// that keeps the memory valid. Deleted by the consumer through DLManagedTensor::deleter, on any
// thread, possibly without the GIL: nothing here touches Python.
struct DlpackExport {
  DLManagedTensor managed{};
  DLManagedTensorVersioned versioned{};  // used instead of `managed` for a versioned capsule
  std::int64_t shape[8] = {0};
  std::int64_t strides[8] = {1};
  std::shared_ptr<FrameHold> frame;  // frame exports: the slot stays held while the tensor lives
  std::unique_ptr<LoanExport> loan;  // loan exports: counted in LoanState::exports
};

void dlpack_deleter(DLManagedTensor* self) {
  delete static_cast<DlpackExport*>(self->manager_ctx);
}
void dlpack_versioned_deleter(DLManagedTensorVersioned* self) {
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

void versioned_capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kUsedVersionedCapsuleName)) return;
  PyObject* type = nullptr;
  PyObject* value = nullptr;
  PyObject* traceback = nullptr;
  PyErr_Fetch(&type, &value, &traceback);
  auto* managed =
      static_cast<DLManagedTensorVersioned*>(PyCapsule_GetPointer(capsule, kVersionedCapsuleName));
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
void check_host_stream(const py::object& stream, const std::string& channel) {
  if (!stream.is_none()) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(channel) +
                   "__dlpack__(stream=" + std::string(py::str(py::repr(stream))) +
                   "): host frames take stream=None (there is no stream to order against)");
  }
}

std::string stream_text(std::uintptr_t s) {
  if (s == 1) return "1 (the legacy default stream)";
  if (s == 2) return "2 (the per-thread default stream)";
  char b[32];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(s));
  return b;
}

// The frame's release fence goes on one stream: the first one a consumer named. A second export
// on another stream is refused (its work would not be covered by the fence).
void bind_release_stream(FrameHold& h, std::uintptr_t s, const PyFrame& f, const char* what) {
  if (h.release_stream_set.load(std::memory_order_acquire)) {
    const std::uintptr_t bound = h.release_stream.load(std::memory_order_acquire);
    if (bound != s) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(f.channel) + what + ": frame " + std::to_string(f.sequence) +
                     " is already used on stream " + stream_text(bound) + ", not stream " +
                     stream_text(s) +
                     ": its release fence is recorded on one stream; use one stream per frame, "
                     "or pass stream=-1 and order the work yourself");
    }
    return;
  }
  h.set_release_stream(s);
}

// Makes `s` wait (on the GPU) for the producer's write of the frame, and binds the release fence
// to it.
void wait_for_write(const PyFrame& f, std::uintptr_t s, const char* what) {
  FrameHold& h = *f.hold;
  bind_release_stream(h, s, f, what);
  const Status st = h.frame.wait_on(to_cuda_stream(s));
  if (st == Status::producer_gone) {
    raise_status(st, channel_prefix(f.channel) + what + ": the producer of frame " +
                         std::to_string(f.sequence) +
                         " died or was replaced before its write of the frame was known complete; "
                         "the frame is dropped (release it unread)");
  }
  if (st != Status::ok) {
    raise_status(st, channel_prefix(f.channel) + what + ": making stream " + stream_text(s) +
                         " wait for the producer's write of frame " + std::to_string(f.sequence) +
                         " failed (" + to_string(st) + "; the CUDA error is on stderr)");
  }
}

// NumPy's typestr of a DLPack type (little-endian machines only, as ipcring is).
std::string typestr(std::uint8_t code, std::uint8_t bits, const std::string& channel) {
  char kind = 0;
  switch (code) {
    case kDLInt:
      kind = 'i';
      break;
    case kDLUInt:
      kind = 'u';
      break;
    case kDLFloat:
      kind = 'f';
      break;
    case kDLComplex:
      kind = 'c';
      break;
    case 6:  // kDLBool (DLPack 0.8; older dlpack.h has no name for it)
      kind = 'b';
      break;
    default:
      break;
  }
  if (kind == 0 || bits % 8 != 0 || bits == 0) {
    raise_errc(Errc::unsupported, channel_prefix(channel) + "__cuda_array_interface__ has no " +
                                      "typestr for DLPack type code " + std::to_string(code) +
                                      " of " + std::to_string(bits) +
                                      " bits (bfloat16?); use __dlpack__ (torch.from_dlpack)");
  }
  return std::string(1, bits == 8 ? '|' : '<') + kind + std::to_string(bits / 8);
}

// A capsule of `bytes` bytes at `data`, typed by `tensor` when given (its byte offset is folded
// into the data pointer, which older consumers such as torch 1.13 handle best), else 1-D uint8.
// The capsule DLPack 1.0 consumers get: they say so with max_version >= (1, 0) (the array API's
// __dlpack__(max_version=...)); older ones (None, or a 0.x version) get a DLPack 0.6 capsule.
struct CapsuleKind {
  bool versioned = false;
  bool read_only = false;  // versioned only: DLPACK_FLAG_BITMASK_READ_ONLY (0.6 cannot say it)
};

py::object make_capsule(DlpackExport* e, std::byte* data, std::size_t bytes, const Device& device,
                        const TensorDesc* tensor = nullptr, CapsuleKind kind = {}) {
  DLTensor& t = kind.versioned ? e->versioned.dl_tensor : e->managed.dl_tensor;
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
  PyObject* capsule = nullptr;
  if (kind.versioned) {
    e->versioned.version = {kDlpackVersionedMajor, kDlpackVersionedMinor};
    e->versioned.manager_ctx = e;
    e->versioned.deleter = &dlpack_versioned_deleter;
    e->versioned.flags = kind.read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
    capsule = PyCapsule_New(&e->versioned, kVersionedCapsuleName, &versioned_capsule_destructor);
  } else {
    e->managed.manager_ctx = e;
    e->managed.deleter = &dlpack_deleter;
    capsule = PyCapsule_New(&e->managed, kCapsuleName, &capsule_destructor);
  }
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

// max_version of __dlpack__: None, or a (major, minor) tuple of ints.
bool wants_versioned(const py::object& max_version, const std::string& channel) {
  if (max_version.is_none()) return false;
  if (!py::isinstance<py::tuple>(max_version) || py::len(max_version) != 2 ||
      !py::isinstance<py::int_>(max_version[py::int_(0)]) ||
      !py::isinstance<py::int_>(max_version[py::int_(1)])) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "__dlpack__(max_version=" +
                                           std::string(py::str(py::repr(max_version))) +
                                           "): a (major, minor) tuple of ints, or None");
  }
  return max_version[py::int_(0)].cast<long long>() >= kDlpackVersionedMajor;
}

py::object frame_dlpack(const PyFrame& f, const py::object& stream, const py::object& max_version) {
  if (!f.hold) {
    raise_errc(Errc::invalid_argument, channel_prefix(f.channel) + "frame " +
                                           std::to_string(f.sequence) +
                                           " was released; __dlpack__ needs a held frame");
  }
  if (f.device.kind == DeviceKind::cpu) {
    check_host_stream(stream, f.channel);
  } else {
    const StreamArg s = parse_stream(stream, f.channel, "__dlpack__");
    // Before the capsule exists: the consumer's stream is ordered after the producer's write.
    if (s.sync) wait_for_write(f, s.value, "__dlpack__");
  }
  const bool versioned = wants_versioned(max_version, f.channel);
  auto* e = new DlpackExport();
  e->frame = f.hold;
  // A frame is read-only for every reader: a DLPack 1.0 consumer is told so
  // (DLPACK_FLAG_BITMASK_READ_ONLY). DLPack 0.6 cannot say it, so an older consumer (torch 1.13,
  // Debian 12's) gets a mutable pointer: on a host frame a write changes only this process's
  // copy of the touched pages (Python readers map the pool copy-on-write, and the copies are
  // discarded at release); on a CUDA frame nothing stops it, and an in-place operation changes
  // the buffer every reader of the frame reads (docs/python.md).
  return make_capsule(e, const_cast<std::byte*>(f.data), f.size, f.device,
                      f.tensor ? &*f.tensor : nullptr, CapsuleKind{versioned, true});
}

py::object loan_dlpack(PyLoan& l, const py::object& stream, const py::object& max_version) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "loan of sequence " +
                                           std::to_string(l.sequence) +
                                           (l.published ? " was published" : " was discarded"));
  }
  if (l.device.kind == DeviceKind::cpu) {
    check_host_stream(stream, l.channel);
  } else {
    const StreamArg s = parse_stream(stream, l.channel, "__dlpack__");
    if (s.sync) set_write_stream(l, s.value);
  }
  const bool versioned = wants_versioned(max_version, l.channel);
  auto* e = new DlpackExport();
  e->loan = std::make_unique<LoanExport>(l.state);
  return make_capsule(e, l.data, l.capacity, l.device, nullptr, CapsuleKind{versioned, false});
}

py::object loan_dlpack_typed(PyLoan& l, const TensorDesc& tensor) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "loan of sequence " +
                                           std::to_string(l.sequence) +
                                           (l.published ? " was published" : " was discarded"));
  }
  auto* e = new DlpackExport();
  e->loan = std::make_unique<LoanExport>(l.state);
  return make_capsule(e, l.data, l.capacity, l.device, &tensor);
}

py::tuple dlpack_device(const Device& device) {
  const DLDevice d = to_dl(device);
  return py::make_tuple(static_cast<int>(d.device_type), d.device_id);
}

Device device_for_backend(Backend backend, int cuda_device, const std::string& /*channel*/) {
  if (backend == Backend::host) return Device{DeviceKind::cpu, 0};
  return Device{DeviceKind::cuda, cuda_device};
}

void check_dlpack_request(const Device& device, const std::string& channel,
                          const py::object& dl_device, const py::object& copy) {
  if (!copy.is_none() && copy.cast<bool>()) {
    raise_buffer_error(channel_prefix(channel) +
                       "__dlpack__(copy=True): ipcring exports views only (copy the tensor)");
  }
  if (!dl_device.is_none()) {
    const py::tuple want = dl_device;
    const DLDevice have = to_dl(device);
    if (want.size() != 2 || want[0].cast<int>() != static_cast<int>(have.device_type) ||
        want[1].cast<int>() != have.device_id) {
      raise_buffer_error(channel_prefix(channel) + "__dlpack__(dl_device=" +
                         std::string(py::str(dl_device)) + "): the memory lives on " +
                         std::string(py::str(dlpack_device(device))) + " and is not copied");
    }
  }
}

StreamArg parse_stream(const py::object& stream, const std::string& channel, const char* what) {
  StreamArg out;
  if (stream.is_none()) return out;  // the legacy default stream
  const auto refuse = [&](const std::string& why) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + what + "(stream=" +
                                           std::string(py::str(py::repr(stream))) + "): " + why);
  };
  if (!PyLong_Check(stream.ptr()) || PyBool_Check(stream.ptr())) {
    refuse(
        "a CUDA stream is an int (1: legacy default, 2: per-thread default, -1: no "
        "synchronisation, else a cudaStream_t such as torch.cuda.Stream.cuda_stream)");
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(stream.ptr(), &overflow);
  if (overflow == 0 && v == -1) {
    out.sync = false;
    return out;
  }
  if (overflow < 0 || (overflow == 0 && v < 0))
    refuse("negative streams other than -1 are invalid");
  if (overflow == 0 && v == 0) {
    refuse(
        "0 is ambiguous for CUDA (DLPack): pass 1 for the legacy default stream or 2 for the "
        "per-thread default stream");
  }
  const unsigned long long u = PyLong_AsUnsignedLongLong(stream.ptr());
  if (PyErr_Occurred() != nullptr) throw py::error_already_set();
  out.value = static_cast<std::uintptr_t>(u);
  return out;
}

void set_write_stream(PyLoan& l, std::uintptr_t s) {
  if (!l.state) return;
  l.state->write_stream.store(s, std::memory_order_release);
  l.state->write_stream_set.store(true, std::memory_order_release);
}

py::dict frame_cuda_array_interface(const PyFrame& f) {
  if (!f.hold) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(f.channel) + "frame " + std::to_string(f.sequence) +
                   " was released; __cuda_array_interface__ needs a held frame");
  }
  // The stream the frame is already used on, else the legacy default stream: the producer's write
  // is made visible on it before the dict is returned, and its `stream` key says which it is.
  const bool bound = f.hold->release_stream_set.load(std::memory_order_acquire);
  const std::uintptr_t s = bound ? f.hold->release_stream.load(std::memory_order_acquire) : 1;
  if (!bound) f.hold->interface_unbound.store(true, std::memory_order_relaxed);
  wait_for_write(f, s, "__cuda_array_interface__");
  py::dict d;
  const auto ptr = reinterpret_cast<std::uintptr_t>(f.data);
  if (f.tensor) {
    const TensorDesc& t = *f.tensor;
    py::tuple shape(t.ndim);
    for (std::uint8_t k = 0; k < t.ndim; ++k) shape[k] = t.shape[k];
    d["shape"] = shape;
    d["typestr"] = typestr(t.dtype_code, t.dtype_bits, f.channel);
    d["data"] = py::make_tuple(ptr + t.byte_offset, true);
    if (t.is_contiguous()) {
      d["strides"] = py::none();
    } else {
      py::tuple strides(t.ndim);
      const auto item = static_cast<std::int64_t>(t.element_bytes());
      for (std::uint8_t k = 0; k < t.ndim; ++k) strides[k] = t.stride(k) * item;
      d["strides"] = strides;
    }
  } else {
    d["shape"] = py::make_tuple(f.size);
    d["typestr"] = "|u1";
    d["data"] = py::make_tuple(ptr, true);
    d["strides"] = py::none();
  }
  d["version"] = 3;
  d["stream"] = s;
  return d;
}

void set_frame_release_stream(PyFrame& f, const py::object& stream) {
  if (!f.hold || f.device.kind == DeviceKind::cpu) {
    if (!stream.is_none() && f.device.kind == DeviceKind::cpu) check_host_stream(stream, f.channel);
    return;
  }
  if (stream.is_none()) {
    if (f.hold->interface_unbound.load(std::memory_order_relaxed)) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(f.channel) + "release(): frame " + std::to_string(f.sequence) +
                     " was exported through __cuda_array_interface__, whose consumer names no "
                     "stream; a release fence on the legacy default stream does not follow work "
                     "on a non-blocking stream (cupy.cuda.Stream(non_blocking=True)), so say "
                     "where the last work on the frame ran: release(stream=<its cudaStream_t>), "
                     "or release(stream=1) for the legacy default or a blocking stream");
    }
    return;  // keep the stream an export bound (else the legacy default)
  }
  const StreamArg s = parse_stream(stream, f.channel, "release");
  if (!s.sync) return;
  // An explicit release stream overrides the one an export chose: the caller says where the last
  // work on the frame was queued.
  f.hold->set_release_stream(s.value);
}

}  // namespace ipcring::python
