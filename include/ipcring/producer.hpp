// producer.hpp — the one writer of a channel.
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
class ProducerCore;
}

// Producer: creates (or takes over) a channel and publishes frames into it. Move-only. One
// Producer object must be used by one thread at a time; loan/publish/reap are not thread-safe
// against each other.
//
// Takeover: when the channel exists and its previous producer is dead, create() takes it over
// automatically and starts a new epoch; attached readers keep their leases and read on. A live
// producer makes create() throw Errc::producer_exists naming its pid, and also while its object's
// name is missing from /dev/shm (then naming its liveness token, an abstract unix socket).
//
// Destruction (a clean exit) marks the channel closed, wakes the readers (they get
// Status::producer_gone) and unlinks the channel's shared-memory objects; processes that still
// map them keep their mappings until they detach.
class Producer {
 public:
  static Producer create(std::string_view name, const ChannelConfig& config);  // throws Error

  Producer(Producer&&) noexcept;
  Producer& operator=(Producer&&) noexcept;
  Producer(const Producer&) = delete;
  Producer& operator=(const Producer&) = delete;
  ~Producer();

  // Claims a free slot for writing. Non-blocking: Status::no_free_slot when every slot is held
  // (cannot happen when config.loan_never_fails()), Status::loan_outstanding when a loan is
  // already out. Reaps dead readers first when no slot is free, and periodically.
  [[nodiscard]] Result<Loan> loan() noexcept;
  // Like loan(), retrying (reaping between tries) until `timeout` runs out.
  [[nodiscard]] Result<Loan> loan(std::chrono::nanoseconds timeout) noexcept;
  // CUDA backend: the loan's buffer will be written by work queued on `stream`. Readers that held
  // the buffer may still have GPU work reading it (they released it with Frame::release(stream));
  // these loans make `stream` wait for that work on the GPU (cuStreamWaitValue64 on the readers'
  // release fence words) instead of reporting the slot as not free, so the CPU never waits. The
  // plain loan() hands out a buffer only when no GPU work of a reader can still read it (otherwise
  // Status::no_free_slot), so any stream, or a synchronous copy, may write it. Host backend: same
  // as loan() / loan(timeout).
  [[nodiscard]] Result<Loan> loan(CudaStream stream) noexcept;
  [[nodiscard]] Result<Loan> loan(std::chrono::nanoseconds timeout, CudaStream stream) noexcept;

  // Publishes the loan's first `bytes` bytes and returns the frame's sequence number (>= 1). Never
  // locks, allocates or makes a system call unless a reader sleeps in read().
  // Throws Error(Errc::invalid_argument) only for a caller error, checked before anything is
  // touched: a loan of another producer, empty or already published, or bytes > capacity.
  // Every other failure returns 0 (no frame has sequence 0) without throwing, and leaves the loan
  // with the caller (it may retry, or drop it): in a forked child (Status::forked), or when the
  // backend fails (CUDA: recording the write-done event; Status::backend_error). try_publish()
  // says which. (Earlier versions threw Errc::forked and Errc::cuda_error for these two.)
  std::uint64_t publish(Loan&& loan, std::size_t bytes);
  // CUDA backend: records the slot's write-done event on `stream` (the stream that wrote the
  // frame) before publishing. Same as publish(loan, bytes) on the host backend.
  std::uint64_t publish(Loan&& loan, std::size_t bytes, CudaStream stream);
  // publish() that never throws: Status::ok (the frame's sequence in *sequence when given, the
  // loan consumed), Status::invalid_loan for the caller errors publish() throws for,
  // Status::forked or Status::backend_error (the loan unchanged).
  [[nodiscard]] Status try_publish(Loan& loan, std::size_t bytes, CudaStream stream = nullptr,
                                   std::uint64_t* sequence = nullptr) noexcept;

  // Probes every reader lease; clears the bits and frees the entries of dead readers. Returns how
  // many were reaped.
  std::size_t reap_dead_readers() noexcept;

  std::string_view name() const noexcept;
  // The channel's epoch: one more than the previous producer's of this name (1 for the first).
  std::uint64_t epoch() const noexcept;
  const ChannelConfig& config() const noexcept;

  // Name defence (docs/operations.md, "When the channel's names are removed"): the producer's
  // socket thread checks once per reap period that the channel's socket and lock file are still
  // its own. When one is gone (RemoveIPC, a cleanup script) it binds a new socket or takes a new
  // lock file; the memory never moves, so readers notice nothing. owns_name() is false for good
  // when another producer took the name in that window (it keeps publishing to the readers
  // attached); the hot path never waits for any of this.
  bool owns_name() const noexcept;
  std::uint64_t name_restores() const noexcept;  // how many times the name was restored

 private:
  explicit Producer(detail::ProducerCore* core) noexcept;
  // Owned (ProducerCore::drop_handle); an outstanding Loan keeps it until the loan is dropped.
  detail::ProducerCore* core_ = nullptr;
};

}  // namespace ipcring
