// inspect.cpp — read-only snapshots of a channel, listing, and explicit repair (reap, remove).
//
// A snapshot reads shared words with relaxed loads while producer and readers run: each value is
// one that was really there, but the whole is not one instant (a slot may show a reader bit whose
// reader entry was read a moment earlier). Every value is range-checked before use; anything
// inconsistent is reported in Snapshot::problems rather than trusted.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "channel/directory.hpp"
#include "channel/handout.hpp"
#include "channel/name_lock.hpp"
#include "common/clock.hpp"
#include "common/naming.hpp"
#include "core.hpp"
#include "inspect_internal.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"
#include "lease/lease.hpp"
#include "segment/segment.hpp"

namespace ipcring {

namespace {

// How long an inspector waits for a producer's answer before it reaches the memory through the
// producer's own descriptors (a stopped or stalled producer answers nothing).
constexpr std::chrono::milliseconds kInspectTimeout{300};

bool is_active(std::uint64_t lease_word) {
  return detail::LeaseWord::state(lease_word) ==
         static_cast<std::uint8_t>(detail::LeaseState::active);
}

// Liveness of a lease: one load of its lock word (nothing is written, so a snapshot never changes
// what producer and readers see). `who` names the owner in problems.
bool lease_alive(const detail::MutexStorage& storage, const std::string& who,
                 std::vector<std::string>& problems) {
  if (!detail::lease_mutex_plausible(storage)) {
    problems.push_back(who + "'s lease is not a robust process-shared mutex (kind " +
                       format_hex(static_cast<std::uint32_t>(detail::lease_mutex_kind(storage))) +
                       "); counted as dead");
    return false;
  }
  return detail::probe_lease(storage) == detail::LeaseProbe::held;
}

}  // namespace

namespace detail {

namespace {

// The frame header of slot i, when it names the slot's sequence; validated like a reader does
// (an invalid tensor is a problem, not a value). `state` is the slot word read before: a value
// found invalid is reported only if the slot still holds that publication afterwards (the
// producer may have reclaimed the slot and be rewriting the header while we read it).
void read_frame_header_estimate(const SegmentView& view, std::uint32_t i, std::uint64_t state,
                                SlotInfo& si, std::vector<std::string>& problems) {
  auto unchanged = [&] {  // same publication: same generation, not reclaimed (readers may come)
    const std::uint64_t now = view.slot(i).state.load(std::memory_order_acquire);
    return SlotWord::generation(now) == SlotWord::generation(state) && !SlotWord::writing(now) &&
           view.frame_header(i).sequence.load(std::memory_order_relaxed) == si.sequence;
  };
  if (si.sequence == 0) return;
  const FrameHeader& fh = view.frame_header(i);
  if (fh.sequence.load(std::memory_order_relaxed) != si.sequence) return;
  si.capture_time_ns = fh.capture_time_ns.load(std::memory_order_relaxed);
  const std::uint32_t mb = fh.metadata_bytes.load(std::memory_order_relaxed);
  if (mb <= view.geo.metadata_bytes) {
    si.metadata_bytes = mb;
  } else if (unchanged()) {
    problems.push_back("slot " + std::to_string(i) + " claims " + std::to_string(mb) +
                       " metadata bytes of " + std::to_string(view.geo.metadata_bytes));
  }
  const std::uint64_t tw = fh.tensor_word.load(std::memory_order_relaxed);
  if (!TensorWord::present(tw)) return;
  TensorDesc t;
  t.dtype_code = TensorWord::code(tw);
  t.dtype_bits = TensorWord::bits(tw);
  t.ndim = TensorWord::ndim(tw);
  t.byte_offset = fh.byte_offset.load(std::memory_order_relaxed);
  if (t.ndim <= kMaxTensorDims) {
    for (std::uint8_t d = 0; d < t.ndim; ++d) {
      t.shape[d] = fh.shape[d].load(std::memory_order_relaxed);
      t.strides[d] = fh.strides[d].load(std::memory_order_relaxed);
    }
  }
  if (t.ndim <= kMaxTensorDims && tensor_fits(t, si.bytes)) {
    si.has_tensor = true;
    si.tensor = t;
  } else if (si.state != SlotState::writing && unchanged()) {
    problems.push_back("slot " + std::to_string(i) + " has an invalid tensor descriptor (" +
                       t.dtype_name() + ", ndim " + std::to_string(t.ndim) + ") for " +
                       std::to_string(si.bytes) + " bytes");
  }
}

// The channel's geometry and fixed header fields.
void snapshot_header(const SegmentView& view, std::string_view name, std::uint32_t owner_uid,
                     std::uint32_t mode, Snapshot& s) {
  const Geometry& g = view.geo;
  s.name = std::string(name);
  s.layout_version = kLayoutVersion;  // validated equal to the segment's
  s.backend = g.backend == kBackendCuda ? Backend::cuda : Backend::host;
  s.cuda_path = g.backend != kBackendCuda     ? CudaPath::none
                : g.cuda_path == kCudaPathVmm ? CudaPath::vmm
                                              : CudaPath::legacy_ipc;
  s.slot_count = g.slots;
  s.max_readers = g.max_readers;
  s.max_held = g.max_held;
  s.frame_bytes = g.frame_bytes;
  s.segment_bytes = g.segment_bytes;
  s.frames_segment_bytes = g.frames_segment_bytes;
  s.owner_uid = owner_uid;
  s.mode = mode;
  s.taken_ns = monotonic_ns();
  // Plain header fields: immutable once magic was published (display only, never trusted).
  s.created_unix_ns = view.header().created_ns;
  s.reap_period_ns = view.header().reap_period_ns;
  s.metadata_bytes = g.metadata_bytes;
}

// The producer block and the producer's lease.
void snapshot_producer(const SegmentView& view, Snapshot& s) {
  const Geometry& g = view.geo;
  ProducerBlock& p = view.producer();
  const std::uint64_t pw = p.lease_word.load(std::memory_order_acquire);
  s.producer.epoch = LeaseWord::generation(pw);
  s.producer.closed = LeaseWord::state(pw) == static_cast<std::uint8_t>(LeaseState::closed);
  if (is_active(pw)) {
    s.producer.alive = lease_alive(p.lease, "the producer", s.problems);
  } else if (!lease_mutex_plausible(p.lease)) {
    s.problems.push_back("the producer's lease is not a robust process-shared mutex (kind " +
                         format_hex(static_cast<std::uint32_t>(lease_mutex_kind(p.lease))) + ")");
  }
  s.producer.pid = p.pid.load(std::memory_order_relaxed);
  s.producer.instance_id = p.instance_id.load(std::memory_order_relaxed);
  s.producer.head = LogWord::sequence(p.head.load(std::memory_order_acquire));
  s.producer.published = p.published.load(std::memory_order_relaxed);
  s.producer.loan_failures = p.loan_failures.load(std::memory_order_relaxed);
  s.producer.readers_reaped = p.readers_reaped.load(std::memory_order_relaxed);
  s.producer.last_publish_ns = p.last_publish_ns.load(std::memory_order_relaxed);
  s.producer.started_ns = p.started_ns.load(std::memory_order_relaxed);
  s.producer.waiters = static_cast<std::uint32_t>(
      std::popcount(p.waiting.load(std::memory_order_relaxed) &
                    static_cast<std::uint32_t>((1ULL << g.max_readers) - 1)));
  const std::uint8_t pstate = LeaseWord::state(pw);
  if (pstate > static_cast<std::uint8_t>(LeaseState::closed)) {
    s.problems.push_back("the producer's lease word has unknown state " + std::to_string(pstate));
  }
}

// One active reader entry (lease word `w`).
ReaderInfo reader_info(ReaderEntry& e, std::uint32_t i, std::uint64_t w,
                       std::vector<std::string>& problems) {
  ReaderInfo r;
  r.index = i;
  r.alive = lease_alive(e.lease, "reader " + std::to_string(i), problems);
  r.pid = e.pid.load(std::memory_order_relaxed);
  r.generation = LeaseWord::generation(w);
  r.instance_id = e.instance_id.load(std::memory_order_relaxed);
  const std::uint32_t pol = e.policy.load(std::memory_order_relaxed);
  r.policy = pol == 1 ? ReadPolicy::sequential : ReadPolicy::latest;
  if (pol > 1) {
    problems.push_back("reader " + std::to_string(i) + " has policy " + std::to_string(pol));
  }
  r.frames_read = e.frames_read.load(std::memory_order_relaxed);
  r.overruns = e.overruns.load(std::memory_order_relaxed);
  r.last_sequence = e.last_sequence.load(std::memory_order_relaxed);
  r.last_read_ns = e.last_read_ns.load(std::memory_order_relaxed);
  r.attached_ns = e.attached_ns.load(std::memory_order_relaxed);
  r.hold_histogram.resize(kHoldBuckets);
  for (std::size_t b = 0; b < kHoldBuckets; ++b) {
    r.hold_histogram[b] = e.hold_histogram[b].load(std::memory_order_relaxed);
  }
  r.delay_histogram.resize(kDelayBuckets);
  for (std::size_t b = 0; b < kDelayBuckets; ++b) {
    r.delay_histogram[b] = e.delay_histogram[b].load(std::memory_order_relaxed);
    r.delay_count += r.delay_histogram[b];
  }
  r.delay_p50_ns = delay_quantile_ns(r.delay_histogram, 0.5);
  r.delay_p99_ns = delay_quantile_ns(r.delay_histogram, 0.99);
  return r;
}

// The reader entries in use; returns the bits of the entries that read as active.
std::uint64_t snapshot_readers(const SegmentView& view, Snapshot& s) {
  const Geometry& g = view.geo;
  std::uint64_t active_mask = 0;
  for (std::uint32_t i = 0; i < g.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    const std::uint64_t w = e.lease_word.load(std::memory_order_acquire);
    const std::uint8_t st = LeaseWord::state(w);
    if (st == static_cast<std::uint8_t>(LeaseState::free)) {
      // Attach will lock it, so a corrupt one is worth reporting.
      if (!lease_mutex_plausible(e.lease)) {
        s.problems.push_back("free reader entry " + std::to_string(i) +
                             "'s lease is not a robust process-shared mutex (kind " +
                             format_hex(static_cast<std::uint32_t>(lease_mutex_kind(e.lease))) +
                             ")");
      }
      continue;
    }
    if (st != static_cast<std::uint8_t>(LeaseState::active)) {
      s.problems.push_back("reader entry " + std::to_string(i) + " has unknown state " +
                           std::to_string(st));
      continue;
    }
    active_mask |= SlotWord::bit(i);
    s.readers.push_back(reader_info(e, i, w, s.problems));
  }
  return active_mask;
}

// Every slot; returns the reader bits set in slots whose reader entry read as free.
std::uint64_t snapshot_slots(const SegmentView& view, Snapshot& s, std::uint64_t active_mask) {
  const Geometry& g = view.geo;
  const std::uint64_t valid_bits = (1ULL << g.max_readers) - 1;  // max_readers <= 32
  std::uint64_t free_holders = 0;  // bits set in slots whose reader entry read as free
  s.slots.reserve(g.slots);
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
    read_frame_header_estimate(view, i, w, si, s.problems);
    if ((si.reader_mask & ~valid_bits) != 0) {
      s.problems.push_back("slot " + std::to_string(i) + " has reader bits beyond max_readers: " +
                           format_hex(si.reader_mask & ~valid_bits));
    }
    free_holders |= si.reader_mask & valid_bits & ~active_mask;
    if (si.bytes > g.frame_bytes && si.state != SlotState::writing) {
      s.problems.push_back("slot " + std::to_string(i) + " claims " + std::to_string(si.bytes) +
                           " bytes in frames of " + std::to_string(g.frame_bytes));
    }
    for (auto& r : s.readers) {
      if ((si.reader_mask & SlotWord::bit(r.index)) != 0) r.held_slots.push_back(i);
    }
    s.slots.push_back(si);
  }
  return free_holders;
}

// Cross-checks against values read before the slots, re-read now so that a producer or reader
// acting during the snapshot is not reported as corruption.
//  * Sequences: a slot read as published carries at most head + 1, where head is read after the
//    slot (the producer stores head (P4) after publishing the slot (P2), and our acquire load of
//    the slot word synchronises with P2, so a later load of head sees at least the previous
//    publication's head).
//  * Reader bits of entries that read as free: a reader may have attached (L1) and claimed a
//    slot after we read its entry; only an entry still free now is a problem.
void cross_check(const SegmentView& view, Snapshot& s, std::uint64_t free_holders) {
  const Geometry& g = view.geo;
  ProducerBlock& p = view.producer();
  const std::uint64_t head_after = LogWord::sequence(p.head.load(std::memory_order_acquire));
  for (const SlotInfo& si : s.slots) {
    if (si.state != SlotState::writing && si.sequence > head_after &&
        si.sequence - head_after > 1) {
      s.problems.push_back("slot " + std::to_string(si.index) + " has sequence " +
                           std::to_string(si.sequence) + " beyond head " +
                           std::to_string(head_after));
    }
  }
  if (free_holders != 0) {
    std::uint64_t still_free = 0;
    for (std::uint32_t i = 0; i < g.max_readers; ++i) {
      if ((free_holders & SlotWord::bit(i)) == 0) continue;
      const std::uint64_t w = view.reader(i).lease_word.load(std::memory_order_acquire);
      if (LeaseWord::state(w) == static_cast<std::uint8_t>(LeaseState::free)) {
        still_free |= SlotWord::bit(i);
      }
    }
    for (const SlotInfo& si : s.slots) {
      if ((si.reader_mask & still_free) != 0) {
        s.problems.push_back("slot " + std::to_string(si.index) +
                             " is held by free reader entries (mask " +
                             format_hex(si.reader_mask & still_free) + ")");
      }
    }
  }
}

}  // namespace

Snapshot snapshot_view(const SegmentView& view, std::string_view name, std::uint32_t owner_uid,
                       std::uint32_t mode) {
  Snapshot s;
  snapshot_header(view, name, owner_uid, mode, s);
  snapshot_producer(view, s);
  const std::uint64_t active_mask = snapshot_readers(view, s);
  const std::uint64_t free_holders = snapshot_slots(view, s, active_mask);
  cross_check(view, s, free_holders);
  return s;
}

Snapshot inspect_image(unsigned char* base, std::size_t size, std::string_view name) {
  const std::string ch = channel_prefix(name);
  if (reinterpret_cast<std::uintptr_t>(base) % kLine != 0) {
    throw Error(Errc::invalid_argument,
                ch + "segment image is not aligned to " + std::to_string(kLine) + " bytes");
  }
  if (size < sizeof(SegmentHeader)) {
    throw Error(Errc::corrupt_segment, ch + "corrupt control segment: the image is " +
                                           std::to_string(size) +
                                           " bytes, smaller than its header");
  }
  // Validate a private copy, as open_segment does.
  SegmentHeader copy;
  std::memcpy(static_cast<void*>(&copy), base, sizeof copy);
  const std::uint64_t magic = copy.magic.load(std::memory_order_relaxed);
  if (magic == 0) {
    throw Error(Errc::not_ready, ch + "the segment image has no magic (never finished)");
  }
  if (magic != kMagic) {
    throw Error(Errc::version_mismatch, ch + "not an ipcring segment of this family: magic is " +
                                            format_hex(magic) + ", expected " + format_hex(kMagic));
  }
  // An image of the control segment, or of the whole object (control segment and frame pool).
  const bool whole = copy.object_bytes != copy.segment_bytes && size == copy.object_bytes;
  const Geometry g = validate_header(copy, size, name, whole);
  return snapshot_view(SegmentView{base, g}, name, 0, 0);
}

}  // namespace detail

