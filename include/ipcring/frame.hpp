// frame.hpp — Loan (a slot the producer is filling) and Frame (a slot a reader holds).
// Both are move-only RAII views of a buffer in the channel's frame pool: nothing is copied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "ipcring/result.hpp"
#include "ipcring/tensor.hpp"

struct CUstream_st;  // cudaStream_t without including CUDA headers

namespace ipcring {

using CudaStream = CUstream_st*;

namespace detail {
class ProducerCore;
class ReaderCore;

// What a Loan describes: written by the producer's core, read by the Loan's accessors.
struct LoanFields {
  std::byte* data = nullptr;
  std::size_t capacity = 0;
  std::uint64_t sequence = 0;
  std::uint32_t slot = 0;
};

// What a Frame describes: filled by the reader's cursor (src/ring/cursor.cpp) from the claimed
// slot's descriptor and frame header, read by the Frame's accessors.
struct FrameFields {
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;
  std::uint64_t timestamp_ns = 0;
  std::uint64_t generation = 0;  // slot generation of the claim
  std::uint64_t skipped = 0;
  std::uint64_t acquired_ns = 0;
  std::uint64_t capture_time_ns = 0;
  std::uint32_t slot = 0;
  std::uint32_t metadata_bytes = 0;
  const std::byte* metadata = nullptr;
  bool has_tensor = false;
  bool tensor_invalid = false;
  TensorDesc tensor;
};
}  // namespace detail

// ChannelConfig::metadata_bytes: its default and its largest value.
inline constexpr std::size_t kDefaultMetadataBytes = 256;
inline constexpr std::size_t kMaxMetadataBytes = 4096;

// A slot the producer owns for writing. Obtained from Producer::loan(), consumed by
// Producer::publish(). Dropping a Loan without publishing returns its slot to the pool.
class Loan {
 public:
  Loan() = default;
  Loan(Loan&& other) noexcept;
  Loan& operator=(Loan&& other) noexcept;
  Loan(const Loan&) = delete;
  Loan& operator=(const Loan&) = delete;
  ~Loan();

  // Host backend: a pointer into shared memory. CUDA backend: a device pointer.
  std::byte* data() const noexcept { return fields_.data; }
  std::size_t capacity() const noexcept { return fields_.capacity; }
  // The sequence number that publish() will give this frame.
  std::uint64_t sequence() const noexcept { return fields_.sequence; }
  std::uint32_t slot() const noexcept { return fields_.slot; }
  bool valid() const noexcept { return core_ != nullptr; }

  // Up to metadata_capacity() bytes (ChannelConfig::metadata_bytes) of user metadata (format,
  // sensor id ...) published with the frame. Returns false when `bytes` is too long (nothing is
  // written then). A later call replaces the earlier one.
  bool set_metadata(std::span<const std::byte> bytes) noexcept;
  std::size_t metadata_capacity() const noexcept;

  // What the frame's bytes are (element type, shape, strides), published with the frame and read
  // with Frame::tensor(). Returns false (nothing is set) when the descriptor is not valid or does
  // not fit the frame capacity (tensor_fits). Publish at least tensor_span() bytes: a reader
  // checks the descriptor against the published size.
  bool set_tensor(const TensorDesc& tensor) noexcept;
  // When the frame's content was captured, on whatever clock the producer chooses (0 = not set);
  // published beside the publish time (Frame::timestamp_ns).
  void set_capture_time_ns(std::uint64_t ns) noexcept;

 private:
  friend class Producer;
  friend class detail::ProducerCore;
  void reset() noexcept;

