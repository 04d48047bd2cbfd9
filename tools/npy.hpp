// npy.hpp — NumPy's .npy files (format versions 1.0, 2.0 and 3.0) to and from frames:
// `ringpub --from` publishes them (typed from the header), `ringdump echo --save` writes them.
//
// Read: little-endian (or byte-order-free) bool, int, uint and float dtypes of 1 to 8 bytes
// ('|b1', '<i4', '<f2', '|u1' ...), C order or Fortran order (published with Fortran strides),
// any shape of at most kMaxTensorDims dimensions; the data must be exactly what the header says.
// Write: version 1.0 with NumPy's own header spelling, so `numpy.load` reads it and a file NumPy
// wrote comes back byte for byte. Nothing here trusts a header: every refusal says why.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ipcring/tensor.hpp"

namespace ipcring::tools::npy {

struct Array {
  TensorDesc tensor;            // dtype and shape (strides only for Fortran order)
  std::vector<std::byte> data;  // the elements as the file holds them
};

// The dtype of a descr ("<f4"): nullopt for byte orders and kinds not handled.
inline std::optional<std::pair<DType, std::uint8_t>> dtype_of(const std::string& descr) {
  if (descr.size() < 3) return std::nullopt;
  const char order = descr[0];
  const char kind = descr[1];
  const std::string size = descr.substr(2);
  if (size != "1" && size != "2" && size != "4" && size != "8") return std::nullopt;
  const auto bits = static_cast<std::uint8_t>(std::stoi(size) * 8);
  if (order != '<' && order != '|' && !(order == '=' && bits == 8)) return std::nullopt;
  if (order == '|' && bits != 8) return std::nullopt;
  switch (kind) {
    case 'b':
      return bits == 8 ? std::optional(std::pair{DType::bool_, bits}) : std::nullopt;
    case 'i':
      return std::pair{DType::int_, bits};
    case 'u':
      return std::pair{DType::uint, bits};
    case 'f':
      return bits >= 16 ? std::optional(std::pair{DType::float_, bits}) : std::nullopt;
    default:
      return std::nullopt;
  }
}

// The descr of a tensor's dtype ("<f4", "|u1"); empty for dtypes .npy cannot say here.
inline std::string descr_of(const TensorDesc& t) {
  const std::string size = std::to_string(t.dtype_bits / 8);
  const std::string order = t.dtype_bits == 8 ? "|" : "<";
  switch (static_cast<DType>(t.dtype_code)) {
    case DType::bool_:
      return t.dtype_bits == 8 ? "|b1" : "";
    case DType::int_:
      return order + "i" + size;
    case DType::uint:
      return order + "u" + size;
    case DType::float_:
      return t.dtype_bits >= 16 ? order + "f" + size : "";
    default:
      return {};
  }
}

namespace detail {

// The value of 'key' in the header dict: the text after "'key':" up to the next top-level comma
// (a tuple's commas are inside its parentheses).
inline std::optional<std::string> field(const std::string& header, const std::string& key) {
  const auto at = header.find("'" + key + "'");
  if (at == std::string::npos) return std::nullopt;
  auto colon = header.find(':', at);
  if (colon == std::string::npos) return std::nullopt;
  std::size_t i = colon + 1;
  while (i < header.size() && header[i] == ' ') ++i;
  int depth = 0;
  std::size_t end = i;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if ((c == ',' && depth == 0) || c == '}') break;
  }
  std::string v = header.substr(i, end - i);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  return v;
}

}  // namespace detail