std::uint64_t delay_bucket_lower_ns(std::size_t b) noexcept {
  return detail::DelayBucket::lower(b);
}

std::uint64_t delay_quantile_ns(const std::vector<std::uint64_t>& histogram, double q) noexcept {
  std::uint64_t total = 0;
  for (const std::uint64_t c : histogram) total += c;
  if (total == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < histogram.size(); ++b) {
    seen += histogram[b];
    if (seen > rank || seen == total) {
      if (b + 1 >= histogram.size()) return detail::DelayBucket::lower(b) * 2;
      return std::max<std::uint64_t>(2, detail::DelayBucket::lower(b + 1));
    }
  }
  return 0;
}

const char* producer_state(const ProducerInfo& p) noexcept {
  if (p.alive) return "alive";
  return p.closed ? "closed" : "dead";
}

std::vector<std::uint32_t> mask_indices(std::uint64_t reader_mask) {
  std::vector<std::uint32_t> indices;
  for (std::uint32_t i = 0; i < 64; ++i) {
    if (((reader_mask >> i) & 1U) != 0) indices.push_back(i);
  }
  return indices;
}

Snapshot inspect(std::string_view name) {
  using namespace detail;
  finish_retired_readers();  // this process's readers whose last frame was just released
  OpenedSegment opened = open_channel(name, {}, {}, kInspectTimeout, true);
  return snapshot_view(opened.mapping->view, name, opened.owner_uid, opened.mode);
}

