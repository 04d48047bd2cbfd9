// mcap_writer.hpp — an MCAP file writer (the format of mcap.dev, version 0): chunked, with message
// indexes after each chunk, a summary section (schemas, channels, statistics, metadata indexes,
// chunk indexes, summary offsets) and the CRCs the format defines (each chunk's uncompressed
// records, the data section, the summary), so indexed readers can seek.
//
// Written for ringdump record: one thread calls every member (no locking). Message payloads are
// handed over as owned buffers and given back through the recycle callback once their chunk is
// on disk, so a recorder can reuse them without allocating (and faulting in) a frame's worth of
// memory per message. Records are written through a buffered file descriptor; a chunk without
// compression is written straight from the message buffers (no copy into a chunk buffer).
//
// Layout written:
//   magic, Header, [Schema, Channel]..., [Chunk, MessageIndex...]..., Metadata..., DataEnd,
//   Schema..., Channel..., Statistics, MetadataIndex..., ChunkIndex..., SummaryOffset...,
//   Footer, magic
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ringdump/buffer.hpp"

namespace ringdump::mcap {

inline constexpr unsigned char kMagic[8] = {0x89, 'M', 'C', 'A', 'P', '0', '\r', '\n'};

// Record opcodes (mcap.dev/spec).
enum class Op : std::uint8_t {
  header = 0x01,
  footer = 0x02,
  schema = 0x03,
  channel = 0x04,
  message = 0x05,
  chunk = 0x06,
  message_index = 0x07,
  chunk_index = 0x08,
  attachment = 0x09,
  attachment_index = 0x0A,
  statistics = 0x0B,
  metadata = 0x0C,
  metadata_index = 0x0D,
  summary_offset = 0x0E,
  data_end = 0x0F,
};

enum class Compression { none, zstd, lz4 };
// "none" (written as the empty string in the file), "zstd", "lz4" (the LZ4 frame format).
const char* to_string(Compression compression) noexcept;
std::optional<Compression> parse_compression(std::string_view text) noexcept;

// The system's text for an errno value (strerror_r: strerror is not thread-safe).
std::string errno_text(int error);

// CRC-32 (ISO-HDLC, zlib's), continued from `crc` (0 to start).
std::uint32_t crc32(std::uint32_t crc, const void* data, std::size_t bytes) noexcept;

using ringdump::Buffer;
using StringMap = std::map<std::string, std::string>;

struct WriterOptions {
  Compression compression = Compression::zstd;
  int zstd_level = 1;
  // A chunk is closed once its records reach this many bytes (a message is never split).
  std::uint64_t chunk_bytes = std::uint64_t{8} << 20;
  // CRC-32 of each chunk's records and of the data section (the summary's is always written).
  // Off: both are written as 0, which the format reads as "not computed" (one pass less over
  // every frame's bytes).
  bool crc = true;
  std::string profile;  // the Header's profile ("" or e.g. "ros2")
  std::string library = "ipcring ringdump";
};

struct WriterStats {
  std::uint64_t messages = 0;
  std::uint64_t chunks = 0;
  std::uint64_t file_bytes = 0;          // written so far
  std::uint64_t uncompressed_bytes = 0;  // chunk records before compression
};

class Writer {
 public:
  // Creates (or truncates) `path` and writes the magic and Header. Throws std::runtime_error
  // naming the path and the system's reason.
  Writer(const std::string& path, WriterOptions options,
         std::function<void(Buffer&&)> recycle = nullptr);
  ~Writer();  // closes the file; without finish() it has no summary (readers can still scan it)
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Ids start at 1. Both records are written into the data section at once (ending the open chunk
  // first) and repeated in the summary.
  std::uint16_t add_schema(const std::string& name, const std::string& encoding,
                           const std::string& data);
  std::uint16_t add_channel(std::uint16_t schema_id, const std::string& topic,
                            const std::string& message_encoding, const StringMap& metadata);
  // The message's data is taken; it is given to the recycle callback once written.
  void add_message(std::uint16_t channel_id, std::uint32_t sequence, std::uint64_t log_time,
                   std::uint64_t publish_time, Buffer&& data);
  // A Metadata record (written outside chunks, indexed in the summary).
  void add_metadata(const std::string& name, const StringMap& values);
  // Ends the open chunk, writes DataEnd, the summary and the footer, and closes the file
  // (fsync'd when `sync`). Throws std::runtime_error on a write error.
  void finish(bool sync = false);

  const WriterStats& stats() const noexcept { return stats_; }
  const std::string& path() const noexcept { return path_; }

 private:
  struct Pending {  // one message of the open chunk
    std::uint16_t channel_id;
    std::uint32_t sequence;
    std::uint64_t log_time, publish_time;
    Buffer data;
  };
  struct ChunkIndex {
    std::uint64_t start_time, end_time, offset, length;
    std::map<std::uint16_t, std::uint64_t> message_index_offsets;
    std::uint64_t message_index_length;
    std::uint64_t compressed_size, uncompressed_size;
  };
  struct MetadataIndex {
    std::uint64_t offset, length;
    std::string name;
  };

  // Buffered, to the file; the bytes join the running CRC (data section or summary) unless
  // `crc_known`, when the caller adds their CRC itself (combine_data_crc).
  void write(const void* data, std::size_t bytes, bool crc_known = false);
  void combine_data_crc(std::uint32_t crc, std::uint64_t bytes) noexcept;
  void flush_buffer();
  void flush_chunk();
  void write_record(Op op, const Buffer& content);

  std::string path_;
  WriterOptions options_;
  std::function<void(Buffer&&)> recycle_;
  int fd_ = -1;
  Buffer out_;                  // write buffer
  std::uint64_t offset_ = 0;    // file offset of the next byte written
  std::uint32_t data_crc_ = 0;  // over everything written before DataEnd
  bool in_summary_ = false;     // once DataEnd is written
  std::uint32_t summary_crc_ = 0;

  std::vector<Buffer> schemas_, channels_;  // their records' contents, for the summary
  std::vector<Pending> chunk_;
  std::uint64_t chunk_records_bytes_ = 0;  // uncompressed records of the open chunk
  std::vector<ChunkIndex> chunk_indexes_;
  std::vector<MetadataIndex> metadata_indexes_;
  std::map<std::uint16_t, std::uint64_t> channel_counts_;
  std::uint64_t start_time_ = 0, end_time_ = 0;
  Buffer scratch_, compressed_;
  WriterStats stats_;
  bool finished_ = false;
};

// Little-endian serialisation of MCAP's primitive types into a Buffer.
void put_u8(Buffer& b, std::uint8_t v);
void put_u16(Buffer& b, std::uint16_t v);
void put_u32(Buffer& b, std::uint32_t v);
void put_u64(Buffer& b, std::uint64_t v);
void put_string(Buffer& b, std::string_view s);  // uint32 length + bytes
void put_map(Buffer& b, const StringMap& m);     // uint32 byte length + (string, string)...

}  // namespace ringdump::mcap
