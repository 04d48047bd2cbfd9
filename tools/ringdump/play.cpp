// play.cpp — ringdump play FILE.mcap: publishes each recorded channel into an ipcring channel of
// the same name (or --remap OLD=NEW), typed as recorded (an Image as a uint8 (H, W, C) tensor, an
// ipcring/msg/Frame with its own tensor, capture time and metadata), with the recorded timing
// scaled by --rate (0: as fast as possible).
//
// Two passes over the file: the first finds the channels and the largest frame of each, so each
// channel is created once with the geometry the file needs (frame_bytes at least the largest
// frame; slots, readers, max_held and metadata bytes as recorded, where the file says); the
// second publishes. Messages of other schemas are counted and skipped.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <queue>
#include <thread>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "ringdump/mcap_reader.hpp"
#include "ringdump/messages.hpp"
#include "ringdump/record.hpp"
#include "signals.hpp"

namespace ringdump::record {

namespace {

using namespace std::chrono;
using ipcring::tools::g_stop;

enum class Kind { image, frame, other };

struct Target {  // one ipcring channel being published
  std::string name;
  ipcring::ChannelConfig config;
  std::optional<ipcring::Producer> producer;
  std::uint64_t published = 0, malformed = 0, too_large = 0;
  std::string first_error;
};

struct Source {  // one MCAP channel
  Kind kind = Kind::other;
  std::string topic;
  std::size_t target = 0;
  std::uint64_t skipped = 0;  // messages of a schema play does not know
};

std::uint64_t meta_u64(const mcap::StringMap& m, const char* key, std::uint64_t fallback) {
  const auto it = m.find(key);
  if (it == m.end()) return fallback;
  try {
    return std::stoull(it->second);
  } catch (const std::exception&) {
    return fallback;
  }
}

std::optional<messages::FrameFields> decode(Kind kind, std::span<const std::byte> data,
                                            std::string& error) {
  return kind == Kind::image ? messages::decode_image(data, error)
                             : messages::decode_frame(data, error);
}

}  // namespace

int cmd_play(const Commands& c) {
  std::map<std::string, std::string> remap;
  for (const auto& r : c.remaps) {
    const auto eq = r.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == r.size()) {
      std::fprintf(stderr, "ringdump play: --remap %s: want OLD=NEW\n", r.c_str());
      return ipcring::tools::kExitUsage;
    }
    remap[r.substr(0, eq)] = r.substr(eq + 1);
  }

  mcap::FileReader file(c.file);
  std::map<std::uint16_t, std::string> schema_names;
  std::map<std::uint16_t, Source> sources;
  std::vector<Target> targets;
  std::map<std::uint16_t, std::uint64_t> largest;  // decoded payload bytes per MCAP channel
  std::uint64_t messages_total = 0;
  // The earliest log time: the file is in the order messages reached the writer, which can differ
  // from log-time order across channels by the writer's latency, so the timing starts here.
  std::uint64_t t0 = 0;
  std::vector<std::uint64_t> log_times;  // of the playable messages, in file order