std::size_t reap_dead_readers(std::string_view name) {
  using namespace detail;
  OpenedSegment opened = open_channel(name, {}, {}, kInspectTimeout, true);
  const SegmentView& view = opened.mapping->view;
  // Say so when an active entry's mutex is not one we made: it is never judged (lease.hpp).
  for (std::uint32_t i = 0; i < view.geo.max_readers; ++i) {
    ReaderEntry& e = view.reader(i);
    if (is_active(e.lease_word.load(std::memory_order_acquire)) &&
        !lease_mutex_plausible(e.lease)) {
      throw Error(Errc::corrupt_segment,
                  channel_prefix(name) + "corrupt control segment: reader " + std::to_string(i) +
                      "'s lease is not a robust process-shared mutex (kind " +
                      format_hex(static_cast<std::uint32_t>(lease_mutex_kind(e.lease))) +
                      "); not reaping");
    }
  }
  const std::size_t n = detail::reap_dead_readers(view);
  if (n != 0) {
    opened.mapping->view.producer().readers_reaped.fetch_add(n, std::memory_order_relaxed);
  }
  return n;
}

const char* to_string(NameState state) noexcept {
  switch (state) {
    case NameState::missing:
      return "missing";
    case NameState::live:
      return "live";
    case NameState::stale:
      return "stale";
    case NameState::broken:
      return "broken";
  }
  return "unknown";
}

