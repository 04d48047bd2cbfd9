#include "segment/segment.hpp"

#include <fcntl.h>
#include <gnu/libc-version.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "common/naming.hpp"
#include "ipcring/error.hpp"

namespace ipcring::detail {

[[noreturn]] void throw_system(std::string_view channel, const std::string& what, int err) {
  Errc code = Errc::system_error;
  if (err == EACCES || err == EPERM) code = Errc::permission_denied;
  if (err == ENOENT) code = Errc::not_found;
  throw Error(code, channel_prefix(channel) + what + ": " + errno_text(err) + " (errno " +
                        std::to_string(err) + ")");
}

namespace {

// Process-wide registry: one mapping per control segment.
std::mutex g_registry_mutex;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Mapping>>& registry() {
  static auto* r = new std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Mapping>>();
  return *r;
}

}  // namespace

const char* libc_identity() noexcept {
  static const std::string id = [] {
    std::string s = std::string("glibc ") + gnu_get_libc_version();
#if defined(__x86_64__)
    s += " x86_64";
#elif defined(__aarch64__)
    s += " aarch64";
#else
    s += " other";
#endif
    return s.substr(0, kLibcIdBytes - 1);
  }();
  return id.c_str();
}

Mapping::Mapping(std::string name, int fd, void* base, std::size_t size, dev_t dev,
                 ino_t ino) noexcept
    : name_(std::move(name)), fd_(fd), base_(base), size_(size), dev_(dev), ino_(ino) {}

Mapping::~Mapping() {
  {
    std::lock_guard lock(g_registry_mutex);
    auto it = registry().find({dev_, ino_});
    if (it != registry().end() && it->second.expired()) registry().erase(it);
  }
  munmap(base_, size_);
  close(fd_);
}

std::shared_ptr<Mapping> create_segment(std::string_view channel, const Geometry& geo,
                                        unsigned mode) {
  const std::string ch = channel_prefix(channel);
  // Nameless until link_segment: nobody can open it, remove it or mistake it for a channel.
  int fd = open(std::string(kShmDirectory).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, mode & 0777);
  if (fd < 0) {
    const int err = errno;
    throw Error(err == EACCES || err == EPERM ? Errc::permission_denied : Errc::unsupported,
                ch + "cannot create an unnamed object in /dev/shm (open O_TMPFILE): " +
                    errno_text(err) + " (errno " + std::to_string(err) +
                    "); /dev/shm must be a tmpfs of Linux 3.11 or later");
  }
  auto fail = [&](const std::string& what, int err) {
    close(fd);  // the object vanishes with its last descriptor: nothing is left behind
    throw_system(channel, what, err);
  };
  if (fchmod(fd, mode & 0777) != 0) fail("fchmod", errno);  // the umask must not narrow it
  // Reserve every page now (Docker's /dev/shm is 64 MiB): a page fault later cannot SIGBUS.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(geo.object_bytes)); err != 0) {
    close(fd);
    if (err == ENOSPC || err == EFBIG) {
      struct statvfs vfs {};
      std::string free_text = "unknown";
      if (statvfs(std::string(kShmDirectory).c_str(), &vfs) == 0) {
        free_text = std::to_string(static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize);
      }
      const std::uint64_t mib = (geo.object_bytes + (1ULL << 20) - 1) >> 20;
      throw Error(Errc::no_space,
                  ch + "needs " + std::to_string(geo.object_bytes) +
                      " bytes of shared memory but /dev/shm has " + free_text +
                      " bytes free; in a container give it more (docker run --shm-size=" +
                      std::to_string(mib + 64) +
                      "m, or --ipc=host), or make the channel smaller "
                      "(slots * frame_bytes)");
    }
    throw_system(channel, "posix_fallocate of " + std::to_string(geo.object_bytes) + " bytes", err);
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) fail("fstat", errno);
  if ((st.st_mode & 0777) != (mode & 0777)) {
    close(fd);
    throw Error(Errc::permission_denied, ch + "created with mode " +
                                             format_mode(st.st_mode & 0777) + " instead of " +
                                             format_mode(mode & 0777));
  }
  return map_control_segment(channel, fd, geo, st.st_dev, st.st_ino, 0);
}

