// import.cpp — ringbridge import: take DDS samples, publish each valid one into a local channel.
//
// The bridge is the channel's producer, like any other: local readers attach by name and read
// the frames zero-copy. Each sample is checked (wire.hpp) before anything is loaned: a sample
// larger than the channel's frames, or with impossible metadata or tensor fields, is counted and
// dropped. The samples are taken serialised (dds_takecdr) and decoded in place, so the payload
// is copied once, from Cyclone's receive buffer into the channel's loan.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <thread>

#include <dds/ddsi/ddsi_serdata.h>

#include "bridge.hpp"
#include "ipcring/ipcring.hpp"
#include "signals.hpp"

namespace ipcring::bridge {
namespace {

using namespace std::chrono;

constexpr std::uint32_t kTakeBatch = 16;

struct ImportStats {
  std::uint64_t received = 0;       // valid samples taken
  std::uint64_t published = 0;      // frames published into the channel
  std::uint64_t lost = 0;           // gaps in the sender's sequence numbers (ipcring type)
  std::uint64_t dds_lost = 0;       // samples Cyclone reports lost (SAMPLE_LOST status)
  std::uint64_t too_large = 0;      // larger than the channel's frame_bytes
  std::uint64_t bad = 0;            // bad metadata, tensor or image shape
  std::uint64_t untyped = 0;        // a tensor description that does not fit its payload: dropped
  std::uint64_t loan_failures = 0;  // no free slot within 100 ms (readers hold every frame)
  std::uint64_t publish_errors = 0;
  std::uint64_t source_restarts = 0;  // the sender's epoch changed or its sequence went back
};

class Importer {
 public:
  explicit Importer(const ImportOptions& o) : o_(o), dds_topic_(dds_topic_name(o.topic, o.ros2)) {}

  int run() {
    keep_frame_buffers_in_heap();
    configure_cyclone(o_.dds.interface_name);
    try {
      producer_.emplace(Producer::create(o_.channel, o_.channel_config));
    } catch (const Error& e) {
      std::fprintf(stderr, "ringbridge import: %s [%s]\n", e.what(), to_string(e.code()));
      return 1;
    }
    participant_ = Entity(check(dds_create_participant(o_.dds.domain, nullptr, nullptr),
                                "dds_create_participant", dds_topic_));
    dds_qos_t* qos = make_qos(o_.dds);
    const dds_topic_descriptor_t* desc =
        o_.ros2 ? &sensor_msgs_msg_dds__Image__desc : &ipcring_bridge_Frame_desc;
    const dds_entity_t topic =
        dds_create_topic(participant_.get(), desc, dds_topic_.c_str(), nullptr, nullptr);
    const dds_entity_t reader = dds_create_reader(participant_.get(), topic, qos, nullptr);
    dds_delete_qos(qos);
    check(topic, "dds_create_topic", dds_topic_);
    reader_ = check(reader, "dds_create_reader", dds_topic_);
    // The samples are taken in Cyclone's receive thread as they arrive (as ddsperf's subscriber
    // does): no other thread to wake per frame. The main thread takes what may have come before
    // the listener was set, and then every 100 ms, under the same lock.
    dds_listener_t* listener = dds_create_listener(this);
    dds_lset_data_available(listener, &Importer::on_data_available);
    const dds_return_t set = dds_set_listener(reader_, listener);
    dds_delete_listener(listener);
    check(set, "dds_set_listener", dds_topic_);
    if (!o_.quiet) {
      std::fprintf(stderr,
                   "ringbridge import %s: reading DDS topic '%s' (%s), domain %u; channel %s: "
                   "%u slots of %zu bytes\n",
                   o_.topic.c_str(), dds_topic_.c_str(),
                   o_.dds.reliability == Reliability::reliable ? "reliable" : "best-effort",
                   o_.dds.domain, o_.channel.c_str(), o_.channel_config.slots,
                   o_.channel_config.frame_bytes);
    }
    start_ = steady_clock::now();
    while (!tools::stop_requested() && !done_.load(std::memory_order_relaxed)) {
      take_all();
      poll_status();
      std::this_thread::sleep_for(milliseconds(100));
    }
    dds_set_listener(reader_, nullptr);  // waits for a listener call in progress
    return summary(0);
  }

 private:
  static void on_data_available(dds_entity_t /*reader*/, void* self) {
    static_cast<Importer*>(self)->take_all();
  }

  // Takes every sample there is, unless --count is reached (then the run ends).
  void take_all() {
    const std::lock_guard<std::mutex> lock(take_mutex_);
    while (!done_.load(std::memory_order_relaxed) && take_batch() == kTakeBatch) {
    }
  }

