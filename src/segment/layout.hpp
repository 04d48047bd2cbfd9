// layout.hpp — the shared-memory ABI of an ipcring channel. Everything that lives in shared memory
// is declared here and nowhere else.
//
// A channel's memory is two sealed memfds that have no name; the producer hands them to the
// readers its policy allows over the channel's socket (docs/protocol.md, "Trust"):
//   the control segment, [0, segment_bytes)     this file's structs, mapped read-write by the
//                                               producer, every reader and the inspector (sealed
//                                               against shrinking and growing);
//   the frame pool, frames_segment_bytes        the host frame pool (host backend only), `slots`
//                                               page-aligned buffers, mapped read-write by the
//                                               producer, then sealed against writes: readers get
//                                               a read-only description and map it read-only.
// The header keeps frames_offset (== segment_bytes) and object_bytes (the sum of both sizes):
// what the channel reserves, in full (fallocate), before anyone can reach it.
//
// Control segment, in order (every block starts on a 128-byte line):
//
//   +-------------------------+ 0
//   | SegmentHeader           |  identity + geometry: written once by the creator, magic last
//   +-------------------------+ 512
//   | ProducerBlock           |  producer lease (robust mutex), epoch/state word, head sequence,
//   |                         |  wake word; reader-written `waiting` bits on their own line
//   +-------------------------+ 512 + 512
//   | ReaderEntry[max_readers]|  one lease (robust mutex) + identity + telemetry per reader
//   +-------------------------+ reader_table_offset + max_readers * 1024
//   | Slot[slots]             |  per slot: state word and descriptor (one line), a free line
//   +-------------------------+ slot_table_offset + slots * 256
//   | LogEntry[log_size]      |  publication log: sequence -> slot, log_size a power of two
//   +-------------------------+ log_offset + log_size * 8, rounded up to 128
//   | CudaSlot[slots]         |  CUDA backend only: IPC handles, release fence words per slot
//   +-------------------------+ frame_header_offset (the end of the above, rounded up to 128)
//   | per slot: FrameHeader   |  tensor descriptor, capture time, metadata size (256 bytes)
//   |   + metadata bytes      |  then metadata_bytes of user metadata, rounded up to 128
//   +-------------------------+ frame_header_offset + slots * frame_header_stride, page-rounded
//                                = segment_bytes = frames_offset (the frame pool follows)
//
// ABI rule (see docs/protocol.md §ABI): increment kLayoutVersion for every incompatible change —
// a field's width, order, meaning, or the packing of a state word. tests/unit/layout_test.cpp pins
// every size and offset below and fails when the layout moves without a version bump.
//
// Cross-process atomics must be lock-free and address-free; every std::atomic used here is
// checked with is_always_lock_free. Shared fields that a crashing process may be writing are at
// most 64 bits wide. Plain (non-atomic) fields are written only before the creator's release store
// of `magic` and are immutable afterwards.
#pragma once

#include <pthread.h>

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "common/naming.hpp"