bool link_segment(const Mapping& mapping, std::string_view channel) {
  const std::string path = shm_path(object_name(channel));
  char proc[48];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", mapping.fd());
  // linkat never replaces: EEXIST when the name exists. Through /proc (no capability needed);
  // AT_EMPTY_PATH where /proc is not mounted (needs CAP_DAC_READ_SEARCH on older kernels).
  if (linkat(AT_FDCWD, proc, AT_FDCWD, path.c_str(), AT_SYMLINK_FOLLOW) == 0) return true;
  int err = errno;
  if (err == EEXIST) return false;
  if (linkat(mapping.fd(), "", AT_FDCWD, path.c_str(), AT_EMPTY_PATH) == 0) return true;
  const int err2 = errno;
  if (err2 == EEXIST) return false;
  err = err == ENOENT ? err2 : err;
  throw_system(channel, "cannot name the new object " + path + " (linkat)", err);
}

void write_header(SegmentHeader& h, std::string_view channel, const Geometry& geo,
                  const ChannelConfig& config) {
  h.layout_version = kLayoutVersion;
  h.endian_mark = kEndianMark;
  h.header_bytes = sizeof(SegmentHeader);
  h.producer_bytes = sizeof(ProducerBlock);
  h.reader_entry_bytes = sizeof(ReaderEntry);
  h.slot_bytes = sizeof(Slot);
  h.cuda_slot_bytes = sizeof(CudaSlot);
  h.mutex_bytes = sizeof(pthread_mutex_t);
  std::memset(h.libc_id, 0, sizeof h.libc_id);
  std::strncpy(h.libc_id, libc_identity(), sizeof h.libc_id - 1);
  h.slots = geo.slots;
  h.max_readers = geo.max_readers;
  h.max_held = geo.max_held;
  h.log_size = geo.log_size;
  h.backend = geo.backend;
  h.cuda_device = config.cuda_device;
  h.mode = config.mode & 0777;
  h.creator_uid = static_cast<std::uint32_t>(geteuid());
  h.frame_bytes = geo.frame_bytes;
  h.frame_stride = geo.frame_stride;
  h.frames_segment_bytes = geo.frames_segment_bytes;
  h.segment_bytes = geo.segment_bytes;
  h.frames_offset = geo.frames_offset;
  h.object_bytes = geo.object_bytes;
  h.producer_offset = geo.producer_offset;
  h.reader_table_offset = geo.reader_table_offset;
  h.slot_table_offset = geo.slot_table_offset;
  h.log_offset = geo.log_offset;
  h.cuda_offset = geo.cuda_offset;
  h.metadata_bytes = geo.metadata_bytes;
  h.frame_header_offset = geo.frame_header_offset;
  h.frame_header_stride = geo.frame_header_stride;
  h.created_ns = realtime_ns();
  h.reap_period_ns = static_cast<std::uint64_t>(config.reap_period.count());
  std::memset(h.name, 0, sizeof h.name);
  std::memcpy(h.name, channel.data(), channel.size());
}

void publish_header(SegmentHeader& h) noexcept {
  // (H1) release: every field of the segment written by the creator happens-before any opener's
  // acquire load of magic that reads kMagic (H2 in open_segment).
  h.magic.store(kMagic, std::memory_order_release);
}

