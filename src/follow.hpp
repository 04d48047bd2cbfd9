// follow.hpp — readers follow their channel by name; a running producer defends its name.
//
// Reader side. A Reader reads one object (its ReaderCore maps it and holds a lease in it). When
// that object's producer has ended (closed, or dead) and the channel's name now refers to another
// object (a clean restart: the old producer unlinked its object and a new one made a fresh one; or
// someone removed the name and a producer re-created it), the Reader attaches to the new object
// and reads on; the old ReaderCore lives on, with its mapping and its lease, as long as frames it
// returned are held. The name is looked at only when the producer looks gone (one load of its
// lease) and the reader finds no new frame, at most once per ReaderOptions::producer_probe: a live
// channel costs no system call (docs/protocol.md, "Following a channel by name").
//
// Producer side. A process-wide watcher thread stats each live producer's name once per reap
// period (off the hot path). When the name is gone or refers to another object, the producer's
// next loan restores it: the kernel cannot give an unlinked object its name back (linkat refuses an
// inode with no links unless it was made O_TMPFILE and never linked), so the producer moves to a
// fresh object under the name, with the same configuration, instance id and sequence numbers, and
// closes the old one; its readers see the same producer (instance id) there and follow without a
// producer_gone. A name taken by another live producer is reported, never fought over.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"

namespace ipcring::detail {

class ReaderCore;
class ProducerCore;
class NameToken;

// ---- readers -----------------------------------------------------------------------------------

// Attaches a ReaderCore to the object now named `name` (Reader::attach; the caller owns the one
// handle of the returned core: ReaderCore::drop_handle ends it).
ReaderCore* attach_reader_core(std::string_view name, const ReaderOptions& options);

// Called by Reader::try_read when the core returned no frame (no_frame or producer_gone): follows
// the name when the producer has ended and the name refers to another object. May replace `core`.
Result<Frame> follow_after(ReaderCore*& core, Result<Frame> result) noexcept;

// Reader::read: the core's read in slices of producer_probe, following between slices.
Result<Frame> read_following(ReaderCore*& core, std::uint64_t timeout_ns) noexcept;

// ---- producers ---------------------------------------------------------------------------------

// What the watcher thread knows about one producer's name. `changed` is set by the watcher
// (release) and read by the producer's loan (relaxed: the producer re-checks the name itself).
struct NameWatch {
  std::string path;  // /dev/shm/ipcring.<channel>
  dev_t device = 0;
  ino_t inode = 0;
  std::uint64_t period_ns = 0;
  std::atomic<bool> changed{false};
  std::uint64_t next_check_ns = 0;  // the watcher's own (under its mutex)
};

// Creates or takes over the channel (Producer::create without the token claim), holding `token`
// (moved into the core on success) and using `instance_id` (0: a new random one).
std::unique_ptr<ProducerCore> create_producer_core(std::string_view name,
                                                   const ChannelConfig& config, NameToken& token,
                                                   std::uint64_t instance_id);

// Starts watching the core's name (the object it maps now).
void watch_name(ProducerCore& core);

// Producer::loan's hook: one relaxed load unless the watcher saw the name change; then restores
// the name (may replace `core`) or reports that another live producer took it.
// `core` is the Producer's handle (ProducerCore::drop_handle ends the old one; no loan is out).
void defend_name(ProducerCore*& core) noexcept;

}  // namespace ipcring::detail