namespace ipcring::detail {

// Fixed false-sharing distance. Deliberately a constant, not
// std::hardware_destructive_interference_size, which varies with compiler flags and would make the
// layout differ between two builds of the same version.
inline constexpr std::size_t kLine = 128;

inline constexpr std::uint64_t kMagic = 0x31474e4952435049ULL;  // "IPCRING1" little-endian
inline constexpr std::uint32_t kLayoutVersion = 6;              // 2: head carries (sequence, slot)
// 3: one object per channel (frames_offset, object_bytes); producer `waiting` is a reader bit
//    mask, not a count; lease mutexes are probed read-only (docs/protocol.md, "Liveness");
//    or (a parallel line of development) per-slot frame headers and the reader delay histogram;
//    or CUDA release fences as words in CudaSlot the producer can complete itself (docs/cuda.md).
// 4: all of the above: one object per channel whose control segment ends with the per-slot frame
//    headers (tensor, capture time, metadata of metadata_bytes); reader delay histogram; CUDA
//    release fence words.
// 5: the descriptor shares the slot state word's line, with a flags word that says whether the
//    frame header was written (readers skip its line when not): a reader's claim CAS brings the
//    descriptor with it.
// 6: the memory has no name: the control segment and the frame pool are two sealed memfds handed
//    out over the channel's socket (frames_offset and object_bytes keep their values: the frame
//    pool's memfd holds what was [frames_offset, object_bytes) of the one object); and two CUDA
//    release fence words per (slot, reader entry), picked by a per-slot recorder epoch
//    (CudaSlot::fence_epoch), so a dead reader's late fence write cannot lower its successor's
//    word and no generation wrap makes an old word read as reached.
inline constexpr std::uint32_t kEndianMark = 0x01020304U;

inline constexpr std::uint32_t kMaxReaders = 32;  // one bit per reader in the slot state word
inline constexpr std::uint32_t kMaxSlots = 1024;  // slot index fits in a log entry's low bits
inline constexpr std::uint32_t kMaxHeld = 64;     // per-reader hold limit
inline constexpr std::uint64_t kMaxFrameBytes = 1ULL << 40;
// kMaxNameLength (common/naming.hpp): the longest channel name, stored in SegmentHeader::name.
inline constexpr std::uint32_t kDefaultFrameMetadataBytes = 256;  // FrameHeader metadata area
inline constexpr std::uint32_t kMaxFrameMetadataBytes = 4096;
inline constexpr std::uint32_t kTensorDims = 8;

// SegmentHeader::backend and Geometry::backend: where the channel's frames live. The values are
// ipcring::Backend's (include/ipcring/config.hpp; producer.cpp asserts that they agree) and part of
// the ABI: never renumber. Unscoped, so that the header's plain uint32_t compares with them.
enum BackendCode : std::uint32_t { kBackendHost = 1, kBackendCuda = 2 };
// SegmentHeader::cuda_path: the values of ipcring::CudaPath.
enum CudaPathCode : std::uint32_t { kCudaPathUnset = 0, kCudaPathLegacy = 1, kCudaPathVmm = 2 };
// CudaSlot::filled once no fill will ever come (its producer died): >= every sequence under
// cuStreamWaitValue64's wrapping comparison ((int64_t)(word - value) >= 0; sequences stay below
// 2^48).
inline constexpr std::uint64_t kFilledAbandoned = std::uint64_t{1} << 62;
inline constexpr std::size_t kDelayBuckets = 64;  // half-octave buckets of publish->claim ns
inline constexpr std::size_t kMutexBytes = 64;    // storage reserved for a pthread_mutex_t
inline constexpr std::size_t kLibcIdBytes = 32;
inline constexpr std::size_t kHoldBuckets = 32;      // log2 buckets of hold time in ns
inline constexpr std::size_t kCudaHandleBytes = 64;  // cudaIpcMemHandle_t / cudaIpcEventHandle_t

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "64-bit atomics must be lock-free to work across process boundaries");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "32-bit atomics must be lock-free to work across process boundaries");
static_assert(std::atomic<std::uint16_t>::is_always_lock_free,
              "16-bit atomics must be lock-free to work across process boundaries");
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4 &&
                  sizeof(std::atomic<std::uint16_t>) == 2,
              "atomics must have the size of the value they hold (no embedded lock)");
static_assert(sizeof(pthread_mutex_t) <= kMutexBytes, "pthread_mutex_t must fit its reserved slot");

// ---------------------------------------------------------------------------------------------
// Slot state word (64 bits), written by the producer and by readers (CAS only):
//
//   63                               33 32 31                                0
//   +-----------------------------------+--+----------------------------------+
//   |        generation (31 bits)       |W |   reader mask (bit i = reader i)  |
//   +-----------------------------------+--+----------------------------------+
//
// W (WRITING) is set while the producer owns the slot (a loan). The generation increases by one
// at every publication into the slot (modulo 2^31). Readers set their bit only with a CAS that
// expects the whole word, so a claim against a stale generation fails; the 64-bit sequence in the
// descriptor is re-checked after the claim to close the wrap-around ABA case.
struct SlotWord {
  static constexpr std::uint64_t kMaskBits = 0xffffffffULL;
  static constexpr std::uint64_t kWriting = 1ULL << 32;
  static constexpr unsigned kGenShift = 33;
  static constexpr std::uint64_t kGenMask = (1ULL << 31) - 1;

