// inspect.cpp — read-only snapshots of a channel, listing, and explicit repair (reap, remove).
//
// A snapshot reads shared words with relaxed loads while producer and readers run: each value is
// one that was really there, but the whole is not one instant (a slot may show a reader bit whose
// reader entry was read a moment earlier). Every value is range-checked before use; anything
// inconsistent is reported in Snapshot::problems rather than trusted.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "lease/lease.hpp"
#include "segment/segment.hpp"

namespace ipcring {

namespace {

bool is_active(std::uint64_t lease_word) {
  return detail::LeaseWord::state(lease_word) ==
         static_cast<std::uint8_t>(detail::LeaseState::active);
}

}  // namespace

Snapshot inspect(std::string_view name) {
  using namespace detail;
  OpenedSegment opened = open_segment(name);
  const SegmentView& view = opened.mapping->view;
  const Geometry& g = view.geo;
  Snapshot s;
  s.name = std::string(name);
  s.layout_version = kLayoutVersion;
  s.backend = g.backend == 2 ? Backend::cuda : Backend::host;
  s.slots = g.slots;
  s.max_readers = g.max_readers;
  s.max_held = g.max_held;
  s.frame_bytes = g.frame_bytes;
  s.segment_bytes = g.segment_bytes;
  s.frames_segment_bytes = g.frames_segment_bytes;
  s.owner_uid = opened.owner_uid;
  s.mode = opened.mode;
  s.taken_ns = monotonic_ns();

  ProducerBlock& p = view.producer();
  const std::uint64_t pw = p.lease_word.load(std::memory_order_acquire);
  s.producer.epoch = LeaseWord::generation(pw);
  s.producer.closed = LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed);
  s.producer.alive = is_active(pw) && probe_alive(p.lease);
  s.producer.pid = p.pid.load(std::memory_order_relaxed);
  s.producer.instance_id = p.instance_id.load(std::memory_order_relaxed);
  s.producer.head = p.head.load(std::memory_order_acquire);
  s.producer.published = p.published.load(std::memory_order_relaxed);
  s.producer.loan_failures = p.loan_failures.load(std::memory_order_relaxed);
  s.producer.readers_reaped = p.readers_reaped.load(std::memory_order_relaxed);
  s.producer.last_publish_ns = p.last_publish_ns.load(std::memory_order_relaxed);
  s.producer.started_ns = p.started_ns.load(std::memory_order_relaxed);
  s.producer.waiters = p.waiters.load(std::memory_order_relaxed);

  std::uint64_t active_mask = 0;
  for (std::uint32_t i = 0; i < g.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    const std::uint64_t w = e.lease_word.load(std::memory_order_acquire);
    const std::uint8_t st = LeaseWord::state(w);
    if (st == static_cast<std::uint8_t>(LeaseState::free)) continue;
    if (st != static_cast<std::uint8_t>(LeaseState::active)) {
      s.problems.push_back("reader entry " + std::to_string(i) + " has unknown state " +
                           std::to_string(st));
      continue;
    }
    active_mask |= SlotWord::bit(i);
    ReaderInfo r;
    r.index = i;
    r.alive = probe_alive(e.lease);
    r.pid = e.pid.load(std::memory_order_relaxed);
    r.generation = LeaseWord::generation(w);
    r.instance_id = e.instance_id.load(std::memory_order_relaxed);
    const std::uint32_t pol = e.policy.load(std::memory_order_relaxed);
    r.policy = pol == 1 ? ReadPolicy::sequential : ReadPolicy::latest;
    if (pol > 1) s.problems.push_back("reader " + std::to_string(i) + " has policy " + std::to_string(pol));
    r.frames_read = e.frames_read.load(std::memory_order_relaxed);
    r.overruns = e.overruns.load(std::memory_order_relaxed);
    r.last_sequence = e.last_sequence.load(std::memory_order_relaxed);
    r.last_read_ns = e.last_read_ns.load(std::memory_order_relaxed);
    r.attached_ns = e.attached_ns.load(std::memory_order_relaxed);
    r.hold_histogram.resize(kHoldBuckets);
    for (std::size_t b = 0; b < kHoldBuckets; ++b) {
      r.hold_histogram[b] = e.hold_histogram[b].load(std::memory_order_relaxed);
    }
    s.readers.push_back(std::move(r));
  }

