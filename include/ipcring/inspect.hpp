// inspect.hpp — a read-only view of a channel for tools and tests, and explicit repair.
//
// inspect() never changes what the protocol sees: it takes no lease, reaps nothing and evicts
// nobody. To tell whether an owner is alive it probes its robust mutex; a probe that finds the
// owner dead leaves the entry marked active (so the owner's death is still seen by the next reap).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ipcring/config.hpp"
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
  std::uint32_t slots = 0;
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
  std::vector<SlotInfo> slots_info;   // "slots" in JSON
  std::vector<ReaderInfo> readers;    // entries in use: alive, or dead and not yet reaped
  std::vector<std::string> problems;  // inconsistencies found (out-of-range values ...)
};

// Throws Error (not_found, version_mismatch, permission_denied, corrupt_segment ...).
Snapshot inspect(std::string_view name);

// Names of the channels present in /dev/shm (the control segments), sorted.
std::vector<std::string> list_channels();

// Probes every reader lease and reaps the dead ones, as Producer::reap_dead_readers() does, from
// any process (ringdump reap). Returns how many were reaped.
std::size_t reap_dead_readers(std::string_view name);

// Removes a channel's shared-memory objects. Refuses (Errc::channel_busy) while its producer or
// any reader is alive, unless `force`. Returns false when the channel did not exist.
bool remove_channel(std::string_view name, bool force = false);

// Checks a channel name: 1..200 characters of [A-Za-z0-9_-]. Throws Errc::invalid_name.
void validate_name(std::string_view name);

}  // namespace ipcring
