// tensors.cpp — dtype names, shape arguments and send() sources (see tensors.hpp).
#include "tensors.hpp"

#include <dlpack/dlpack.h>

#include <cstring>
#include <string_view>

#include "errors.hpp"

namespace ipcring::python {

namespace {

constexpr DtypeInfo kDtypes[] = {
    {0, 8, "int8", "b"},        {0, 16, "int16", "h"},        {0, 32, "int32", "i"},
    {0, 64, "int64", "q"},      {1, 8, "uint8", "B"},         {1, 16, "uint16", "H"},
    {1, 32, "uint32", "I"},     {1, 64, "uint64", "Q"},       {2, 16, "float16", "e"},
    {2, 32, "float32", "f"},    {2, 64, "float64", "d"},      {4, 16, "bfloat16", nullptr},
    {5, 64, "complex64", "Zf"}, {5, 128, "complex128", "Zd"}, {6, 8, "bool", "?"},
};

const DtypeInfo* dtype_by_name(std::string_view name) noexcept {
  for (const DtypeInfo& d : kDtypes) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

std::string type_name(const py::handle& obj) {
  return py::str(py::type::handle_of(obj).attr("__qualname__"));
}

// A PEP 3118 format with its item size -> dtype. Native or little-endian only (both hosts this
// library builds for are little-endian).
const DtypeInfo* dtype_from_format(const char* format, Py_ssize_t itemsize) noexcept {
  std::string_view f = format == nullptr ? "B" : format;
  if (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<')) f.remove_prefix(1);
  const auto bits = static_cast<std::uint8_t>(itemsize * 8);
  if (f.size() == 1) {
    switch (f[0]) {
      case 'b':
      case 'h':
      case 'i':
      case 'l':
      case 'q':
      case 'n':
        return dtype_info(0, bits);
      case 'B':
      case 'H':
      case 'I':
      case 'L':
      case 'Q':
      case 'N':
      case 'c':
        return dtype_info(1, bits);
      case 'e':
      case 'f':
      case 'd':
        return dtype_info(2, bits);
      case '?':
        return itemsize == 1 ? dtype_info(6, 8) : nullptr;
      default:
        return nullptr;
    }
  }
  if (f == "Zf" || f == "Zd") return dtype_info(5, bits);
  return nullptr;
}

void dlpack_capsule_used(PyObject* capsule, DLManagedTensor* managed) {
  // We took ownership: the capsule's destructor must not delete it again.
  PyCapsule_SetName(capsule, "used_dltensor");
  (void)managed;
}

}  // namespace

const DtypeInfo* dtype_info(std::uint8_t code, std::uint8_t bits) noexcept {
  for (const DtypeInfo& d : kDtypes) {
    if (d.code == code && d.bits == bits) return &d;
  }
  return nullptr;
}

const DtypeInfo& parse_dtype(const py::handle& dtype, const std::string& channel) {
  std::string name;
  if (py::isinstance<py::str>(dtype)) {
    name = py::str(dtype);
  } else {
    const py::handle type = py::type::handle_of(dtype);
    const std::string module = py::str(type.attr("__module__"));
    if (module == "torch" && std::string(py::str(type.attr("__name__"))) == "dtype") {
      name = py::str(dtype);  // 'torch.float32'
      if (name.rfind("torch.", 0) == 0) name = name.substr(6);
    } else if (py::hasattr(dtype, "name") && py::hasattr(dtype, "itemsize")) {
      name = py::str(dtype.attr("name"));  // numpy.dtype
    } else if (py::isinstance<py::type>(dtype) && py::hasattr(dtype, "__name__")) {
      name = py::str(dtype.attr("__name__"));  // numpy.float32, ...
      if (name == "bool_") name = "bool";
    }
  }
  if (const DtypeInfo* d = dtype_by_name(name)) return *d;
  // Other spellings NumPy understands ('f4', '<u2', 'float') when NumPy is there.
  try {
    const py::object np_dtype = py::module_::import("numpy").attr("dtype")(dtype);
    const std::string byteorder = py::str(np_dtype.attr("byteorder"));
    if (byteorder != ">") {
      if (const DtypeInfo* d = dtype_by_name(std::string(py::str(np_dtype.attr("name"))))) {
        return *d;
      }
    }
  } catch (const py::error_already_set&) {
  }
  std::string known;
  for (const DtypeInfo& d : kDtypes) known += std::string(known.empty() ? "" : ", ") + d.name;
  raise_errc(Errc::invalid_argument, channel_prefix(channel) + "dtype " +
                                         std::string(py::str(py::repr(dtype))) +
                                         " is not a frame element type (" + known + ")");
}

std::vector<std::int64_t> parse_shape(const py::handle& shape, const std::string& channel) {
  std::vector<std::int64_t> dims;
  auto bad = [&](const std::string& why) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "shape " +
                                           std::string(py::str(py::repr(shape))) + ": " + why);
  };
  if (py::isinstance<py::int_>(shape)) {
    dims.push_back(shape.cast<std::int64_t>());
  } else if (py::isinstance<py::sequence>(shape) && !py::isinstance<py::str>(shape)) {
    for (const py::handle d : shape) {
      if (!py::isinstance<py::int_>(d) && !py::hasattr(d, "__index__")) bad("dimensions are ints");
      dims.push_back(py::int_(py::reinterpret_borrow<py::object>(d)).cast<std::int64_t>());
    }
  } else {
    bad("expected an int or a sequence of ints");
  }
  if (dims.size() > kMaxTensorDims) {
    bad(std::to_string(dims.size()) + " dimensions; frames have at most " +
        std::to_string(kMaxTensorDims));
  }
  for (const std::int64_t d : dims) {
    if (d < 0) bad("negative dimension " + std::to_string(d));
  }
  return dims;
}

TensorDesc make_contiguous(const DtypeInfo& dtype, const std::vector<std::int64_t>& shape) {
  TensorDesc t;
  t.dtype_code = dtype.code;
  t.dtype_bits = dtype.bits;
  t.ndim = static_cast<std::uint8_t>(shape.size());
  for (std::size_t d = 0; d < shape.size() && d < kMaxTensorDims; ++d) t.shape[d] = shape[d];
  return t;
}

// ---- SendSource ------------------------------------------------------------------------------

SendSource::SendSource(const py::handle& obj, const std::string& channel) {
  if (PyObject_CheckBuffer(obj.ptr()) != 0) {
    from_buffer(obj, channel);
  } else if (!from_dlpack(obj, channel)) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) +
                                           "send() takes a numpy array, a torch tensor, an object "
                                           "with __dlpack__ or a bytes-like object; got " +
                                           type_name(obj));
  }
  const auto span = tensor_span(tensor_);
  if (!span) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send() of a " +
                                           tensor_.dtype_name() + " array of shape " +
                                           tensor_.shape_text() + ": too large for a frame");
  }
  bytes_ = static_cast<std::size_t>(*span);
}

