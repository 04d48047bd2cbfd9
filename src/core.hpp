// core.hpp — the process-side objects behind Producer, Reader, Loan and Frame: what one channel
// end owns (the mapping, the lease, the frame pool) and for how long. The ring algorithms they run
// are src/ring/writer.hpp and src/ring/cursor.hpp; the liveness protocols are src/lease/.
//
// Lifetime. A ProducerCore is owned by its Producer; a Loan points at it without a counted
// reference (one Producer is used by one thread at a time, so a plain flag says whether a loan is
// out). When the Producer goes while its loan is out, the core stays until that loan is dropped.
// A ReaderCore is owned jointly by its Reader and the Frames it returned, counted in one atomic
// word (`held_`: frames in the low bits, the Reader's handle in kHandleBit), so a frame costs one
// increment and one decrement and no shared_ptr copy. Whoever brings the word to zero ends the
// core: the Reader's destructor does it in place; the last Frame::release() (noexcept, any thread)
// hands it to a library thread instead, so that release never runs the detach (pool teardown,
// repair lock, lease keeper).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/pool.hpp"
#include "channel/handout.hpp"
#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"
#include "ring/cursor.hpp"
#include "ring/observe.hpp"
#include "ring/writer.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

class ProducerCore {
 public:
  // Producer::create: the channel's directory (made if missing), its name's lock (refused while
  // another producer lives), fresh memory, the producer lease, the frame pool sealed, the header
  // published, and then the socket that hands the memory out. Throws Error.
  static std::unique_ptr<ProducerCore> create(std::string_view name, const ChannelConfig& config,
                                              const Geometry& geo);
  // The Producer's end of ownership: deletes the core, or leaves that to the outstanding loan.
  static void drop_handle(ProducerCore* core) noexcept;

  ~ProducerCore();
  ProducerCore(const ProducerCore&) = delete;
  ProducerCore& operator=(const ProducerCore&) = delete;

  [[nodiscard]] Result<Loan> loan(CudaStream stream = nullptr) noexcept;
  // Precondition: `loan` is this core's and bytes <= its capacity (the facade checks). A failure
  // is a Status and leaves the loan as it was.
  [[nodiscard]] Status publish(Loan& loan, std::size_t bytes, CudaStream stream,
                               std::uint64_t& sequence) noexcept;
  void drop(Loan& loan) noexcept;
  std::size_t reap() noexcept;
  void reap_on_next_loan() noexcept { last_reap_ns_ = 0; }
  bool forked() const noexcept;
  bool set_metadata(std::uint32_t slot, const void* bytes, std::size_t size) noexcept;
  bool set_tensor(std::uint32_t slot, const TensorDesc& tensor) noexcept;
  void set_capture_time_ns(std::uint32_t slot, std::uint64_t ns) noexcept;

  const std::string& name() const noexcept { return name_; }
  const ChannelConfig& config() const noexcept { return config_; }
  std::uint64_t epoch() const noexcept { return writer_.epoch; }
  std::size_t metadata_capacity() const noexcept { return view_.geo.metadata_bytes; }
  // Name defence (channel/handout.hpp): false for good once another producer took the name.
  bool owns_name() const noexcept { return server_ == nullptr || server_->owns_name(); }
  std::uint64_t name_restores() const noexcept { return server_ ? server_->restores() : 0; }

 private:
  ProducerCore(std::string_view name, const ChannelConfig& config);
  static void reap_hook(void* self) noexcept;

  std::string name_;
  ChannelConfig config_;
  std::shared_ptr<Mapping> mapping_;
  SegmentView view_;
  std::unique_ptr<ProducerPool> pool_;
  WriterState writer_;
  std::uint64_t instance_id_ = 0;
  std::uint64_t fork_gen_ = 0;
  std::uint64_t last_reap_ns_ = 0;
  std::uint64_t reap_period_ns_ = 0;
  std::uint64_t readers_reaped_ = 0;
  bool loan_out_ = false;
  bool handle_gone_ = false;  // the Producer is gone; the outstanding loan ends the core
  bool holds_lease_ = false;
  // The channel's socket, name lock and name defence (after the memory: destroyed first).
  std::unique_ptr<ChannelServer> server_;
};

