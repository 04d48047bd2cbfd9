// segment.hpp — creating, opening and validating a channel's control segment.
//
// Creation: shm_open(O_CREAT|O_EXCL) with the requested mode set again by fchmod (the umask must
// not change it), ftruncate to the full size, then the creator fills the segment and stores
// `magic` last with release ordering (publish_header). Opening: fstat owner, mode and size before
// mapping; then wait (bounded) for magic with acquire ordering; then check the layout version,
// type sizes, libc identity and every geometry field against the layout recomputed locally.
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
#include "segment/layout.hpp"

namespace ipcring::detail {

std::string control_object_name(std::string_view channel);  // "ipcring.<channel>"
std::string frames_object_name(std::string_view channel);   // "ipcring.<channel>.frames"
std::string shm_path(const std::string& object_name);       // "/dev/shm/<object>"

// A mapping of one control segment, shared by every object of this process that uses it.
class Mapping {
 public:
  Mapping(std::string name, int fd, void* base, std::size_t size, dev_t dev, ino_t ino) noexcept;
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const std::string& name() const noexcept { return name_; }
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

// Creates the control segment with O_EXCL. Returns nullptr when the name exists already. The
// caller initialises the segment and then calls publish_header(). Throws Error otherwise.
std::shared_ptr<Mapping> create_segment(std::string_view channel, const Geometry& geo,
                                        unsigned mode);
// Fills the header's identity and geometry fields (not magic).
void write_header(SegmentHeader& h, std::string_view channel, const Geometry& geo,
                  const ChannelConfig& config);
// (H1) The creator's last store: release, pairs with the acquire load in open_segment.
void publish_header(SegmentHeader& h) noexcept;

// Opens and validates an existing control segment. Throws Error: not_found, permission_denied,
// version_mismatch, corrupt_segment, not_ready.
OpenedSegment open_segment(std::string_view channel);

// Validates a header copy against the layout rules; returns the geometry or throws Error naming
// the channel and the values. `segment_bytes` is the size of the object as fstat saw it. Exposed
// for the fuzz target.
Geometry validate_header(const SegmentHeader& header, std::uint64_t segment_bytes,
                         std::string_view channel);

// Fixed identity of this build's C library and architecture, as written in headers.
const char* libc_identity() noexcept;

// True when /dev/shm/ipcring.<channel> is the object (dev, ino).
bool still_named(std::string_view channel, dev_t dev, ino_t ino) noexcept;

// Unlinks the control and frames objects of a channel. Returns false when neither existed.
bool unlink_channel_objects(std::string_view channel) noexcept;

}  // namespace ipcring::detail
