// follow.hpp — a reader follows its channel by name.
//
// A Reader reads one channel's memory (its ReaderCore maps it and holds a lease in it). When that
// memory's producer has ended (closed, or dead), the Reader asks the channel's socket again: when
// a new producer answers (a clean restart, a crash and a new start, a re-creation after the names
// were removed), with memory that this reader's trust accepts, the Reader attaches to it and
// reads on; the old ReaderCore lives on, with its mapping and its lease, as long as frames it
// returned are held. The socket is asked only when the producer looks gone (one load of its
// lease) and the reader finds no new frame, at most once per ReaderOptions::producer_probe: a live
// channel costs no system call (docs/protocol.md, "Following a channel").
#pragma once

#include <cstdint>

#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"

namespace ipcring::detail {

class ReaderCore;

// Called by Reader::try_read when the core returned no frame (no_frame or producer_gone): follows
// the channel when the producer has ended and a new one answers on its socket. May replace `core`.
Result<Frame> follow_after(ReaderCore*& core, Result<Frame> result) noexcept;

// Reader::read: the core's read in slices of producer_probe, following between slices.
Result<Frame> read_following(ReaderCore*& core, std::uint64_t timeout_ns) noexcept;

}  // namespace ipcring::detail
