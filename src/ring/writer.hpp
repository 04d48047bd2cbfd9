// writer.hpp — the producer's half of the ring, apart from object lifetime: the free-slot search
// with the sizing rule's passes (loan), the slot's preparation, and the publication (descriptor,
// (P2) the slot word, (P3) the log entry, (P4) head, (P5)/(P6) the wake-up).
//
// Roles. Only the producer (the one holder of the producer lease, on one thread at a time) calls
// these functions; WriterState is its private memory between calls, never shared. Everything in
// shared memory is reached through the SegmentView, with the atomics of ring.hpp.
// Guarantees. claim_free_slot never returns a slot a reader holds (it claims with (P1));
// publish_frame never makes a system call unless a reader sleeps (P6). Nothing here allocates,
// locks or throws. docs/protocol.md's loan() and publish() pseudocode is this file.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/pool.hpp"
#include "ipcring/result.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// The producer's memory between loans. Only the producer's thread reads or writes it.
struct WriterState {
  std::uint64_t epoch = 0;                 // written into every descriptor
  std::uint64_t next_sequence = 1;         // the sequence the next publish gives
  std::uint64_t published = 0;             // telemetry mirrored into ProducerBlock::published
  std::uint64_t loan_failures = 0;         // telemetry mirrored into ProducerBlock::loan_failures
  std::uint32_t cursor = 0;                // last slot claimed
  std::uint32_t newest_slot = UINT32_MAX;  // slot of the newest published frame
};

// Run by the search between its first pass and the rest: reap dead readers (their bits hold
// slots). A plain function and its context, so that the search neither allocates nor throws.
struct ReapHook {
  void (*run)(void* context) noexcept = nullptr;
  void* context = nullptr;
  void operator()() const noexcept {
    if (run != nullptr) run(context);
  }
};

inline constexpr std::uint32_t kNoSlot = UINT32_MAX;

// One round-robin pass from the slot after `cursor`: claims (P1) and returns the first free slot,
// skipping `newest_slot` unless `allow_newest`; kNoSlot when none was free. With `observed`, also
// stores a hash of the busy words the pass saw (compared between passes by claim_free_slot).
std::uint32_t find_free(const SegmentView& view, std::uint32_t cursor, std::uint32_t newest_slot,
                        bool allow_newest, std::uint64_t* observed = nullptr) noexcept;

// loan()'s search: a pass that keeps the newest frame; if that fails, `reap`, then the bounded
// passes of the sizing rule (see the comment in writer.cpp). Returns the claimed slot (W set) or
// kNoSlot (then counts a loan failure in `state` and in the segment). Sets state.cursor.
std::uint32_t claim_free_slot(const SegmentView& view, WriterState& state,
                              const ReapHook& reap) noexcept;

// Makes the claimed slot `i` ready for writing: the pool's prepare_write first (a slot it refuses
// is unclaimed and keeps its published frame: the Status is returned), then the descriptor's
// sequence and the frame header zeroed (a dropped loan leaves an empty slot).
Status prepare_slot(const SegmentView& view, ProducerPool& pool, WriterState& state,
                    std::uint32_t i, CudaStream stream) noexcept;

// Publishes claimed slot `i` with `bytes` payload bytes under state.next_sequence: the pool's
// before_publish (a failure is returned, the slot stays claimed and nothing is published), then
// descriptor, (P2) ... (P6). On success stores the frame's sequence in `sequence`.
Status publish_frame(const SegmentView& view, ProducerPool& pool, WriterState& state,
                     std::uint32_t i, std::uint64_t bytes, CudaStream stream,
                     std::uint64_t& sequence) noexcept;

}  // namespace ipcring::detail
