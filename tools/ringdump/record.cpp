// record.cpp — ringdump record (see record.hpp), and the command line of record, info and play.
//
// Threads: one reader thread per channel and one writer thread. A reader thread first takes a
// buffer from the byte budget (--buffer-mb), then reads a frame, copies it into the buffer as
// the CDR of its MCAP message, releases the frame and queues the buffer: it never holds a frame
// while it waits for the writer or for memory. When the writer falls behind, the budget runs out
// and the reader thread stops reading; the producer then overruns it and the frames it could not
// take are counted (Frame::skipped of the sequential policy) and written into the file.
//
// Times: MCAP's log time is the frame's publish time and its publish time the frame's capture
// time (the publish time when none was set), both shifted from CLOCK_MONOTONIC to UNIX time by
// the offset between the two clocks measured at the start (written into the file as metadata
// `ipcring.recording`, so play can undo it). A capture time that already looks like UNIX time
// (after 2001-09-09, 1e18 ns) is taken as it is.
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "backend/cuda/cuda_pool.hpp"  // the CUDA runtime binding, for CUDA channels
#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "ringdump/device_copy.hpp"
#include "ringdump/mcap_writer.hpp"
#include "ringdump/messages.hpp"
#include "ringdump/record.hpp"
#include "signals.hpp"

