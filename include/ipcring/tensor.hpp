// tensor.hpp — TensorDesc: what a frame's bytes are (element type, shape, strides), in DLPack's
// vocabulary, published with the frame (Loan::set_tensor, Frame::tensor).
//
// The element type is DLPack's (type code, bits) with one lane. Strides count elements, not bytes
// (as DLPack's do); all-zero strides (or ndim == 0) mean contiguous row-major (C order).
// byte_offset is where element [0, ..., 0] lies from the start of the frame.
//
// A descriptor is checked with tensor_span() wherever it crosses the segment: by set_tensor
// against the frame capacity, and by the reader against the bytes the producer published, so a
// descriptor that Frame::tensor() returns never reaches outside the frame.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

namespace ipcring {

// DLPack's DLDataTypeCode values.
enum class DType : std::uint8_t {
  int_ = 0,     // kDLInt
  uint = 1,     // kDLUInt
  float_ = 2,   // kDLFloat
  bfloat = 4,   // kDLBfloat
  complex = 5,  // kDLComplex
  bool_ = 6,    // kDLBool
};

inline constexpr std::uint8_t kMaxTensorDims = 8;

struct TensorDesc {
  std::uint8_t dtype_code = 0;  // DLPack type code (DType)
  std::uint8_t dtype_bits = 0;  // bits per element: 8, 16, 32, 64 or 128
  std::uint8_t ndim = 0;        // <= kMaxTensorDims
  std::int64_t shape[kMaxTensorDims] = {};
  std::int64_t strides[kMaxTensorDims] = {};  // in elements; all zero = contiguous (C order)
  std::uint64_t byte_offset = 0;

  // A contiguous tensor of `shape` (at most kMaxTensorDims dimensions; extra ones are ignored).
  static TensorDesc contiguous(DType code, std::uint8_t bits,
                               std::initializer_list<std::int64_t> shape) noexcept;

  std::size_t element_bytes() const noexcept { return dtype_bits / 8U; }
  // Number of elements (product of the shape; 1 for ndim == 0).
  std::uint64_t elements() const noexcept;
  // True when the strides are all zero or equal the row-major strides of the shape.
  bool is_contiguous() const noexcept;
  // The stride of dimension d in elements, the row-major one when the strides are all zero.
  std::int64_t stride(std::uint8_t d) const noexcept;
  // "uint8", "float32" ... or "dtype(code,bits)" for a combination without a common name.
  std::string dtype_name() const;
  // "(480, 640, 3)".
  std::string shape_text() const;
};

bool operator==(const TensorDesc& a, const TensorDesc& b) noexcept;

// Bytes from the start of a frame that the tensor reaches (byte_offset + the highest element's
// end), or std::nullopt when the descriptor is not valid: ndim > 8, an unknown (code, bits), a
// negative dimension, an element before the frame's start (negative strides), or any extent beyond
// 2^40 bytes. A tensor with a zero dimension spans byte_offset bytes.
std::optional<std::uint64_t> tensor_span(const TensorDesc& t) noexcept;

// tensor_span(t) <= bytes.
inline bool tensor_fits(const TensorDesc& t, std::uint64_t bytes) noexcept {
  const auto s = tensor_span(t);
  return s && *s <= bytes;
}

}  // namespace ipcring