  static constexpr std::uint64_t mask(std::uint64_t w) noexcept { return w & kMaskBits; }
  static constexpr bool writing(std::uint64_t w) noexcept { return (w & kWriting) != 0; }
  static constexpr std::uint64_t generation(std::uint64_t w) noexcept {
    return (w >> kGenShift) & kGenMask;
  }
  static constexpr std::uint64_t make(std::uint64_t gen, bool writing,
                                      std::uint64_t mask) noexcept {
    return ((gen & kGenMask) << kGenShift) | (writing ? kWriting : 0) | (mask & kMaskBits);
  }
  static constexpr std::uint64_t bit(std::uint32_t reader) noexcept { return 1ULL << reader; }
};

// Lease word (64 bits) of a reader entry and of the producer block:
//   bits 63..8: generation (bumped by every owner change: attach, detach, reap, takeover)
//   bits  7..0: LeaseState
enum class LeaseState : std::uint8_t {
  free = 0,    // no owner; the robust mutex is unlocked
  active = 1,  // owned: the owner's lease thread holds the robust mutex
  closed = 2,  // producer only: clean exit, no frames will follow in this epoch
};
struct LeaseWord {
  static constexpr std::uint64_t make(std::uint64_t gen, LeaseState s) noexcept {
    return (gen << 8) | static_cast<std::uint64_t>(s);
  }
  static constexpr std::uint64_t generation(std::uint64_t w) noexcept { return w >> 8; }
  static constexpr std::uint8_t state(std::uint64_t w) noexcept {
    return static_cast<std::uint8_t>(w & 0xff);
  }
};

// Publication log entry: (sequence << 16) | slot index. 48 bits of sequence last 8.9 years at
// one million frames per second.
struct LogWord {
  static constexpr unsigned kSlotBits = 16;
  static constexpr std::uint64_t make(std::uint64_t seq, std::uint32_t slot) noexcept {
    return (seq << kSlotBits) | slot;
  }
  static constexpr std::uint64_t sequence(std::uint64_t w) noexcept { return w >> kSlotBits; }
  static constexpr std::uint32_t slot(std::uint64_t w) noexcept {
    return static_cast<std::uint32_t>(w & 0xffff);
  }
};
static_assert(kMaxSlots <= (1U << LogWord::kSlotBits));

// Storage for a process-shared robust pthread mutex. Sized for every glibc ABI (40 bytes on
// x86-64, 48 on aarch64) so the rest of the layout does not move between architectures.
struct alignas(16) MutexStorage {
  unsigned char bytes[kMutexBytes];
};

// ---------------------------------------------------------------------------------------------
// Identity and geometry. Written by the creator before the release store of `magic`; immutable
// afterwards. Openers copy what they need into process memory after validating it and never read
// the geometry from shared memory again.
struct alignas(kLine) SegmentHeader {
  std::atomic<std::uint64_t> magic;  // (H1) release store by the creator, written last
  std::uint32_t layout_version;
  std::uint32_t endian_mark;  // kEndianMark
  // Sizes of the shared types, checked by openers (another compiler or ABI would differ).
  std::uint32_t header_bytes;
  std::uint32_t producer_bytes;
  std::uint32_t reader_entry_bytes;
  std::uint32_t slot_bytes;
  std::uint32_t cuda_slot_bytes;
  std::uint32_t mutex_bytes;   // sizeof(pthread_mutex_t) of the creator
  char libc_id[kLibcIdBytes];  // e.g. "glibc 2.36 x86_64"
  // Geometry.
  std::uint32_t slots;
  std::uint32_t max_readers;
  std::uint32_t max_held;
  std::uint32_t log_size;    // power of two, >= 2 * slots
  std::uint32_t backend;     // BackendCode: kBackendHost, kBackendCuda
  std::int32_t cuda_device;  // creator's ordinal (display only; identity is the UUID)
  std::uint32_t mode;        // permission bits requested by the creator
  std::uint32_t creator_uid;
  std::uint64_t frame_bytes;           // capacity of one frame
  std::uint64_t frame_stride;          // distance between frames in the pool (page multiple)
  std::uint64_t frames_segment_bytes;  // size of the frame pool region (0 for cuda)
  std::uint64_t segment_bytes;         // size of the control segment (the mapped prefix)
  std::uint64_t producer_offset;
  std::uint64_t reader_table_offset;
  std::uint64_t slot_table_offset;
  std::uint64_t log_offset;
  std::uint64_t cuda_offset;  // 0 unless backend == cuda
  std::uint64_t created_ns;   // CLOCK_REALTIME at creation, display only
  std::uint64_t reap_period_ns;
  unsigned char cuda_uuid[16];    // device UUID of the frame pool (cuda backend)
  char name[kMaxNameLength + 1];  // channel name, NUL-terminated
  std::uint32_t metadata_bytes;   // user metadata capacity of each frame header
  std::uint64_t frames_offset;    // start of the frame pool in the object (== segment_bytes)
  std::uint64_t object_bytes;     // size of the whole object
  std::uint64_t frame_header_offset;
  std::uint64_t frame_header_stride;  // sizeof(FrameHeader) + metadata_bytes, rounded up to 128
  // CUDA channels: how the buffers reach readers (CudaPathCode; 0 in segments of producers that
  // predate the field: legacy IPC) and, for VMM, the size of each buffer's allocation (frame_bytes
  // rounded up to the device's VMM granularity; 0 otherwise). Written by the producer's CUDA pool
  // before H1, like cuda_uuid.
  std::uint32_t cuda_path;
  std::uint32_t reserved_h0;
  std::uint64_t cuda_buffer_bytes;
};

