// mcap_writer.cpp — see mcap_writer.hpp. Field order and types follow mcap.dev/spec; every record
// is opcode (uint8), content length (uint64), content.
#include "ringdump/mcap_writer.hpp"

#include <fcntl.h>
#include <lz4frame.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ringdump::mcap {

namespace {

// Bytes of a Message record before its data: opcode, length, channel_id, sequence, log_time,
// publish_time.
constexpr std::size_t kMessageHead = 1 + 8 + 2 + 4 + 8 + 8;

std::runtime_error system_error(const std::string& path, const char* what) {
  return std::runtime_error(path + ": " + what + ": " + errno_text(errno));
}

}  // namespace

std::string errno_text(int error) {
  char text[256];
  return ::strerror_r(error, text, sizeof text);  // the GNU strerror_r: returns the text
}

const char* to_string(Compression compression) noexcept {
  switch (compression) {
    case Compression::zstd:
      return "zstd";
    case Compression::lz4:
      return "lz4";
    case Compression::none:
      break;
  }
  return "none";
}

std::optional<Compression> parse_compression(std::string_view text) noexcept {
  if (text == "none" || text.empty()) return Compression::none;
  if (text == "zstd") return Compression::zstd;
  if (text == "lz4") return Compression::lz4;
  return std::nullopt;
}

std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const Bytef*>(data);
  while (bytes > 0) {  // zlib takes uInt lengths
    const auto n = static_cast<uInt>(std::min<std::size_t>(bytes, 1U << 30));
    crc = static_cast<std::uint32_t>(::crc32(crc, p, n));
    p += n;
    bytes -= n;
  }
  return crc;
}

void put_u8(Buffer& b, std::uint8_t v) {
  b.push_back(static_cast<std::byte>(v));
}
void put_u16(Buffer& b, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) put_u8(b, static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_u32(Buffer& b, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) put_u8(b, static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_u64(Buffer& b, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) put_u8(b, static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_string(Buffer& b, std::string_view s) {
  put_u32(b, static_cast<std::uint32_t>(s.size()));
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  b.insert(b.end(), p, p + s.size());
}
void put_map(Buffer& b, const StringMap& m) {
  Buffer entries;
  for (const auto& [k, v] : m) {
    put_string(entries, k);
    put_string(entries, v);
  }
  put_u32(b, static_cast<std::uint32_t>(entries.size()));
  b.insert(b.end(), entries.begin(), entries.end());
}

Writer::Writer(const std::string& path, WriterOptions options,
               std::function<void(Buffer&&)> recycle)
    : path_(path), options_(std::move(options)), recycle_(std::move(recycle)) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw system_error(path, "cannot create the file");
  out_.reserve(std::size_t{1} << 20);
  write(kMagic, sizeof kMagic);
  Buffer header;
  put_string(header, options_.profile);
  put_string(header, options_.library);
  write_record(Op::header, header);
}

Writer::~Writer() {
  if (fd_ >= 0) {
    try {
      if (!finished_) flush_buffer();
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): nothing to report to
    }
    ::close(fd_);
  }
}

void Writer::flush_buffer() {
  std::size_t done = 0;
  while (done < out_.size()) {
    const ssize_t n = ::write(fd_, out_.data() + done, out_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error(path_, "write failed");
    }
    done += static_cast<std::size_t>(n);
  }
  out_.clear();
}

void Writer::combine_data_crc(std::uint32_t crc, std::uint64_t bytes) noexcept {
  data_crc_ =
      static_cast<std::uint32_t>(crc32_combine(data_crc_, crc, static_cast<z_off_t>(bytes)));
}

void Writer::write(const void* data, std::size_t bytes, bool crc_known) {
  if (crc_known) {
    // the caller combines the CRC
  } else if (in_summary_) {
    summary_crc_ = crc32(summary_crc_, data, bytes);
  } else if (options_.crc) {
    data_crc_ = crc32(data_crc_, data, bytes);
  }
  offset_ += bytes;
  stats_.file_bytes = offset_;
  const auto* p = static_cast<const std::byte*>(data);
  if (out_.size() + bytes <= out_.capacity()) {
    out_.insert(out_.end(), p, p + bytes);
    return;
  }
  flush_buffer();
  if (bytes < out_.capacity() / 2) {
    out_.insert(out_.end(), p, p + bytes);
    return;
  }
  std::size_t done = 0;  // large: straight from the caller's memory
  while (done < bytes) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error(path_, "write failed");
    }
    done += static_cast<std::size_t>(n);
  }
}