namespace {

[[noreturn]] void throw_corrupt(const std::string& ch, const std::string& what) {
  throw Error(Errc::corrupt_segment, ch + "corrupt control segment: " + what);
}

// Layout version, byte order, the sizes of the shared types and the C library: the build that
// made the segment must be this one's ABI.
void check_build_identity(const SegmentHeader& h, const std::string& ch) {
  auto mismatch = [&](const char* what, std::uint64_t found, std::uint64_t expected) {
    throw Error(Errc::version_mismatch, ch + what + " is " + std::to_string(found) +
                                            " in the segment but " + std::to_string(expected) +
                                            " in this build (layout version " +
                                            std::to_string(kLayoutVersion) + ")");
  };
  if (h.layout_version != kLayoutVersion) {
    mismatch("layout version", h.layout_version, kLayoutVersion);
  }
  if (h.endian_mark != kEndianMark) mismatch("byte-order mark", h.endian_mark, kEndianMark);
  if (h.header_bytes != sizeof(SegmentHeader)) {
    mismatch("header size", h.header_bytes, sizeof(SegmentHeader));
  }
  if (h.producer_bytes != sizeof(ProducerBlock)) {
    mismatch("producer block size", h.producer_bytes, sizeof(ProducerBlock));
  }
  if (h.reader_entry_bytes != sizeof(ReaderEntry)) {
    mismatch("reader entry size", h.reader_entry_bytes, sizeof(ReaderEntry));
  }
  if (h.slot_bytes != sizeof(Slot)) mismatch("slot size", h.slot_bytes, sizeof(Slot));
  if (h.cuda_slot_bytes != sizeof(CudaSlot)) {
    mismatch("CUDA slot size", h.cuda_slot_bytes, sizeof(CudaSlot));
  }
  if (h.mutex_bytes != sizeof(pthread_mutex_t)) {
    mismatch("pthread_mutex_t size", h.mutex_bytes, sizeof(pthread_mutex_t));
  }
  char libc[kLibcIdBytes + 1] = {};
  std::memcpy(libc, h.libc_id, kLibcIdBytes);
  if (std::strcmp(libc, libc_identity()) != 0) {
    throw Error(Errc::version_mismatch,
                ch + "segment was made by '" + libc + "' but this process runs '" +
                    libc_identity() + "'; robust mutexes are not portable across C libraries");
  }
}

// The configuration fields, each within its range (before the geometry is computed from them).
void check_config_ranges(const SegmentHeader& h, const std::string& ch) {
  auto corrupt = [&](const std::string& what) { throw_corrupt(ch, what); };
  if (h.slots < 1 || h.slots > kMaxSlots) {
    corrupt("slots = " + std::to_string(h.slots) + " (must be 1.." + std::to_string(kMaxSlots) +
            ")");
  }
  if (h.max_readers < 1 || h.max_readers > kMaxReaders) {
    corrupt("max_readers = " + std::to_string(h.max_readers) + " (must be 1.." +
            std::to_string(kMaxReaders) + ")");
  }
  if (h.max_held < 1 || h.max_held > kMaxHeld) {
    corrupt("max_held = " + std::to_string(h.max_held) + " (must be 1.." +
            std::to_string(kMaxHeld) + ")");
  }
  if (h.backend != kBackendHost && h.backend != kBackendCuda)
    corrupt("backend = " + std::to_string(h.backend));
  if (h.frame_bytes < 1 || h.frame_bytes > kMaxFrameBytes) {
    corrupt("frame_bytes = " + std::to_string(h.frame_bytes));
  }
  if (h.metadata_bytes > kMaxFrameMetadataBytes) {
    corrupt("metadata_bytes = " + std::to_string(h.metadata_bytes) + " (must be 0.." +
            std::to_string(kMaxFrameMetadataBytes) + ")");
  }
}

// Every derived field equals what this build computes from the configuration fields.
void check_derived_fields(const SegmentHeader& h, const Geometry& g, const std::string& ch) {
  auto corrupt = [&](const std::string& what) { throw_corrupt(ch, what); };
  auto expect = [&](const char* field, std::uint64_t found, std::uint64_t want) {
    if (found != want) {
      corrupt(std::string(field) + " = " + std::to_string(found) + " but the geometry gives " +
              std::to_string(want));
    }
  };
  expect("log_size", h.log_size, g.log_size);
  expect("frame_stride", h.frame_stride, g.frame_stride);
  expect("frames_segment_bytes", h.frames_segment_bytes, g.frames_segment_bytes);
  expect("segment_bytes", h.segment_bytes, g.segment_bytes);
  expect("producer_offset", h.producer_offset, g.producer_offset);
  expect("reader_table_offset", h.reader_table_offset, g.reader_table_offset);
  expect("slot_table_offset", h.slot_table_offset, g.slot_table_offset);
  expect("log_offset", h.log_offset, g.log_offset);
  expect("cuda_offset", h.cuda_offset, g.cuda_offset);
  expect("frame_header_offset", h.frame_header_offset, g.frame_header_offset);
  expect("frame_header_stride", h.frame_header_stride, g.frame_header_stride);
  expect("frames_offset", h.frames_offset, g.frames_offset);
  expect("object_bytes", h.object_bytes, g.object_bytes);
}

}  // namespace

