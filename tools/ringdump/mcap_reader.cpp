// mcap_reader.cpp — see mcap_reader.hpp.
#include "ringdump/mcap_reader.hpp"

#include <fcntl.h>
#include <lz4frame.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ringdump::mcap {

namespace {

// Largest decompressed chunk accepted (a chunk holds at least one message; frames are far below).
constexpr std::uint64_t kMaxChunk = std::uint64_t{4} << 30;

// Reads MCAP primitives from a span; `ok` turns false at the first read past its end.
class Cursor {
 public:
  explicit Cursor(std::span<const std::byte> s) : s_(s) {}
  bool ok() const { return ok_; }
  std::size_t at() const { return at_; }
  std::size_t left() const { return s_.size() - at_; }
  template <typename T>
  T get() {
    T v{};
    if (!ok_ || left() < sizeof(T)) {
      ok_ = false;
      return v;
    }
    std::memcpy(&v, s_.data() + at_, sizeof(T));  // the format is little-endian, as are we
    at_ += sizeof(T);
    return v;
  }
  std::span<const std::byte> bytes(std::uint64_t n) {
    if (!ok_ || left() < n) {
      ok_ = false;
      return {};
    }
    auto r = s_.subspan(at_, n);
    at_ += n;
    return r;
  }
  std::string string() {
    const auto n = get<std::uint32_t>();
    const auto b = bytes(n);
    return {reinterpret_cast<const char*>(b.data()), b.size()};
  }
  StringMap map() {
    StringMap m;
    const auto n = get<std::uint32_t>();
    Cursor inner(bytes(n));
    if (!ok_) return m;
    while (inner.ok() && inner.left() > 0) {
      std::string k = inner.string();
      std::string v = inner.string();
      if (inner.ok()) m.emplace(std::move(k), std::move(v));
    }
    if (!inner.ok()) ok_ = false;
    return m;
  }

 private:
  std::span<const std::byte> s_;
  std::size_t at_ = 0;
  bool ok_ = true;
};

const char* op_name(std::uint8_t op) {
  switch (static_cast<Op>(op)) {
    case Op::header:
      return "Header";
    case Op::footer:
      return "Footer";
    case Op::schema:
      return "Schema";
    case Op::channel:
      return "Channel";
    case Op::message:
      return "Message";
    case Op::chunk:
      return "Chunk";
    case Op::message_index:
      return "MessageIndex";
    case Op::chunk_index:
      return "ChunkIndex";
    case Op::attachment:
      return "Attachment";
    case Op::attachment_index:
      return "AttachmentIndex";
    case Op::statistics:
      return "Statistics";
    case Op::metadata:
      return "Metadata";
    case Op::metadata_index:
      return "MetadataIndex";
    case Op::summary_offset:
      return "SummaryOffset";
    case Op::data_end:
      return "DataEnd";
  }
  return "unknown";
}

}  // namespace

FileReader::FileReader(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file");
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ < 2 * sizeof kMagic) {
    ::close(fd);
    throw std::runtime_error(path + ": " + std::to_string(size_) +
                             " bytes: too short for an MCAP file");
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) throw std::runtime_error(path + ": mmap failed: " + errno_text(errno));
  map_ = static_cast<const std::byte*>(m);
  if (std::memcmp(map_, kMagic, sizeof kMagic) != 0) {
    ::munmap(const_cast<std::byte*>(map_), size_);
    map_ = nullptr;
    throw std::runtime_error(path + ": not an MCAP file (no MCAP magic at its start)");
  }
}

FileReader::~FileReader() {
  if (map_ != nullptr) ::munmap(const_cast<std::byte*>(map_), size_);
}

void FileReader::fail(std::uint64_t offset, const std::string& what) const {
  throw std::runtime_error(path_ + ": at byte " + std::to_string(offset) + ": " + what);
}

bool FileReader::scan(const Handlers& h) {
  const std::span<const std::byte> all(map_, size_);
  return records(all.subspan(sizeof kMagic), sizeof kMagic, false, h);
}