namespace ringdump::record {

namespace {

using namespace std::chrono;
using ipcring::tools::g_stop;

std::uint64_t clock_ns(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

// ---- where frames come from ------------------------------------------------------------------
// An observer by default (docs/observers.md): no reader entry, no bit in any slot, so the recorder
// never holds a producer's frame and records a channel whose reader entries are all taken. It
// copies each frame into its own buffer and re-checks the slot; a copy the producer overwrote
// meanwhile is dropped and counted (observer_dropped), and, the policy being sequential, is one
// of the frames the next frame skipped, so the overrun count (Reader::overruns) covers both.
// A holding reader (--reader) takes an entry: `ringdump play --wait-readers` and `show` see it,
// and observers cannot read CUDA channels (their frames are device memory).
using Source = ipcring::Reader;

Source open_source(const std::string& name, double wait_s, bool reader) {
  ipcring::ReaderOptions o;
  o.policy = ipcring::ReadPolicy::sequential;
  o.wait_for_channel = duration_cast<nanoseconds>(duration<double>(wait_s));
  o.observer = !reader;
  return ipcring::Reader::attach(name, o);
}

// ---- the byte budget ---------------------------------------------------------------------------
// Buffers copied frames live in, bounded by the sum of their capacities. Returned buffers are
// kept (their pages stay faulted in) and handed out again.
class Budget {
 public:
  explicit Budget(std::uint64_t limit) : limit_(limit) {}

  // A buffer with capacity >= bytes, waiting up to `timeout` for room; nullopt when none came.
  std::optional<Buffer> take(std::size_t bytes, milliseconds timeout) {
    std::unique_lock lock(m_);
    const auto deadline = steady_clock::now() + timeout;
    for (;;) {
      for (auto it = spare_.begin(); it != spare_.end(); ++it) {
        if (it->capacity() >= bytes) {
          Buffer b = std::move(*it);
          spare_.erase(it);
          b.clear();
          return b;
        }
      }
      // No spare is large enough: free spares until a new one fits.
      while (total_ + bytes > limit_ && !spare_.empty()) {
        total_ -= spare_.back().capacity();
        spare_.pop_back();
      }
      if (total_ + bytes <= limit_ || total_ == 0) {  // one frame always fits
        Buffer b;
        b.reserve(bytes);
        total_ += b.capacity();
        return b;
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) return std::nullopt;
    }
  }
  // A buffer about to grow beyond its capacity (a frame larger than the channel's frame_bytes
  // after the channel changed): account for the growth.
  void grow(Buffer& b, std::size_t bytes) {
    std::lock_guard lock(m_);
    const std::size_t before = b.capacity();
    b.reserve(bytes);
    total_ += b.capacity() - before;
  }
  void give(Buffer&& b) {
    {
      std::lock_guard lock(m_);
      spare_.push_back(std::move(b));
    }
    cv_.notify_all();
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t limit_;
  std::uint64_t total_ = 0;
  std::vector<Buffer> spare_;
};

// ---- one channel -------------------------------------------------------------------------------

struct Item {
  std::size_t channel = 0;  // index into the recorder's channels
  bool image = false;
  std::string encoding;  // images
  std::uint32_t sequence = 0;
  std::uint64_t log_time = 0, publish_time = 0;
  Buffer data;
};

struct Queue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<Item> items;
  bool closed = false;

  void push(Item&& item) {
    {
      std::lock_guard lock(m);
      items.push_back(std::move(item));
    }
    cv.notify_one();
  }
  std::optional<Item> pop() {
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return closed || !items.empty(); });
    if (items.empty()) return std::nullopt;
    Item i = std::move(items.front());
    items.pop_front();
    return i;
  }
  void close() {
    {
      std::lock_guard lock(m);
      closed = true;
    }
    cv.notify_all();
  }
};

struct Channel {
  std::string name;
  std::string encoding;  // requested (--encoding NAME=ENC), or empty
  std::optional<Source> source;
  ipcring::Snapshot geometry;  // at attach: written as the MCAP channel's metadata
  std::thread thread;
  // Written by this channel's thread, read by the main thread after join (or as estimates).
  std::atomic<std::uint64_t> frames{0};
  std::atomic<std::uint64_t> drops{0};
  std::atomic<std::uint64_t> not_image{0};       // frames of an image channel written as Frames
  std::atomic<std::uint64_t> writer_waits{0};    // 100 ms waits for the writer (buffer full)
  std::atomic<std::uint64_t> copies_dropped{0};  // observer: copies overwritten (among drops)
  std::atomic<std::uint64_t> copy_failures{0};   // CUDA: frames whose copy failed (among drops)
  std::unique_ptr<DeviceCopy> device_copy;       // CUDA channels: the copy to host memory
  bool observer = false;
  std::atomic<bool> done{false};
  std::string error;
  // MCAP channel ids (writer thread only): one per schema used, 0 until the first message.
  std::uint16_t image_id = 0, frame_id = 0;
};

struct Shared {
  Budget budget;
  Queue queue;
  std::atomic<bool> stop{false};
  std::uint64_t clock_offset_ns = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC at the start
  std::uint64_t count = 0;
};

std::uint64_t unix_time(std::uint64_t monotonic_or_unix, std::uint64_t offset) {
  constexpr std::uint64_t kLooksUnix = 1000000000000000000ULL;
  return monotonic_or_unix >= kLooksUnix ? monotonic_or_unix : monotonic_or_unix + offset;
}

// Drops are counted from the source's overruns (sequential policy: the frames skipped between
// two frames read, the copies an observer dropped among them, and frames that were all gone
// before the reader got to them), except what a new producer's first frame skipped.
void read_channel(Channel& ch, Shared& s, std::size_t index) {
  Source& src = *ch.source;
  bool first = true;
  std::uint64_t overruns = src.overruns();  // counted into ch.drops so far
  auto count_drops = [&](bool counted) {
    const std::uint64_t now = src.overruns();
    if (counted) ch.drops.fetch_add(now - overruns, std::memory_order_relaxed);
    overruns = now;
  };
  while (!s.stop.load(std::memory_order_relaxed)) {
    if (s.count != 0 && ch.frames.load(std::memory_order_relaxed) >= s.count) break;
    const std::size_t need = src.frame_bytes() + 4096 + 512;  // payload, metadata, CDR fields
    auto buffer = s.budget.take(need, milliseconds(100));
    if (!buffer) {  // the writer is behind: frames the producer publishes meanwhile are lost to
                    // overruns, counted when the next frame is read
      ch.writer_waits.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    auto f = src.read(milliseconds(100));
    if (!f) {
      s.budget.give(std::move(*buffer));
      const auto st = f.status();
      if (st == ipcring::Status::timeout || st == ipcring::Status::no_frame) continue;
      if (st == ipcring::Status::producer_gone) {
        std::fprintf(stderr, "ringdump record: %s: the producer is gone; waiting for a new one\n",
                     ch.name.c_str());
        count_drops(!first);
        first = true;  // a new producer's frames start again: none of them were lost to us
        continue;
      }
      ch.error = std::string("read failed: ") + ipcring::to_string(st);
      break;
    }
    count_drops(!first);
    first = false;
    Item item;
    item.channel = index;
    item.sequence = static_cast<std::uint32_t>(f->sequence());
    item.log_time = unix_time(f->timestamp_ns(), s.clock_offset_ns);
    item.publish_time = f->capture_time_ns() != 0
                            ? unix_time(f->capture_time_ns(), s.clock_offset_ns)
                            : item.log_time;
    Buffer& b = *buffer;
    if (f->size() + 4096 + 512 > b.capacity()) s.budget.grow(b, f->size() + 4096 + 512);
    std::optional<std::string> encoding;
    if (ch.device_copy) {
      // A CUDA frame: copied to page-locked memory, encoded from there, then released.
      const bool copied = ch.device_copy->copy_then_release(
          *f, [&](const ipcring::Frame& held, std::span<const std::byte> payload) {
            encoding =
                messages::encode(b, held, ch.name, ch.encoding, item.publish_time, payload.data());
          });
      if (!copied) {  // dropped (released) and counted; said once, counted at the end
        if (ch.copy_failures.fetch_add(1, std::memory_order_relaxed) == 0) {
          std::fprintf(stderr, "ringdump record: %s\n", ch.device_copy->error().c_str());
        }
        ch.drops.fetch_add(1, std::memory_order_relaxed);
        s.budget.give(std::move(b));
        continue;
      }
    } else {
      encoding = messages::encode(b, *f, ch.name, ch.encoding, item.publish_time);
    }
    if (encoding) {
      item.image = true;
      item.encoding = *encoding;
    } else if (!ch.encoding.empty()) {
      ch.not_image.fetch_add(1, std::memory_order_relaxed);
    }
    f->release();  // copied: a reader's slot may be reused, an observer's buffer read again
    item.data = std::move(b);
    s.queue.push(std::move(item));
    ch.frames.fetch_add(1, std::memory_order_relaxed);
  }
  count_drops(!first);  // frames that were all gone after the last one read
  ch.copies_dropped.store(src.observer_dropped(), std::memory_order_relaxed);
  ch.done.store(true, std::memory_order_release);
}

mcap::StringMap channel_metadata(const Channel& ch) {
  const auto& g = ch.geometry;
  return {{"ipcring.channel", ch.name},
          {"ipcring.frame_bytes", std::to_string(g.frame_bytes)},
          {"ipcring.slots", std::to_string(g.slot_count)},
          {"ipcring.max_readers", std::to_string(g.max_readers)},
          {"ipcring.max_held", std::to_string(g.max_held)},
          {"ipcring.metadata_bytes", std::to_string(g.metadata_bytes)}};
}

}  // namespace

int cmd_record(const Commands& c) {
  const auto compression = mcap::parse_compression(c.compression);
  if (!compression) {
    std::fprintf(stderr, "ringdump record: --compression %s: not one of zstd, lz4, none\n",
                 c.compression.c_str());
    return ipcring::tools::kExitUsage;
  }
  std::vector<std::unique_ptr<Channel>> channels;
  for (const auto& name : c.names) {
    if (std::any_of(channels.begin(), channels.end(),
                    [&](const auto& ch) { return ch->name == name; })) {
      std::fprintf(stderr, "ringdump record: channel %s is named twice\n", name.c_str());
      return ipcring::tools::kExitUsage;
    }
    auto ch = std::make_unique<Channel>();
    ch->name = name;
    channels.push_back(std::move(ch));
  }
  for (const auto& e : c.encodings) {
    const auto eq = e.rfind('=');
    const std::string name = eq == std::string::npos ? "" : e.substr(0, eq);
    const std::string enc = eq == std::string::npos ? "" : e.substr(eq + 1);
    auto it = std::find_if(channels.begin(), channels.end(),
                           [&](const auto& ch) { return ch->name == name; });
    if (it == channels.end() || !messages::bytes_per_pixel(enc)) {
      std::fprintf(stderr,
                   "ringdump record: --encoding %s: want NAME=ENCODING with NAME one of the "
                   "recorded channels and ENCODING one of mono8, rgb8, bgr8, rgba8, bgra8\n",
                   e.c_str());
      return ipcring::tools::kExitUsage;
    }
    (*it)->encoding = enc;
  }
  for (auto& ch : channels) {
    try {
      ch->source.emplace(open_source(ch->name, c.wait_s, c.reader));
    } catch (const ipcring::Error& e) {
      if (c.reader || e.code() != ipcring::Errc::unsupported) throw;
      // Observers copy with the CPU: a CUDA channel needs a holding reader.
      ch->source.emplace(open_source(ch->name, 0, true));
      if (ch->source->backend() != ipcring::Backend::cuda) throw;
      std::fprintf(stderr,
                   "ringdump record: %s: a CUDA channel; reading it as a reader (it takes a "
                   "reader entry)\n",
                   ch->name.c_str());
    }
    ch->observer = ch->source->observer();
    if (ch->source->backend() == ipcring::Backend::cuda) {
      auto api = ipcring::detail::cuda_api_for_testing();
      if (!api) api = ipcring::detail::cudart_api();
      try {
        ch->device_copy =
            std::make_unique<DeviceCopy>(std::move(api), ch->name, ch->source->frame_bytes());
      } catch (const std::runtime_error& e) {
        std::fprintf(stderr, "ringdump record: %s\n", e.what());
        return ipcring::tools::kExitError;
      }
    }
    ch->geometry = ipcring::inspect(ch->name);
  }
  ipcring::tools::install_stop_handlers();

  mcap::WriterOptions wo;
  wo.compression = *compression;
  wo.chunk_bytes = static_cast<std::uint64_t>(c.chunk_mb * 1024 * 1024);
  wo.crc = !c.no_crc;
  Shared shared{Budget(static_cast<std::uint64_t>(c.buffer_mb * 1024 * 1024)), {}, {}, 0, c.count};
  const std::uint64_t mono = clock_ns(CLOCK_MONOTONIC);
  shared.clock_offset_ns = clock_ns(CLOCK_REALTIME) - mono;
  mcap::Writer writer(c.output, wo, [&](Buffer&& b) { shared.budget.give(std::move(b)); });

  std::string write_error;
  std::thread writer_thread([&] {
    std::uint16_t image_schema = 0, frame_schema = 0;
    try {
      while (auto item = shared.queue.pop()) {
        Channel& ch = *channels[item->channel];
        std::uint16_t& id = item->image ? ch.image_id : ch.frame_id;
        if (id == 0) {
          std::uint16_t& schema = item->image ? image_schema : frame_schema;
          if (schema == 0) {
            schema = item->image ? writer.add_schema(std::string(messages::kImageSchemaName),
                                                     "ros2msg", messages::kImageSchema)
                                 : writer.add_schema(std::string(messages::kFrameSchemaName),
                                                     "ros2msg", messages::kFrameSchema);
          }
          id = writer.add_channel(schema, ch.name, "cdr", channel_metadata(ch));
        }
        writer.add_message(id, item->sequence, item->log_time, item->publish_time,
                           std::move(item->data));
      }
    } catch (const std::exception& e) {
      write_error = e.what();
      shared.stop.store(true);
      while (auto item = shared.queue.pop()) shared.budget.give(std::move(item->data));
    }
  });
  for (std::size_t i = 0; i < channels.size(); ++i) {
    channels[i]->thread = std::thread(read_channel, std::ref(*channels[i]), std::ref(shared), i);
  }
  std::fprintf(stderr, "ringdump record: recording %zu channel(s) into %s (%s); Ctrl-C stops\n",
               channels.size(), c.output.c_str(), mcap::to_string(*compression));

  const auto start = steady_clock::now();
  const auto end =
      c.duration_s > 0
          ? start + duration_cast<steady_clock::duration>(duration<double>(c.duration_s))
          : steady_clock::time_point::max();
  while (g_stop == 0 && !shared.stop.load() && steady_clock::now() < end) {
    if (std::all_of(channels.begin(), channels.end(),
                    [](const auto& ch) { return ch->done.load(std::memory_order_acquire); })) {
      break;
    }
    std::this_thread::sleep_for(milliseconds(10));
  }
  shared.stop.store(true);
  for (auto& ch : channels) ch->thread.join();
  shared.queue.close();
  writer_thread.join();
  const double seconds = duration_cast<duration<double>>(steady_clock::now() - start).count();

  int rc = ipcring::tools::kExitOk;
  if (write_error.empty()) {
    mcap::StringMap drops, recording;
    for (const auto& ch : channels) drops[ch->name] = std::to_string(ch->drops.load());
    recording["clock_offset_ns"] = std::to_string(shared.clock_offset_ns);
    recording["clock"] = "log and publish times: CLOCK_MONOTONIC + clock_offset_ns";
    recording["seconds"] = std::to_string(seconds);
    try {
      writer.add_metadata("ipcring.drops", drops);
      writer.add_metadata("ipcring.recording", recording);
      writer.finish(c.sync);
    } catch (const std::exception& e) {
      write_error = e.what();
    }
  }
  for (const auto& ch : channels) {
    // writer_behind_ms: how long, at least, this channel waited for buffer room (the disk or
    // the compression behind); drops without it mean the recorder was not scheduled in time.
    // copies_dropped (observers): the drops whose copy the producer overwrote while it was taken;
    // copy_failures (CUDA channels): the drops whose copy to host memory failed.
    std::printf(
        "ringdump record %s: frames=%llu drops=%llu writer_behind_ms=%llu %s%s%s\n",
        ch->name.c_str(), static_cast<unsigned long long>(ch->frames.load()),
        static_cast<unsigned long long>(ch->drops.load()),
        static_cast<unsigned long long>(ch->writer_waits.load()) * 100ULL,
        ch->observer
            ? ("mode=observer copies_dropped=" + std::to_string(ch->copies_dropped.load())).c_str()
        : ch->device_copy
            ? ("mode=reader cuda copy_failures=" + std::to_string(ch->copy_failures.load())).c_str()
            : "mode=reader",
        ch->not_image.load() != 0 ? (" not_image=" + std::to_string(ch->not_image.load())).c_str()
                                  : "",
        ch->error.empty() ? "" : (" error=\"" + ch->error + "\"").c_str());
    if (!ch->error.empty()) rc = ipcring::tools::kExitError;
  }
  const auto& st = writer.stats();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // every thread of ringdump: reading, copying, compressing, writing
  const double cpu_s = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  std::printf(
      "ringdump record: wrote %s: messages=%llu chunks=%llu bytes=%llu seconds=%.2f "
      "cpu_seconds=%.2f cpu_per_message_us=%.0f\n",
      c.output.c_str(), static_cast<unsigned long long>(st.messages),
      static_cast<unsigned long long>(st.chunks), static_cast<unsigned long long>(st.file_bytes),
      seconds, cpu_s, st.messages != 0 ? cpu_s * 1e6 / static_cast<double>(st.messages) : 0.0);
  std::fflush(stdout);
  if (!write_error.empty()) {
    std::fprintf(stderr, "ringdump record: %s\n", write_error.c_str());
    return ipcring::tools::kExitError;
  }
  return rc;
}

void add(CLI::App& app, Commands& c) {
  c.record = app.add_subcommand("record", "Record channels' frames into an MCAP file");
  c.record->add_option("name", c.names, "Channel names")->required();
  c.record->add_option("-o,--output", c.output, "The MCAP file to write")->required();
  auto* count = c.record->add_option("--count", c.count, "Stop after N frames of each channel");
  c.record->add_option("--duration", c.duration_s, "Stop after SEC seconds")
      ->check(ipcring::tools::non_negative())
      ->excludes(count);
  c.record->add_option("--compression", c.compression, "Chunk compression: zstd, lz4 or none")
      ->check(CLI::IsMember({"zstd", "lz4", "none"}))
      ->capture_default_str();
  c.record->add_option("--encoding", c.encodings,
                       "NAME=ENCODING: the image encoding of a channel's uint8 (H, W, C) frames "
                       "(default: mono8, rgb8, rgba8 by C)");
  c.record
      ->add_option("--buffer-mb", c.buffer_mb, "MiB of frames copied and not yet written, at most")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.record->add_option("--chunk-mb", c.chunk_mb, "MiB of messages per chunk (before compression)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  c.record
      ->add_option("--wait-for-channel,--wait", c.wait_s,
                   "Seconds to wait for each channel to appear")
      ->check(ipcring::tools::non_negative(1e6))
      ->capture_default_str();
  c.record->add_flag("--reader", c.reader,
                     "Read as a reader (a reader entry, seen by show and play --wait-readers) "
                     "instead of an observer");
  c.record->add_flag("--sync", c.sync, "fsync the file before exiting");
  c.record->add_flag("--no-crc", c.no_crc,
                     "Do not compute chunk and data CRCs (written as 0: not computed); saves a "
                     "pass over every frame");

  c.info =
      app.add_subcommand("info", "Channels, message counts, duration and drops of an MCAP file");
  c.info->add_option("file", c.file, "MCAP file")->required();
  c.info->add_flag("--json", c.json, "One JSON document");

  c.play = app.add_subcommand("play", "Publish an MCAP file's channels into ipcring channels");
  c.play->add_option("file", c.file, "MCAP file")->required();
  c.play
      ->add_option("--rate", c.rate, "Speed factor of the recorded timing (0: as fast as possible)")
      ->check(ipcring::tools::non_negative())
      ->capture_default_str();
  c.play->add_flag("--loop", c.loop, "Start again at the end (until Ctrl-C)");
  c.play->add_option("--remap", c.remaps, "OLD=NEW: publish the recorded channel OLD as NEW");
  c.play->add_option("--wait-readers", c.wait_readers,
                     "Wait until each channel has N readers before publishing");
  c.play
      ->add_option("--wait-readers-timeout", c.wait_readers_s,
                   "Seconds --wait-readers waits at most")
      ->check(ipcring::tools::non_negative(1e6))
      ->capture_default_str();
}

std::optional<int> run(const Commands& c) {
  if (c.record == nullptr) return std::nullopt;
  if (c.record->parsed()) return cmd_record(c);
  if (c.info->parsed()) return cmd_info(c);
  if (c.play->parsed()) return cmd_play(c);
  return std::nullopt;
}

}  // namespace ringdump::record
