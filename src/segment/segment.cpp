#include "segment/segment.hpp"

#include <fcntl.h>
#include <gnu/libc-version.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "common/clock.hpp"
#include "common/errno_text.hpp"
#include "ipcring/error.hpp"
#include "ipcring/inspect.hpp"

namespace bip = boost::interprocess;

namespace ipcring {

void validate_name(std::string_view name) {
  if (name.empty()) {
    throw Error(Errc::invalid_name, "ipcring: channel name is empty");
  }
  if (name.size() > detail::kMaxNameLength) {
    throw Error(Errc::invalid_name, "ipcring: channel name '" + std::string(name.substr(0, 40)) +
                                        "...' is " + std::to_string(name.size()) +
                                        " characters long; at most " +
                                        std::to_string(detail::kMaxNameLength) + " are allowed");
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) {
      char shown[8];
      std::snprintf(shown, sizeof shown, "0x%02x", static_cast<unsigned char>(c));
      throw Error(Errc::invalid_name, "ipcring: channel name '" + std::string(name) +
                                          "' has character " + shown + " at position " +
                                          std::to_string(i) +
                                          "; allowed are letters, digits, '_' and '-'");
    }
  }
}

}  // namespace ipcring

namespace ipcring::detail {

namespace {

[[noreturn]] void throw_system(std::string_view channel, const std::string& what, int err) {
  Errc code = Errc::system_error;
  if (err == EACCES || err == EPERM) code = Errc::permission_denied;
  if (err == ENOENT) code = Errc::not_found;
  throw Error(code, "ipcring: channel '" + std::string(channel) + "': " + what + ": " +
                        errno_text(err) + " (errno " + std::to_string(err) + ")");
}

// Process-wide registry: one mapping per control segment.
std::mutex g_registry_mutex;
std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Mapping>>& registry() {
  static auto* r = new std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Mapping>>();
  return *r;
}

std::string hex32(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

}  // namespace

std::string control_object_name(std::string_view channel) {
  return "ipcring." + std::string(channel);
}
std::string frames_object_name(std::string_view channel) {
  return "ipcring." + std::string(channel) + ".frames";
}
std::string shm_path(const std::string& object_name) {
  return "/dev/shm/" + object_name;
}

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
  const std::string object = control_object_name(channel);
  int fd = -1;
  try {
    // O_CREAT|O_EXCL; Boost applies the permissions again with fchmod, so the umask cannot
    // narrow them.
    bip::permissions perm(static_cast<int>(mode & 0777));
    bip::shared_memory_object shm(bip::create_only, object.c_str(), bip::read_write, perm);
    shm.truncate(static_cast<bip::offset_t>(geo.segment_bytes));  // size set before validation
    fd = dup(shm.get_mapping_handle().handle);
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) return nullptr;
    throw Error(e.get_native_error() == EACCES ? Errc::permission_denied : Errc::system_error,
                "ipcring: channel '" + std::string(channel) + "': cannot create /dev/shm/" +
                    object + " of " + std::to_string(geo.segment_bytes) + " bytes: " + e.what());
  }
  if (fd < 0) throw_system(channel, "dup", errno);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    throw_system(channel, "fstat", err);
  }
  if ((st.st_mode & 0777) != (mode & 0777)) {
    close(fd);
    shm_unlink(object.c_str());
    throw Error(Errc::permission_denied, "ipcring: channel '" + std::string(channel) +
                                             "': created with mode " + hex32(st.st_mode & 0777) +
                                             " instead of " + hex32(mode & 0777));
  }
  void* base = mmap(nullptr, geo.segment_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const int err = errno;
    close(fd);
    shm_unlink(object.c_str());
    throw_system(channel, "mmap of the new control segment", err);
  }
  auto mapping = std::make_shared<Mapping>(std::string(channel), fd, base, geo.segment_bytes,
                                           st.st_dev, st.st_ino);
  mapping->view = SegmentView{static_cast<unsigned char*>(base), geo};
  std::lock_guard lock(g_registry_mutex);
  registry()[{st.st_dev, st.st_ino}] = mapping;
  return mapping;
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