  const std::uint64_t valid_bits = g.max_readers == 64 ? ~0ULL : (1ULL << g.max_readers) - 1;
  s.slots_info.reserve(g.slots);
  for (std::uint32_t i = 0; i < g.slots; ++i) {
    Slot& slot = view.slot(i);
    const std::uint64_t w = slot.state.load(std::memory_order_acquire);
    SlotInfo si;
    si.index = i;
    si.reader_mask = SlotWord::mask(w);
    si.generation = SlotWord::generation(w);
    si.sequence = slot.sequence.load(std::memory_order_relaxed);
    si.epoch = slot.epoch.load(std::memory_order_relaxed);
    si.bytes = slot.bytes.load(std::memory_order_relaxed);
    si.timestamp_ns = slot.timestamp_ns.load(std::memory_order_relaxed);
    if (SlotWord::writing(w)) {
      si.state = SlotState::writing;
    } else if (si.reader_mask != 0) {
      si.state = SlotState::held;
    } else if (si.sequence != 0) {
      si.state = SlotState::ready;
    } else {
      si.state = SlotState::empty;
    }
    if ((si.reader_mask & ~valid_bits) != 0) {
      s.problems.push_back("slot " + std::to_string(i) + " has reader bits beyond max_readers: 0x" +
                           std::to_string(si.reader_mask));
    }
    if ((si.reader_mask & valid_bits & ~active_mask) != 0) {
      s.problems.push_back("slot " + std::to_string(i) + " is held by free reader entries (mask " +
                           std::to_string(si.reader_mask & ~active_mask) + ")");
    }
    if (si.bytes > g.frame_bytes) {
      s.problems.push_back("slot " + std::to_string(i) + " claims " + std::to_string(si.bytes) +
                           " bytes in frames of " + std::to_string(g.frame_bytes));
    }
    if (si.sequence > s.producer.head && si.state != SlotState::writing) {
      s.problems.push_back("slot " + std::to_string(i) + " has sequence " +
                           std::to_string(si.sequence) + " beyond head " +
                           std::to_string(s.producer.head));
    }
    for (auto& r : s.readers) {
      if ((si.reader_mask & SlotWord::bit(r.index)) != 0) r.held_slots.push_back(i);
    }
    s.slots_info.push_back(si);
  }
  return s;
}

std::vector<std::string> list_channels() {
  std::vector<std::string> names;
  DIR* dir = opendir("/dev/shm");
  if (dir == nullptr) return names;
  while (dirent* d = readdir(dir)) {
    std::string_view n(d->d_name);
    if (!n.starts_with("ipcring.")) continue;
    n.remove_prefix(8);
    if (n.ends_with(".frames")) continue;
    names.emplace_back(n);
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::size_t reap_dead_readers(std::string_view name) {
  using namespace detail;
  OpenedSegment opened = open_segment(name);
  const std::size_t n = detail::reap_dead_readers(opened.mapping->view, nullptr);
  if (n != 0) {
    opened.mapping->view.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
  }
  return n;
}

bool remove_channel(std::string_view name, bool force) {
  using namespace detail;
  validate_name(name);
  if (!force) {
    Snapshot s;
    try {
      s = inspect(name);
    } catch (const Error& e) {
      if (e.code() == Errc::not_found) {
        // A frames object may be left alone; remove it quietly.
        return unlink_channel_objects(name);
      }
      throw Error(e.code(), std::string(e.what()) +
                                "; refusing to remove a channel that cannot be checked (use force)");
    }
    std::string live;
    if (s.producer.alive) live += "producer pid " + std::to_string(s.producer.pid);
    for (const auto& r : s.readers) {
      if (!r.alive) continue;
      live += (live.empty() ? "" : ", ") + std::string("reader ") + std::to_string(r.index) +
              " pid " + std::to_string(r.pid);
    }
    if (!live.empty()) {
      throw Error(Errc::channel_busy, "ipcring: channel '" + std::string(name) +
                                          "' is in use (" + live + "); refusing to remove it");
    }
  }
  return unlink_channel_objects(name);
}

}  // namespace ipcring
