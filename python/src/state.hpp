// state.hpp — the C++ objects behind the Python classes, and who keeps what alive.
//
// Ownership (arrows: "keeps alive"):
//
//   Producer (py) ──> ProducerState ──> ipcring::Producer ──> ProducerCore
//   Loan (py) ──> LoanState ──> ipcring::Loan ──> ProducerCore
//   loan views (memoryview, ndarray, DLPack tensor) ──> LoanExport ──> LoanState
//
//   Reader (py) ──> ReaderState ──> ipcring::Reader ──> ReaderCore (lease, mapping)
//   Frame (py) ──> FrameHold ──> ipcring::Frame ──> ReaderCore
//   frame views (memoryview, ndarray, DLPack tensor) ──> FrameView or DLPack export ──> FrameHold
//
// A FrameHold is the one place a slot is held: the slot is released when the last reference to
// it goes, whichever that is (the Frame, or the last view). Frame.release() drops the Frame's own
// reference only, so no view ever points at a buffer the producer may rewrite.
//
// A LoanState counts its live views (LoanExport objects); publish() refuses (BufferError) while a
// view of the loan is alive, so nothing can write into a frame after it was published.
//
// Threads: the C++ Producer and Reader are not thread-safe; each state carries a mutex that
// serialises calls into them, taken with the GIL released when a call may block. A mutex is never
// held while acquiring the GIL (no lock-order inversion). FrameHold and LoanState hold no Python
// objects, so DLPack deleters may destroy them on any thread without the GIL.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "ipcring/ipcring.hpp"

namespace ipcring::python {

// Where the bytes of a frame or loan live, in DLPack's terms. Host frames are kDLCPU; CUDA frames
// and loans are kDLCUDA with the device ordinal the pointer is valid on in this process (the
// reader's current device at attach; the producer's cuda_device).
enum class DeviceKind { cpu, cuda };
struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
};

struct ProducerState {
  std::mutex mutex;                  // serialises calls into `producer` and drops of its loans
  std::optional<Producer> producer;  // empty once closed
  std::string name;
  Backend backend = Backend::host;
  Device device;
};

struct LoanState {
  explicit LoanState(std::shared_ptr<ProducerState> p) : producer(std::move(p)) {}
  LoanState(const LoanState&) = delete;
  LoanState& operator=(const LoanState&) = delete;
  ~LoanState() {
    if (loan.valid()) {
      std::lock_guard lock(producer->mutex);
      Loan dropped = std::move(loan);  // returns the slot to the pool
    }
  }

  std::shared_ptr<ProducerState> producer;
  Loan loan;                    // guarded by producer->mutex; empty once published
  std::atomic<int> exports{0};  // live buffer and DLPack views
  // CUDA loans: the stream a consumer said it writes on (loan.__dlpack__(stream), loan.tensor()
  // with torch's current stream); publish() records the write-done event there unless told
  // otherwise (none given: the legacy default stream).
  std::atomic<std::uintptr_t> write_stream{0};
  std::atomic<bool> write_stream_set{false};
};

// A CUDA stream as DLPack and __cuda_array_interface__ name it: 1 the legacy default stream (what
// ipcring's C++ API calls nullptr), 2 the per-thread default stream, else a cudaStream_t.
inline CudaStream to_cuda_stream(std::uintptr_t s) noexcept {
  return s == 1 ? nullptr : reinterpret_cast<CudaStream>(s);
}

struct FrameHold {
  FrameHold() = default;
  FrameHold(const FrameHold&) = delete;
  FrameHold& operator=(const FrameHold&) = delete;
  // The last reference gone (Frame.release(), the end of a `with`, the DLPack deleter or the
  // death of the last view): release the slot; on a CUDA channel the release fence is queued on
  // the stream the consumer used (release_stream), so the producer reuses the buffer only after
  // the consumer's queued GPU work on it, without a CPU sync. Host frames ignore the stream.
  ~FrameHold() { frame.release(to_cuda_stream(stream_for_release())); }

  // Binds the consumer's stream; 2 (the per-thread default stream) names the calling thread's.
  void set_release_stream(std::uintptr_t s) noexcept {
    release_stream.store(s, std::memory_order_relaxed);
    if (s == 2) stream_thread.store(std::this_thread::get_id(), std::memory_order_relaxed);
    release_stream_set.store(true, std::memory_order_release);
  }
  // The stream to fence on, resolved on the releasing thread. Stream 2 means the per-thread
  // default stream of whoever calls CUDA with it, and the last reference may go on another thread
  // (a DLPack deleter, the garbage collector): there it names that thread's stream, not the
  // consumer's. So off the thread that named it, the fence goes on the legacy default stream
  // instead, which the runtime orders after the work queued before it on every blocking stream of
  // the context, the consumer's per-thread default stream included.
  std::uintptr_t stream_for_release() const noexcept {
    const std::uintptr_t s = release_stream.load(std::memory_order_acquire);
    if (s == 2 && stream_thread.load(std::memory_order_relaxed) != std::this_thread::get_id()) {
      return 1;
    }
    return s;
  }

  Frame frame;
  // The consumer's stream (DLPack/CUDA array interface numbering; 1: legacy default). Set by the
  // first export that names one, or by Frame.release(stream=...) (set_release_stream).
  std::atomic<std::uintptr_t> release_stream{1};
  std::atomic<bool> release_stream_set{false};
  std::atomic<std::thread::id> stream_thread{};  // the thread that named stream 2
  // __cuda_array_interface__ was exported before any stream was bound: the dict said stream 1 by
  // our choice, and its consumer may run on a stream the legacy one does not order (a
  // non-blocking CuPy or Numba stream). Frame.release() then needs the consumer's stream.
  std::atomic<bool> interface_unbound{false};
};

struct ReaderState {
  std::mutex mutex;              // serialises calls into `reader`
  std::optional<Reader> reader;  // empty once closed
  std::string name;
  Backend backend = Backend::host;
  Device device;
};

// Python Frame: the descriptor, copied at read time (readable after release), and the hold.
struct PyFrame {
  std::shared_ptr<FrameHold> hold;  // null once this object released it
  std::weak_ptr<FrameHold> watch;   // tells whether views still hold the slot
  std::string channel;
  const std::byte* data = nullptr;
  std::size_t size = 0;
  std::uint64_t sequence = 0;
  std::uint64_t epoch = 0;
  std::uint64_t timestamp_ns = 0;
  std::uint64_t skipped = 0;
  std::uint32_t slot = 0;
  std::string metadata;
  std::optional<TensorDesc> tensor;   // validated by the reader against `size`
  bool tensor_invalid = false;        // the producer's descriptor failed validation
  std::uint64_t capture_time_ns = 0;  // 0: not set
  Device device;
};

// Python Loan.
struct PyLoan {
  std::shared_ptr<LoanState> state;  // null once published or discarded
  std::string channel;
  std::byte* data = nullptr;
  std::size_t capacity = 0;
  std::uint64_t sequence = 0;
  std::uint32_t slot = 0;
  bool published = false;
  std::optional<TensorDesc> tensor;  // set_tensor / ndarray / tensor: publish's default size
  Device device;
};

}  // namespace ipcring::python
