// segment.hpp — creating, opening, validating and mapping a channel's object (the one code path for
// it), and the name checks removal uses. Names come from common/naming.hpp.
//
// Creation with evidence (docs/protocol.md, "Names"): the object is made nameless
// (open(O_TMPFILE) in /dev/shm), its mode set by fchmod (the umask must not change it), its whole
// size reserved with fallocate (no later page fault can SIGBUS), the creator fills it, locks its
// producer lease and stores `magic` last with release ordering (publish_header); only then does it
// get its name, with linkat(), which fails with EEXIST instead of replacing anything. Nobody can
// find an unfinished object, so there is no "creator stalled or dead?" question to answer.
// Opening: fstat owner, mode, size and backing, read the header with pread (never through a
// mapping of an object that may be short or unbacked), check magic, layout version, type sizes,
// libc identity and every geometry field against the layout recomputed locally; then map.
// Removal (remove_channel in inspect.cpp, a producer's clean exit): under the object's repair lock
// (lease.hpp, above this module), with open_object, still_named and unlink_name_if from here, after
// checking that the name still refers to that very object (device and inode), so a name is never
// removed on the strength of a check made on another object.
// Plain POSIX, not Boost.Interprocess: docs/architecture.md, "One shared-memory object per
// channel", says why.
//
// One mapping per control segment per process: a process-wide registry keyed by (device, inode)
// hands out the existing mapping to a second Producer/Reader/inspect of the same channel.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "ipcring/config.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"

namespace ipcring::detail {

// The channel's one object name and its path come from common/naming.hpp (object_name).

// A mapping of one control segment, shared by every object of this process that uses it.
class Mapping {
 public:
  Mapping(std::string name, int fd, void* base, std::size_t size, dev_t dev, ino_t ino) noexcept;
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const std::string& name() const noexcept { return name_; }
  int fd() const noexcept { return fd_; }
  unsigned char* base() const noexcept { return static_cast<unsigned char*>(base_); }
  std::size_t size() const noexcept { return size_; }
  dev_t device() const noexcept { return dev_; }
  ino_t inode() const noexcept { return ino_; }
  SegmentView view;  // set after validation

 private:
  std::string name_;
  int fd_;
  void* base_;
  std::size_t size_;
  dev_t dev_;
  ino_t ino_;
};

struct OpenedSegment {
  std::shared_ptr<Mapping> mapping;
  std::uint32_t owner_uid = 0;
  std::uint32_t mode = 0;
};

// Creates a nameless object of geo.object_bytes (reserved in full) and maps its control segment.
// The caller initialises it, calls publish_header(), then link_segment(). Throws Error (no_space
// with the bytes needed and free, and the Docker fix, when /dev/shm is too small).
std::shared_ptr<Mapping> create_segment(std::string_view channel, const Geometry& geo,
                                        unsigned mode);
// The one way a control segment gets mapped (create_segment and open_segment_fd): maps the
// first geo.segment_bytes of `fd` (consumed: owned by the mapping, closed on failure), checks
// that magic is `expected_magic` (0 for a new object, kMagic when opening) with the acquire load
// (H2), and registers the mapping under (dev, ino), handing out an
// existing mapping of the same object instead.
std::shared_ptr<Mapping> map_control_segment(std::string_view channel, int fd, const Geometry& geo,
                                             dev_t dev, ino_t ino, std::uint64_t expected_magic);
// Gives a finished object its name. False when the name exists (nothing was replaced).
bool link_segment(const Mapping& mapping, std::string_view channel);
// Fills the header's identity and geometry fields (not magic).
void write_header(SegmentHeader& h, std::string_view channel, const Geometry& geo,
                  const ChannelConfig& config);
// (H1) The creator's last store: release, pairs with the acquire load in open_segment.
void publish_header(SegmentHeader& h) noexcept;

// How a process maps a host channel's frame pool, [frames_offset, object_bytes) of the object:
// the producer read-write, readers read-only, or copy-on-write (MAP_PRIVATE: a write changes this
// process's copy of the page only).
enum class FrameAccess { read_write, read_only, copy_on_write };
// Maps the frame pool of a validated view whose fd is open (the opener checked the object's size
// and backing against the geometry); unmap with munmap(base, geo.frames_segment_bytes). Throws
// Error naming the channel, the range and errno.
void* map_frame_pool(std::string_view channel, const SegmentView& view, FrameAccess access);

// Opens the channel's object (read-write, close-on-exec): its descriptor, or -1 when there is no
// such name (errno ENOENT). Throws Error for any other failure. Neither validated nor mapped.
int open_object(std::string_view channel);
// Opens and validates an existing control segment. Throws Error: not_found, permission_denied,
// version_mismatch, corrupt_segment, not_ready.
OpenedSegment open_segment(std::string_view channel);
// The same for an object already open as `fd` (not consumed).
OpenedSegment open_segment_fd(std::string_view channel, int fd);

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

// True when object_path(channel) is the object (dev, ino).
bool still_named(std::string_view channel, dev_t dev, ino_t ino) noexcept;
// True when `path` names another object than (dev, ino); `missing` when it names nothing at all.
bool name_moved(const std::string& path, dev_t dev, ino_t ino, bool& missing) noexcept;

// Removes the name /dev/shm/<object> if it still refers to (dev, ino). Precondition: the caller
// holds the repair lock of (dev, ino), which every remover takes, so the name cannot change between
// the check and the unlink. Returns true when removed.
bool unlink_name_if(const std::string& object, dev_t dev, ino_t ino) noexcept;

}  // namespace ipcring::detail
