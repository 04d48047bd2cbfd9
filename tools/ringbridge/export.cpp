// export.cpp — ringbridge export: read a channel, write each frame as one DDS sample.
//
// The Reader follows the channel by name as any reader does: a producer that takes a crashed
// one's channel over (new epoch), and a channel closed and created anew under the name (a clean
// restart, a removal and re-creation), give producer_gone once, then the new producer's frames.
// A channel is told apart from a later one of the same name by its creation time (inspect()),
// looked at once after each producer_gone: a new one counts as `reattached`. Only a Reader that
// cannot go on (evicted, forked, a backend error) is dropped for a new one, attached by name; a
// frame already sent (same channel, epoch and sequence or older, as a new Reader of the same
// channel may return its newest frame again) is then skipped and counted as a duplicate. It
// holds one frame at a time: the frame is released as soon as dds_write has serialised it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>

#include "bridge.hpp"
#include "ipcring/ipcring.hpp"
#include "signals.hpp"

namespace ipcring::bridge {
namespace {

using namespace std::chrono;

struct ExportStats {
  std::uint64_t read = 0;            // frames read from the channel
  std::uint64_t sent = 0;            // samples written
  std::uint64_t unmatched = 0;       // frames read while no subscriber was matched (not sent)
  std::uint64_t not_image = 0;       // --ros2: frames that were not image-shaped (not sent)
  std::uint64_t write_timeouts = 0;  // reliable writes that waited out max_blocking_time (retried)
  std::uint64_t write_errors = 0;    // writes that failed otherwise (frame dropped)
  std::uint64_t overruns = 0;        // sequential policy: frames the channel overwrote unread
  std::uint64_t producer_gone = 0;
  std::uint64_t reattached = 0;  // the channel was followed to one created anew under its name
  std::uint64_t duplicates = 0;  // frames read again by a replacing Reader (not sent twice)
};

class Exporter {
 public:
  explicit Exporter(const ExportOptions& o)
      : o_(o),
        frame_id_(o.frame_id.empty() ? o.channel : o.frame_id),
        dds_topic_(dds_topic_name(o.topic, o.ros2)) {}

  int run() {
    keep_frame_buffers_in_heap();
    const std::string config = configure_cyclone(o_.dds.interface_name);
    participant_ = Entity(check(dds_create_participant(o_.dds.domain, nullptr, nullptr),
                                "dds_create_participant", dds_topic_));
    dds_qos_t* qos = make_qos(o_.dds);
    const dds_topic_descriptor_t* desc =
        o_.ros2 ? &sensor_msgs_msg_dds__Image__desc : &ipcring_bridge_Frame_desc;
    const dds_entity_t topic =
        dds_create_topic(participant_.get(), desc, dds_topic_.c_str(), nullptr, nullptr);
    const dds_entity_t writer = dds_create_writer(participant_.get(), topic, qos, nullptr);
    dds_delete_qos(qos);
    check(topic, "dds_create_topic", dds_topic_);
    writer_ = check(writer, "dds_create_writer", dds_topic_);
    if (!o_.quiet) {
      std::fprintf(stderr, "ringbridge export %s: writing DDS topic '%s' (%s, %s), domain %u\n",
                   o_.channel.c_str(), dds_topic_.c_str(), o_.ros2 ? desc->m_typename : "frames",
                   o_.dds.reliability == Reliability::reliable ? "reliable" : "best-effort",
                   o_.dds.domain);
    }
    start_ = steady_clock::now();
    if (!attach(true)) return tools::stop_requested() ? summary(0) : summary(1);
    while (!tools::stop_requested() && reader_ && (o_.count == 0 || stats_.sent < o_.count)) {
      poll_matches();
      auto f = reader_->read(milliseconds(100));
      if (!f) {
        if (!handle_status(f.status())) break;
        continue;
      }
      if (suspect_) followed();
      ++stats_.read;
      if (sent_created_ == attached_created_ && f->epoch() == sent_epoch_ &&
          f->sequence() <= sent_sequence_) {
        ++stats_.duplicates;
      } else {
        sent_created_ = attached_created_;
        sent_epoch_ = f->epoch();
        sent_sequence_ = f->sequence();
        send(*f);
      }
      f->release();
    }
    if (reader_) stats_.overruns += reader_->overruns();
    return summary(0);
  }

