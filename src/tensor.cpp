// tensor.cpp — TensorDesc helpers and the bounds check every descriptor passes (tensor_span).
#include "ipcring/tensor.hpp"

#include <algorithm>
#include <cstdio>

namespace ipcring {

namespace {

// Every extent is compared with this bound before it can grow further, so that no value a hostile
// producer can write (|shape|, |stride| up to 2^63, eight dimensions) overflows 64-bit arithmetic:
// each partial result stays below 2^41 before the next step.
constexpr std::int64_t kMaxSpan = std::int64_t{1} << 40;

bool known_dtype(std::uint8_t code, std::uint8_t bits) noexcept {
  switch (static_cast<DType>(code)) {
    case DType::int_:
    case DType::uint:
      return bits == 8 || bits == 16 || bits == 32 || bits == 64;
    case DType::float_:
      return bits == 16 || bits == 32 || bits == 64;
    case DType::bfloat:
      return bits == 16;
    case DType::complex:
      return bits == 64 || bits == 128;
    case DType::bool_:
      return bits == 8;
  }
  return false;
}

bool all_zero_strides(const TensorDesc& t) noexcept {
  return std::all_of(t.strides, t.strides + std::min<std::uint8_t>(t.ndim, kMaxTensorDims),
                     [](std::int64_t s) { return s == 0; });
}

}  // namespace

TensorDesc TensorDesc::contiguous(DType code, std::uint8_t bits,
                                  std::initializer_list<std::int64_t> shape) noexcept {
  TensorDesc t;
  t.dtype_code = static_cast<std::uint8_t>(code);
  t.dtype_bits = bits;
  for (const std::int64_t d : shape) {
    if (t.ndim == kMaxTensorDims) break;
    t.shape[t.ndim++] = d;
  }
  return t;
}

std::uint64_t TensorDesc::elements() const noexcept {
  std::uint64_t n = 1;
  for (std::uint8_t d = 0; d < std::min<std::uint8_t>(ndim, kMaxTensorDims); ++d) {
    n *= static_cast<std::uint64_t>(std::max<std::int64_t>(0, shape[d]));
  }
  return n;
}

std::int64_t TensorDesc::stride(std::uint8_t d) const noexcept {
  const std::uint8_t n = std::min<std::uint8_t>(ndim, kMaxTensorDims);
  if (d >= n) return 0;
  if (!all_zero_strides(*this)) return strides[d];
  std::int64_t s = 1;
  for (std::uint8_t k = n; k-- > d + 1;) s *= std::max<std::int64_t>(1, shape[k]);
  return s;
}

bool TensorDesc::is_contiguous() const noexcept {
  if (all_zero_strides(*this)) return true;
  std::int64_t expect = 1;
  for (std::uint8_t k = std::min<std::uint8_t>(ndim, kMaxTensorDims); k-- > 0;) {
    if (shape[k] != 1 && strides[k] != expect) return false;
    expect *= std::max<std::int64_t>(1, shape[k]);
  }
  return true;
}

std::string TensorDesc::dtype_name() const {
  const char* base = nullptr;
  switch (static_cast<DType>(dtype_code)) {
    case DType::int_:
      base = "int";
      break;
    case DType::uint:
      base = "uint";
      break;
    case DType::float_:
      base = "float";
      break;
    case DType::bfloat:
      base = "bfloat";
      break;
    case DType::complex:
      base = "complex";
      break;
    case DType::bool_:
      return dtype_bits == 8 ? "bool" : "bool" + std::to_string(dtype_bits);
  }
  if (base == nullptr) {
    return "dtype(" + std::to_string(dtype_code) + "," + std::to_string(dtype_bits) + ")";
  }
  return base + std::to_string(dtype_bits);
}

std::string TensorDesc::shape_text() const {
  std::string s = "(";
  const std::uint8_t n = std::min<std::uint8_t>(ndim, kMaxTensorDims);
  for (std::uint8_t d = 0; d < n; ++d) {
    if (d != 0) s += ", ";
    s += std::to_string(shape[d]);
  }
  if (n == 1) s += ",";
  return s + ")";
}

bool operator==(const TensorDesc& a, const TensorDesc& b) noexcept {
  if (a.dtype_code != b.dtype_code || a.dtype_bits != b.dtype_bits || a.ndim != b.ndim ||
      a.byte_offset != b.byte_offset) {
    return false;
  }
  for (std::uint8_t d = 0; d < std::min<std::uint8_t>(a.ndim, kMaxTensorDims); ++d) {
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  }
  return true;
}

std::optional<std::uint64_t> tensor_span(const TensorDesc& t) noexcept {
  if (t.ndim > kMaxTensorDims || !known_dtype(t.dtype_code, t.dtype_bits)) return std::nullopt;
  if (t.byte_offset > static_cast<std::uint64_t>(kMaxSpan)) return std::nullopt;
  const std::int64_t element = t.dtype_bits / 8;
  const auto offset = static_cast<std::int64_t>(t.byte_offset);
  const bool contiguous = all_zero_strides(t);
  // Lowest and highest element index reached, relative to element [0, ..., 0]; every value stays
  // within [-kMaxSpan, kMaxSpan].
  std::int64_t low = 0;
  std::int64_t high = 0;
  std::int64_t count = 1;  // elements, while no dimension is zero
  bool empty = false;
  for (std::uint8_t d = 0; d < t.ndim; ++d) {
    const std::int64_t n = t.shape[d];
    if (n < 0 || n > kMaxSpan) return std::nullopt;
    if (n == 0) empty = true;
    if (!contiguous) {
      const std::int64_t s = t.strides[d];
      if (s > kMaxSpan || s < -kMaxSpan) return std::nullopt;
    }
  }
  if (empty) return t.byte_offset;  // no element is ever addressed
  for (std::uint8_t d = 0; d < t.ndim; ++d) {
    const std::int64_t n = t.shape[d];
    if (n > kMaxSpan / count) return std::nullopt;
    count *= n;
    if (contiguous) continue;
    const std::int64_t s = t.strides[d];
    const std::int64_t magnitude = s < 0 ? -s : s;
    if (magnitude != 0 && n - 1 > kMaxSpan / magnitude) return std::nullopt;
    const std::int64_t reach = (n - 1) * s;  // |reach| <= kMaxSpan
    if (reach >= 0) {
      high += reach;
    } else {
      low += reach;
    }
    if (high > kMaxSpan || low < -kMaxSpan) return std::nullopt;
  }
  if (contiguous) high = count - 1;
  // |low|, high + 1 <= 2^40 + 1 and element <= 16: the products stay below 2^45.
  const std::int64_t first = offset + low * element;
  const std::int64_t end = offset + (high + 1) * element;
  if (first < 0 || end > kMaxSpan) return std::nullopt;
  return static_cast<std::uint64_t>(end);
}

}  // namespace ipcring