class ReaderCore {
 public:
  // The construction path of Reader::attach: the frame pool, a reader entry (free, or one whose
  // owner the kernel declared dead), the cursor at the newest frame present. Throws Error
  // (too_many_readers naming the entries' pids). The returned core is owned by one handle.
  static ReaderCore* attach(std::string_view name, const ReaderOptions& options,
                            const OpenedSegment& opened);
  // The Reader's end of ownership: ends the core here when no frame is held, else the last
  // frame's release hands it to a library thread.
  static void drop_handle(ReaderCore* core) noexcept;

  // Ends the core in place (the detach). Only drop_handle, the retirement thread and a failed
  // attach call it.
  ~ReaderCore();
  ReaderCore(const ReaderCore&) = delete;
  ReaderCore& operator=(const ReaderCore&) = delete;

  [[nodiscard]] Result<Frame> try_read() noexcept;
  [[nodiscard]] Result<Frame> read(std::uint64_t timeout_ns) noexcept;
  // Frame::release: gives the frame back and drops its reference (never locks, never detaches).
  void release(Frame& frame, CudaStream stream) noexcept;
  [[nodiscard]] Status wait_on(std::uint32_t slot, CudaStream stream) noexcept;
  bool evicted() const noexcept;
  bool forked() const noexcept;
  // Producer liveness for a waiting reader: false when dead or closed.
  bool producer_alive() noexcept;

  const std::string& name() const noexcept { return name_; }
  const ReaderOptions& options() const noexcept { return options_; }
  // How often a waiting reader probes the producer (options.producer_probe, at least 1 ms).
  std::uint64_t probe_period_ns() const noexcept {
    return static_cast<std::uint64_t>(
        std::max<std::int64_t>(1'000'000, options_.producer_probe.count()));
  }
  const Geometry& geometry() const noexcept { return view_.geo; }
  std::uint32_t index() const noexcept { return cursor_.index; }
  bool observer() const noexcept { return observer_; }
  std::uint64_t observer_dropped() const noexcept { return cursor_.observer_dropped; }
  std::uint32_t held() const noexcept { return frames_held(held_.load(std::memory_order_relaxed)); }
  std::uint64_t overruns() const noexcept { return cursor_.overruns; }
  std::uint64_t epoch() const noexcept { return cursor_.epoch; }
  // Why following the name failed (empty: it did not; reader/follow.hpp).
  const std::string& follow_error() const noexcept { return follow_error_; }

 private:
  friend class Retirer;
  friend class Follow;  // reader/follow.cpp: a core that follows the name hands its cursor on
  static constexpr std::uint32_t kHandleBit = ~kHeldFramesMask;

  ReaderCore(std::string_view name, const ReaderOptions& options, const OpenedSegment& opened);

  std::string name_;
  ReaderOptions options_;
  std::shared_ptr<Mapping> mapping_;
  SegmentView view_;
  std::unique_ptr<ReaderPool> pool_;
  CursorState cursor_;
  std::uint64_t instance_id_ = 0;
  std::uint64_t fork_gen_ = 0;
  std::atomic<std::uint32_t> held_{kHandleBit};  // frames held | kHandleBit while the Reader lives
  bool holds_lease_ = false;
  // Observers (ring/observe.hpp): no entry; frames are copies in this buffer (frame_bytes, then
  // metadata_bytes), allocated at attach so that no read allocates.
  bool observer_ = false;
  std::unique_ptr<std::byte[]> observer_bytes_;
  ObserverBuffer observer_buffer_;
  ReaderCore* next_retired_ = nullptr;  // the Retirer's list
  std::uint64_t follow_next_ns_ = 0;    // reader/follow.hpp: next look at the name
  std::string follow_error_;            // why following the name failed (empty: it did not)
};

// Reader::attach: attaches a ReaderCore to the object now named `name` (Reader::attach; the caller
// owns the one handle of the returned core: ReaderCore::drop_handle ends it).
ReaderCore* attach_reader_core(std::string_view name, const ReaderOptions& options);

// Producer::create: validates the name and the configuration, then ProducerCore::create.
std::unique_ptr<ProducerCore> create_producer_core(std::string_view name,
                                                   const ChannelConfig& config);

// Waits (bounded: 2 s) until the readers of this process whose last frame was released so far
// are detached, so that a snapshot taken after the release sees their entries free, as program
// order suggests (inspect() calls it first). Slow path; returns at once when nothing is pending.
void finish_retired_readers() noexcept;

}  // namespace ipcring::detail