void Writer::write_record(Op op, const Buffer& content) {
  Buffer head;
  put_u8(head, static_cast<std::uint8_t>(op));
  put_u64(head, content.size());
  write(head.data(), head.size());
  write(content.data(), content.size());
}

std::uint16_t Writer::add_schema(const std::string& name, const std::string& encoding,
                                 const std::string& data) {
  flush_chunk();
  const auto id = static_cast<std::uint16_t>(schemas_.size() + 1);
  Buffer r;
  put_u16(r, id);
  put_string(r, name);
  put_string(r, encoding);
  put_string(r, data);  // bytes with a uint32 length, as a string is
  write_record(Op::schema, r);
  schemas_.push_back(std::move(r));
  return id;
}

std::uint16_t Writer::add_channel(std::uint16_t schema_id, const std::string& topic,
                                  const std::string& message_encoding, const StringMap& metadata) {
  flush_chunk();
  const auto id = static_cast<std::uint16_t>(channels_.size() + 1);
  Buffer r;
  put_u16(r, id);
  put_u16(r, schema_id);
  put_string(r, topic);
  put_string(r, message_encoding);
  put_map(r, metadata);
  write_record(Op::channel, r);
  channels_.push_back(std::move(r));
  channel_counts_[id] = 0;
  return id;
}

void Writer::add_message(std::uint16_t channel_id, std::uint32_t sequence, std::uint64_t log_time,
                         std::uint64_t publish_time, Buffer&& data) {
  if (stats_.messages == 0 || log_time < start_time_) start_time_ = log_time;
  if (stats_.messages == 0 || log_time > end_time_) end_time_ = log_time;
  ++stats_.messages;
  ++channel_counts_[channel_id];
  chunk_records_bytes_ += kMessageHead + data.size();
  chunk_.push_back(Pending{channel_id, sequence, log_time, publish_time, std::move(data)});
  if (chunk_records_bytes_ >= options_.chunk_bytes) flush_chunk();
}

