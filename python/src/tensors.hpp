// tensors.hpp — element types and shapes between Python and ipcring::TensorDesc.
//
// Names: frames describe their element type with DLPack's (code, bits); Python sees the NumPy
// names ('uint8', 'float32', ... and 'bfloat16', which NumPy lacks). A dtype argument may be such
// a name, a numpy.dtype or NumPy scalar type, or a torch.dtype.
//
// Sources of Producer.send(): anything with the buffer protocol (NumPy arrays, bytes, bytearray,
// memoryview, array.array) or __dlpack__ (torch tensors, CuPy/JAX CPU arrays...). Their bytes are
// copied into the loan in C order (strided sources are compacted), so the frame's tensor is
// contiguous with the source's shape and dtype.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ipcring/ipcring.hpp"

namespace ipcring::python {

namespace py = pybind11;

struct DtypeInfo {
  std::uint8_t code = 0;         // DLPack type code
  std::uint8_t bits = 0;         // bits per element
  const char* name = nullptr;    // 'float32'
  const char* format = nullptr;  // PEP 3118 format; nullptr: none (bfloat16)
};

// The entry for (code, bits), or nullptr for a combination the module does not name.
const DtypeInfo* dtype_info(std::uint8_t code, std::uint8_t bits) noexcept;

// Parses a dtype argument (see above); InvalidArgument naming the channel otherwise.
const DtypeInfo& parse_dtype(const py::handle& dtype, const std::string& channel);

// A shape argument: an int or a sequence of at most 8 non-negative ints.
std::vector<std::int64_t> parse_shape(const py::handle& shape, const std::string& channel);

TensorDesc make_contiguous(const DtypeInfo& dtype, const std::vector<std::int64_t>& shape);

// The bytes of a send() source, with its dtype and shape, ready to be copied into a loan.
class SendSource {
 public:
  // InvalidArgument (naming the channel and the object's type) when `obj` is neither a buffer
  // nor a DLPack producer on the CPU, or has a type, byte order or rank a frame cannot describe.
  SendSource(const py::handle& obj, const std::string& channel);
  SendSource(const SendSource&) = delete;
  SendSource& operator=(const SendSource&) = delete;
  ~SendSource();

  const TensorDesc& tensor() const noexcept { return tensor_; }
  std::size_t bytes() const noexcept { return bytes_; }
  // Copies the elements in C order to `dst` (bytes() bytes). Runs without the GIL.
  void copy_to(std::byte* dst) const noexcept;

 private:
  void from_buffer(const py::handle& obj, const std::string& channel);
  bool from_dlpack(const py::handle& obj, const std::string& channel);

  TensorDesc tensor_;  // contiguous, the source's dtype and shape
  std::size_t bytes_ = 0;
  const std::byte* data_ = nullptr;    // element [0, ..., 0]
  std::int64_t stride_bytes_[8] = {};  // of the source
  Py_buffer view_{};                   // buffer sources
  bool have_view_ = false;
  void* managed_ = nullptr;  // DLPack sources: DLManagedTensor*, deleted at the end
  py::object keep_;          // the object whose memory we read
};

}  // namespace ipcring::python