  // The producer's core, kept alive while this loan is out (the core counts its loans, so the
  // loan costs no shared_ptr copy); nullptr when empty or published.
  detail::ProducerCore* core_ = nullptr;
  detail::LoanFields fields_;
};

// A published frame held by one reader. While it is held, the producer cannot reuse its buffer.
// An observer's Frame (ReaderOptions::observer) is a copy in the observer's own buffer instead:
// data() and metadata() point there, and the producer's buffer is not held.
// release() (or the destructor) gives it back; release is idempotent. A Frame may be released from
// any thread, and may outlive the Reader object that read it (the reader entry stays leased until
// its last frame is released; that release only hands the detach to a library thread, so release
// stays cheap and never locks; inspect() in this process waits for it).
class Frame {
 public:
  Frame() = default;
  Frame(Frame&& other) noexcept;
  Frame& operator=(Frame&& other) noexcept;
  Frame(const Frame&) = delete;
  Frame& operator=(const Frame&) = delete;
  ~Frame();

  // Host backend: a read-only mapping of the producer's buffer. CUDA backend: a device pointer
  // (wait_on() a stream before reading it there). nullptr when not held (released, or inherited by
  // a fork child, which holds nothing of its parent's).
  const std::byte* data() const noexcept;
  std::size_t size() const noexcept { return fields_.size; }
  std::uint64_t sequence() const noexcept { return fields_.sequence; }
  std::uint64_t epoch() const noexcept { return fields_.epoch; }
  std::uint64_t timestamp_ns() const noexcept { return fields_.timestamp_ns; }  // CLOCK_MONOTONIC
  std::uint32_t slot() const noexcept { return fields_.slot; }
  // Frames this reader skipped between the previous frame it read and this one (sequential policy:
  // frames lost to overruns; latest policy: older frames deliberately skipped).
  std::uint64_t skipped() const noexcept { return fields_.skipped; }
  // The producer's metadata (Loan::set_metadata), in the control segment: valid while held.
  std::span<const std::byte> metadata() const noexcept {
    return {fields_.metadata, fields_.metadata == nullptr ? 0 : fields_.metadata_bytes};
  }
  // The producer's tensor descriptor, checked against size() at read time: std::nullopt when the
  // producer set none or set one that does not describe this frame (tensor_invalid()).
  std::optional<TensorDesc> tensor() const noexcept {
    return fields_.has_tensor ? std::optional<TensorDesc>(fields_.tensor) : std::nullopt;
  }
  // True when the frame carried a tensor descriptor that failed validation (corrupt or hostile
  // producer, or a publish shorter than the tensor): the bytes are delivered, the tensor is not.
  bool tensor_invalid() const noexcept { return fields_.tensor_invalid; }
  // Loan::set_capture_time_ns of the producer; 0 when it set none.
  std::uint64_t capture_time_ns() const noexcept { return fields_.capture_time_ns; }
  bool held() const noexcept;  // false after release and in a fork child

  // Gives the frame back. Idempotent.
  void release() noexcept;

  // CUDA backend: make `stream` wait (on the GPU) until the producer's writes to this frame are
  // done; release(stream) queues this reader's release fence (a write of its fence word) on
  // `stream`, so the producer reuses the buffer only after the reader's queued kernels finished.
  // Both are no-ops on the host backend. wait_on returns Status::producer_gone when the frame's
  // producer died or was replaced before its writes to the frame were known complete: release the
  // frame unread (its bytes may be torn). On the CUDA VMM path (Reader::cuda_path() == vmm) a
  // producer that dies after wait_on queued the wait can never finish the frame; the reader then
  // ends the wait so `stream` does not block forever, and the work queued after it sees a torn
  // frame: a later wait_on of the same frame returns producer_gone, and the reader logs it.
  [[nodiscard]] Status wait_on(CudaStream stream) noexcept;
  void release(CudaStream stream) noexcept;

 private:
  friend class Reader;
  friend class detail::ReaderCore;

  // The reader's core, kept alive while this frame is held (the core counts its frames, so a
  // frame costs no shared_ptr copy); nullptr when released.
  detail::ReaderCore* core_ = nullptr;
  detail::FrameFields fields_;
};

}  // namespace ipcring