  // Pass 1: channels and their largest frames.
  mcap::Handlers first;
  first.schema = [&](const mcap::SchemaRecord& s) { schema_names[s.id] = s.name; };
  first.channel = [&](const mcap::ChannelRecord& ch) {
    Source src;
    src.topic = ch.topic;
    const std::string schema =
        schema_names.count(ch.schema_id) != 0 ? schema_names[ch.schema_id] : "";
    if (ch.message_encoding == "cdr" && schema == messages::kImageSchemaName)
      src.kind = Kind::image;
    if (ch.message_encoding == "cdr" && schema == messages::kFrameSchemaName)
      src.kind = Kind::frame;
    const auto r = remap.find(ch.topic);
    const std::string name = r != remap.end() ? r->second : ch.topic;
    auto t = std::find_if(targets.begin(), targets.end(),
                          [&](const Target& x) { return x.name == name; });
    if (t == targets.end()) {
      Target nt;
      nt.name = name;
      nt.config.slots = static_cast<std::uint32_t>(meta_u64(ch.metadata, "ipcring.slots", 8));
      nt.config.max_readers =
          static_cast<std::uint32_t>(meta_u64(ch.metadata, "ipcring.max_readers", 4));
      nt.config.max_held = static_cast<std::uint32_t>(meta_u64(ch.metadata, "ipcring.max_held", 1));
      nt.config.metadata_bytes =
          static_cast<std::uint32_t>(meta_u64(ch.metadata, "ipcring.metadata_bytes", 256));
      nt.config.frame_bytes = meta_u64(ch.metadata, "ipcring.frame_bytes", 0);
      targets.push_back(std::move(nt));
      t = targets.end() - 1;
    }
    src.target = static_cast<std::size_t>(t - targets.begin());
    sources[ch.id] = src;
  };
  first.message = [&](const mcap::MessageRecord& m) {
    if (messages_total == 0 || m.log_time < t0) t0 = m.log_time;
    ++messages_total;
    const auto it = sources.find(m.channel_id);
    if (it == sources.end() || it->second.kind == Kind::other) return true;
    log_times.push_back(m.log_time);
    std::string error;
    const auto f = decode(it->second.kind, m.data, error);
    if (f) {
      auto& l = largest[m.channel_id];
      l = std::max<std::uint64_t>(l, f->data.size());
      auto& cfg = targets[it->second.target].config;
      cfg.metadata_bytes = std::max<std::uint32_t>(cfg.metadata_bytes,
                                                   static_cast<std::uint32_t>(f->metadata.size()));
    }
    return true;
  };
  file.scan(first);
  for (const auto& [id, bytes] : largest) {
    auto& cfg = targets[sources[id].target].config;
    cfg.frame_bytes = std::max<std::size_t>(cfg.frame_bytes, bytes);
  }
  for (const auto& [id, src] : sources) {
    if (src.kind == Kind::other) {
      std::fprintf(stderr,
                   "ringdump play: topic %s: its schema is neither %s nor %s (cdr); its messages "
                   "are skipped\n",
                   src.topic.c_str(), std::string(messages::kImageSchemaName).c_str(),
                   std::string(messages::kFrameSchemaName).c_str());
    }
  }
  for (auto& t : targets) {
    if (t.config.frame_bytes == 0) continue;  // nothing playable
    t.producer.emplace(ipcring::Producer::create(t.name, t.config));
    std::fprintf(stderr, "ringdump play: %s: slots=%u max_readers=%u max_held=%u frame_bytes=%zu\n",
                 t.name.c_str(), t.config.slots, t.config.max_readers, t.config.max_held,
                 t.config.frame_bytes);
  }
  ipcring::tools::install_stop_handlers();

  if (c.wait_readers > 0) {
    const auto deadline = steady_clock::now() +
                          duration_cast<steady_clock::duration>(duration<double>(c.wait_readers_s));
    for (const auto& t : targets) {
      if (!t.producer) continue;
      for (;;) {
        const auto snap = ipcring::inspect(t.name);
        const auto alive = std::count_if(snap.readers.begin(), snap.readers.end(),
                                         [](const auto& r) { return r.alive; });
        if (static_cast<std::uint64_t>(alive) >= c.wait_readers) break;
        if (g_stop != 0 || steady_clock::now() >= deadline) {
          std::fprintf(
              stderr, "ringdump play: %s: %lld reader(s) after %.1f s, --wait-readers %u\n",
              t.name.c_str(), static_cast<long long>(alive), c.wait_readers_s, c.wait_readers);
          return ipcring::tools::kExitError;
        }
        std::this_thread::sleep_for(milliseconds(10));
      }
    }
  }