 private:
  // Attaches by name, waiting for the channel. first: the start (wait_s applies; an error other
  // than "not there yet" ends the run). Later re-attaches wait until stopped.
  bool attach(bool first) {
    ReaderOptions ro;
    ro.policy = o_.policy;
    const auto begin = steady_clock::now();
    bool said = false;
    while (!tools::stop_requested()) {
      try {
        // The creation time before and after the attach: equal, the Reader is on that channel.
        const std::uint64_t before = created_ns();
        reader_.emplace(Reader::attach(o_.channel, ro));
        const std::uint64_t after = created_ns();
        if (before != after) {  // replaced meanwhile: once more
          reader_.reset();
          std::this_thread::sleep_for(milliseconds(10));
          continue;
        }
        attached_created_ = after;
        suspect_ = false;
        if (!o_.quiet) {
          std::fprintf(stderr, "ringbridge export %s: %s (epoch %llu, %zu-byte frames)\n",
                       o_.channel.c_str(), first ? "attached" : "re-attached",
                       static_cast<unsigned long long>(reader_->epoch()), reader_->frame_bytes());
        }
        return true;
      } catch (const Error& e) {
        const bool not_yet = e.code() == Errc::not_found || e.code() == Errc::not_ready;
        if (first && !not_yet) {
          std::fprintf(stderr, "ringbridge export: %s [%s]\n", e.what(), to_string(e.code()));
          return false;
        }
        if (first && o_.wait_s >= 0 && steady_clock::now() - begin >= duration<double>(o_.wait_s)) {
          std::fprintf(stderr,
                       "ringbridge export: %s [%s] (waited %.1f s; --wait-for-channel SEC or "
                       "forever waits longer)\n",
                       e.what(), to_string(e.code()), o_.wait_s);
          return false;
        }
        if (!said && !o_.quiet) {
          std::fprintf(stderr, "ringbridge export %s: waiting for the channel (%s)\n",
                       o_.channel.c_str(), to_string(e.code()));
          said = true;
        }
      }
      poll_matches();  // subscribers come and go while we wait too
      std::this_thread::sleep_for(milliseconds(50));
    }
    return false;
  }

  // Creation time of the channel now under our name (0: none, or it cannot be inspected).
  std::uint64_t created_ns() const {
    try {
      return inspect(o_.channel).created_unix_ns;
    } catch (const std::exception&) {
      return 0;
    }
  }

  // The first frame after a producer_gone: the Reader is on the channel now under the name,
  // the one it was on (a takeover) or one created anew.
  void followed() {
    suspect_ = false;
    const std::uint64_t now_created = created_ns();
    if (now_created == 0 || now_created == attached_created_) return;
    attached_created_ = now_created;
    ++stats_.reattached;
    if (!o_.quiet) {
      std::fprintf(stderr,
                   "ringbridge export %s: following the channel created anew (epoch %llu, %zu-byte "
                   "frames)\n",
                   o_.channel.c_str(), static_cast<unsigned long long>(reader_->epoch()),
                   reader_->frame_bytes());
    }
  }

  void reattach() {
    stats_.overruns += reader_->overruns();
    reader_.reset();  // frees our reader entry before we take a new one
    ++stats_.reattached;
    attach(false);
  }

  // false: stop the run.
  bool handle_status(Status st) {
    switch (st) {
      case Status::timeout:
      case Status::no_frame:
        return !tools::stop_requested();  // the Reader follows a channel created anew itself
      case Status::producer_gone:
        ++stats_.producer_gone;
        if (!o_.quiet) {
          std::fprintf(stderr, "ringbridge export %s: producer gone\n", o_.channel.c_str());
        }
        suspect_ = true;  // closed or taken over: the next frame says which channel it is on
        return !tools::stop_requested();
      default:
        // evicted (reaped or repaired), forked, backend error: a fresh Reader is the way out.
        std::fprintf(stderr, "ringbridge export %s: read failed: %s; re-attaching\n",
                     o_.channel.c_str(), to_string(st));
        std::this_thread::sleep_for(milliseconds(50));
        reattach();
        return !tools::stop_requested();
    }
  }

  void poll_matches() {
    dds_publication_matched_status_t st{};
    if (dds_get_publication_matched_status(writer_, &st) < 0) return;
    if (st.current_count != matched_ && !o_.quiet) {
      std::fprintf(stderr, "ringbridge export %s: %u subscriber(s) matched\n", o_.channel.c_str(),
                   st.current_count);
    }
    matched_ = st.current_count;
  }