namespace {

NameInfo inspect_name_in(const detail::ChannelDirectory& d) {
  using namespace detail;
  NameInfo info;
  info.lock_path = d.shown_path(kLockSuffix);
  info.socket_path = d.shown_path(kSocketSuffix);
  struct stat sock {};
  const bool has_socket = fstatat(d.fd(), d.socket_file().c_str(), &sock, AT_SYMLINK_NOFOLLOW) == 0;
  switch (probe_name_lock(d.fd(), d.leaf(), &info.holder)) {
    case NameLockState::held:
      info.state = NameState::live;
      return info;
    case NameLockState::free:
      info.state = NameState::stale;
      break;
    case NameLockState::missing:
      info.state = has_socket ? NameState::stale : NameState::missing;
      break;
    case NameLockState::not_a_lock:
      info.state = NameState::broken;
      info.problem = info.lock_path + " is not a regular file";
      return info;
  }
  if (has_socket && !S_ISSOCK(sock.st_mode)) {
    info.state = NameState::broken;
    info.problem = info.socket_path + " is not a socket";
  }
  return info;
}

}  // namespace

NameInfo inspect_name(std::string_view name, std::string_view dir) {
  const detail::ChannelDirectory d = detail::ChannelDirectory::open(name, dir, false);
  return inspect_name_in(d);
}