// Producer block: its lease, the epoch and the hot publication counters.
struct alignas(kLine) ProducerBlock {
  // Line 0: lease (written at create, takeover and close).
  MutexStorage lease;                      // robust mutex held by the producer's lease thread
  std::atomic<std::uint64_t> lease_word;   // LeaseWord: generation = epoch
  std::atomic<std::uint64_t> instance_id;  // random per producer object
  std::atomic<std::uint32_t> pid;          // display only
  std::uint32_t reserved0;
  std::atomic<std::uint64_t> started_ns;  // CLOCK_MONOTONIC at takeover
  alignas(kLine)
      // Line 1: producer-written hot words.
      std::atomic<std::uint64_t> head;  // LogWord (sequence, slot) of the newest frame; 0 =
                                        // none. Carrying the slot saves latest-policy readers
                                        // the publication log's cache line.
  std::atomic<std::uint32_t> wake;      // futex word: incremented on every publication
  std::uint32_t reserved1;
  std::atomic<std::uint64_t> published;      // frames published over all epochs
  std::atomic<std::uint64_t> loan_failures;  // loans that found no free slot
  std::atomic<std::uint64_t> readers_reaped;
  std::atomic<std::uint64_t> last_publish_ns;
  alignas(kLine)
      // Line 2: reader-written.
      // Bit i: reader i is inside a futex wait (or about to be). A bit, not a count, so that the
      // reap of a reader that died asleep clears it (a count would stay raised forever).
      std::atomic<std::uint32_t> waiting;
  std::uint32_t reserved2;
  alignas(kLine) std::uint64_t reserved3;  // line 3 kept free for future producer state
};

// One reader's lease and telemetry.
struct alignas(kLine) ReaderEntry {
  // Line 0: lease (attach/detach/reap).
  MutexStorage lease;                      // robust mutex held by the reader's lease thread
  std::atomic<std::uint64_t> lease_word;   // LeaseWord
  std::atomic<std::uint64_t> instance_id;  // random per reader object; 0 when free
  std::atomic<std::uint32_t> pid;          // display only
  std::atomic<std::uint32_t> policy;       // 0 latest, 1 sequential
  std::atomic<std::uint64_t> attached_ns;  // CLOCK_MONOTONIC
  alignas(kLine)
      // Line 1: reader-written telemetry (relaxed; estimates while the reader runs).
      std::atomic<std::uint64_t> frames_read;
  std::atomic<std::uint64_t> overruns;
  std::atomic<std::uint64_t> last_sequence;
  std::atomic<std::uint64_t> last_read_ns;
  std::atomic<std::uint32_t> held;
  std::uint32_t reserved0;
  alignas(kLine)
      // Lines 2-3: hold-time histogram, bucket b counts holds of [2^b, 2^(b+1)) ns.
      std::atomic<std::uint64_t> hold_histogram[kHoldBuckets];
  alignas(kLine)
      // Lines 4-7: delay histogram (publish -> claim, CLOCK_MONOTONIC), DelayBucket's buckets.
      // Written by the reader at each claim with a relaxed add: no system call, no lock.
      std::atomic<std::uint64_t> delay_histogram[kDelayBuckets];
};

