// reader.hpp — a consumer of a channel.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"

namespace ipcring {

namespace detail {
class ReaderCore;
}  // namespace detail

// Reader: takes one entry of the channel's reader table (a lease held by a library thread, so it
// survives the thread that called attach) and reads frames; an observer (ReaderOptions::observer,
// docs/observers.md) takes no entry and reads copies instead. Move-only. One Reader must be used by
// one thread at a time; the Frames it returns may be released from any thread.
class Reader {
 public:
  // Throws Error (Errc::not_found when there is no such channel, after waiting up to
  // options.wait_for_channel for it to appear).
  static Reader attach(std::string_view name, ReaderOptions options = {});

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader();

  // Non-blocking. Status::no_frame when nothing newer than the last frame read was published;
  // Status::max_held when this reader already holds max_held frames; Status::producer_gone once
  // per producer epoch that ended (the producer closed, or a new producer took over);
  // Status::evicted when this reader's lease was taken away (it must attach again).
  //
  // Following the name: when the producer has ended (closed, or died) and the channel's name now
  // refers to a new object (a clean restart, or a removal and re-creation), the reader attaches to
  // it by itself: producer_gone is reported once for the ended producer, then the new producer's
  // frames are returned (their geometry may differ: frame_bytes() and max_held() follow). Frames
  // still held stay valid until released. The name is looked at only while no new frame comes
  // and the producer looks gone, at most once per options.producer_probe. A new object this
  // reader cannot attach to (every entry taken, permissions, layout version) gives
  // Status::evicted once with follow_error() saying why; the reader stays on the ended channel
  // and looks again (it need not be replaced).
  [[nodiscard]] Result<Frame> try_read() noexcept;
  // Blocking: spins for options.spin, then sleeps on the channel's futex. Returns
  // Status::timeout when `timeout` runs out. Status::producer_gone when the producer is found dead
  // or closed while waiting (probed every options.producer_probe) — once per epoch, like
  // try_read(): later calls wait for a new producer to take over (its epoch change is reported as
  // producer_gone too, then its frames are returned).
  [[nodiscard]] Result<Frame> read(std::chrono::nanoseconds timeout) noexcept;

  // Entry in the reader table (bit in slot masks); kObserverIndex for an observer, which has none.
  std::uint32_t index() const noexcept;
  static constexpr std::uint32_t kObserverIndex = 0xffffffffU;
  bool observer() const noexcept;  // ReaderOptions::observer
  // Observers: copies dropped so far because the producer overwrote the slot while they were
  // copied (the re-check failed). Always 0 for a reader that holds an entry.
  std::uint64_t observer_dropped() const noexcept;
  std::uint32_t held() const noexcept;      // frames held of the channel object it reads now
  std::uint64_t overruns() const noexcept;  // sequential policy: frames lost so far
  std::uint64_t epoch() const noexcept;     // producer epoch last seen
  std::string_view name() const noexcept;
  std::size_t frame_bytes() const noexcept;
  std::uint32_t max_held() const noexcept;
  Backend backend() const noexcept;     // where the channel's frames live (host or cuda)
  CudaPath cuda_path() const noexcept;  // CUDA channels: legacy_ipc or vmm; none for host
  // Why following the channel to a new object failed (empty when it did not): the reader then
  // got Status::evicted once and stays on the ended channel, looking again every producer_probe.
  std::string_view follow_error() const noexcept;

 private:
  explicit Reader(detail::ReaderCore* core) noexcept;
  // Shared with the Frames it returned (counted in the core, no shared_ptr): the core ends with
  // the last of them.
  detail::ReaderCore* core_ = nullptr;
};

}  // namespace ipcring
