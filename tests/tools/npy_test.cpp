// npy_test.cpp — real data in and out: `ringpub --from` publishes .npy and raw files typed from
// their header (or --dtype/--shape), `ringdump echo --save` writes frames back as .npy files;
// the round trip gives back the files byte for byte. tools/npy.hpp against NumPy's own spelling.
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "ipcring/ipcring.hpp"
#include "npy.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

namespace npy = ipcring::tools::npy;
using ipcring::test::run_tool;
using ipcring::test::ScopedChannel;
using ipcring::test::ToolResult;

namespace {

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) + "\nstdout:\n" +
         r.out + "\nstderr:\n" + r.err;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What numpy.save(path, numpy.arange(6, dtype='<i4').reshape(2, 3)) writes, spelled out here
// (not by npy::serialise): magic, version 1.0, header length 118, the dict padded with spaces
// to 128 bytes in all, then the six int32 elements.
std::vector<std::byte> numpy_arange_2x3_int32() {
  std::string header = "{'descr': '<i4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(58, ' ');
  header += '\n';
  std::string file =
      std::string("\x93NUMPY\x01\x00", 8) + std::string(1, '\x76') + std::string(1, '\0') + header;
  for (std::int32_t v = 0; v < 6; ++v) file.append(reinterpret_cast<const char*>(&v), 4);
  std::vector<std::byte> out(file.size());
  std::memcpy(out.data(), file.data(), file.size());
  return out;
}

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& stem) {
    path = (std::filesystem::temp_directory_path() /
            ("ipcring-" + stem + "-" + std::to_string(getpid())))
               .string();
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// ringdump echo --save first (it waits for the channel), then ringpub --from: the frames echo
// saved.
std::vector<std::string> round_trip(const std::string& name, const std::vector<std::string>& pub,
                                    const std::string& out_dir, int frames, ToolResult& echo,
                                    ToolResult& publisher) {
  std::thread reader([&] {
    echo = run_tool({RINGDUMP_PATH, "echo", name, "--sequential", "--count", std::to_string(frames),
                     "--save", out_dir, "--wait", "30"},
                    std::chrono::seconds(60));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<std::string> argv = {
      RINGPUB_PATH, name,        "--rate", "10",      "--slots",
      "16",         "--readers", "2",      "--count", std::to_string(frames * 4)};
  argv.insert(argv.end(), pub.begin(), pub.end());
  publisher = run_tool(argv, std::chrono::seconds(60));
  reader.join();
  return files_in(out_dir);
}

}  // namespace

TEST_CASE("npy: NumPy's own file parses, and serialise spells it as NumPy does") {
  const auto file = numpy_arange_2x3_int32();
  const npy::Array a = npy::parse(file, "arange.npy");
  CHECK(a.tensor.dtype_name() == "int32");
  CHECK(a.tensor.shape_text() == "(2, 3)");
  REQUIRE(a.data.size() == 24);
  std::int32_t last = 0;
  std::memcpy(&last, a.data.data() + 20, 4);
  CHECK(last == 5);
  CHECK(npy::serialise(a.tensor, a.data.data(), a.data.size()) == file);
}

TEST_CASE("npy: headers that do not say what the data is are refused, saying why") {
  auto file = numpy_arange_2x3_int32();
  const auto refused = [](const std::vector<std::byte>& f) -> std::string {
    try {
      npy::parse(f, "x.npy");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return {};
  };
  auto truncated = file;
  truncated.resize(truncated.size() - 4);
  CHECK(contains(refused(truncated),
                 "the header says 24 bytes of data (int32 (2, 3)), the file "
                 "has 20"));
  auto big_endian = file;
  big_endian[10 + 11] = static_cast<std::byte>('>');  // '<i4' -> '>i4'
  CHECK(contains(refused(big_endian), "dtype '>i4'"));
  auto not_npy = file;
  not_npy[1] = static_cast<std::byte>('X');
  CHECK(contains(refused(not_npy), "no \\x93NUMPY magic"));
}

TEST_CASE("ringpub --from DIR -> ringdump echo --save: the .npy files come back byte for byte") {
  ScopedChannel ch("npy-rt");
  TempDir in("npy-in");
  TempDir out("npy-out");
  // Two files of different dtype and shape: an (H, W, C) uint8 image and NumPy's int32 arange.
  const auto image_tensor = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {4, 5, 3});
  std::vector<std::byte> pixels(60);
  for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<std::byte>(k * 7);
  const auto image = npy::serialise(image_tensor, pixels.data(), pixels.size());
  const auto arange = numpy_arange_2x3_int32();
  npy::write_file(in.path + "/a-image.npy", image);
  npy::write_file(in.path + "/b-arange.npy", arange);

  ToolResult echo, pub;
  const auto saved = round_trip(ch.name(), {"--from", in.path}, out.path, 2, echo, pub);
  INFO(describe(pub));
  INFO(describe(echo));
  REQUIRE(pub.rc == 0);
  REQUIRE(echo.rc == 0);
  CHECK((contains(echo.out, "tensor     uint8 (4, 5, 3)") &&
         contains(echo.out, "tensor     int32 (2, 3)")));
  CHECK(contains(echo.out, "metadata   11 bytes: \"a-image.npy\""));
  REQUIRE(saved.size() == 2);
  // Two consecutive frames: one of each file, each the file it came from, byte for byte.
  int images = 0, aranges = 0;
  for (const auto& path : saved) {
    CAPTURE(path);
    CHECK(path.size() > 4);
    CHECK(path.substr(path.size() - 4) == ".npy");
    const auto bytes = npy::read_file(path);
    if (bytes == image) ++images;
    if (bytes == arange) ++aranges;
  }
  CHECK(images == 1);
  CHECK(aranges == 1);
}

TEST_CASE("ringpub --from: Fortran order and raw files keep their values; bad files exit 2") {
  TempDir in("npy-raw");
  // A raw file of uint16 elements with --dtype and --shape; saved as C-order .npy.
  std::vector<std::uint16_t> values = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::string raw = in.path + "/values.raw";
  {
    std::vector<std::byte> bytes(values.size() * 2);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    npy::write_file(raw, bytes);
  }
  {
    ScopedChannel ch("npy-raw");
    TempDir out("npy-raw-out");
    ToolResult echo, pub;
    const auto saved = round_trip(ch.name(), {"--from", raw, "--dtype", "uint16", "--shape", "2,4"},
                                  out.path, 1, echo, pub);
    INFO(describe(pub));
    INFO(describe(echo));
    REQUIRE(saved.size() == 1);
    const npy::Array a = npy::parse(npy::read_file(saved[0]), saved[0]);
    CHECK(a.tensor.dtype_name() == "uint16");
    CHECK(a.tensor.shape_text() == "(2, 4)");
    REQUIRE(a.data.size() == 16);
    CHECK(std::memcmp(a.data.data(), values.data(), 16) == 0);
  }
  {
    // The same values as a Fortran-order (4, 2) array: element [i, j] is values[i + 4 j]. The
    // frame carries Fortran strides; the saved file is C order with the same elements.
    std::string header = "{'descr': '<u2', 'fortran_order': True, 'shape': (4, 2), }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::string file = std::string("\x93NUMPY\x01\x00", 8) +
                       std::string(1, static_cast<char>(header.size())) + std::string(1, '\0') +
                       header + std::string(reinterpret_cast<const char*>(values.data()), 16);
    std::vector<std::byte> bytes(file.size());
    std::memcpy(bytes.data(), file.data(), file.size());
    npy::write_file(in.path + "/fortran.npy", bytes);
    ScopedChannel ch("npy-fortran");
    TempDir out("npy-fortran-out");
    ToolResult echo, pub;
    const auto saved =
        round_trip(ch.name(), {"--from", in.path + "/fortran.npy"}, out.path, 1, echo, pub);
    INFO(describe(pub));
    INFO(describe(echo));
    REQUIRE(saved.size() == 1);
    const npy::Array a = npy::parse(npy::read_file(saved[0]), saved[0]);
    CHECK(a.tensor.shape_text() == "(4, 2)");
    REQUIRE(a.data.size() == 16);
    std::vector<std::uint16_t> c_order(8);
    std::memcpy(c_order.data(), a.data.data(), 16);
    CHECK(c_order == std::vector<std::uint16_t>{1, 5, 2, 6, 3, 7, 4, 8});
  }
  // Refusals name the file and the numbers.
  const ToolResult wrong = run_tool({RINGPUB_PATH, "npy-unused", "--from", raw, "--dtype", "uint16",
                                     "--shape", "3,3", "--count", "1"});
  INFO(describe(wrong));
  CHECK(wrong.rc == 2);
  CHECK(contains(wrong.err, "values.raw: 16 bytes, but uint16 (3, 3) is 18 bytes"));
  const ToolResult missing = run_tool({RINGPUB_PATH, "npy-unused", "--from", in.path + "/none"});
  CHECK(missing.rc == 2);
  CHECK(contains(missing.err, "no such file or directory"));
  const ToolResult small =
      run_tool({RINGPUB_PATH, "npy-unused", "--from", raw, "--frame-bytes", "8", "--count", "1"});
  CHECK(small.rc == 2);
  CHECK(contains(small.err, "values.raw has 16 bytes, more than --frame-bytes 8"));
}