  // Pass 2 (and again with --loop): publish.
  // later_min[i]: the earliest log time of the messages after the i-th (file order). A message
  // read from the file waits in `pending` until no later message in the file is earlier: frames
  // go out in log-time order, holding only as many copies as the file is out of order.
  std::vector<std::uint64_t> later_min(log_times.size() + 1, UINT64_MAX);
  for (std::size_t i = log_times.size(); i-- > 0;) {
    later_min[i] = std::min(later_min[i + 1], log_times[i]);
  }
  struct Pending {
    std::uint64_t log_time;
    std::size_t index;  // in file order: ties keep it
    std::uint16_t channel_id;
    Buffer data;
    bool operator>(const Pending& o) const {
      return log_time != o.log_time ? log_time > o.log_time : index > o.index;
    }
  };
  do {
    const steady_clock::time_point wall0 = steady_clock::now();
    std::priority_queue<Pending, std::vector<Pending>, std::greater<>> pending;
    std::size_t index = 0;
    // Publishes one message; false to stop.
    auto publish = [&](const Pending& m) {
      Source& src = sources[m.channel_id];
      Target& t = targets[src.target];
      std::string error;
      const auto f = decode(src.kind, {m.data.data(), m.data.size()}, error);
      if (!f) {
        if (t.malformed++ == 0) t.first_error = error;
        return true;
      }
      if (c.rate > 0 && m.log_time > t0) {
        const auto at = wall0 + duration_cast<steady_clock::duration>(duration<double>(
                                    static_cast<double>(m.log_time - t0) / 1e9 / c.rate));
        std::this_thread::sleep_until(at);
      }
      ipcring::Result<ipcring::Loan> loan = t.producer->loan(milliseconds(100));
      while (!loan && g_stop == 0) loan = t.producer->loan(milliseconds(100));
      if (!loan) return false;
      if (f->data.size() > loan->capacity()) {
        ++t.too_large;
        return true;
      }
      std::memcpy(loan->data(), f->data.data(), f->data.size());
      if (f->tensor && !loan->set_tensor(*f->tensor)) {
        if (t.malformed++ == 0) {
          t.first_error = "tensor " + f->tensor->dtype_name() + " " + f->tensor->shape_text() +
                          " does not fit the frame";
        }
      }
      if (f->capture_time_ns != 0) loan->set_capture_time_ns(f->capture_time_ns);
      if (!f->metadata.empty()) (void)loan->set_metadata(f->metadata);
      t.producer->publish(std::move(*loan), f->data.size());
      ++t.published;
      return true;
    };
    mcap::Handlers second;
    second.message = [&](const mcap::MessageRecord& m) {
      if (g_stop != 0) return false;
      const auto it = sources.find(m.channel_id);
      if (it == sources.end() || it->second.kind == Kind::other) {
        if (it != sources.end()) ++it->second.skipped;
        return true;
      }
      if (index >= log_times.size()) return false;  // the file changed since pass 1
      Pending p{m.log_time, index, m.channel_id, Buffer(m.data.begin(), m.data.end())};
      ++index;
      pending.push(std::move(p));
      while (!pending.empty() && pending.top().log_time <= later_min[index]) {
        if (!publish(pending.top())) return false;
        pending.pop();
      }
      return true;
    };
    file.scan(second);
    while (!pending.empty() && g_stop == 0) {
      if (!publish(pending.top())) break;
      pending.pop();
    }
  } while (c.loop && g_stop == 0);

  // Give sequential readers a moment to take the last frames before the channels close.
  std::this_thread::sleep_for(milliseconds(200));
  int rc = ipcring::tools::kExitOk;
  for (const auto& t : targets) {
    std::printf(
        "ringdump play %s: published=%llu malformed=%llu too_large=%llu%s%s\n", t.name.c_str(),
        static_cast<unsigned long long>(t.published), static_cast<unsigned long long>(t.malformed),
        static_cast<unsigned long long>(t.too_large), t.first_error.empty() ? "" : " first_error=",
        t.first_error.empty() ? "" : t.first_error.c_str());
    if (t.malformed != 0 || t.too_large != 0) rc = ipcring::tools::kExitError;
  }
  std::fflush(stdout);
  (void)messages_total;
  return rc;
}

}  // namespace ringdump::record