// Delay histogram buckets: half-octaves. Bucket 0 holds [0, 2) ns; for b >= 2, bucket b holds
// [lower(b), lower(b + 1)) with lower(2k) = 2^k and lower(2k + 1) = 1.5 * 2^k; the last bucket
// holds everything from lower(63) (about 3.2 s) up.
struct DelayBucket {
  static constexpr std::size_t of(std::uint64_t ns) noexcept {
    if (ns < 2) return 0;
    // k = floor(log2 ns) >= 1: one instruction (lzcnt or bsr), not a loop; this runs on every
    // read, between the claim and the return to the caller.
    const unsigned k = 63U - static_cast<unsigned>(std::countl_zero(ns));
    const std::size_t b = 2 * std::size_t{k} + ((ns >> (k - 1)) & 1);
    return b < kDelayBuckets ? b : kDelayBuckets - 1;
  }
  static constexpr std::uint64_t lower(std::size_t b) noexcept {
    if (b < 2) return 0;
    const std::uint64_t p = 1ULL << (b / 2);
    return (b % 2) == 0 ? p : p + p / 2;
  }
};

// One slot: the state word and the descriptor on one line. A reader's claim (R3) must fetch the
// state word's line from the producer's core anyway; the descriptor it reads next (R4) comes with
// it, instead of costing a transfer of its own. The descriptor is written only by the producer
// while the slot is WRITING, when readers do not CAS the word (a W word is never claimed), and the
// producer's claim (P1) owns the line by then, so its stores need no further transfer either.
// Line 1 is unused (neighbouring slots' hot lines stay 256 bytes apart, as in layout 4).
struct alignas(kLine) Slot {
  std::atomic<std::uint64_t> state;  // SlotWord
  // Descriptor: written by the producer while the slot is WRITING.
  std::atomic<std::uint64_t> sequence;  // 0 = never published
  std::atomic<std::uint64_t> epoch;
  std::atomic<std::uint64_t> bytes;
  std::atomic<std::uint64_t> timestamp_ns;  // CLOCK_MONOTONIC at publish
  std::atomic<std::uint32_t> buffer_index;
  // DescriptorFlags: whether the frame header has anything to read (readers skip its line if not).
  std::atomic<std::uint32_t> flags;
  std::atomic<std::uint64_t> reserved0;
  alignas(kLine) std::uint64_t reserved1;  // line 1: unused
};

struct DescriptorFlags {
  // The frame header was written for this publication (capture time, tensor or metadata set).
  // Clear: the frame has none of them, and readers do not touch the frame header's line.
  static constexpr std::uint32_t kHeader = 1U << 0;
};

// Frame header: what a frame is, beside the slot's hot lines. Written by the producer while the
// slot is WRITING (set_tensor, set_capture_time_ns, set_metadata, then `sequence` at publish), all
// before the release store (P2) that publishes the slot; read by a reader after its claim (R3),
// which validates every field and takes the header only if `sequence` is the frame's sequence
// (a header left by a dropped loan or an older publication is never attributed to this frame).
// The metadata bytes follow the header (sizeof(FrameHeader) bytes from its start); like the payload
// they are plain bytes, written only under W and read only while a reader's bit is set.
struct alignas(kLine) FrameHeader {
  std::atomic<std::uint64_t> sequence;         // publication described; 0 = none
  std::atomic<std::uint64_t> capture_time_ns;  // producer-set (any clock); 0 = not set
  // TensorWord: bits 0-7 DLPack type code, 8-15 bits, 16-23 ndim, bit 32 a tensor is present.
  std::atomic<std::uint64_t> tensor_word;
  std::atomic<std::uint64_t> byte_offset;
  std::atomic<std::uint32_t> metadata_bytes;  // <= the segment's metadata_bytes
  std::uint32_t reserved0;
  std::uint64_t reserved1[3];
  std::atomic<std::int64_t> shape[kTensorDims];
  std::atomic<std::int64_t> strides[kTensorDims];  // in elements; all zero = contiguous
};

