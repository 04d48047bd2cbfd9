// config.hpp — how a channel is shaped (producer side) and how a reader reads it.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ipcring {

// Where a channel's frames live. A CUDA channel's buffers reach its readers one of two ways
// (CudaPath, docs/cuda.md "Two ways to share a buffer"): `cuda` lets the producer choose from its
// device's attributes (CUDA VMM where the device exports VMM memory as file descriptors, which
// works between containers and on integrated GPUs; legacy CUDA IPC otherwise); `cuda_legacy` and
// `cuda_vmm` pin one, and a device that cannot do the pinned one is refused at create with the
// reason (never a silent fallback). Channels report Backend::cuda for all three; the path taken is
// Snapshot::cuda_path and Reader::cuda_path().
enum class Backend : std::uint32_t { host = 1, cuda = 2, cuda_legacy = 3, cuda_vmm = 4 };
const char* to_string(Backend backend) noexcept;  // "host", "cuda", "cuda_legacy", "cuda_vmm"
constexpr bool is_cuda(Backend backend) noexcept {
  return backend == Backend::cuda || backend == Backend::cuda_legacy ||
         backend == Backend::cuda_vmm;
}

// How a CUDA channel's frame buffers reach its readers.
enum class CudaPath : std::uint32_t {
  none = 0,        // a host channel
  legacy_ipc = 1,  // cudaIpcGetMemHandle handles in the control segment, IPC write-done events
  vmm = 2,         // CUDA VMM allocations sent as file descriptors over the channel's socket,
                   // write-done as a stream-written word in the control segment
};
const char* to_string(CudaPath path) noexcept;  // "none", "legacy_ipc", "vmm"

struct ChannelConfig {
  // The defaults satisfy the sizing rule below (8 >= 4 * 1 + 2).
  std::uint32_t slots = 8;        // frame buffers in the pool, 1..1024
  std::uint32_t max_readers = 4;  // reader entries, 1..32
  std::uint32_t max_held = 1;     // frames one reader may hold at once, 1..64
  std::size_t frame_bytes = 0;    // capacity of each frame buffer, > 0
  Backend backend = Backend::host;
  int cuda_device = 0;  // CUDA ordinal in the producer's process
  // Permission bits of the channel's socket and lock file (0600, or 0660 to let a group-shared
  // directory's members connect); who receives the memory is decided by the policy below.
  unsigned mode = 0600;
  // The channel directory (ipcring/naming.hpp): empty means $IPCRING_DIR, else the user's private
  // /dev/shm/ipcring-<uid>.
  std::string dir{};
  // Who may read (docs/protocol.md, "Trust"): a connecting process is handed the channel's memory
  // when its uid is the producer's, or 0, or in allow_uids, or when its primary or a supplementary
  // group is in allow_gids or is the group of a group-shared channel directory. Everyone else gets
  // a refusal naming its uid, and no descriptor.
  std::vector<std::uint32_t> allow_uids{};
  std::vector<std::uint32_t> allow_gids{};
  // Dead readers are reaped when a loan finds no free slot and at least this often while the
  // producer loans frames.
  std::chrono::nanoseconds reap_period = std::chrono::milliseconds(100);
  // User metadata each frame can carry (Loan::set_metadata), 0..4096 bytes; it lives in the
  // control segment beside each slot's frame header.
  std::uint32_t metadata_bytes = 256;

  // The sizing rule: with slots >= max_readers * max_held + 2, loan() never fails, whatever the
  // readers do.
  bool loan_never_fails() const noexcept {
    return std::uint64_t{slots} >= std::uint64_t{max_readers} * max_held + 2;
  }
};

enum class ReadPolicy : std::uint32_t {
  latest = 0,      // each read returns the newest frame not yet read; older ones are skipped
  sequential = 1,  // each read returns the next frame in order; frames lost to the producer
                   // lapping this reader are counted as overruns
};
const char* to_string(ReadPolicy policy) noexcept;  // "latest", "sequential"

struct ReaderOptions {
  ReadPolicy policy = ReadPolicy::latest;
  // read(timeout) spins this long polling for a frame before it sleeps on the futex.
  std::chrono::nanoseconds spin = std::chrono::microseconds(0);
  // While sleeping, the producer's lease is probed this often, so a dead producer is reported as
  // Status::producer_gone within about this time.
  std::chrono::nanoseconds producer_probe = std::chrono::milliseconds(100);
  // Reader::attach waits up to this long for the channel to exist and be ready (its producer not
  // started yet, or still creating it), retrying every few milliseconds; when the wait runs out it
  // throws the last not_found (or not_ready), saying how long it waited. Other refusals are thrown
  // at once. 0: fail at once. Negative: Errc::invalid_argument.
  std::chrono::nanoseconds wait_for_channel = std::chrono::nanoseconds(0);
  // Host backend: map the frame pool copy-on-write instead of read-only. A write through a
  // frame's pointer then changes this process's private copy of the touched pages only (never
  // the producer's buffer or other readers' view) instead of faulting, and release discards the
  // copies (a system call per release: a /proc/self/pagemap read, and madvise when a page was
  // written). Used by the Python module, whose tensors
  // cannot be marked read-only.
  bool copy_on_write = false;
  // Read as an observer (docs/observers.md): take no reader entry and set no bit in any slot, so
  // the channel's readers and its producer are not disturbed, and attach works when every entry
  // is taken. Each read copies the frame (payload, header, metadata) into a buffer the Reader
  // allocated at attach, then re-checks that the slot still holds that publication; a copy
  // overwritten meanwhile is dropped and counted (Reader::observer_dropped()). An observer holds
  // at most one frame (Status::max_held while it does); read(timeout) polls the channel's wake
  // word in sleeps of at most 1 ms. Host backend only (CUDA: Errc::unsupported at attach).
  bool observer = false;
  // The channel directory, as ChannelConfig::dir.
  std::string dir{};
  // Whose channel to read (docs/protocol.md, "Trust"): the producer that answers on the channel's
  // socket is trusted when its uid is this process's, the directory's owner, 0, or in trust_uids,
  // or when it is a member of a group-shared directory's group; on first attach and after every
  // follow. Any other producer is refused, naming its uid.
  std::vector<std::uint32_t> trust_uids{};
};

}  // namespace ipcring