Geometry validate_header(const SegmentHeader& h, std::uint64_t segment_bytes,
                         std::string_view channel, bool whole_object) {
  const std::string ch = channel_prefix(channel);
  auto corrupt = [&](const std::string& what) { throw_corrupt(ch, what); };
  check_build_identity(h, ch);
  check_config_ranges(h, ch);
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const Geometry g = compute_geometry(h.slots, h.max_readers, h.max_held, h.frame_bytes, h.backend,
                                      page, h.metadata_bytes);
  check_derived_fields(h, g, ch);
  const std::uint64_t want = whole_object ? g.object_bytes : g.segment_bytes;
  if (segment_bytes != want) {
    corrupt("the object is " + std::to_string(segment_bytes) + " bytes but its header says " +
            std::to_string(want));
  }
  if (std::memchr(h.name, 0, sizeof h.name) == nullptr) corrupt("name is not NUL-terminated");
  if (std::string_view(h.name) != channel) {
    corrupt("it names itself '" + std::string(h.name, strnlen(h.name, 64)) + "'");
  }
  return g;
}

int open_object(std::string_view channel) {
  const std::string object = object_name(channel);
  const int fd = shm_open(object.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0 && errno != ENOENT) throw_system(channel, "cannot open " + shm_path(object), errno);
  return fd;
}

OpenedSegment open_segment(std::string_view channel) {
  validate_name(channel);
  const int fd = open_object(channel);
  if (fd < 0) {
    throw Error(Errc::not_found, channel_prefix(channel) + "no such channel (" +
                                     object_path(channel) +
                                     " does not exist); is its producer running?");
  }
  try {
    OpenedSegment opened = open_segment_fd(channel, fd);
    close(fd);
    return opened;
  } catch (...) {
    close(fd);
    throw;
  }
}

namespace {

// Owner and mode before reading anything: a segment of another user is refused unless its
// creator opened it to group or others on purpose, and never when it is world-writable.
void check_owner_and_mode(std::string_view channel, const std::string& object,
                          const struct stat& st) {
  const unsigned mode = st.st_mode & 07777;
  if ((mode & 0002) != 0 || (mode & 07000) != 0) {
    throw Error(Errc::permission_denied, channel_prefix(channel) + "refusing " + shm_path(object) +
                                             " with unsafe mode " + format_mode(mode));
  }
  if (st.st_uid != geteuid() && geteuid() != 0 && (mode & 0060) != 0060) {
    throw Error(Errc::permission_denied,
                channel_prefix(channel) + shm_path(object) + " belongs to uid " +
                    std::to_string(st.st_uid) + " (mode " + format_mode(mode) +
                    "), not to this process's uid " + std::to_string(geteuid()));
  }
}

// This process's mapping of the object (dev, ino), if it has one.
std::shared_ptr<Mapping> registered_mapping(const struct stat& st) {
  std::lock_guard lock(g_registry_mutex);
  auto it = registry().find({st.st_dev, st.st_ino});
  return it != registry().end() ? it->second.lock() : nullptr;
}

// The header, read with pread, not through a mapping: a short or sparse object (on a full tmpfs a
// touch of an unbacked page is SIGBUS) cannot hurt a read. Checks magic in the private copy; the
// acquire load that orders later loads (H2) is made through the mapping (map_control_segment).
void read_header_copy(std::string_view channel, const std::string& object, int fd,
                      std::uint64_t size, SegmentHeader& copy) {
  const std::string ch = channel_prefix(channel);
  std::memset(static_cast<void*>(&copy), 0, sizeof copy);
  const ssize_t got = pread(fd, &copy, sizeof copy, 0);
  if (got < 0) throw_system(channel, "pread of the header", errno);
  const std::uint64_t magic = copy.magic.load(std::memory_order_relaxed);
  const std::string not_made_here =
      "ipcring names an object only once it is complete, so this one was not made by this "
      "version's Producer::create";
  const std::string remove_it = "Remove it with 'ringdump rm --force " + std::string(channel) + "'";
  if (static_cast<std::size_t>(got) < sizeof copy) {
    if (magic == 0) {
      throw Error(Errc::not_ready, ch + shm_path(object) + " is " + std::to_string(size) +
                                       " bytes and has no header; " + not_made_here + ". " +
                                       remove_it);
    }
    throw Error(Errc::corrupt_segment, ch + "corrupt control segment: the object is " +
                                           std::to_string(size) +
                                           " bytes, smaller than its header");
  }
  if (magic == 0) {
    throw Error(Errc::not_ready, ch + shm_path(object) + " has no magic: " + not_made_here +
                                     " (an older version's creator that died?). " + remove_it);
  }
  if (magic != kMagic) {
    throw Error(Errc::version_mismatch, ch + "not an ipcring segment of this family: magic is " +
                                            format_hex(magic) + ", expected " + format_hex(kMagic));
  }
}

// Every page must be backed: a sparse object could SIGBUS on a full /dev/shm when touched.
void check_backed(std::string_view channel, const std::string& object, const struct stat& st) {
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const auto backed = static_cast<std::uint64_t>(st.st_blocks) * 512;
  if (backed < size) {
    throw Error(Errc::corrupt_segment,
                channel_prefix(channel) + "corrupt control segment: " + shm_path(object) + " is " +
                    std::to_string(size) + " bytes but only " + std::to_string(backed) +
                    " are backed by memory; touching the rest could kill this process (SIGBUS)");
  }
}

}  // namespace

