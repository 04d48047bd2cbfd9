// name_defence.hpp — a running producer defends its channel's name.
//
// A process-wide watcher thread stats each live producer's name once per reap
// period (off the hot path). When the name is gone or refers to another object, the producer's
// next loan restores it: the kernel cannot give an unlinked object its name back (linkat refuses an
// inode with no links unless it was made O_TMPFILE and never linked), so the producer moves to a
// fresh object under the name, with the same configuration, instance id and sequence numbers, and
// closes the old one; its readers see the same producer (instance id) there and follow without a
// producer_gone. A name taken by another live producer is reported, never fought over.
#pragma once

namespace ipcring::detail {

class ProducerCore;

// Starts watching the core's name (the object it maps now).
void watch_name(ProducerCore& core);

// Producer::loan's hook: one relaxed load unless the watcher saw the name change; then restores
// the name (may replace `core`) or reports that another live producer took it.
// `core` is the Producer's handle (ProducerCore::drop_handle ends the old one; no loan is out).
void defend_name(ProducerCore*& core) noexcept;

}  // namespace ipcring::detail
