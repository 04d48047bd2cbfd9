// info.cpp — ringdump info FILE.mcap: what a recording holds. Reads the file front to back
// (every chunk decompressed and its CRC checked), so it also says whether the file is intact;
// when the file has a summary, its Statistics are compared with what was counted.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "cli.hpp"
#include "ringdump/mcap_reader.hpp"
#include "ringdump/record.hpp"

namespace ringdump::record {

namespace {

struct ChannelCount {
  mcap::ChannelRecord record;
  std::string schema;
  std::uint64_t messages = 0, bytes = 0;
  std::uint64_t first = 0, last = 0;
};

}  // namespace

int cmd_info(const Commands& c) {
  mcap::FileReader file(c.file);
  std::map<std::uint16_t, std::string> schemas;
  std::map<std::uint16_t, ChannelCount> channels;
  std::map<std::string, mcap::StringMap> metadata;
  std::uint64_t messages = 0, first = 0, last = 0;
  mcap::Handlers h;
  h.schema = [&](const mcap::SchemaRecord& s) { schemas[s.id] = s.name; };
  h.channel = [&](const mcap::ChannelRecord& ch) {
    auto& cc = channels[ch.id];
    cc.record = ch;
    cc.schema = schemas.count(ch.schema_id) != 0 ? schemas[ch.schema_id] : "(none)";
  };
  h.message = [&](const mcap::MessageRecord& m) {
    auto it = channels.find(m.channel_id);
    if (it == channels.end()) {
      throw std::runtime_error(c.file + ": a message on channel " + std::to_string(m.channel_id) +
                               ", which no Channel record declared before it");
    }
    auto& cc = it->second;
    if (cc.messages == 0) cc.first = m.log_time;
    cc.last = m.log_time;
    ++cc.messages;
    cc.bytes += m.data.size();
    if (messages == 0 || m.log_time < first) first = m.log_time;
    if (m.log_time > last) last = m.log_time;
    ++messages;
    return true;
  };
  h.metadata = [&](const std::string& name, const mcap::StringMap& v) { metadata[name] = v; };
  file.scan(h);
  const auto stats = file.statistics();

  std::vector<std::string> problems;
  if (!file.data_crc_ok()) problems.emplace_back("no DataEnd record (the recording was cut short)");
  if (file.data_crc_ok() && !*file.data_crc_ok())
    problems.emplace_back("data section CRC mismatch");
  if (!stats) {
    problems.emplace_back("no summary (the recording was not finished)");
  } else if (stats->message_count != messages) {
    problems.push_back("the summary counts " + std::to_string(stats->message_count) +
                       " messages, the file holds " + std::to_string(messages));
  }
  const auto drops_it = metadata.find("ipcring.drops");
  const double duration_s = messages > 1 ? static_cast<double>(last - first) / 1e9 : 0.0;

  if (c.json) {
    nlohmann::ordered_json j;
    j["file"] = c.file;
    j["messages"] = messages;
    j["chunks"] = file.chunks();
    j["compression"] = file.compression().empty() ? "none" : file.compression();
    j["start_ns"] = first;
    j["end_ns"] = last;
    j["duration_s"] = duration_s;
    j["channels"] = nlohmann::ordered_json::array();
    for (const auto& [id, cc] : channels) {
      nlohmann::ordered_json ch;
      ch["id"] = id;
      ch["topic"] = cc.record.topic;
      ch["schema"] = cc.schema;
      ch["message_encoding"] = cc.record.message_encoding;
      ch["messages"] = cc.messages;
      ch["bytes"] = cc.bytes;
      ch["metadata"] = cc.record.metadata;
      j["channels"].push_back(ch);
    }
    j["drops"] = drops_it != metadata.end() ? nlohmann::ordered_json(drops_it->second)
                                            : nlohmann::ordered_json(nullptr);
    j["metadata"] = metadata;
    j["problems"] = problems;
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("file:        %s\n", c.file.c_str());
    std::printf("messages:    %llu in %llu chunk(s), compression %s\n",
                static_cast<unsigned long long>(messages),
                static_cast<unsigned long long>(file.chunks()),
                file.compression().empty() ? "none" : file.compression().c_str());
    std::printf("duration:    %.3f s\n", duration_s);
    std::printf("channels:\n");
    for (const auto& [id, cc] : channels) {
      const double span = static_cast<double>(cc.last - cc.first) / 1e9;
      std::printf("  %-24s %-22s %8llu msgs  %10.1f MB  %7.2f Hz\n", cc.record.topic.c_str(),
                  cc.schema.c_str(), static_cast<unsigned long long>(cc.messages),
                  static_cast<double>(cc.bytes) / 1e6,
                  cc.messages > 1 && span > 0 ? static_cast<double>(cc.messages - 1) / span : 0.0);
    }
    std::printf("drops:      ");
    if (drops_it == metadata.end()) {
      std::printf(" not recorded\n");
    } else {
      for (const auto& [name, n] : drops_it->second) std::printf(" %s=%s", name.c_str(), n.c_str());
      std::printf("\n");
    }
    for (const auto& p : problems) std::printf("problem:     %s\n", p.c_str());
  }
  return problems.empty() ? ipcring::tools::kExitOk : ipcring::tools::kExitUnhealthy;
}

}  // namespace ringdump::record
