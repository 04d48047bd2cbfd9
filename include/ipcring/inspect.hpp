// inspect.hpp — a read-only view of a channel for tools and tests, and explicit repair.
//
// inspect() never changes what the protocol sees: it takes no lease, reaps nothing and evicts
// nobody. To tell whether an owner is alive it probes its robust mutex; a probe that finds the
// owner dead leaves the entry marked active (so the owner's death is still seen by the next reap).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ipcring/config.hpp"
#include "ipcring/naming.hpp"
#include "ipcring/tensor.hpp"

namespace ipcring {

enum class SlotState : std::uint8_t {
  empty,    // never published in this epoch
  ready,    // holds a published frame no reader holds
  held,     // one or more readers hold it
  writing,  // the producer is filling it
};
const char* to_string(SlotState s) noexcept;

struct ProducerInfo {
  std::uint32_t pid = 0;
  bool alive = false;
  bool closed = false;  // clean exit
  std::uint64_t epoch = 0;
  std::uint64_t instance_id = 0;
  std::uint64_t head = 0;  // newest sequence
  std::uint64_t published = 0;
  std::uint64_t loan_failures = 0;
  std::uint64_t readers_reaped = 0;
  std::uint64_t last_publish_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t started_ns = 0;       // CLOCK_MONOTONIC
  std::uint32_t waiters = 0;
};

struct SlotInfo {
  std::uint32_t index = 0;
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;
  SlotState state = SlotState::empty;
  std::uint64_t reader_mask = 0;
  std::uint64_t generation = 0;
  std::uint64_t bytes = 0;
  std::uint64_t timestamp_ns = 0;
  // The frame header, when it belongs to `sequence` (read without claiming: an estimate while the
  // producer runs, validated like a reader validates it).
  std::uint64_t capture_time_ns = 0;  // 0: not set
  std::uint32_t metadata_bytes = 0;
  bool has_tensor = false;
  TensorDesc tensor;  // when has_tensor
};

struct ReaderInfo {
  std::uint32_t index = 0;
  std::uint32_t pid = 0;
  bool alive = false;
  std::uint64_t generation = 0;
  std::uint64_t instance_id = 0;
  ReadPolicy policy = ReadPolicy::latest;
  std::uint64_t frames_read = 0;
  std::uint64_t overruns = 0;
  std::uint64_t last_sequence = 0;
  std::uint64_t last_read_ns = 0;  // CLOCK_MONOTONIC
  std::uint64_t attached_ns = 0;   // CLOCK_MONOTONIC
  std::vector<std::uint32_t> held_slots;
  std::vector<std::uint64_t> hold_histogram;  // bucket b: holds of [2^b, 2^(b+1)) ns
  // Delay from publish to this reader's claim, over the frames it read since it attached:
  // half-octave buckets (bucket b >= 2 starts at delay_bucket_lower_ns(b)).
  std::vector<std::uint64_t> delay_histogram;
  std::uint64_t delay_count = 0;   // frames counted in delay_histogram
  std::uint64_t delay_p50_ns = 0;  // upper bounds of the buckets holding the quantiles
  std::uint64_t delay_p99_ns = 0;  // (0 when nothing was counted)
};

// Lower bound in ns of delay-histogram bucket b.
std::uint64_t delay_bucket_lower_ns(std::size_t b) noexcept;
// The upper bound of the bucket that holds quantile q (0..1) of a delay histogram; 0 if empty.
std::uint64_t delay_quantile_ns(const std::vector<std::uint64_t>& histogram, double q) noexcept;

struct Snapshot {
  std::string name;
  std::uint32_t layout_version = 0;
  Backend backend = Backend::host;
  CudaPath cuda_path = CudaPath::none;  // CUDA channels: how the buffers reach the readers
  std::uint32_t slot_count = 0;
  std::uint32_t max_readers = 0;
  std::uint32_t max_held = 0;
  std::uint64_t frame_bytes = 0;
  std::uint64_t segment_bytes = 0;
  std::uint64_t frames_segment_bytes = 0;
  std::uint32_t owner_uid = 0;
  std::uint32_t mode = 0;
  std::uint64_t taken_ns = 0;         // CLOCK_MONOTONIC when the snapshot was taken
  std::uint64_t created_unix_ns = 0;  // CLOCK_REALTIME when the channel was created (display only)
  std::uint64_t reap_period_ns = 0;   // the producer's periodic reap, as configured at creation
  std::uint32_t metadata_bytes = 0;   // user metadata capacity per frame
  ProducerInfo producer;
  std::vector<SlotInfo> slots;        // slot_count entries, by index
  std::vector<ReaderInfo> readers;    // entries in use: alive, or dead and not yet reaped
  std::vector<std::string> problems;  // inconsistencies found (out-of-range values ...)
};

// ---- The schema ---------------------------------------------------------------------------------
// Every field a snapshot shows, in one place, under the names ringdump --json and the Python
// module's inspect() use: the names of the structs above. ringdump adds only values derived at
// display time (ages, rates, lag, percentiles of the hold histogram, owner name, octal mode).
// for_each_field(record, visitor) calls, in schema order,
//   visitor(name, value)         for a value: an integer, bool, const char* (an enum's to_string),
//                                std::string, a std::vector of those, or a std::optional of one
//                                of them (empty: null in JSON, None in Python);
//   visitor.record(name, r)      for a nested record (the producer): visit it with for_each_field;
//   visitor.records(name, list)  for a list of records (slots, readers).
// Derived fields in the schema: producer.state (producer_state), slots[].reader_indices (the bits
// of reader_mask), and a slot's tensor as dtype, shape, strides (in elements) and byte_offset,
// each empty when the slot has no tensor; capture_time_ns and the delay quantiles are empty
// while unset.

const char* producer_state(const ProducerInfo& p) noexcept;          // "alive", "closed" or "dead"
std::vector<std::uint32_t> mask_indices(std::uint64_t reader_mask);  // the set bits, ascending

template <class Visitor>
void for_each_field(const ProducerInfo& p, Visitor& v) {
  v("pid", p.pid);
  v("alive", p.alive);
  v("closed", p.closed);
  v("state", producer_state(p));
  v("epoch", p.epoch);
  v("instance_id", p.instance_id);
  v("head", p.head);
  v("published", p.published);
  v("loan_failures", p.loan_failures);
  v("readers_reaped", p.readers_reaped);
  v("last_publish_ns", p.last_publish_ns);
  v("started_ns", p.started_ns);
  v("waiters", p.waiters);
}

template <class Visitor>
void for_each_field(const SlotInfo& s, Visitor& v) {
  using Dims = std::optional<std::vector<std::int64_t>>;
  auto dims = [&](bool strides) -> Dims {
    if (!s.has_tensor) return std::nullopt;
    std::vector<std::int64_t> out;
    for (std::uint8_t d = 0; d < s.tensor.ndim && d < 8; ++d) {
      out.push_back(strides ? s.tensor.stride(d) : s.tensor.shape[d]);
    }
    return out;
  };
  auto if_tensor = [&](auto value) { return s.has_tensor ? std::optional(value) : std::nullopt; };
  v("index", s.index);
  v("sequence", s.sequence);
  v("epoch", s.epoch);
  v("state", to_string(s.state));
  v("reader_mask", s.reader_mask);
  v("reader_indices", mask_indices(s.reader_mask));
  v("generation", s.generation);
  v("bytes", s.bytes);
  v("timestamp_ns", s.timestamp_ns);
  v("capture_time_ns", s.capture_time_ns != 0 ? std::optional(s.capture_time_ns) : std::nullopt);
  v("metadata_bytes", s.metadata_bytes);
  v("dtype", s.has_tensor ? std::optional(s.tensor.dtype_name()) : std::nullopt);
  v("shape", dims(false));
  v("strides", dims(true));
  v("byte_offset", if_tensor(s.tensor.byte_offset));
}

template <class Visitor>
void for_each_field(const ReaderInfo& r, Visitor& v) {
  auto if_counted = [&](std::uint64_t ns) {
    return r.delay_count != 0 ? std::optional(ns) : std::nullopt;
  };
  v("index", r.index);
  v("pid", r.pid);
  v("alive", r.alive);
  v("generation", r.generation);
  v("instance_id", r.instance_id);
  v("policy", to_string(r.policy));
  v("frames_read", r.frames_read);
  v("overruns", r.overruns);
  v("last_sequence", r.last_sequence);
  v("last_read_ns", r.last_read_ns);
  v("attached_ns", r.attached_ns);
  v("held_slots", r.held_slots);
  v("hold_histogram", r.hold_histogram);
  v("delay_histogram", r.delay_histogram);
  v("delay_count", r.delay_count);
  v("delay_p50_ns", if_counted(r.delay_p50_ns));
  v("delay_p99_ns", if_counted(r.delay_p99_ns));
}

template <class Visitor>
void for_each_field(const Snapshot& s, Visitor& v) {
  v("name", s.name);
  v("layout_version", s.layout_version);
  v("backend", to_string(s.backend));
  v("cuda_path", to_string(s.cuda_path));
  v("slot_count", s.slot_count);
  v("max_readers", s.max_readers);
  v("max_held", s.max_held);
  v("frame_bytes", s.frame_bytes);
  v("segment_bytes", s.segment_bytes);
  v("frames_segment_bytes", s.frames_segment_bytes);
  v("owner_uid", s.owner_uid);
  v("mode", s.mode);
  v("taken_ns", s.taken_ns);
  v("created_unix_ns", s.created_unix_ns);
  v("reap_period_ns", s.reap_period_ns);
  v("metadata_bytes", s.metadata_bytes);
  v.record("producer", s.producer);
  v.records("slots", s.slots);
  v.records("readers", s.readers);
  v("problems", s.problems);
}

// Throws Error (not_found, version_mismatch, permission_denied, corrupt_segment ...).
// Connects to the channel's producer as an observer would (no reader entry is taken) and reads its
// control segment. Throws Error (not_found when no producer serves it, version_mismatch,
// permission_denied, corrupt_segment ...).
Snapshot inspect(std::string_view name);

// Probes every reader lease and reaps the dead ones, as Producer::reap_dead_readers() does, from
// any process (ringdump reap). Returns how many were reaped.
std::size_t reap_dead_readers(std::string_view name);

// What a channel's name is in its directory, read without taking anything (ringdump list, gc).
enum class NameState : std::uint32_t {
  missing = 0,  // neither lock file nor socket
  live = 1,     // a producer holds the lock
  stale = 2,    // names left by a producer that ended (the lock is free): gc removes them
  broken = 3,   // something that is not a lock file or not a socket is there
};
const char* to_string(NameState state) noexcept;  // "missing", "live", "stale", "broken"
struct NameInfo {
  NameState state = NameState::missing;
  std::string holder;       // "pid P uid U" of a live producer, as it wrote it in its lock file
  std::string lock_path;    // DIR/NAME.lock
  std::string socket_path;  // DIR/NAME.sock
  std::string problem;      // why it is broken
};
// Throws Error for a name that is invalid or a directory that is not trusted (channel/directory).
NameInfo inspect_name(std::string_view name, std::string_view dir = {});

// Removes a channel's names (socket and lock file): at once when its producer has ended (under
// the lock, taken for the removal, so no producer starting meanwhile loses its names); while its
// producer lives only with `force` (it restores them within its reap period: its memory is not
// affected; refused otherwise with Errc::channel_busy); a broken name only with `force`. Memory is
// never removed: it goes with the last process that maps it. Returns false when there was no
// such name.
bool remove_channel(std::string_view name, bool force = false);

}  // namespace ipcring