SendSource::~SendSource() {
  if (have_view_) PyBuffer_Release(&view_);
  if (managed_ != nullptr) {
    auto* m = static_cast<DLManagedTensor*>(managed_);
    if (m->deleter != nullptr) m->deleter(m);
  }
}

void SendSource::from_buffer(const py::handle& obj, const std::string& channel) {
  if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_RECORDS_RO) != 0) {
    py::error_already_set original;
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): the " + type_name(obj) +
                                           " gives no readable buffer (" + original.what() + ")");
  }
  have_view_ = true;
  const DtypeInfo* d = dtype_from_format(view_.format, view_.itemsize);
  if (d == nullptr) {
    const std::string f = view_.format == nullptr ? "B" : view_.format;
    raise_errc(Errc::invalid_argument,
               channel_prefix(channel) + "send(): a " + type_name(obj) + " of element format '" +
                   f + "' (" + std::to_string(view_.itemsize) +
                   " bytes) is not a frame element type (numeric, bool or complex, native byte "
                   "order)");
  }
  if (view_.ndim > static_cast<int>(kMaxTensorDims)) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): a " + type_name(obj) +
                                           " of " + std::to_string(view_.ndim) +
                                           " dimensions; frames have at most " +
                                           std::to_string(kMaxTensorDims));
  }
  std::vector<std::int64_t> shape;
  for (int k = 0; k < view_.ndim; ++k) {
    shape.push_back(view_.shape != nullptr ? view_.shape[k] : view_.len / view_.itemsize);
    stride_bytes_[k] = view_.strides != nullptr ? view_.strides[k] : 0;
  }
  if (view_.ndim == 0 && view_.len > view_.itemsize) {  // a plain byte buffer without a shape
    shape.push_back(view_.len / view_.itemsize);
  }
  tensor_ = make_contiguous(*d, shape);
  if (view_.strides == nullptr) {
    for (int k = static_cast<int>(tensor_.ndim); k-- > 0;) {
      stride_bytes_[k] =
          static_cast<std::int64_t>(tensor_.stride(static_cast<std::uint8_t>(k))) * view_.itemsize;
    }
  }
  data_ = static_cast<const std::byte*>(view_.buf);
}