Geometry validate_header(const SegmentHeader& h, std::uint64_t segment_bytes,
                         std::string_view channel) {
  const std::string ch = "ipcring: channel '" + std::string(channel) + "': ";
  auto mismatch = [&](const char* what, std::uint64_t found, std::uint64_t expected) {
    throw Error(Errc::version_mismatch, ch + what + " is " + std::to_string(found) +
                                            " in the segment but " + std::to_string(expected) +
                                            " in this build (layout version " +
                                            std::to_string(kLayoutVersion) + ")");
  };
  auto corrupt = [&](const std::string& what) {
    throw Error(Errc::corrupt_segment, ch + "corrupt control segment: " + what);
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
  if (h.backend != 1 && h.backend != 2) corrupt("backend = " + std::to_string(h.backend));
  if (h.frame_bytes < 1 || h.frame_bytes > kMaxFrameBytes) {
    corrupt("frame_bytes = " + std::to_string(h.frame_bytes));
  }
  if (h.metadata_bytes > kMaxFrameMetadataBytes) {
    corrupt("metadata_bytes = " + std::to_string(h.metadata_bytes) + " (must be 0.." +
            std::to_string(kMaxFrameMetadataBytes) + ")");
  }
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  const Geometry g = compute_geometry(h.slots, h.max_readers, h.max_held, h.frame_bytes, h.backend,
                                      page, h.metadata_bytes);
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
  if (segment_bytes != g.segment_bytes) {
    corrupt("the object is " + std::to_string(segment_bytes) + " bytes but its header says " +
            std::to_string(g.segment_bytes));
  }
  if (std::memchr(h.name, 0, sizeof h.name) == nullptr) corrupt("name is not NUL-terminated");
  if (std::string_view(h.name) != channel) {
    corrupt("it names itself '" + std::string(h.name, strnlen(h.name, 64)) + "'");
  }
  return g;
}

OpenedSegment open_segment(std::string_view channel) {
  validate_name(channel);
  const std::string object = control_object_name(channel);
  const std::string ch = "ipcring: channel '" + std::string(channel) + "': ";
  const auto page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  // Bounded wait for a creator still between O_EXCL and publish_header (about one second).
  for (int attempt = 0;; ++attempt) {
    const int fd = shm_open(object.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      const int err = errno;
      if (err == ENOENT) {
        throw Error(Errc::not_found, ch + "no such channel (/dev/shm/" + object +
                                         " does not exist); is its producer running?");
      }
      throw_system(channel, "cannot open /dev/shm/" + object, err);
    }
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      throw_system(channel, "fstat", err);
    }
    // Owner and mode before mapping: a segment of another user is refused unless its creator
    // opened it to group or others on purpose, and never when it is world-writable.
    const unsigned mode = st.st_mode & 07777;
    if ((mode & 0002) != 0 || (mode & 07000) != 0) {
      close(fd);
      throw Error(Errc::permission_denied,
                  ch + "refusing /dev/shm/" + object + " with unsafe mode " + hex32(mode));
    }
    if (st.st_uid != geteuid() && geteuid() != 0 && (mode & 0060) != 0060) {
      close(fd);
      throw Error(Errc::permission_denied, ch + "/dev/shm/" + object + " belongs to uid " +
                                               std::to_string(st.st_uid) + " (mode " + hex32(mode) +
                                               "), not to this process's uid " +
                                               std::to_string(geteuid()));
    }
    const auto size = static_cast<std::uint64_t>(st.st_size);
    const bool too_small = size < sizeof(SegmentHeader) + sizeof(ProducerBlock);
    if (!too_small) {
      // Reuse this process's mapping of the same object if there is one.
      std::lock_guard lock(g_registry_mutex);
      auto it = registry().find({st.st_dev, st.st_ino});
      if (it != registry().end()) {
        if (auto existing = it->second.lock()) {
          close(fd);
          return OpenedSegment{existing, static_cast<std::uint32_t>(st.st_uid), mode};
        }
      }
    }
    if (!too_small) {
      void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) {
        const int err = errno;
        close(fd);
        throw_system(channel, "mmap of " + std::to_string(size) + " bytes", err);
      }
      auto* header = static_cast<SegmentHeader*>(base);
      // (H2) acquire, pairs with (H1): the creator's initialisation is visible once magic is.
      const std::uint64_t magic = header->magic.load(std::memory_order_acquire);
      if (magic == kMagic) {
        auto mapping =
            std::make_shared<Mapping>(std::string(channel), fd, base, size, st.st_dev, st.st_ino);
        // Validate a private copy: the shared header could change under us.
        SegmentHeader copy;
        std::memcpy(static_cast<void*>(&copy), base, sizeof copy);
        const Geometry g = validate_header(copy, size, channel);
        (void)page;
        mapping->view = SegmentView{static_cast<unsigned char*>(base), g};
        std::lock_guard lock(g_registry_mutex);
        auto& slot = registry()[{st.st_dev, st.st_ino}];
        if (auto existing = slot.lock())
          return {existing, static_cast<std::uint32_t>(st.st_uid), mode};
        slot = mapping;
        return OpenedSegment{mapping, static_cast<std::uint32_t>(st.st_uid), mode};
      }
      munmap(base, size);
      if (magic != 0) {
        close(fd);
        throw Error(Errc::version_mismatch, ch +
                                                "not an ipcring segment of this family: magic is " +
                                                hex32(magic) + ", expected " + hex32(kMagic));
      }
    }
    close(fd);
    if (attempt >= 100) {
      throw Error(Errc::not_ready, ch + "/dev/shm/" + object +
                                       " was never finished by its creator (size " +
                                       std::to_string(size) +
                                       ", no magic); it probably died while creating it. Remove it "
                                       "with 'ringdump rm --force " +
                                       std::string(channel) + "'");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

bool still_named(std::string_view channel, dev_t dev, ino_t ino) noexcept {
  struct stat st {};
  const std::string path = shm_path(control_object_name(channel));
  if (stat(path.c_str(), &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

bool unlink_channel_objects(std::string_view channel) noexcept {
  const bool control = shm_unlink(control_object_name(channel).c_str()) == 0;
  const bool frames = shm_unlink(frames_object_name(channel).c_str()) == 0;
  return control || frames;
}

}  // namespace ipcring::detail