struct TensorWord {
  static constexpr std::uint64_t kPresent = 1ULL << 32;
  static constexpr std::uint64_t make(std::uint8_t code, std::uint8_t bits,
                                      std::uint8_t ndim) noexcept {
    return kPresent | (std::uint64_t{ndim} << 16) | (std::uint64_t{bits} << 8) | code;
  }
  static constexpr bool present(std::uint64_t w) noexcept { return (w & kPresent) != 0; }
  static constexpr std::uint8_t code(std::uint64_t w) noexcept {
    return static_cast<std::uint8_t>(w & 0xff);
  }
  static constexpr std::uint8_t bits(std::uint64_t w) noexcept {
    return static_cast<std::uint8_t>((w >> 8) & 0xff);
  }
  static constexpr std::uint8_t ndim(std::uint64_t w) noexcept {
    return static_cast<std::uint8_t>((w >> 16) & 0xff);
  }
};

// CUDA state of one slot (backend == cuda): the IPC handles of its buffer and write-done event,
// and two release fence words per reader entry (src/backend/cuda/cuda_fence.hpp, docs/cuda.md).
// The control segment is host-registered (cudaHostRegister) by the producer and by every reader,
// so streams read and write the fence words in place.
struct alignas(kLine) CudaSlot {
  unsigned char memory_handle[kCudaHandleBytes];      // cudaIpcMemHandle_t of the buffer
  unsigned char write_done_handle[kCudaHandleBytes];  // cudaIpcEventHandle_t, recorded at publish
  // Line 2: producer-written (memory_generation) and reader-set bits.
  std::atomic<std::uint64_t> memory_generation;  // producer instance that exported the handles
  std::atomic<std::uint32_t> release_recorded;   // bit i: reader i queued its fence write
  // Bit i: reader entry i has this slot's buffer mapped (set before its import, cleared after
  // its close); a closing producer frees a buffer only once no bit is set (docs/cuda.md "Close
  // order"). Zero in segments of producers that predate it: they never look.
  std::atomic<std::uint32_t> mapped;
  // Per reader entry, the recorder epoch of its last fence in this slot (cuda_fence.hpp): counts
  // the entry's incarnations that recorded here, and picks the word of the pair they write.
  std::atomic<std::uint16_t> fence_epoch[kMaxReaders];
  // VMM channels (header cuda_path == vmm): the write-done word. The producer's stream writes the
  // sequence of the slot's frame into it after the work that filled the buffer
  // (cuStreamWriteValue64, at publish); a reader's stream waits until it is >= its frame's
  // sequence (cuStreamWaitValue64, Frame::wait_on). Readers store kFilledAbandoned from the CPU
  // when the producer died with a fill still queued, so no stream waits forever. Unused (zero)
  // on legacy channels, whose write-done signal is the IPC event.
  std::atomic<std::uint64_t> filled;
  alignas(kLine)
      // Line 3: per reader entry, the lease generation of the reader that queued the fence write
      // counted in release_recorded (low 32 bits): who the last recorder is, for the reaper.
      std::atomic<std::uint32_t> fence_generation[kMaxReaders];
  alignas(kLine)
      // Lines 4-7: FenceWord (recorder epoch, frame sequence) per reader entry, two words each
      // (epoch e writes release_fence[e & 1]): written by that reader's stream
      // (cuStreamWriteValue64) and by whoever reaps it (CPU), waited on by the producer's stream
      // (cuStreamWaitValue64) or polled by its CPU.
      std::atomic<std::uint64_t> release_fence[2][kMaxReaders];
};

