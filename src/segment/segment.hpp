// segment.hpp — creating, validating and mapping a channel's memory (the one code path for it).
//
// Creation: the control segment and (host channels) the frame pool are memfds
// (MFD_ALLOW_SEALING), sized and reserved in full with fallocate (no later page fault can SIGBUS),
// then sealed against shrinking and growing; the frame pool, once the producer has mapped it
// read-write, also against writes (F_SEAL_FUTURE_WRITE), and readers get it as a read-only open
// file description. The creator fills the control segment, locks its producer lease and stores
// `magic` last with release ordering (publish_header); only then does the producer start handing
// the memory out (channel/handout.hpp). Nobody can reach unfinished memory.
// Opening (open_received): what a reader received is never trusted: each descriptor's type,
// size, seals and access mode, whether every page is backed (no hole, so no SIGBUS), then the
// header read with pread (never through a mapping) and every geometry field checked against the
// layout recomputed locally; only then is anything mapped.
//
// One mapping per control segment per process: a process-wide registry keyed by (device, inode)
// hands out the existing mapping to a second Producer/Reader/inspect of the same channel.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ipcring/config.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// A mapping of one control segment, shared by every object of this process that uses it. Owns
// the control segment's descriptor and, for host channels, the frame pool's.
class Mapping {
 public:
  Mapping(std::string name, int fd, void* base, std::size_t size, dev_t dev, ino_t ino) noexcept;
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const std::string& name() const noexcept { return name_; }
  int fd() const noexcept { return fd_; }
  int frames_fd() const noexcept { return frames_fd_; }
  unsigned char* base() const noexcept { return static_cast<unsigned char*>(base_); }
  std::size_t size() const noexcept { return size_; }
  dev_t device() const noexcept { return dev_; }
  ino_t inode() const noexcept { return ino_; }
  // Takes the frame pool's descriptor (closed with the mapping) and shows it in `view`.
  void adopt_frames_fd(int fd) noexcept;
  SegmentView view;  // set after validation

 private:
  std::string name_;
  int fd_;
  int frames_fd_ = -1;
  void* base_;
  std::size_t size_;
  dev_t dev_;
  ino_t ino_;
};

// Descriptors a reader received and owns until it is done with them (closed on destruction).
struct DescriptorSet {
  std::vector<int> fds;
  DescriptorSet() = default;
  explicit DescriptorSet(std::vector<int> v) noexcept : fds(std::move(v)) {}
  ~DescriptorSet();
  DescriptorSet(const DescriptorSet&) = delete;
  DescriptorSet& operator=(const DescriptorSet&) = delete;
};

struct OpenedSegment {
  std::shared_ptr<Mapping> mapping;
  // CUDA VMM channels: the frame buffers' descriptors, one per slot in slot order (checked
  // against the header's geometry); null for every other channel and for inspection.
  std::shared_ptr<DescriptorSet> device_fds;
  // The producer's pid on the channel's socket (SO_PEERCRED, in our PID namespace; 0: a namespace
  // we cannot see); -1 when the memory was not received over the socket.
  int producer_pid = -1;
  std::uint32_t owner_uid = 0;  // the producer's uid (its credentials on the socket)
  std::uint32_t mode = 0;       // the channel's mode (its socket's permission bits)
};

// The name a channel's memfd carries ("ipcring:control segment:NAME", "ipcring:frame pool:NAME"):
// only for people and debuggers (/proc/PID/fd shows it), and for inspecting a producer that
// cannot answer (channel/handout.hpp, open_channel's fallback).
std::string memory_label(std::string_view channel, std::string_view what);

// Creates the channel's memory for `geo` (control segment, and the frame pool for host
// channels), reserved in full and sealed against resizing, and maps the control segment. The
// caller initialises it, maps the frame pool read-write (the host pool), calls seal_frame_pool,
// then publish_header(). Throws Error (no_space with the bytes needed).
std::shared_ptr<Mapping> create_segment(std::string_view channel, const Geometry& geo);
// Seals the frame pool against writes through any mapping made from now on and returns a new
// read-only open file description of it for the readers (-1 when the channel has none).
int seal_frame_pool(std::string_view channel, const Mapping& mapping);
// The one way a control segment gets mapped (create_segment and open_received): maps the
// first geo.segment_bytes of `fd` (consumed: owned by the mapping, closed on failure), checks
// that magic is `expected_magic` (0 for new memory, kMagic when opening) with the acquire load
// (H2), and registers the mapping under (dev, ino), handing out an existing mapping of the same
// segment instead.
std::shared_ptr<Mapping> map_control_segment(std::string_view channel, int fd, const Geometry& geo,
                                             dev_t dev, ino_t ino, std::uint64_t expected_magic);
// Fills the header's identity and geometry fields (not magic).
void write_header(SegmentHeader& h, std::string_view channel, const Geometry& geo,
                  const ChannelConfig& config);
// (H1) The creator's last store: release, pairs with the acquire load in open_received.
void publish_header(SegmentHeader& h) noexcept;

// How a process maps a host channel's frame pool: the producer read-write, readers read-only, or
// copy-on-write (MAP_PRIVATE: a write changes this process's copy of the page only).
enum class FrameAccess { read_write, read_only, copy_on_write };
// Maps the frame pool of a validated view whose frames_fd is open; unmap with
// munmap(base, geo.frames_segment_bytes). Throws Error naming the channel, the size and errno.
void* map_frame_pool(std::string_view channel, const SegmentView& view, FrameAccess access);

// Validates descriptors received from a producer and maps the control segment. Takes
// `control_fd` and `frames_fd` (set to -1 once consumed; left for the caller to close on a
// throw). `control_bytes`/`frames_bytes`: the sizes the producer announced. Throws Error:
// corrupt_segment (wrong type, size, seals, access, holes, header), version_mismatch.
OpenedSegment open_received(std::string_view channel, int& control_fd, int& frames_fd,
                            std::uint64_t control_bytes, std::uint64_t frames_bytes);

// Validates a header copy against the layout rules; returns the geometry or throws Error naming
// the channel and the values. `segment_bytes` is the size of the object as fstat saw it. Exposed
// for the fuzz target.
// `whole_object`: segment_bytes is the whole object's size (else an image of the control segment).
Geometry validate_header(const SegmentHeader& header, std::uint64_t segment_bytes,
                         std::string_view channel, bool whole_object = false);

// Throws the Error for a failed system call `what` on `channel`: permission_denied for EACCES
// and EPERM, not_found for ENOENT, system_error otherwise; the message has errno's text.
[[noreturn]] void throw_system(std::string_view channel, const std::string& what, int err);

// Fixed identity of this build's C library and architecture, as written in headers.
const char* libc_identity() noexcept;

}  // namespace ipcring::detail
