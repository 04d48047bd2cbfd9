// follow.cpp — a reader follows its channel across a restart or a re-creation (follow.hpp has the
// overview, docs/protocol.md "Following a channel" the argument).
//
// Concurrency: follow_after and read_following run on the Reader's one thread.
#include "reader/follow.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"
#include "lease/lease.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

// ReaderCore's friend: what following reads of the old core and hands on to the new one.
class Follow {
 public:
  static Result<Frame> after(ReaderCore*& core, Result<Frame> result) noexcept;
};

Result<Frame> follow_after(ReaderCore*& core, Result<Frame> result) noexcept {
  return Follow::after(core, std::move(result));
}

Result<Frame> Follow::after(ReaderCore*& core, Result<Frame> result) noexcept {
  ReaderCore& c = *core;
  const bool reported_now = result.status() == Status::producer_gone;
  if (c.forked()) return result;
  // A live producer keeps the reader here: the socket is asked only once the memory's producer has
  // ended. Loads only, and first: this runs
  // after every try_read that found no frame, so a polling reader of a live channel reads no clock
  // here (a clock read per poll lengthened the polling loop, and with it the time to see a frame).
  if (producer_lease_alive(c.view_)) return result;
  // Rate: at once when the core has just reported the end of its producer (a restart's new object
  // is usually there already), otherwise at most once per probe period.
  const std::uint64_t now = monotonic_ns();
  if (!reported_now && now < c.follow_next_ns_) return result;
  c.follow_next_ns_ = now + c.probe_period_ns();
  ReaderCore* next = nullptr;
  try {
    ReaderOptions o = c.options_;
    o.wait_for_channel = std::chrono::nanoseconds(0);
    next = attach_reader_core(c.name_, o);
    if (next->mapping_ == c.mapping_) {  // the ended producer's process still answers
      ReaderCore::drop_handle(next);
      return result;
    }
  } catch (const Error& e) {
    // No producer answers yet, or it is stalled: look again next period. Anything else (a
    // producer this reader does not trust, one that refuses it, another layout version, every
    // reader entry taken, corrupt memory) is reported once, as evicted, with the message (naming
    // the channel and the values) in Reader::follow_error().
    if (e.code() == Errc::not_found || e.code() == Errc::not_ready ||
        e.code() == Errc::channel_busy) {
      return result;
    }
    if (reported_now) {  // the end of our producer first; the refusal on the next look
      c.follow_next_ns_ = now;
      return result;
    }
    try {
      std::string text = std::string("cannot follow the channel to its new producer: ") + e.what();
      if (c.follow_error_ == text) return result;
      c.follow_error_ = std::move(text);
    } catch (...) {
      return result;  // out of memory while saying so
    }
    return Status::evicted;
  } catch (...) {
    return result;  // out of memory: try again next period
  }
  next->cursor_.overruns = c.cursor_.overruns;  // frames lost so far, whatever the memory
  next->cursor_.observer_dropped = c.cursor_.observer_dropped;
  // producer_gone exactly once per ended producer: now, unless the core reported it already.
  const bool report = !c.cursor_.gone_reported;
  c.cursor_.gone_reported = true;
  // The old core lives on in the frames still held (their mapping and lease stay valid) and ends
  // with the last of them; with none held it ends (detaches) here.
  ReaderCore::drop_handle(core);
  core = next;
  if (report) return Status::producer_gone;
  if (reported_now) return result;
  return core->try_read();
}

Result<Frame> read_following(ReaderCore*& core, std::uint64_t timeout_ns) noexcept {
  const std::uint64_t start = monotonic_ns();
  const std::uint64_t deadline = timeout_ns > UINT64_MAX - start ? UINT64_MAX : start + timeout_ns;
  for (;;) {
    const std::uint64_t now = monotonic_ns();
    const std::uint64_t slice =
        std::min(deadline - std::min(deadline, now), core->probe_period_ns());
    Result<Frame> r = core->read(slice);
    if (r) return r;
    const Status st = r.status();
    if (st != Status::timeout && st != Status::no_frame && st != Status::producer_gone) return r;
    const ReaderCore* before = core;
    r = follow_after(core, st == Status::timeout ? Result<Frame>(Status::no_frame) : std::move(r));
    if (r || r.status() != Status::no_frame) return r;
    if (core != before) continue;  // followed: read the new object at once
    if (monotonic_ns() >= deadline) return Status::timeout;
  }
}

}  // namespace ipcring::detail