bool FileReader::records(std::span<const std::byte> bytes, std::uint64_t base, bool in_chunk,
                         const Handlers& h) {
  Cursor c(bytes);
  while (c.left() > 0) {
    const std::uint64_t at = base + c.at();
    const auto op = c.get<std::uint8_t>();
    const auto length = c.get<std::uint64_t>();
    if (!c.ok()) fail(at, "a record's opcode and length run past the end");
    if (length > c.left()) {
      fail(at, std::string(op_name(op)) + " record of " + std::to_string(length) +
                   " bytes with only " + std::to_string(c.left()) + " left" +
                   (in_chunk ? " in its chunk" : " in the file (a recording cut short?)"));
    }
    Cursor r(c.bytes(length));
    switch (static_cast<Op>(op)) {
      case Op::schema: {
        SchemaRecord s;
        s.id = r.get<std::uint16_t>();
        s.name = r.string();
        s.encoding = r.string();
        s.data = r.string();
        if (!r.ok()) fail(at, "Schema record shorter than its fields");
        if (h.schema) h.schema(s);
        break;
      }
      case Op::channel: {
        ChannelRecord ch;
        ch.id = r.get<std::uint16_t>();
        ch.schema_id = r.get<std::uint16_t>();
        ch.topic = r.string();
        ch.message_encoding = r.string();
        ch.metadata = r.map();
        if (!r.ok()) fail(at, "Channel record shorter than its fields");
        if (h.channel) h.channel(ch);
        break;
      }
      case Op::message: {
        MessageRecord m;
        m.channel_id = r.get<std::uint16_t>();
        m.sequence = r.get<std::uint32_t>();
        m.log_time = r.get<std::uint64_t>();
        m.publish_time = r.get<std::uint64_t>();
        if (!r.ok()) fail(at, "Message record of " + std::to_string(length) + " bytes (< 22)");
        m.data = r.bytes(r.left());
        if (h.message && !h.message(m)) return false;
        break;
      }
      case Op::metadata: {
        const std::string name = r.string();
        const StringMap values = r.map();
        if (!r.ok()) fail(at, "Metadata record shorter than its fields");
        if (h.metadata) h.metadata(name, values);
        break;
      }
      case Op::chunk: {
        if (in_chunk) fail(at, "a Chunk inside a chunk");
        (void)r.get<std::uint64_t>();  // message_start_time
        (void)r.get<std::uint64_t>();  // message_end_time
        const auto uncompressed = r.get<std::uint64_t>();
        const auto crc = r.get<std::uint32_t>();
        const std::string compression = r.string();
        const auto n = r.get<std::uint64_t>();
        const auto payload = r.bytes(n);
        if (!r.ok()) fail(at, "Chunk record shorter than its fields");
        if (uncompressed > kMaxChunk) {
          fail(at, "chunk of " + std::to_string(uncompressed) + " uncompressed bytes (at most " +
                       std::to_string(kMaxChunk) + ")");
        }
        ++chunks_;
        if (compression_.empty()) compression_ = compression.empty() ? "none" : compression;
        std::span<const std::byte> inner = payload;
        Buffer own;  // this chunk's records, decompressed
        if (compression == "zstd") {
          own.resize(uncompressed);
          const std::size_t got =
              ZSTD_decompress(own.data(), own.size(), payload.data(), payload.size());
          if (ZSTD_isError(got) != 0U || got != uncompressed) {
            fail(at, std::string("zstd chunk does not decompress to its ") +
                         std::to_string(uncompressed) + " bytes: " +
                         (ZSTD_isError(got) != 0U ? ZSTD_getErrorName(got)
                                                  : std::to_string(got) + " bytes"));
          }
          inner = own;
        } else if (compression == "lz4") {
          own.resize(uncompressed);
          LZ4F_dctx* d = nullptr;
          if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)) != 0U) {
            fail(at, "lz4: cannot create a decompression context");
          }
          std::size_t out_at = 0, in_at = 0;
          std::size_t hint = 1;
          while (hint != 0 && in_at < payload.size()) {
            std::size_t out_n = own.size() - out_at, in_n = payload.size() - in_at;
            hint = LZ4F_decompress(d, own.data() + out_at, &out_n, payload.data() + in_at, &in_n,
                                   nullptr);
            if (LZ4F_isError(hint) != 0U) {
              const std::string why = LZ4F_getErrorName(hint);
              LZ4F_freeDecompressionContext(d);
              fail(at, "lz4 chunk: " + why);
            }
            out_at += out_n;
            in_at += in_n;
            if (out_n == 0 && in_n == 0) break;
          }
          LZ4F_freeDecompressionContext(d);
          if (out_at != uncompressed) {
            fail(at, "lz4 chunk decompresses to " + std::to_string(out_at) + " bytes, not " +
                         std::to_string(uncompressed));
          }
          inner = own;
        } else if (!compression.empty()) {
          fail(at, "chunk compression \"" + compression + "\" (known: zstd, lz4, none)");
        } else if (n != uncompressed) {
          fail(at, "uncompressed chunk of " + std::to_string(n) + " bytes says " +
                       std::to_string(uncompressed));
        }
        if (crc != 0) {
          const std::uint32_t got = crc32(0, inner.data(), inner.size());
          if (got != crc) {
            char b[96];
            std::snprintf(b, sizeof b, "chunk CRC %08x, its records' CRC is %08x", crc, got);
            fail(at, b);
          }
        }
        if (!records(inner, 0, true, h)) return false;
        break;
      }
      case Op::data_end: {
        if (in_chunk) fail(at, "DataEnd inside a chunk");
        const auto stored = r.get<std::uint32_t>();
        data_crc_ok_ = stored == 0 || stored == crc32(0, map_, at);
        return true;
      }
      default:
        break;  // Header, indexes, attachments: not needed front to back
    }
  }
  return true;
}

