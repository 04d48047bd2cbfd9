// ringdump's MCAP writer and reader and its CDR messages, in process: a round trip, and files and
// messages that lie about their lengths (every length read from a file is checked before use).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ringdump/mcap_reader.hpp"
#include "ringdump/mcap_writer.hpp"
#include "ringdump/messages.hpp"

namespace {

using ringdump::Buffer;
namespace mcap = ringdump::mcap;
namespace messages = ringdump::messages;

std::string temp_path(const char* what) {
  return "/tmp/ipcring_mcap_unit_" + std::to_string(::getpid()) + "_" + what + ".mcap";
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

Buffer bytes_of(std::size_t n, unsigned seed) {
  Buffer b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 31 + seed) & 0xff);
  return b;
}

// Writes `messages` messages of 1000 bytes on one channel; returns the path.
std::string write_file(const char* what, mcap::Compression compression, int messages,
                       std::uint64_t chunk_bytes = 4096) {
  const std::string path = temp_path(what);
  mcap::WriterOptions o;
  o.compression = compression;
  o.chunk_bytes = chunk_bytes;
  mcap::Writer w(path, o);
  const auto schema = w.add_schema("test/msg/Blob", "ros2msg", "uint8[] data\n");
  const auto channel = w.add_channel(schema, "blob", "cdr", {{"k", "v"}});
  for (int i = 0; i < messages; ++i) {
    w.add_message(channel, static_cast<std::uint32_t>(i), 1000 + i, 2000 + i,
                  bytes_of(1000, static_cast<unsigned>(i)));
  }
  w.add_metadata("ipcring.drops", {{"blob", "3"}});
  w.finish();
  return path;
}

struct Scan {
  int messages = 0;
  bool payloads_ok = true;
  std::string channel_metadata, drops;
};

Scan scan(const std::string& path) {
  mcap::FileReader r(path);
  Scan s;
  mcap::Handlers h;
  h.channel = [&](const mcap::ChannelRecord& c) { s.channel_metadata = c.metadata.at("k"); };
  h.message = [&](const mcap::MessageRecord& m) {
    const Buffer want = bytes_of(1000, m.sequence);
    if (m.data.size() != want.size() || std::memcmp(m.data.data(), want.data(), want.size()) != 0 ||
        m.log_time != 1000 + m.sequence || m.publish_time != 2000 + m.sequence) {
      s.payloads_ok = false;
    }
    ++s.messages;
    return true;
  };
  h.metadata = [&](const std::string& name, const mcap::StringMap& v) {
    if (name == "ipcring.drops") s.drops = v.at("blob");
  };
  r.scan(h);
  const auto stats = r.statistics();
  REQUIRE(stats.has_value());
  CHECK(stats->message_count == static_cast<std::uint64_t>(s.messages));
  CHECK(r.data_crc_ok() == std::optional<bool>(true));
  return s;
}

