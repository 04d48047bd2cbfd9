// mcap_reader.hpp — reads an MCAP file front to back (ringdump info and play): schemas, channels,
// messages (inside chunks or not) and metadata, in file order, up to DataEnd. The file is
// mapped read-only; every length, offset and size read from it is checked against the file
// before use, chunk CRCs are verified, and a malformed file is a std::runtime_error naming the
// file, the offset and the values. The summary (when there is one) is read for its Statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "ringdump/mcap_writer.hpp"

namespace ringdump::mcap {

struct SchemaRecord {
  std::uint16_t id = 0;
  std::string name, encoding, data;
};

struct ChannelRecord {
  std::uint16_t id = 0, schema_id = 0;
  std::string topic, message_encoding;
  StringMap metadata;
};

struct MessageRecord {
  std::uint16_t channel_id = 0;
  std::uint32_t sequence = 0;
  std::uint64_t log_time = 0, publish_time = 0;
  std::span<const std::byte> data;  // valid during the callback
};

struct Handlers {
  std::function<void(const SchemaRecord&)> schema;
  std::function<void(const ChannelRecord&)> channel;
  // Return false to stop the scan.
  std::function<bool(const MessageRecord&)> message;
  std::function<void(const std::string& name, const StringMap& values)> metadata;
};

struct SummaryStatistics {
  std::uint64_t message_count = 0;
  std::uint32_t channel_count = 0, chunk_count = 0, metadata_count = 0;
  std::uint64_t message_start_time = 0, message_end_time = 0;
  std::map<std::uint16_t, std::uint64_t> channel_message_counts;
};

class FileReader {
 public:
  explicit FileReader(const std::string& path);  // throws std::runtime_error
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  // Reads the data section in order. Returns false when a handler stopped it.
  bool scan(const Handlers& handlers);
  // The summary's Statistics record; std::nullopt when the file has no summary (not finished).
  std::optional<SummaryStatistics> statistics();
  // The data section CRC stored in DataEnd equals the one computed (true when it stores 0, which
  // means "not computed"); only known after a complete scan().
  std::optional<bool> data_crc_ok() const noexcept { return data_crc_ok_; }
  std::uint64_t chunks() const noexcept { return chunks_; }
  std::string compression() const { return compression_; }
  const std::string& path() const noexcept { return path_; }

 private:
  [[noreturn]] void fail(std::uint64_t offset, const std::string& what) const;
  bool records(std::span<const std::byte> bytes, std::uint64_t base, bool in_chunk,
               const Handlers& handlers);

  std::string path_;
  const std::byte* map_ = nullptr;
  std::size_t size_ = 0;
  std::optional<bool> data_crc_ok_;
  std::uint64_t chunks_ = 0;
  std::string compression_;
};

}  // namespace ringdump::mcap