// Layout pins. A change to any of these is an ABI change: bump kLayoutVersion.
static_assert(sizeof(SegmentHeader) == 512);
static_assert(offsetof(SegmentHeader, magic) == 0);
static_assert(offsetof(SegmentHeader, layout_version) == 8);
static_assert(offsetof(SegmentHeader, libc_id) == 40);
static_assert(offsetof(SegmentHeader, slots) == 72);
static_assert(offsetof(SegmentHeader, frame_bytes) == 104);
static_assert(offsetof(SegmentHeader, cuda_uuid) == 192);
static_assert(offsetof(SegmentHeader, name) == 208);
static_assert(offsetof(SegmentHeader, metadata_bytes) == 412);
static_assert(offsetof(SegmentHeader, frames_offset) == 416);
static_assert(offsetof(SegmentHeader, object_bytes) == 424);
static_assert(offsetof(SegmentHeader, frame_header_offset) == 432);
static_assert(offsetof(SegmentHeader, frame_header_stride) == 440);
static_assert(offsetof(SegmentHeader, cuda_path) == 448);
static_assert(offsetof(SegmentHeader, cuda_buffer_bytes) == 456);
static_assert(sizeof(ProducerBlock) == 512);
static_assert(offsetof(ProducerBlock, lease_word) == 64);
static_assert(offsetof(ProducerBlock, head) == kLine);
static_assert(offsetof(ProducerBlock, wake) == kLine + 8);
static_assert(offsetof(ProducerBlock, waiting) == 2 * kLine);
static_assert(offsetof(ReaderEntry, lease_word) == 64);
static_assert(offsetof(ReaderEntry, frames_read) == kLine);
static_assert(offsetof(ReaderEntry, hold_histogram) == 2 * kLine);
static_assert(offsetof(ReaderEntry, delay_histogram) == 4 * kLine);
static_assert(sizeof(ReaderEntry) == 1024);
static_assert(sizeof(Slot) == 256);
static_assert(offsetof(Slot, sequence) == 8);
static_assert(offsetof(Slot, flags) == 44);
static_assert(offsetof(Slot, reserved0) == 48);
static_assert(offsetof(Slot, reserved1) == kLine);
static_assert(sizeof(FrameHeader) == 256);
static_assert(offsetof(FrameHeader, metadata_bytes) == 32);
static_assert(offsetof(FrameHeader, shape) == 64);
static_assert(offsetof(FrameHeader, strides) == 128);
static_assert(sizeof(CudaSlot) == 896);
static_assert(offsetof(CudaSlot, memory_generation) == kLine);
static_assert(offsetof(CudaSlot, mapped) == kLine + 12);
static_assert(offsetof(CudaSlot, fence_epoch) == kLine + 16);
static_assert(offsetof(CudaSlot, filled) == kLine + 80);
static_assert(offsetof(CudaSlot, fence_generation) == 2 * kLine);
static_assert(offsetof(CudaSlot, release_fence) == 3 * kLine);

// Where each block of a segment of a given geometry lives. Computed identically by the creator
// and every opener; openers compare it with the header before trusting the header's offsets.
struct Geometry {
  std::uint32_t slots = 0;
  std::uint32_t max_readers = 0;
  std::uint32_t max_held = 0;
  std::uint32_t log_size = 0;
  std::uint32_t backend = 0;
  std::uint64_t frame_bytes = 0;
  std::uint64_t frame_stride = 0;
  std::uint64_t frames_segment_bytes = 0;
  std::uint64_t producer_offset = 0;
  std::uint64_t reader_table_offset = 0;
  std::uint64_t slot_table_offset = 0;
  std::uint64_t log_offset = 0;
  std::uint64_t cuda_offset = 0;
  std::uint32_t metadata_bytes = 0;
  std::uint64_t frame_header_offset = 0;
  std::uint64_t frame_header_stride = 0;
  std::uint64_t segment_bytes = 0;  // control segment, frame headers included
  std::uint64_t frames_offset = 0;
  std::uint64_t object_bytes = 0;  // control segment + frame pool
  // CUDA channels, from the header after validation (0 elsewhere): the path (CudaPathCode; an
  // unset one reads as legacy) and the VMM allocation size of each buffer.
  std::uint32_t cuda_path = 0;
  std::uint64_t cuda_buffer_bytes = 0;
};

constexpr std::uint64_t round_up(std::uint64_t v, std::uint64_t to) noexcept {
  return (v + to - 1) / to * to;
}