bool remove_channel(std::string_view name, bool force) {
  using namespace detail;
  const std::string ch = channel_prefix(name);
  ChannelDirectory d;
  try {
    d = ChannelDirectory::open(name, {}, false);
  } catch (const Error& e) {
    if (e.code() == Errc::not_found) return false;
    throw;
  }
  const std::string lock_file = d.lock_file();
  const std::string socket_file = d.socket_file();
  const NameInfo info = inspect_name_in(d);
  switch (info.state) {
    case NameState::missing:
      return false;
    case NameState::live:
      if (!force) {
        throw Error(Errc::channel_busy,
                    ch + "its producer is running (" + info.holder + ", holding " + info.lock_path +
                        "); stop it first, or remove its names anyway with --force (the producer "
                        "then makes them again within its reap period; its memory and readers "
                        "are not affected)");
      }
      unlinkat(d.fd(), socket_file.c_str(), 0);
      unlinkat(d.fd(), lock_file.c_str(), 0);
      return true;
    case NameState::broken:
      if (!force) {
        throw Error(Errc::corrupt_segment, ch + info.problem +
                                               "; ipcring did not make it. Look at it, then "
                                               "remove it with --force");
      }
      unlinkat(d.fd(), socket_file.c_str(), 0);
      unlinkat(d.fd(), lock_file.c_str(), 0);
      return true;
    case NameState::stale:
      break;
  }
  // Stale: take the lock ourselves, so that a producer starting meanwhile either holds it (and we
  // are refused) or finds our lock and waits for nothing: it retries once we removed the names.
  NameLock lock;
  try {
    lock = NameLock::take(d, name, 0600);
  } catch (const Error& e) {
    if (e.code() == Errc::producer_exists) {
      throw Error(Errc::channel_busy, std::string(e.what()) + " (it started while we looked)");
    }
    throw;
  }
  unlinkat(d.fd(), socket_file.c_str(), 0);
  lock.remove_name(d);
  return true;
}

}  // namespace ipcring