void Writer::flush_chunk() {
  if (chunk_.empty()) return;
  // The message records' heads, and each message's offset within the chunk's records.
  std::vector<std::array<std::byte, kMessageHead>> heads(chunk_.size());
  std::map<std::uint16_t, std::vector<std::pair<std::uint64_t, std::uint64_t>>> index;
  std::uint64_t at = 0, start = 0, end = 0;
  std::uint32_t crc = 0;
  for (std::size_t i = 0; i < chunk_.size(); ++i) {
    const Pending& m = chunk_[i];
    Buffer h;
    put_u8(h, static_cast<std::uint8_t>(Op::message));
    put_u64(h, kMessageHead - 9 + m.data.size());
    put_u16(h, m.channel_id);
    put_u32(h, m.sequence);
    put_u64(h, m.log_time);
    put_u64(h, m.publish_time);
    std::copy(h.begin(), h.end(), heads[i].begin());
    if (options_.crc) {
      crc = crc32(crc, heads[i].data(), kMessageHead);
      crc = crc32(crc, m.data.data(), m.data.size());
    }
    index[m.channel_id].emplace_back(m.log_time, at);
    if (i == 0 || m.log_time < start) start = m.log_time;
    if (i == 0 || m.log_time > end) end = m.log_time;
    at += kMessageHead + m.data.size();
  }
  const std::uint64_t uncompressed = at;

  const void* records = nullptr;  // compressed records, or nullptr: write the pieces as they are
  std::uint64_t records_bytes = uncompressed;
  if (options_.compression == Compression::zstd) {
    compressed_.resize(ZSTD_compressBound(uncompressed));
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    if (cctx == nullptr) throw std::runtime_error(path_ + ": zstd: out of memory");
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, options_.zstd_level);
    ZSTD_CCtx_setPledgedSrcSize(cctx, uncompressed);
    ZSTD_outBuffer out{compressed_.data(), compressed_.size(), 0};
    auto feed = [&](const void* p, std::size_t n, ZSTD_EndDirective how) {
      ZSTD_inBuffer in{p, n, 0};
      for (;;) {
        const std::size_t left = ZSTD_compressStream2(cctx, &out, &in, how);
        if (ZSTD_isError(left) != 0U) {
          ZSTD_freeCCtx(cctx);
          throw std::runtime_error(path_ + ": zstd: " + ZSTD_getErrorName(left));
        }
        if (how == ZSTD_e_end ? left == 0 : in.pos == in.size) break;
      }
    };
    for (std::size_t i = 0; i < chunk_.size(); ++i) {
      feed(heads[i].data(), kMessageHead, ZSTD_e_continue);
      feed(chunk_[i].data.data(), chunk_[i].data.size(), ZSTD_e_continue);
    }
    feed(nullptr, 0, ZSTD_e_end);
    ZSTD_freeCCtx(cctx);
    records = compressed_.data();
    records_bytes = out.pos;
  } else if (options_.compression == Compression::lz4) {
    LZ4F_preferences_t prefs{};
    prefs.frameInfo.contentSize = uncompressed;
    prefs.frameInfo.blockSizeID = LZ4F_max4MB;
    std::size_t largest = kMessageHead;
    for (const auto& m : chunk_) largest = std::max(largest, m.data.size());
    // Room for the frame header, every update's worst case and the end mark.
    std::size_t bound = LZ4F_HEADER_SIZE_MAX + 16;
    bound += chunk_.size() * (LZ4F_compressBound(kMessageHead, &prefs) + 16);
    bound += LZ4F_compressBound(uncompressed, &prefs) + chunk_.size() * 16;
    compressed_.resize(bound);
    LZ4F_cctx* cctx = nullptr;
    if (LZ4F_isError(LZ4F_createCompressionContext(&cctx, LZ4F_VERSION)) != 0U) {
      throw std::runtime_error(path_ + ": lz4: cannot create a compression context");
    }
    std::size_t pos = 0;
    auto check = [&](std::size_t r) {
      if (LZ4F_isError(r) != 0U) {
        LZ4F_freeCompressionContext(cctx);
        throw std::runtime_error(path_ + ": lz4: " + LZ4F_getErrorName(r));
      }
      pos += r;
    };
    auto* base = reinterpret_cast<char*>(compressed_.data());
    check(LZ4F_compressBegin(cctx, base, compressed_.size(), &prefs));
    auto update = [&](const void* p, std::size_t n) {
      const std::size_t need = LZ4F_compressBound(n, &prefs);
      if (compressed_.size() - pos < need) {
        compressed_.resize(pos + need + 64);
        base = reinterpret_cast<char*>(compressed_.data());
      }
      check(LZ4F_compressUpdate(cctx, base + pos, compressed_.size() - pos, p, n, nullptr));
    };
    for (std::size_t i = 0; i < chunk_.size(); ++i) {
      update(heads[i].data(), kMessageHead);
      update(chunk_[i].data.data(), chunk_[i].data.size());
    }
    if (compressed_.size() - pos < LZ4F_compressBound(0, &prefs)) {
      compressed_.resize(pos + LZ4F_compressBound(0, &prefs) + 64);
      base = reinterpret_cast<char*>(compressed_.data());
    }
    check(LZ4F_compressEnd(cctx, base + pos, compressed_.size() - pos, nullptr));
    LZ4F_freeCompressionContext(cctx);
    records = compressed_.data();
    records_bytes = pos;
  }

  const std::string compression =
      options_.compression == Compression::none ? "" : to_string(options_.compression);
  ChunkIndex ci{};
  ci.start_time = start;
  ci.end_time = end;
  ci.offset = offset_;
  ci.compressed_size = records_bytes;
  ci.uncompressed_size = uncompressed;
  Buffer head;
  put_u8(head, static_cast<std::uint8_t>(Op::chunk));
  const std::uint64_t content = 8 + 8 + 8 + 4 + 4 + compression.size() + 8 + records_bytes;
  put_u64(head, content);
  put_u64(head, start);
  put_u64(head, end);
  put_u64(head, uncompressed);
  put_u32(head, crc);
  put_string(head, compression);
  put_u64(head, records_bytes);
  write(head.data(), head.size());
  if (records != nullptr) {
    write(records, records_bytes);
  } else {
    // The records' CRC is the chunk's: one pass over a frame's bytes serves both CRCs.
    for (std::size_t i = 0; i < chunk_.size(); ++i) {
      write(heads[i].data(), kMessageHead, true);
      write(chunk_[i].data.data(), chunk_[i].data.size(), true);
    }
    if (options_.crc) combine_data_crc(crc, uncompressed);
  }
  ci.length = offset_ - ci.offset;

  const std::uint64_t index_start = offset_;
  for (const auto& [channel, entries] : index) {
    ci.message_index_offsets[channel] = offset_;
    Buffer r;
    put_u16(r, channel);
    put_u32(r, static_cast<std::uint32_t>(entries.size() * 16));
    for (const auto& [time, where] : entries) {
      put_u64(r, time);
      put_u64(r, where);
    }
    write_record(Op::message_index, r);
  }
  ci.message_index_length = offset_ - index_start;
  chunk_indexes_.push_back(std::move(ci));

  ++stats_.chunks;
  stats_.uncompressed_bytes += uncompressed;
  for (auto& m : chunk_) {
    if (recycle_) recycle_(std::move(m.data));
  }
  chunk_.clear();
  chunk_records_bytes_ = 0;
}