constexpr std::uint32_t log_size_for(std::uint32_t slots) noexcept {
  std::uint32_t n = 16;
  while (n < 4 * slots) n *= 2;
  return n;
}

// Computes the layout for already-range-checked values (slots in [1, kMaxSlots], max_readers in
// [1, kMaxReaders], frame_bytes in [1, kMaxFrameBytes], page_bytes a power of two,
// metadata_bytes in [0, kMaxFrameMetadataBytes]).
constexpr Geometry compute_geometry(
    std::uint32_t slots, std::uint32_t max_readers, std::uint32_t max_held,
    std::uint64_t frame_bytes, std::uint32_t backend, std::uint64_t page_bytes,
    std::uint32_t metadata_bytes = kDefaultFrameMetadataBytes) noexcept {
  Geometry g;
  g.slots = slots;
  g.max_readers = max_readers;
  g.max_held = max_held;
  g.log_size = log_size_for(slots);
  g.backend = backend;
  g.frame_bytes = frame_bytes;
  const bool cuda = backend == kBackendCuda;
  g.frame_stride = cuda ? 0 : round_up(frame_bytes, page_bytes);
  g.frames_segment_bytes = cuda ? 0 : g.frame_stride * slots;
  g.producer_offset = sizeof(SegmentHeader);
  g.reader_table_offset = g.producer_offset + sizeof(ProducerBlock);
  g.slot_table_offset = g.reader_table_offset + std::uint64_t{max_readers} * sizeof(ReaderEntry);
  g.log_offset = g.slot_table_offset + std::uint64_t{slots} * sizeof(Slot);
  std::uint64_t end = round_up(g.log_offset + std::uint64_t{g.log_size} * 8, kLine);
  if (cuda) {
    g.cuda_offset = end;
    end += std::uint64_t{slots} * sizeof(CudaSlot);
  }
  g.metadata_bytes = metadata_bytes;
  g.frame_header_offset = round_up(end, kLine);
  g.frame_header_stride = sizeof(FrameHeader) + round_up(metadata_bytes, kLine);
  end = g.frame_header_offset + std::uint64_t{slots} * g.frame_header_stride;
  g.segment_bytes = round_up(end, page_bytes);
  g.frames_offset = g.segment_bytes;
  g.object_bytes = g.frames_offset + g.frames_segment_bytes;
  return g;
}

// A mapped control segment seen through typed accessors. Holds no ownership; the bounds were
// validated when the view was made (segment.cpp), and the accessors take indices that callers
// have range-checked against the process-local geometry.
struct SegmentView {
  unsigned char* base = nullptr;
  Geometry geo;
  int fd = -1;         // the control segment's memfd (process-local; -1 for an in-memory image)
  int frames_fd = -1;  // the frame pool's memfd (host channels; -1 otherwise)

  SegmentHeader& header() const noexcept { return *reinterpret_cast<SegmentHeader*>(base); }
  ProducerBlock& producer() const noexcept {
    return *reinterpret_cast<ProducerBlock*>(base + geo.producer_offset);
  }
  ReaderEntry& reader(std::uint32_t i) const noexcept {
    return reinterpret_cast<ReaderEntry*>(base + geo.reader_table_offset)[i];
  }
  Slot& slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<Slot*>(base + geo.slot_table_offset)[i];
  }
  std::atomic<std::uint64_t>& log(std::uint64_t sequence) const noexcept {
    return reinterpret_cast<std::atomic<std::uint64_t>*>(
        base + geo.log_offset)[sequence & (geo.log_size - 1)];
  }
  CudaSlot& cuda_slot(std::uint32_t i) const noexcept {
    return reinterpret_cast<CudaSlot*>(base + geo.cuda_offset)[i];
  }
  FrameHeader& frame_header(std::uint32_t i) const noexcept {
    return *reinterpret_cast<FrameHeader*>(base + geo.frame_header_offset +
                                           std::uint64_t{i} * geo.frame_header_stride);
  }
  // geo.metadata_bytes of user metadata after slot i's frame header.
  unsigned char* frame_metadata(std::uint32_t i) const noexcept {
    return base + geo.frame_header_offset + std::uint64_t{i} * geo.frame_header_stride +
           sizeof(FrameHeader);
  }
};

}  // namespace ipcring::detail