  // Takes the samples serialised, as Cyclone received them, and decodes each in place: its
  // payload is copied once, straight from Cyclone's buffer into the loan (wire.hpp). Returns
  // how many it took.
  std::uint32_t take_batch() {
    ddsi_serdata* samples[kTakeBatch] = {};
    dds_sample_info_t infos[kTakeBatch];
    const dds_return_t n = dds_takecdr(reader_, samples, kTakeBatch, infos, DDS_ANY_STATE);
    if (n <= 0) return 0;
    for (dds_return_t i = 0; i < n; ++i) {
      if (infos[i].valid_data) handle(samples[i]);  // else a dispose or unregister: no payload
      ddsi_serdata_unref(samples[i]);
    }
    if (o_.count != 0 && stats_.published >= o_.count) done_.store(true, std::memory_order_relaxed);
    return static_cast<std::uint32_t>(n);
  }

  void handle(ddsi_serdata* d) {
    ++stats_.received;
    const std::uint32_t size = ddsi_serdata_size(d);
    ddsrt_iovec_t iov{};
    ddsi_serdata* const ref = ddsi_serdata_to_ser_ref(d, 0, size, &iov);
    const std::span<const std::byte> cdr{static_cast<const std::byte*>(iov.iov_base),
                                         static_cast<std::size_t>(iov.iov_len)};
    if (o_.ros2) {
      sensor_msgs_msg_dds__Image_ s{};
      const Verdict v = decode_image_sample(cdr, s);
      if (v == Verdict::ok) {
        handle_image(s);
      } else {
        drop_undecodable(cdr);
      }
    } else {
      ipcring_bridge_Frame s{};
      const Verdict v = decode_frame_sample(cdr, s);
      if (v == Verdict::ok) {
        handle_frame(s);
      } else {
        drop_undecodable(cdr);
      }
    }
    ddsi_serdata_to_ser_unref(ref, &iov);
  }

  void count_drop(Verdict v, std::uint64_t sequence, std::size_t bytes) {
    if (v == Verdict::too_large) {
      ++stats_.too_large;
    } else {
      ++stats_.bad;
    }
    if (dropped_++ == 0 || !o_.quiet) {
      std::fprintf(stderr,
                   "ringbridge import %s: dropped sample %llu (%zu bytes) for channel %s "
                   "(frame_bytes %zu): %s\n",
                   o_.topic.c_str(), static_cast<unsigned long long>(sequence), bytes,
                   o_.channel.c_str(), o_.channel_config.frame_bytes, to_string(v));
    }
  }

  // Not CDR of the topic's type (its sequence number cannot be trusted): counted as bad, and the
  // first one, or each without --quiet, reported with its size and encapsulation header.
  void drop_undecodable(std::span<const std::byte> cdr) {
    ++stats_.bad;
    if (dropped_++ == 0 || !o_.quiet) {
      char header[16] = "none";
      if (cdr.size() >= 4) {
        std::snprintf(header, sizeof header, "%02x %02x %02x %02x",
                      std::to_integer<unsigned>(cdr[0]), std::to_integer<unsigned>(cdr[1]),
                      std::to_integer<unsigned>(cdr[2]), std::to_integer<unsigned>(cdr[3]));
      }
      std::fprintf(stderr,
                   "ringbridge import %s: dropped received sample %llu (%zu bytes serialised, "
                   "header %s) for channel %s: %s\n",
                   o_.topic.c_str(), static_cast<unsigned long long>(stats_.received), cdr.size(),
                   header, o_.channel.c_str(), to_string(Verdict::bad_encoding));
    }
  }

  void handle_frame(const ipcring_bridge_Frame& s) {
    const Verdict v = check_frame_sample(s, o_.channel_config.frame_bytes);
    if (v != Verdict::ok) {
      count_drop(v, s.sequence_number, s.data._length);
      return;
    }
    // Gaps in the sender's sequence (same epoch): frames lost on the way (best effort) or
    // overwritten in the sending channel before the exporter read them.
    if (have_last_ && s.producer_epoch == last_epoch_ && s.sequence_number > last_sequence_) {
      stats_.lost += s.sequence_number - last_sequence_ - 1;
    } else if (have_last_) {
      ++stats_.source_restarts;
    }
    have_last_ = true;
    last_epoch_ = s.producer_epoch;
    last_sequence_ = s.sequence_number;
    const std::optional<TensorDesc> tensor = sample_tensor(s);
    publish({reinterpret_cast<const std::byte*>(s.data._buffer), s.data._length},
            {reinterpret_cast<const std::byte*>(s.metadata._buffer), s.metadata._length},
            s.capture_time_ns, tensor ? &*tensor : nullptr);
  }