std::optional<SummaryStatistics> FileReader::statistics() {
  // Footer (29 bytes) and magic (8) end the file.
  constexpr std::size_t kFooter = 1 + 8 + 8 + 8 + 4;
  if (size_ < sizeof kMagic * 2 + kFooter) return std::nullopt;
  const std::byte* end = map_ + size_;
  if (std::memcmp(end - sizeof kMagic, kMagic, sizeof kMagic) != 0) return std::nullopt;
  Cursor f(std::span<const std::byte>(end - sizeof kMagic - kFooter, kFooter));
  if (f.get<std::uint8_t>() != static_cast<std::uint8_t>(Op::footer)) return std::nullopt;
  (void)f.get<std::uint64_t>();
  const auto summary_start = f.get<std::uint64_t>();
  if (summary_start == 0) return std::nullopt;
  const std::uint64_t footer_at = size_ - sizeof kMagic - kFooter;
  if (summary_start >= footer_at) fail(footer_at, "summary start " + std::to_string(summary_start));
  Cursor c(std::span<const std::byte>(map_ + summary_start, footer_at - summary_start));
  while (c.left() > 0) {
    const auto op = c.get<std::uint8_t>();
    const auto length = c.get<std::uint64_t>();
    if (!c.ok() || length > c.left()) fail(summary_start + c.at(), "summary record past its end");
    Cursor r(c.bytes(length));
    if (static_cast<Op>(op) != Op::statistics) continue;
    SummaryStatistics s;
    s.message_count = r.get<std::uint64_t>();
    (void)r.get<std::uint16_t>();  // schema_count
    s.channel_count = r.get<std::uint32_t>();
    (void)r.get<std::uint32_t>();  // attachment_count
    s.metadata_count = r.get<std::uint32_t>();
    s.chunk_count = r.get<std::uint32_t>();
    s.message_start_time = r.get<std::uint64_t>();
    s.message_end_time = r.get<std::uint64_t>();
    Cursor counts(r.bytes(r.get<std::uint32_t>()));
    while (counts.ok() && counts.left() > 0) {
      const auto id = counts.get<std::uint16_t>();
      const auto n = counts.get<std::uint64_t>();
      if (counts.ok()) s.channel_message_counts[id] = n;
    }
    if (!r.ok() || !counts.ok()) fail(summary_start, "Statistics record shorter than its fields");
    return s;
  }
  return std::nullopt;
}

}  // namespace ringdump::mcap
