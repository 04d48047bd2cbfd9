#include "segment/segment.hpp"

#include <fcntl.h>
#include <gnu/libc-version.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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
  if (frames_fd_ >= 0) close(frames_fd_);
}

void Mapping::adopt_frames_fd(int fd) noexcept {
  if (frames_fd_ >= 0) close(frames_fd_);
  frames_fd_ = fd;
  view.frames_fd = fd;
}

std::string memory_label(std::string_view channel, std::string_view what) {
  return "ipcring:" + std::string(what) + ":" + std::string(channel);
}

namespace {

constexpr unsigned kResizeSeals = F_SEAL_SHRINK | F_SEAL_GROW;

// A memfd of `bytes`, reserved in full and sealed against resizing. Throws Error.
int make_memory(std::string_view channel, const char* what, std::uint64_t bytes) {
  const std::string ch = channel_prefix(channel);
  const std::string label = memory_label(channel, what);
  const int fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) {
    const int err = errno;
    throw Error(Errc::unsupported, ch + "memfd_create: " + errno_text(err) + " (errno " +
                                       std::to_string(err) +
                                       "); ipcring needs Linux 3.17 or later");
  }
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    throw_system(
        channel,
        std::string("ftruncate of the ") + what + " to " + std::to_string(bytes) + " bytes", err);
  }
  // Reserve every page now: a page fault later cannot SIGBUS.
  if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err != 0) {
    close(fd);
    if (err == ENOSPC || err == ENOMEM || err == EFBIG) {
      const std::uint64_t mib = (bytes + (1ULL << 20) - 1) >> 20;
      throw Error(Errc::no_space,
                  ch + "cannot reserve the " + what + "'s " + std::to_string(bytes) + " bytes (" +
                      std::to_string(mib) + " MiB) of shared memory: " + errno_text(err) +
                      "; the machine or this process's memory cgroup (a container's --memory) "
                      "has too little left; make the channel smaller (slots * frame_bytes) or "
                      "give it more memory");
    }
    throw_system(
        channel,
        std::string("posix_fallocate of the ") + what + "'s " + std::to_string(bytes) + " bytes",
        err);
  }
  if (fcntl(fd, F_ADD_SEALS, kResizeSeals) != 0) {
    const int err = errno;
    close(fd);
    throw_system(channel, std::string("sealing the ") + what, err);
  }
  return fd;
}

}  // namespace

std::shared_ptr<Mapping> create_segment(std::string_view channel, const Geometry& geo) {
  const int fd = make_memory(channel, "control segment", geo.segment_bytes);
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SEAL) != 0) {
    const int err = errno;
    close(fd);
    throw_system(channel, "sealing the control segment", err);
  }
  int frames = -1;
  if (geo.frames_segment_bytes != 0) {
    try {
      frames = make_memory(channel, "frame pool", geo.frames_segment_bytes);
    } catch (...) {
      close(fd);
      throw;
    }
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    if (frames >= 0) close(frames);
    throw_system(channel, "fstat", err);
  }
  std::shared_ptr<Mapping> m;
  try {
    m = map_control_segment(channel, fd, geo, st.st_dev, st.st_ino, 0);
  } catch (...) {
    if (frames >= 0) close(frames);
    throw;
  }
  if (frames >= 0) m->adopt_frames_fd(frames);
  return m;
}