  void send(const Frame& f) {
    if (matched_ == 0) {  // nobody listens: skip the serialisation copy
      ++stats_.unmatched;
      return;
    }
    FrameView v{{f.data(), f.size()}, f.metadata(),        f.sequence(), f.epoch(),
                f.timestamp_ns(),     f.capture_time_ns(), f.tensor()};
    const std::uint64_t now = realtime_ns();
    dds_return_t rc = 0;
    if (o_.ros2) {
      // Width, height, encoding and step from the frame's tensor; the flags override.
      sensor_msgs_msg_dds__Image_ img{};
      const std::optional<ImageFormat> format = image_format_of(o_.image, v.tensor);
      if (!format || fill_image_sample(img, v, *format, frame_id_, now) != Verdict::ok) {
        if (stats_.not_image++ == 0) {
          const std::string tensor =
              v.tensor ? v.tensor->dtype_name() + " " + v.tensor->shape_text() : "no tensor";
          if (format) {
            std::fprintf(stderr,
                         "ringbridge export %s: frame %llu has %zu bytes (%s), not a %ux%u %s "
                         "image; such frames are dropped (counted as not_image)\n",
                         o_.channel.c_str(), static_cast<unsigned long long>(f.sequence()),
                         f.size(), tensor.c_str(), format->width, format->height,
                         format->encoding.c_str());
          } else {
            std::fprintf(stderr,
                         "ringbridge export %s: frame %llu (%zu bytes, %s) is not an image: give "
                         "--width and --height (and --encoding), or publish a uint8 (H, W) or "
                         "(H, W, C) tensor; such frames are dropped (counted as not_image)\n",
                         o_.channel.c_str(), static_cast<unsigned long long>(f.sequence()),
                         f.size(), tensor.c_str());
          }
        }
        return;
      }
      rc = write(&img);
    } else {
      ipcring_bridge_Frame s{};
      fill_frame_sample(s, v, o_.channel, now);
      rc = write(&s);
    }
    if (rc >= 0) {
      ++stats_.sent;
    } else if (stats_.write_errors++ == 0) {
      std::fprintf(stderr, "ringbridge export %s: dds_write on '%s' failed: %s\n",
                   o_.channel.c_str(), dds_topic_.c_str(), dds_strretcode(rc));
    }
  }

  // A reliable write blocks while the history is full (slow or lost subscriber); it times out
  // every 100 ms so that a stop request is seen, and is retried until it succeeds.
  dds_return_t write(const void* sample) {
    for (;;) {
      const dds_return_t rc = dds_write(writer_, sample);
      if (rc != DDS_RETCODE_TIMEOUT || tools::stop_requested()) return rc;
      ++stats_.write_timeouts;
      poll_matches();
      if (matched_ == 0) return rc;
    }
  }

  int summary(int rc) const {
    const double secs = duration<double>(steady_clock::now() - start_).count();
    std::printf(
        "ringbridge export %s -> %s: read=%llu sent=%llu unmatched=%llu not_image=%llu "
        "write_timeouts=%llu write_errors=%llu overruns=%llu producer_gone=%llu reattached=%llu "
        "duplicates=%llu seconds=%.2f\n",
        o_.channel.c_str(), dds_topic_.c_str(), static_cast<unsigned long long>(stats_.read),
        static_cast<unsigned long long>(stats_.sent),
        static_cast<unsigned long long>(stats_.unmatched),
        static_cast<unsigned long long>(stats_.not_image),
        static_cast<unsigned long long>(stats_.write_timeouts),
        static_cast<unsigned long long>(stats_.write_errors),
        static_cast<unsigned long long>(stats_.overruns),
        static_cast<unsigned long long>(stats_.producer_gone),
        static_cast<unsigned long long>(stats_.reattached),
        static_cast<unsigned long long>(stats_.duplicates), secs);
    std::fflush(stdout);
    return rc;
  }

  const ExportOptions& o_;
  const std::string frame_id_;
  const std::string dds_topic_;
  Entity participant_;
  dds_entity_t writer_ = 0;
  std::uint32_t matched_ = 0;
  std::optional<Reader> reader_;
  std::uint64_t attached_created_ = 0;  // creation time of the channel the Reader is on
  bool suspect_ = false;                // producer_gone and no frame since
  std::uint64_t sent_created_ = 0;      // the newest frame sent: its channel, epoch, sequence
  std::uint64_t sent_epoch_ = 0;
  std::uint64_t sent_sequence_ = 0;
  ExportStats stats_;
  steady_clock::time_point start_;
};

}  // namespace

int run_export(const ExportOptions& options) {
  Exporter e(options);
  return e.run();
}

}  // namespace ipcring::bridge