std::string error_of(const std::string& path) {
  try {
    scan(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("mcap: what the writer writes, the reader reads back, for each compression") {
  for (const auto c : {mcap::Compression::none, mcap::Compression::zstd, mcap::Compression::lz4}) {
    CAPTURE(mcap::to_string(c));
    const std::string path = write_file("roundtrip", c, 25);
    const Scan s = scan(path);
    CHECK(s.messages == 25);
    CHECK(s.payloads_ok);
    CHECK(s.channel_metadata == "v");
    CHECK(s.drops == "3");
    ::unlink(path.c_str());
  }
}

TEST_CASE(
    "mcap: a flipped byte in a chunk, a cut file and a record longer than the file fail "
    "with the offset") {
  const std::string path = write_file("hostile", mcap::Compression::none, 10);
  const std::vector<char> good = slurp(path);

  std::vector<char> flipped = good;
  flipped[flipped.size() / 2] ^= 0x5a;
  spit(path, flipped);
  const std::string crc = error_of(path);
  CHECK(crc.find("CRC") != std::string::npos);
  CHECK(crc.find("at byte") != std::string::npos);

  std::vector<char> cut(good.begin(), good.begin() + static_cast<long>(good.size() / 2));
  spit(path, cut);
  const std::string short_file = error_of(path);
  CHECK(short_file.find("cut short") != std::string::npos);

  // The Header record (right after the 8-byte magic) claims 2^60 bytes.
  std::vector<char> huge = good;
  const std::uint64_t length = std::uint64_t{1} << 60;
  std::memcpy(huge.data() + 9, &length, 8);
  spit(path, huge);
  const std::string too_long = error_of(path);
  CHECK(too_long.find("at byte 8") != std::string::npos);

  std::vector<char> not_mcap = good;
  not_mcap[1] = 'X';
  spit(path, not_mcap);
  CHECK(error_of(path).find("not an MCAP file") != std::string::npos);
  ::unlink(path.c_str());
}

TEST_CASE("messages: an Image round-trips and a lying one is refused with its values") {
  const Buffer pixels = bytes_of(std::size_t{4} * 3 * 3, 7);
  Buffer cdr;
  messages::encode_image(cdr, 1234567890123ULL, "cam", 3, 4, "rgb8",
                         {pixels.data(), pixels.size()});
  std::string error;
  const auto f = messages::decode_image({cdr.data(), cdr.size()}, error);
  REQUIRE(f.has_value());
  CHECK(f->encoding == "rgb8");
  CHECK(f->capture_time_ns == 1234567890123ULL);
  REQUIRE(f->tensor.has_value());
  CHECK(f->tensor->shape_text() == "(3, 4, 3)");
  CHECK(std::memcmp(f->data.data(), pixels.data(), pixels.size()) == 0);

  // Cut anywhere, the message is refused, never read past its end.
  for (std::size_t n = 0; n < cdr.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(messages::decode_image({cdr.data(), n}, error).has_value());
  }
  // A height the data cannot hold: height is the uint32 after the stamp and frame_id "cam".
  Buffer tall = cdr;
  const std::uint32_t height = 1000000;
  std::memcpy(tall.data() + 4 + 8 + 4 + 4, &height, 4);
  CHECK_FALSE(messages::decode_image({tall.data(), tall.size()}, error).has_value());
  CHECK(error.find("1000000") != std::string::npos);
}

TEST_CASE("messages: a Frame round-trips; a tensor beyond its data is refused") {
  const Buffer data = bytes_of(96, 3);
  const std::string meta = "front";
  messages::FrameFields in;
  in.sequence = 42;
  in.timestamp_ns = 7;
  in.capture_time_ns = 5;
  in.tensor = ipcring::TensorDesc::contiguous(ipcring::DType::float_, 32, {2, 3, 4});
  in.metadata = {reinterpret_cast<const std::byte*>(meta.data()), meta.size()};
  in.data = {data.data(), data.size()};
  Buffer cdr;
  messages::encode_frame(cdr, in);
  std::string error;
  const auto out = messages::decode_frame({cdr.data(), cdr.size()}, error);
  REQUIRE(out.has_value());
  CHECK(out->sequence == 42);
  CHECK(out->capture_time_ns == 5);
  REQUIRE(out->tensor.has_value());
  CHECK(*out->tensor == *in.tensor);
  CHECK(out->metadata.size() == meta.size());
  CHECK(out->data.size() == data.size());

  in.data = {data.data(), 95};  // one byte short of 2 x 3 x 4 float32
  Buffer short_cdr;
  messages::encode_frame(short_cdr, in);
  CHECK_FALSE(messages::decode_frame({short_cdr.data(), short_cdr.size()}, error).has_value());
  CHECK(error.find("(2, 3, 4)") != std::string::npos);
  CHECK(error.find("95") != std::string::npos);
}

TEST_CASE("messages: which tensors are images") {
  using ipcring::DType;
  using ipcring::TensorDesc;
  CHECK(messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {48, 64, 3}), "") ==
        std::optional<std::string>("rgb8"));
  CHECK(messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {48, 64}), "") ==
        std::optional<std::string>("mono8"));
  CHECK(messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {48, 64, 3}), "bgr8") ==
        std::optional<std::string>("bgr8"));
  CHECK_FALSE(
      messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {48, 64, 3}), "rgba8"));
  CHECK_FALSE(messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {48, 64, 2}), ""));
  CHECK_FALSE(messages::image_encoding(TensorDesc::contiguous(DType::float_, 32, {48, 64, 3}), ""));
  CHECK_FALSE(messages::image_encoding(TensorDesc::contiguous(DType::uint, 8, {4096}), ""));
}