int seal_frame_pool(std::string_view channel, const Mapping& mapping) {
  if (mapping.frames_fd() < 0) return -1;
  // From now on no mapping or write(2) through any descriptor can change the frames but the
  // producer's existing read-write mapping.
  if (fcntl(mapping.frames_fd(), F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) != 0) {
    throw_system(channel, "sealing the frame pool against writes (F_SEAL_FUTURE_WRITE, Linux 5.1)",
                 errno);
  }
  // A description of its own, opened read-only, for the readers.
  char proc[48];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", mapping.frames_fd());
  const int ro = open(proc, O_RDONLY | O_CLOEXEC);
  if (ro < 0)
    throw_system(channel, "reopening the frame pool read-only (" + std::string(proc) + ")", errno);
  return ro;
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

// The CUDA path fields: none on host channels; on CUDA channels a known path, and for VMM a buffer
// size that holds a frame, is a whole number of pages and is not absurdly larger (the importer
// checks the device's granularity).
void check_cuda_path(const SegmentHeader& h, Geometry& g, const std::string& ch) {
  auto corrupt = [&](const std::string& what) { throw_corrupt(ch, what); };
  if (h.backend != kBackendCuda) {
    if (h.cuda_path != kCudaPathUnset || h.cuda_buffer_bytes != 0) {
      corrupt("a host channel with cuda_path = " + std::to_string(h.cuda_path) +
              ", cuda_buffer_bytes = " + std::to_string(h.cuda_buffer_bytes));
    }
    return;
  }
  const std::uint32_t path = h.cuda_path == kCudaPathUnset ? kCudaPathLegacy : h.cuda_path;
  if (path != kCudaPathLegacy && path != kCudaPathVmm) {
    corrupt("cuda_path = " + std::to_string(h.cuda_path) + " (must be 1 or 2)");
  }
  if (path == kCudaPathLegacy && h.cuda_buffer_bytes != 0) {
    corrupt("a legacy-IPC channel with cuda_buffer_bytes = " + std::to_string(h.cuda_buffer_bytes));
  }
  if (path == kCudaPathVmm &&
      (h.cuda_buffer_bytes < h.frame_bytes || h.cuda_buffer_bytes % 4096 != 0 ||
       h.cuda_buffer_bytes - h.frame_bytes >= (std::uint64_t{1} << 30))) {
    corrupt("cuda_buffer_bytes = " + std::to_string(h.cuda_buffer_bytes) + " for frame_bytes " +
            std::to_string(h.frame_bytes) +
            " (must hold a frame, be a multiple of 4096 and exceed it by less than 1 GiB)");
  }
  g.cuda_path = path;
  g.cuda_buffer_bytes = path == kCudaPathVmm ? h.cuda_buffer_bytes : 0;
}

}  // namespace

DescriptorSet::~DescriptorSet() {
  for (const int fd : fds) close(fd);
}

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
  Geometry out = g;
  check_cuda_path(h, out, ch);
  return out;
}