bool SendSource::from_dlpack(const py::handle& obj, const std::string& channel) {
  if (!py::hasattr(obj, "__dlpack__")) return false;
  py::object source = py::reinterpret_borrow<py::object>(obj);
  // torch refuses to export a tensor that requires grad; what is sent is its value.
  if (py::hasattr(source, "requires_grad") && py::hasattr(source, "detach") &&
      source.attr("requires_grad").cast<bool>()) {
    source = source.attr("detach")();
  }
  if (py::hasattr(source, "__dlpack_device__")) {
    const py::tuple dev = source.attr("__dlpack_device__")();
    const int kind = dev[0].cast<int>();
    if (kind != kDLCPU && kind != kDLCUDAHost) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(channel) + "send(): the " + type_name(obj) +
                     " lives on DLPack device type " + std::to_string(kind) +
                     " (not host memory); this is a host channel: copy it to the CPU first "
                     "(tensor.cpu())");
    }
  }
  py::object capsule;
  try {
    capsule = source.attr("__dlpack__")();
  } catch (py::error_already_set& e) {
    // torch 1.13 exports no bool tensors through DLPack; its NumPy view carries them.
    if (py::hasattr(source, "numpy")) {
      try {
        keep_ = source.attr("numpy")();
        from_buffer(keep_, channel);
        return true;
      } catch (py::error_already_set&) {
      }
    }
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): " + type_name(obj) +
                                           ".__dlpack__() failed: " + e.what());
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): " + type_name(obj) +
                                           ".__dlpack__() did not return a DLPack capsule");
  }
  dlpack_capsule_used(capsule.ptr(), managed);
  managed_ = managed;  // deleted by our destructor
  keep_ = source;
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): the " + type_name(obj) +
                                           " is not in host memory (DLPack device type " +
                                           std::to_string(t.device.device_type) + ")");
  }
  const DtypeInfo* d = t.dtype.lanes == 1 ? dtype_info(t.dtype.code, t.dtype.bits) : nullptr;
  if (d == nullptr) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(channel) + "send(): DLPack type (code " +
                   std::to_string(t.dtype.code) + ", bits " + std::to_string(t.dtype.bits) +
                   ", lanes " + std::to_string(t.dtype.lanes) + ") is not a frame element type");
  }
  if (t.ndim < 0 || t.ndim > static_cast<int>(kMaxTensorDims)) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(channel) + "send(): a tensor of " + std::to_string(t.ndim) +
                   " dimensions; frames have at most " + std::to_string(kMaxTensorDims));
  }
  std::vector<std::int64_t> shape(t.shape, t.shape + t.ndim);
  for (const std::int64_t s : shape) {
    if (s < 0) {
      raise_errc(Errc::invalid_argument, channel_prefix(channel) + "send(): negative dimension");
    }
  }
  tensor_ = make_contiguous(*d, shape);
  const auto item = static_cast<std::int64_t>(d->bits / 8);
  for (int k = 0; k < t.ndim; ++k) {
    const std::int64_t elements =
        t.strides != nullptr ? t.strides[k] : tensor_.stride(static_cast<std::uint8_t>(k));
    stride_bytes_[k] = elements * item;
  }
  data_ = static_cast<const std::byte*>(t.data) + t.byte_offset;
  return true;
}

namespace {

void copy_dims(std::byte* dst, const std::byte* src, const TensorDesc& t, const std::int64_t* sb,
               std::uint8_t d, std::size_t item, std::byte*& out) noexcept {
  const std::int64_t n = t.shape[d];
  if (d + 1 == t.ndim) {
    if (sb[d] == static_cast<std::int64_t>(item)) {
      std::memcpy(out, src, static_cast<std::size_t>(n) * item);
      out += static_cast<std::size_t>(n) * item;
      return;
    }
    for (std::int64_t i = 0; i < n; ++i) {
      std::memcpy(out, src + i * sb[d], item);
      out += item;
    }
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) copy_dims(dst, src + i * sb[d], t, sb, d + 1, item, out);
}

}  // namespace

void SendSource::copy_to(std::byte* dst) const noexcept {
  const std::size_t item = tensor_.element_bytes();
  if (tensor_.elements() == 0) return;
  if (tensor_.ndim == 0) {
    std::memcpy(dst, data_, item);
    return;
  }
  std::byte* out = dst;
  copy_dims(dst, data_, tensor_, stride_bytes_, 0, item, out);
}

}  // namespace ipcring::python