void Writer::add_metadata(const std::string& name, const StringMap& values) {
  flush_chunk();
  Buffer r;
  put_string(r, name);
  put_map(r, values);
  const std::uint64_t at = offset_;
  write_record(Op::metadata, r);
  metadata_indexes_.push_back(MetadataIndex{at, offset_ - at, name});
}

void Writer::finish(bool sync) {
  if (finished_) return;
  flush_chunk();
  Buffer data_end;
  put_u32(data_end, data_crc_);
  write_record(Op::data_end, data_end);

  in_summary_ = true;
  summary_crc_ = 0;
  const std::uint64_t summary_start = offset_;
  struct Group {
    Op op;
    std::uint64_t start, length;
  };
  std::vector<Group> groups;
  auto group = [&](Op op, auto&& body) {
    const std::uint64_t start = offset_;
    body();
    if (offset_ != start) groups.push_back(Group{op, start, offset_ - start});
  };
  group(Op::schema, [&] {
    for (const auto& s : schemas_) write_record(Op::schema, s);
  });
  group(Op::channel, [&] {
    for (const auto& c : channels_) write_record(Op::channel, c);
  });
  group(Op::statistics, [&] {
    Buffer r;
    put_u64(r, stats_.messages);
    put_u16(r, static_cast<std::uint16_t>(schemas_.size()));
    put_u32(r, static_cast<std::uint32_t>(channels_.size()));
    put_u32(r, 0);  // attachments
    put_u32(r, static_cast<std::uint32_t>(metadata_indexes_.size()));
    put_u32(r, static_cast<std::uint32_t>(chunk_indexes_.size()));
    put_u64(r, start_time_);
    put_u64(r, end_time_);
    put_u32(r, static_cast<std::uint32_t>(channel_counts_.size() * 10));
    for (const auto& [channel, count] : channel_counts_) {
      put_u16(r, channel);
      put_u64(r, count);
    }
    write_record(Op::statistics, r);
  });
  group(Op::metadata_index, [&] {
    for (const auto& m : metadata_indexes_) {
      Buffer r;
      put_u64(r, m.offset);
      put_u64(r, m.length);
      put_string(r, m.name);
      write_record(Op::metadata_index, r);
    }
  });
  group(Op::chunk_index, [&] {
    for (const auto& c : chunk_indexes_) {
      Buffer r;
      put_u64(r, c.start_time);
      put_u64(r, c.end_time);
      put_u64(r, c.offset);
      put_u64(r, c.length);
      put_u32(r, static_cast<std::uint32_t>(c.message_index_offsets.size() * 10));
      for (const auto& [channel, at] : c.message_index_offsets) {
        put_u16(r, channel);
        put_u64(r, at);
      }
      put_u64(r, c.message_index_length);
      put_string(r,
                 options_.compression == Compression::none ? "" : to_string(options_.compression));
      put_u64(r, c.compressed_size);
      put_u64(r, c.uncompressed_size);
      write_record(Op::chunk_index, r);
    }
  });
  const std::uint64_t summary_offset_start = offset_;
  for (const auto& g : groups) {
    Buffer r;
    put_u8(r, static_cast<std::uint8_t>(g.op));
    put_u64(r, g.start);
    put_u64(r, g.length);
    write_record(Op::summary_offset, r);
  }
  // Footer: its CRC covers the summary up to and including summary_offset_start.
  Buffer footer;
  put_u8(footer, static_cast<std::uint8_t>(Op::footer));
  put_u64(footer, 8 + 8 + 4);
  put_u64(footer, summary_start);
  put_u64(footer, summary_offset_start);
  write(footer.data(), footer.size());
  Buffer crc;
  put_u32(crc, summary_crc_);
  write(crc.data(), crc.size());
  write(kMagic, sizeof kMagic);
  flush_buffer();
  if (sync && ::fsync(fd_) != 0) throw system_error(path_, "fsync failed");
  finished_ = true;
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw system_error(path_, "close failed");
  }
  fd_ = -1;
}

}  // namespace ringdump::mcap