// Parses a whole .npy file. Throws std::runtime_error naming `what` (the file) and the value.
inline Array parse(const std::vector<std::byte>& file, const std::string& what) {
  auto fail = [&](const std::string& why) -> Array {
    throw std::runtime_error(what + ": not a .npy file ringpub can publish: " + why);
  };
  const unsigned char magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (file.size() < 10 || std::memcmp(file.data(), magic, sizeof magic) != 0) {
    return fail("no \\x93NUMPY magic at its start");
  }
  const auto major = static_cast<unsigned>(file[6]);
  std::size_t header_len = 0;
  std::size_t header_at = 0;
  if (major == 1) {
    header_len = static_cast<std::size_t>(file[8]) | static_cast<std::size_t>(file[9]) << 8;
    header_at = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return fail("truncated header");
    header_len = 0;
    for (int k = 0; k < 4; ++k) header_len |= static_cast<std::size_t>(file[8 + k]) << (8 * k);
    header_at = 12;
  } else {
    return fail("format version " + std::to_string(major) + " (1, 2 and 3 are known)");
  }
  if (header_len > file.size() - header_at) {
    return fail("header of " + std::to_string(header_len) + " bytes in a file of " +
                std::to_string(file.size()));
  }
  const std::string header(reinterpret_cast<const char*>(file.data() + header_at), header_len);
  const auto descr = detail::field(header, "descr");
  const auto fortran = detail::field(header, "fortran_order");
  const auto shape = detail::field(header, "shape");
  if (!descr || !fortran || !shape) return fail("header without descr, fortran_order or shape");
  if (descr->size() < 2 || (*descr)[0] != '\'' || descr->back() != '\'') {
    return fail("descr " + *descr + " (a structured dtype?)");
  }
  const std::string d = descr->substr(1, descr->size() - 2);
  const auto dtype = dtype_of(d);
  if (!dtype) {
    return fail("dtype '" + d + "' (little-endian bool, int, uint or float of 1 to 8 bytes)");
  }
  Array a;
  a.tensor.dtype_code = static_cast<std::uint8_t>(dtype->first);
  a.tensor.dtype_bits = dtype->second;
  if (shape->empty() || shape->front() != '(' || shape->back() != ')') {
    return fail("shape " + *shape);
  }
  std::vector<std::int64_t> dims;
  std::string inner = shape->substr(1, shape->size() - 2);
  std::size_t i = 0;
  while (i < inner.size()) {
    while (i < inner.size() && (inner[i] == ' ' || inner[i] == ',')) ++i;
    if (i >= inner.size()) break;
    std::size_t end = i;
    while (end < inner.size() && inner[end] >= '0' && inner[end] <= '9') ++end;
    if (end == i || end - i > 12) return fail("shape " + *shape);
    dims.push_back(std::stoll(inner.substr(i, end - i)));
    i = end;
  }
  if (dims.size() > kMaxTensorDims) {
    return fail(std::to_string(dims.size()) + " dimensions (at most " +
                std::to_string(kMaxTensorDims) + ")");
  }
  a.tensor.ndim = static_cast<std::uint8_t>(dims.size());
  std::uint64_t elements = 1;
  for (std::size_t k = 0; k < dims.size(); ++k) {
    a.tensor.shape[k] = dims[k];
    elements *= static_cast<std::uint64_t>(dims[k]);
    if (elements > (std::uint64_t{1} << 40)) return fail("shape " + *shape + " is too large");
  }
  if (*fortran == "True" && dims.size() > 1) {
    std::int64_t stride = 1;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      a.tensor.strides[k] = stride;
      stride *= dims[k] == 0 ? 1 : dims[k];
    }
  } else if (*fortran != "False" && *fortran != "True") {
    return fail("fortran_order " + *fortran);
  }
  const std::uint64_t bytes = elements * a.tensor.element_bytes();
  const std::size_t data_at = header_at + header_len;
  if (file.size() - data_at != bytes) {
    return fail("the header says " + std::to_string(bytes) + " bytes of data (" +
                a.tensor.dtype_name() + " " + a.tensor.shape_text() + "), the file has " +
                std::to_string(file.size() - data_at));
  }
  a.data.assign(file.begin() + static_cast<std::ptrdiff_t>(data_at), file.end());
  return a;
}

// A version 1.0 file of a C-order array, NumPy's header spelling: "{'descr': '<f4',
// 'fortran_order': False, 'shape': (2, 3), }", spaces and '\n' to a multiple of 64 bytes.
inline std::vector<std::byte> serialise(const TensorDesc& t, const std::byte* data,
                                        std::size_t bytes) {
  std::string shape = "(";
  for (std::uint8_t d = 0; d < t.ndim; ++d) {
    shape += std::to_string(t.shape[d]);
    shape += t.ndim == 1 ? "," : (d + 1 < t.ndim ? ", " : "");
  }
  shape += ")";
  std::string header =
      "{'descr': '" + descr_of(t) + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::vector<std::byte> out(10 + header.size() + bytes);
  const unsigned char start[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  std::memcpy(out.data(), start, sizeof start);
  out[8] = static_cast<std::byte>(header.size() & 0xff);
  out[9] = static_cast<std::byte>(header.size() >> 8);
  std::memcpy(out.data() + 10, header.data(), header.size());
  if (bytes != 0) std::memcpy(out.data() + 10 + header.size(), data, bytes);
  return out;
}

inline std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot be read");
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  if (!chars.empty()) std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

inline void write_file(const std::string& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error(path + ": cannot be written");
}

}  // namespace ipcring::tools::npy