std::shared_ptr<Mapping> map_control_segment(std::string_view channel, int fd, const Geometry& geo,
                                             dev_t dev, ino_t ino, std::uint64_t expected_magic) {
  void* base = mmap(nullptr, geo.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    throw_system(channel, "mmap of " + std::to_string(geo.segment_bytes) + " bytes", err);
  }
  // (H2) acquire, pairs with (H1): everything the creator wrote before magic is visible to our
  // loads through this mapping. (The name appeared only after (H1), so magic is set; a new
  // object's magic is 0 until its creator publishes it.)
  if (static_cast<SegmentHeader*>(base)->magic.load(std::memory_order_acquire) != expected_magic) {
    munmap(base, geo.segment_bytes);
    close(fd);
    throw Error(Errc::corrupt_segment,
                channel_prefix(channel) + "corrupt control segment: magic changed while opening");
  }
  auto mapping =
      std::make_shared<Mapping>(std::string(channel), fd, base, geo.segment_bytes, dev, ino);
  mapping->view = SegmentView{static_cast<unsigned char*>(base), geo, fd};
  std::lock_guard lock(g_registry_mutex);
  auto& slot = registry()[{dev, ino}];
  if (auto existing = slot.lock()) return existing;
  slot = mapping;
  return mapping;
}

void* map_frame_pool(std::string_view channel, const SegmentView& view, FrameAccess access) {
  const int prot = access == FrameAccess::read_only ? PROT_READ : PROT_READ | PROT_WRITE;
  const int flags = access == FrameAccess::copy_on_write ? MAP_PRIVATE : MAP_SHARED;
  void* base = mmap(nullptr, view.geo.frames_segment_bytes, prot, flags, view.fd,
                    static_cast<off_t>(view.geo.frames_offset));
  if (base == MAP_FAILED) {
    throw_system(channel,
                 "mmap of the frame pool (" + std::to_string(view.geo.frames_segment_bytes) +
                     " bytes at offset " + std::to_string(view.geo.frames_offset) + ")",
                 errno);
  }
  return base;
}

OpenedSegment open_segment_fd(std::string_view channel, int object_fd) {
  const std::string object = object_name(channel);
  struct stat st {};
  if (fstat(object_fd, &st) != 0) throw_system(channel, "fstat", errno);
  check_owner_and_mode(channel, object, st);
  const auto owner = static_cast<std::uint32_t>(st.st_uid);
  const std::uint32_t mode = st.st_mode & 07777;
  if (auto existing = registered_mapping(st)) return OpenedSegment{existing, owner, mode};
  const auto size = static_cast<std::uint64_t>(st.st_size);
  SegmentHeader copy;
  read_header_copy(channel, object, object_fd, size, copy);
  const Geometry g = validate_header(copy, size, channel, true);
  check_backed(channel, object, st);
  const int fd = fcntl(object_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw_system(channel, "dup", errno);
  return OpenedSegment{map_control_segment(channel, fd, g, st.st_dev, st.st_ino, kMagic), owner,
                       mode};
}

bool still_named(std::string_view channel, dev_t dev, ino_t ino) noexcept {
  bool missing = false;
  return !name_moved(shm_path(object_name(channel)), dev, ino, missing) && !missing;
}

// True when `path` names another object than (dev, ino), or nothing at all (`missing`).
bool name_moved(const std::string& path, dev_t dev, ino_t ino, bool& missing) noexcept {
  struct stat st {};
  missing = stat(path.c_str(), &st) != 0;
  return !missing && (st.st_dev != dev || st.st_ino != ino);
}

bool unlink_name_if(const std::string& object, dev_t dev, ino_t ino) noexcept {
  struct stat st {};
  if (stat(shm_path(object).c_str(), &st) != 0) return false;
  if (st.st_dev != dev || st.st_ino != ino) return false;
  return shm_unlink(object.c_str()) == 0;
}

}  // namespace ipcring::detail
