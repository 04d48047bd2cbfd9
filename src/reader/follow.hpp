// follow.hpp — a reader follows its channel by name.
//
// A Reader reads one object (its ReaderCore maps it and holds a lease in it). When
// that object's producer has ended (closed, or dead) and the channel's name now refers to another
// object (a clean restart: the old producer unlinked its object and a new one made a fresh one; or
// someone removed the name and a producer re-created it), the Reader attaches to the new object
// and reads on; the old ReaderCore lives on, with its mapping and its lease, as long as frames it
// returned are held. The name is looked at only when the producer looks gone (one load of its
// lease) and the reader finds no new frame, at most once per ReaderOptions::producer_probe: a live
// channel costs no system call (docs/protocol.md, "Following a channel by name").
#pragma once

#include <cstdint>

#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"

namespace ipcring::detail {

class ReaderCore;

// Called by Reader::try_read when the core returned no frame (no_frame or producer_gone): follows
// the name when the producer has ended and the name refers to another object. May replace `core`.
Result<Frame> follow_after(ReaderCore*& core, Result<Frame> result) noexcept;

// Reader::read: the core's read in slices of producer_probe, following between slices.
Result<Frame> read_following(ReaderCore*& core, std::uint64_t timeout_ns) noexcept;

}  // namespace ipcring::detail
