// pool.hpp — the narrow interface between the ring protocol and a frame pool (host or CUDA).
//
// The ring decides which slot a loan or a frame uses; the pool turns a slot into a buffer and
// carries the backend's ordering (CUDA events). Hot-path members are noexcept and must not
// allocate, lock or make a system call (CUDA API calls excepted: they are the backend's work).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// Producer side: owns the frame buffers of one channel.
class ProducerPool {
 public:
  virtual ~ProducerPool() = default;
  // Buffer of `slot` for writing (host pointer or device pointer).
  virtual std::byte* buffer(std::uint32_t slot) noexcept = 0;
  // Called after the slot was claimed for writing and before the loan is handed out. CUDA: the
  // release fences of the readers that last held the slot must be complete before the buffer is
  // written: with a `stream` (Producer::loan(stream)), make `stream` wait for the ones still
  // running, on the GPU; without one, return Status::no_free_slot while any is still running.
  virtual Status prepare_write(std::uint32_t slot, CudaStream stream) noexcept {
    (void)slot;
    (void)stream;
    return Status::ok;
  }
  // Called after the payload is written and before the slot is published as frame `sequence`.
  // CUDA: record the slot's write-done signal on `stream` (legacy IPC: the IPC event; VMM: the
  // stream's write of `sequence` into the slot's `filled` word).
  virtual Status before_publish(std::uint32_t slot, CudaStream stream,
                                std::uint64_t sequence) noexcept {
    (void)slot;
    (void)stream;
    (void)sequence;
    return Status::ok;
  }
  // CUDA VMM: one descriptor per frame buffer, in slot order, for the channel's socket to hand to
  // every reader it lets in (the pool keeps them open for its life; the server sends its own
  // duplicates); empty for every other pool.
  virtual std::vector<int> device_descriptors() const { return {}; }
  // The producer's close, after the epoch was marked closed and before the pool is destroyed:
  // waits (bounded) for what still uses the buffers and decides what to free. Returns true when
  // work of ours may still be about to write what readers wait on (CUDA VMM: a fill whose
  // write-done word is not written yet): the caller then keeps its lease until the process ends,
  // so that end shows as OWNER_DIED to readers, whose waits it then ends (docs/cuda.md, V3).
  // Idempotent; the destructor calls it when nobody did.
  virtual bool close() noexcept { return false; }
};

// Reader side: maps buffers of one channel lazily.
class ReaderPool {
 public:
  virtual ~ReaderPool() = default;
  // Buffer of `slot` as published in `epoch` by producer instance `producer_instance`; nullptr
  // when it cannot be mapped (the caller releases the slot and reports Status::backend_error).
  virtual const std::byte* buffer(std::uint32_t slot, std::uint64_t epoch,
                                  std::uint64_t producer_instance) noexcept = 0;
  // CUDA: make `stream` wait on the slot's write-done event.
  virtual Status wait_on(std::uint32_t slot, CudaStream stream) noexcept {
    (void)slot;
    (void)stream;
    return Status::ok;
  }
  // CUDA: record this reader's release fence for `slot` on `stream` (nullptr: on the legacy
  // default stream, which orders it after the reader's work on the legacy stream and on blocking
  // streams). Called before the reader's bit is cleared in the slot word.
  virtual void release_fence(std::uint32_t slot, std::uint32_t reader, CudaStream stream) noexcept {
    (void)slot;
    (void)reader;
    (void)stream;
  }
  // Called once the reader holds its table entry `reader` (the bit of its release fences).
  virtual void attached(std::uint32_t reader) noexcept { (void)reader; }
  // Called by the reading thread when a read found the producer ended (closed, dead or
  // replaced), at the report and at every later read that finds no frame: the CUDA pool closes the
  // mappings no frame holds and no kernel of ours still reads, so a closing producer may free them.
  virtual void producer_ended() noexcept {}
};

// Factories. `view` is the validated control segment (its fd is the channel's object, whose
// frames range the host pool maps); `name` the channel name (for messages). They throw Error.
struct PoolRequest {
  std::string name;
  SegmentView view;
  unsigned mode = 0600;
  int cuda_device = 0;
  bool create = false;         // producer: new memory (always, since layout 6)
  bool copy_on_write = false;  // host reader: ReaderOptions::copy_on_write
  // Producer: the owner's reaper (probe every reader lease, reap the dead ones: their backend work
  // runs in the reaper's hook, e.g. reader_fences_reaped). A pool may call it from its own thread
  // while it waits for readers (the CUDA pool's watchdog); empty: never called.
  std::function<void()> reap;
  // Producer: what the configuration asked for (Backend::cuda chooses the CUDA path; see
  // cuda_capability.hpp choose_path).
  Backend backend = Backend::host;
  // Reader of a CUDA VMM channel: the frame buffers' descriptors from the handout, in slot order
  // (not owned: the pool duplicates what it keeps).
  std::vector<int> device_fds;
  // Reader: true when the channel's producer of the given epoch is gone for good (lease.hpp,
  // producer_lease_dead); the CUDA VMM pool asks it while its streams wait on a fill
  // (cuda_reader_pool.cpp). Empty: never asked.
  std::function<bool(std::uint64_t)> producer_died;
  // Reader: the producer's pid as the kernel gave it on the channel's socket, translated into
  // this process's PID namespace; 0 when it lives in a namespace we cannot see (legacy CUDA IPC
  // then cannot work). -1: unknown (not received over the socket).
  int producer_pid = -1;
};
std::unique_ptr<ProducerPool> make_host_producer_pool(const PoolRequest& request);
std::unique_ptr<ReaderPool> make_host_reader_pool(const PoolRequest& request);
std::unique_ptr<ProducerPool> make_cuda_producer_pool(const PoolRequest& request);
std::unique_ptr<ReaderPool> make_cuda_reader_pool(const PoolRequest& request);

}  // namespace ipcring::detail