namespace {

// This process's mapping of the object (dev, ino), if it has one.
std::shared_ptr<Mapping> registered_mapping(const struct stat& st) {
  std::lock_guard lock(g_registry_mutex);
  auto it = registry().find({st.st_dev, st.st_ino});
  return it != registry().end() ? it->second.lock() : nullptr;
}

// The header, read with pread, not through a mapping: a short or sparse object (on a full tmpfs a
// touch of an unbacked page is SIGBUS) cannot hurt a read. Checks magic in the private copy; the
// acquire load that orders later loads (H2) is made through the mapping (map_control_segment).
void read_header_copy(std::string_view channel, int fd, std::uint64_t size, SegmentHeader& copy) {
  const std::string ch = channel_prefix(channel);
  std::memset(static_cast<void*>(&copy), 0, sizeof copy);
  const ssize_t got = pread(fd, &copy, sizeof copy, 0);
  if (got < 0) throw_system(channel, "pread of the header", errno);
  const std::uint64_t magic = copy.magic.load(std::memory_order_relaxed);
  if (static_cast<std::size_t>(got) < sizeof copy) {
    throw Error(Errc::corrupt_segment, ch + "corrupt control segment: it is " +
                                           std::to_string(size) +
                                           " bytes, smaller than its header");
  }
  if (magic == 0) {
    // A producer hands its memory out only after publishing the header.
    throw Error(Errc::not_ready, ch + "the control segment has no magic: its producer handed it "
                                      "out unfinished");
  }
  if (magic != kMagic) {
    throw Error(Errc::version_mismatch, ch + "not an ipcring segment of this family: magic is " +
                                            format_hex(magic) + ", expected " + format_hex(kMagic));
  }
}

// Touching a page must not be able to kill us (SIGBUS). A page of a file on a size-limited tmpfs
// that is a hole (or was only preallocated beyond the end, FALLOC_FL_KEEP_SIZE, which st_blocks
// cannot tell from a reserved page) faults in only while the file system has room; hugetlbfs
// pages only while huge pages are free. A memfd of the kernel's internal shmem mount (every
// memfd_create without MFD_HUGETLB) has no size limit: a hole there is filled on first touch, as
// any anonymous memory is, and never raises SIGBUS. So the memory must be such a memfd: shmem
// (TMPFS_MAGIC) and sealable (a tmpfs file that was not made by memfd_create refuses every
// seal, and the caller requires resize seals); and its block count must cover its size, which a
// producer's full reservation (fallocate at create) gives.
void check_backed(std::string_view channel, const char* what, int fd, const struct stat& st) {
  struct statfs fs {};
  if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    throw Error(Errc::corrupt_segment,
                channel_prefix(channel) + "the " + what +
                    " is not shared memory of a memfd "
                    "(file system " +
                    format_hex(static_cast<std::uint64_t>(fs.f_type)) +
                    "); its pages might not be backed, and touching one could kill this process "
                    "(SIGBUS)");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const auto backed = static_cast<std::uint64_t>(st.st_blocks) * 512;
  if (backed < size) {
    throw Error(Errc::corrupt_segment,
                channel_prefix(channel) + "corrupt " + what + ": it is " + std::to_string(size) +
                    " bytes but only " + std::to_string(backed) +
                    " are reserved; its producer reserves all of it at create");
  }
}

// A received descriptor: a regular file (memfd) of `bytes`, with at least `seals`, opened with
// `access` (O_RDWR or O_RDONLY) or, for the frame pool, read-only.
void check_received(std::string_view channel, const char* what, int fd, std::uint64_t bytes,
                    unsigned seals, bool read_only, struct stat& st) {
  const std::string ch = channel_prefix(channel);
  if (fstat(fd, &st) != 0) throw_system(channel, std::string("fstat of the ") + what, errno);
  if (!S_ISREG(st.st_mode)) {
    throw Error(Errc::corrupt_segment, ch + "the producer sent a " + what +
                                           " that is not a memory file (mode " +
                                           format_mode(st.st_mode) + ")");
  }
  if (static_cast<std::uint64_t>(st.st_size) != bytes) {
    throw Error(Errc::corrupt_segment, ch + "the " + what + " is " + std::to_string(st.st_size) +
                                           " bytes, not the " + std::to_string(bytes) +
                                           " its producer announced");
  }
  const int have = fcntl(fd, F_GET_SEALS);
  if (have < 0 || (static_cast<unsigned>(have) & seals) != seals) {
    throw Error(Errc::corrupt_segment,
                ch + "the " + what + " is not sealed as a producer seals it (seals " +
                    format_hex(static_cast<std::uint32_t>(have < 0 ? 0 : have)) + ", needs " +
                    format_hex(seals) + "): another process could resize it under us");
  }
  const int flags = fcntl(fd, F_GETFL);
  if (read_only && (flags < 0 || (flags & O_ACCMODE) != O_RDONLY)) {
    throw Error(Errc::corrupt_segment, ch + "the " + what + " was not handed out read-only");
  }
  check_backed(channel, what, fd, st);
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
  // loads through this mapping. (The producer hands memory out only after (H1), so magic is set;
  // new memory's magic is 0 until its creator publishes it.)
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
  void* base = mmap(nullptr, view.geo.frames_segment_bytes, prot, flags, view.frames_fd, 0);
  if (base == MAP_FAILED) {
    throw_system(
        channel,
        "mmap of the frame pool (" + std::to_string(view.geo.frames_segment_bytes) + " bytes)",
        errno);
  }
  return base;
}

OpenedSegment open_received(std::string_view channel, int& control_fd, int& frames_fd,
                            std::uint64_t control_bytes, std::uint64_t frames_bytes) {
  const std::string ch = channel_prefix(channel);
  struct stat st {};
  check_received(channel, "control segment", control_fd, control_bytes, kResizeSeals, false, st);
  if (frames_fd >= 0) {
    struct stat fst {};
    check_received(channel, "frame pool", frames_fd, frames_bytes,
                   kResizeSeals | F_SEAL_FUTURE_WRITE, true, fst);
  }
  if (auto existing = registered_mapping(st)) {
    close(control_fd);
    control_fd = -1;
    if (frames_fd >= 0) close(frames_fd);
    frames_fd = -1;
    OpenedSegment opened;
    opened.mapping = existing;
    return opened;
  }
  SegmentHeader copy;
  read_header_copy(channel, control_fd, static_cast<std::uint64_t>(st.st_size), copy);
  const Geometry g = validate_header(copy, static_cast<std::uint64_t>(st.st_size), channel, false);
  if ((g.frames_segment_bytes != 0) != (frames_fd >= 0) ||
      (frames_fd >= 0 && g.frames_segment_bytes != frames_bytes)) {
    throw Error(Errc::corrupt_segment,
                ch + "corrupt control segment: its header says the frame pool has " +
                    std::to_string(g.frames_segment_bytes) + " bytes, the producer sent " +
                    (frames_fd >= 0 ? std::to_string(frames_bytes) + " bytes" : "none"));
  }
  const int fd = control_fd;
  control_fd = -1;  // consumed by map_control_segment, even when it throws
  auto mapping = map_control_segment(channel, fd, g, st.st_dev, st.st_ino, kMagic);
  if (frames_fd >= 0) {
    if (mapping->frames_fd() < 0) {
      mapping->adopt_frames_fd(frames_fd);
    } else {
      close(frames_fd);  // a concurrent open registered the same segment first
    }
    frames_fd = -1;
  }
  OpenedSegment opened;
  opened.mapping = mapping;
  return opened;
}

}  // namespace ipcring::detail