  void handle_image(const sensor_msgs_msg_dds__Image_& s) {
    const Verdict v = check_image_sample(s, o_.channel_config.frame_bytes);
    if (v != Verdict::ok) {
      count_drop(v, stats_.received, s.data._length);
      return;
    }
    // The image's shape as the frame's tensor ((H, W, C) uint8, rows step bytes apart) and its
    // header stamp as the capture time, so a reader (numpy, torch) gets an image, not bytes.
    const std::optional<TensorDesc> tensor = image_tensor(s);
    publish({reinterpret_cast<const std::byte*>(s.data._buffer), s.data._length}, {},
            image_stamp_ns(s), tensor ? &*tensor : nullptr);
  }

  void publish(std::span<const std::byte> data, std::span<const std::byte> metadata,
               std::uint64_t capture_time_ns, const TensorDesc* tensor) {
    auto loan = producer_->loan(milliseconds(100));
    if (!loan) {
      ++stats_.loan_failures;
      return;
    }
    if (!data.empty()) std::memcpy(loan->data(), data.data(), data.size());
    if (!metadata.empty()) loan->set_metadata(metadata);
    if (capture_time_ns != 0) loan->set_capture_time_ns(capture_time_ns);
    // A description that does not fit this payload (hostile, or cut) is not set and counted
    // (untyped); the payload still goes through.
    if (tensor != nullptr && (!tensor_fits(*tensor, data.size()) || !loan->set_tensor(*tensor))) {
      ++stats_.untyped;
    }
    try {
      producer_->publish(std::move(*loan), data.size());
      ++stats_.published;
    } catch (const std::exception& e) {
      if (stats_.publish_errors++ == 0) {
        std::fprintf(stderr, "ringbridge import %s: publish into %s failed: %s\n", o_.topic.c_str(),
                     o_.channel.c_str(), e.what());
      }
    }
  }

  void poll_status() {
    dds_subscription_matched_status_t m{};
    if (dds_get_subscription_matched_status(reader_, &m) >= 0) {
      if (m.current_count != matched_ && !o_.quiet) {
        std::fprintf(stderr, "ringbridge import %s: %u publisher(s) matched\n", o_.topic.c_str(),
                     m.current_count);
      }
      matched_ = m.current_count;
    }
    dds_sample_lost_status_t l{};
    if (dds_get_sample_lost_status(reader_, &l) >= 0) stats_.dds_lost = l.total_count;
  }

  int summary(int rc) const {
    const double secs = duration<double>(steady_clock::now() - start_).count();
    std::printf(
        "ringbridge import %s -> %s: received=%llu published=%llu lost=%llu dds_lost=%llu "
        "too_large=%llu bad=%llu untyped=%llu loan_failures=%llu publish_errors=%llu "
        "source_restarts=%llu "
        "seconds=%.2f\n",
        dds_topic_.c_str(), o_.channel.c_str(), static_cast<unsigned long long>(stats_.received),
        static_cast<unsigned long long>(stats_.published),
        static_cast<unsigned long long>(stats_.lost),
        static_cast<unsigned long long>(stats_.dds_lost),
        static_cast<unsigned long long>(stats_.too_large),
        static_cast<unsigned long long>(stats_.bad),
        static_cast<unsigned long long>(stats_.untyped),
        static_cast<unsigned long long>(stats_.loan_failures),
        static_cast<unsigned long long>(stats_.publish_errors),
        static_cast<unsigned long long>(stats_.source_restarts), secs);
    std::fflush(stdout);
    return rc;
  }

  const ImportOptions& o_;
  const std::string dds_topic_;
  std::optional<Producer> producer_;
  // Before participant_: destroyed after it, so after the last listener call has returned.
  std::mutex take_mutex_;  // the listener (Cyclone's thread) and the main thread take in turn
  std::atomic<bool> done_{false};  // --count reached
  Entity participant_;
  dds_entity_t reader_ = 0;
  std::uint32_t matched_ = 0;
  ImportStats stats_;
  std::uint64_t dropped_ = 0;
  bool have_last_ = false;
  std::uint64_t last_epoch_ = 0;
  std::uint64_t last_sequence_ = 0;
  steady_clock::time_point start_;
};

}  // namespace

int run_import(const ImportOptions& options) {
  Importer i(options);
  return i.run();
}

}  // namespace ipcring::bridge
