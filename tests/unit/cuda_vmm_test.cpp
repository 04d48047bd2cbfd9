// cuda_vmm_test.cpp — CUDA VMM frame buffers through the fake CUDA, and their descriptors over
// the channel's socket (channel/handout): the producer's buffers (cuMemCreate, POSIX file
// descriptors) exported once and handed to every reader the policy allows, after the same
// credential checks as the channel's host memory; readers in other PID and user namespaces import
// them, map them read-only and see the producer's bytes; a reader the policy refuses receives no
// descriptor; no descriptor outlives an attach, on any error path.
//
// The readers are real processes (fork, then unshare(2) for their namespaces); each makes its own
// simulated machine, as a process on another GPU driver instance would, and imports what came over
// the socket (memfds stand in for exported allocations, fake_cuda.hpp).
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backend/cuda/cuda_vmm.hpp"
#include "channel/directory.hpp"
#include "channel/handout.hpp"
#include "channel/name_lock.hpp"
#include "ipcring/ipcring.hpp"
#include "unit/child_process.hpp"
#include "unit/fake_cuda.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using detail::CudaErr;
using detail::cuda::VmmExporter;
using detail::cuda::VmmImporter;
using test::FakeGpuWorld;
using test::FakeOp;
using test::in_child;
using test::open_descriptors;

namespace {

constexpr std::uint32_t kBuffers = 3;
constexpr std::uint64_t kFrameBytes = 5000;  // rounded up to the fake's 2 MiB granularity

unsigned char pattern(std::uint32_t buffer, std::uint64_t offset) {
  return static_cast<unsigned char>((std::uint64_t{buffer} * 131 + offset * 7) & 0xff);
}

// A producer: its buffers filled with pattern(), and a channel server handing them out.
struct VmmChannel {
  std::string dir_path;
  std::string name;
  std::shared_ptr<FakeGpuWorld> world;
  std::shared_ptr<test::FakeCuda> api;
  std::unique_ptr<VmmExporter> exporter;
  std::vector<int> exported;
  int control_fd = -1;
  std::unique_ptr<detail::ChannelServer> server;

  VmmChannel() {
    char path[] = "/tmp/ipcring-vmm-XXXXXX";
    REQUIRE(mkdtemp(path) != nullptr);
    dir_path = path;
    chmod(path, 0755);  // a reader of another uid may reach the socket (and be refused)
    name = "vmm-" + std::to_string(getpid());
    world = FakeGpuWorld::make({FakeGpuWorld::device(0xd4)});
    api = world->process();
    exporter = std::make_unique<VmmExporter>(api, 0, kBuffers, kFrameBytes, "test: ");
    for (std::uint32_t b = 0; b < kBuffers; ++b) {
      auto* p = static_cast<unsigned char*>(exporter->buffers()[b].ptr);
      for (std::uint64_t i = 0; i < 4096; ++i) p[i] = pattern(b, i);
    }
    exported = exporter->export_descriptors();
    control_fd = memfd_create("ipcring-vmm-test-control", MFD_CLOEXEC);
    REQUIRE(control_fd >= 0);
    REQUIRE(ftruncate(control_fd, 4096) == 0);
    detail::ChannelDirectory dir = detail::ChannelDirectory::open(name, dir_path, true);
    detail::NameLock lock = detail::NameLock::take(dir, name, 0666);
    detail::AccessPolicy policy;
    policy.producer_uid = geteuid();
    policy.directory = dir.trust();
    detail::ChannelServer::Memory memory;
    memory.control_fd = control_fd;
    memory.control_bytes = 4096;
    memory.instance_id = 7;
    memory.device_fds = exported;
    server = std::make_unique<detail::ChannelServer>(name, std::move(dir), std::move(lock), 0666,
                                                     policy, memory, 100ms);
  }
  ~VmmChannel() {
    server.reset();
    for (const int fd : exported) close(fd);
    close(control_fd);
    exporter.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_path, ec);
  }
  VmmChannel(const VmmChannel&) = delete;
  VmmChannel& operator=(const VmmChannel&) = delete;

  detail::Handout fetch() const {
    const detail::ChannelDirectory d = detail::ChannelDirectory::open(name, dir_path, false);
    return detail::fetch_handout(name, d, {}, 2000ms);
  }
};

// A reader's whole attach, in the calling process: fetch, import with a machine of its own, map
// read-only, compare every buffer with the producer's bytes. 0 when all of it holds.
int attach_and_check(const VmmChannel& ch, std::uint64_t buffer_bytes) {
  try {
    detail::Handout h = ch.fetch();
    if (h.device_fds.size() != kBuffers || h.message.device_descriptors != kBuffers) {
      std::fprintf(stderr, "reader: %zu device descriptors\n", h.device_fds.size());
      return 10;
    }
    if (h.control_fd < 0 || h.frames_fd >= 0) return 11;
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xd4)});
    auto api = world->process();
    VmmImporter imported(api, 0, std::exchange(h.device_fds, {}), kBuffers, buffer_bytes,
                         "reader: ");
    for (std::uint32_t b = 0; b < kBuffers; ++b) {
      const auto* p = static_cast<const unsigned char*>(imported.buffers()[b].ptr);
      for (std::uint64_t i = 0; i < 4096; ++i) {
        if (p[i] != pattern(b, i)) return 12;
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reader: %s\n", e.what());
    return 13;
  }
}

}  // namespace

TEST_CASE("cuda_vmm: buffers are granularity-sized, mapped read-write, undone on every failure") {
  auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xd4)});
  auto api = world->process();
  const int fds_before = open_descriptors();
  {
    VmmExporter e(api, 0, kBuffers, kFrameBytes, "test: ");
    CHECK(e.buffer_bytes() == (2u << 20));
    REQUIRE(e.buffers().size() == kBuffers);
    CHECK(world->vmm_allocations() == static_cast<int>(kBuffers));
    CHECK(api->vmm_mappings() == static_cast<int>(kBuffers));
    auto* p = static_cast<unsigned char*>(e.buffers()[1].ptr);
    p[0] = 42;  // read-write for the producer
    CHECK(p[0] == 42);
  }
  CHECK(world->vmm_allocations() == 0);
  CHECK(api->vmm_handles() == 0);
  CHECK(api->vmm_ranges() == 0);
  // A failure at every step of the second buffer leaves nothing behind, the first included.
  for (FakeOp op :
       {FakeOp::vmm_create, FakeOp::vmm_reserve, FakeOp::vmm_map, FakeOp::vmm_set_access}) {
    CAPTURE(static_cast<int>(op));
    api->fail_after(op, 1, CudaErr::invalid_value);
    CHECK_THROWS_AS(VmmExporter(api, 0, kBuffers, kFrameBytes, "test: "), Error);
    CHECK(world->vmm_allocations() == 0);
    CHECK(api->vmm_handles() == 0);
    CHECK(api->vmm_ranges() == 0);
  }
  // An export that fails for the second buffer leaves the first one's descriptor closed.
  {
    VmmExporter e(api, 0, kBuffers, kFrameBytes, "test: ");
    const int with_buffers = open_descriptors();
    api->fail_after(FakeOp::vmm_export_fd, 1, CudaErr::invalid_value);
    CHECK_THROWS_AS(e.export_descriptors(), Error);
    CHECK(open_descriptors() == with_buffers);
  }
  // No VMM on the device: the error names the call and the device.
  auto plain = FakeGpuWorld::device(0xe5);
  plain.vmm_posix_fd = false;
  auto no_vmm = FakeGpuWorld::make({plain});
  try {
    VmmExporter e(no_vmm->process(), 0, 1, kFrameBytes, "ipcring: channel 'x': ");
    FAIL("a device without VMM descriptors was accepted");
  } catch (const Error& err) {
    CHECK(err.code() == Errc::unsupported);
    CHECK(std::string(err.what()).find("cuMemGetAllocationGranularity") != std::string::npos);
    CHECK(std::string(err.what()).find("channel 'x'") != std::string::npos);
  }
  CHECK(open_descriptors() == fds_before);
}

TEST_CASE("cuda_vmm: a reader's mapping is read-only") {
  auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xd4)});
  auto api = world->process();
  VmmExporter e(api, 0, 1, kFrameBytes, "test: ");
  std::vector<int> fds = e.export_descriptors();
  auto reader = world->process();
  VmmImporter imported(reader, 0, std::move(fds), 1, e.buffer_bytes(), "reader: ");
  static_cast<unsigned char*>(e.buffers()[0].ptr)[10] = 0x5a;
  auto* p = static_cast<volatile unsigned char*>(imported.buffers()[0].ptr);
  CHECK(p[10] == 0x5a);  // the producer's byte, through the reader's own mapping
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);  // the test framework's handler would report it as a crash
    p[10] = 1;                 // must fault
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
}

TEST_CASE("cuda_vmm: readers in other PID and user namespaces receive exactly the buffers") {
  VmmChannel ch;
  const std::uint64_t bytes = ch.exporter->buffer_bytes();
  auto nothing = [] { return true; };
  auto body = [&] { return attach_and_check(ch, bytes); };

  CHECK(in_child(nothing, body, false) == 0);
  if (geteuid() != 0) {
    MESSAGE("a new PID namespace needs root (CAP_SYS_ADMIN): not run");
  } else {
    CHECK(in_child(nothing, body, true) == 0);
  }
  // Its own user namespace (this uid inside is this uid outside), sharing the directory.
  auto user_namespace = [] { return test::enter_own_user_namespace(); };
  const int r = in_child(user_namespace, body, false);
  if (r == 90) {
    MESSAGE("user namespaces are not available here: not run");
  } else {
    CHECK(r == 0);
  }
}

TEST_CASE("cuda_vmm: a reader the policy refuses receives no descriptor") {
  if (geteuid() != 0) {
    MESSAGE("needs root to become another uid: not run");
    return;
  }
  VmmChannel ch;
  auto other_uid = [] {
    return setresgid(4242, 4242, 4242) == 0 && setresuid(4242, 4242, 4242) == 0;
  };
  auto body = [&] {
    const int before = open_descriptors();
    try {
      detail::Handout h = ch.fetch();
      std::fprintf(stderr, "refused reader: got %zu device descriptors\n", h.device_fds.size());
      return 20;
    } catch (const Error& e) {
      if (e.code() != Errc::permission_denied) return 21;
      if (std::string(e.what()).find("refuses uid 4242") == std::string::npos) return 22;
    }
    return open_descriptors() == before ? 0 : 23;
  };
  CHECK(in_child(other_uid, body, false) == 0);
}

TEST_CASE("cuda_vmm: descriptors that come with a control segment that is not one are all closed") {
  VmmChannel ch;  // a memfd of 4096 zero bytes stands in for the control segment
  const int before = open_descriptors();
  try {
    (void)detail::open_channel(ch.name, ch.dir_path, {}, 2000ms);
    FAIL("a handout with a zeroed control segment was opened");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::corrupt_segment);
    CHECK(std::string(e.what()).find(ch.name) != std::string::npos);
  }
  CHECK(open_descriptors() == before);
}

TEST_CASE("cuda_vmm: 1000 attach/detach cycles, failures included, leave no descriptor open") {
  VmmChannel ch;
  const std::uint64_t bytes = ch.exporter->buffer_bytes();
  auto reader = ch.world->process();
  const int before = open_descriptors();
  int failed = 0;
  int expected_failures = 0;
  for (int cycle = 0; cycle < 1000; ++cycle) {
    expected_failures += cycle % 6 != 0 ? 1 : 0;
    try {
      detail::Handout h = ch.fetch();
      REQUIRE(h.device_fds.size() == kBuffers);
      std::uint32_t expected = kBuffers;
      std::uint64_t size = bytes;
      switch (cycle % 6) {
        case 1:
          reader->fail(FakeOp::vmm_import_fd, CudaErr::invalid_value, 1);
          break;
        case 2:
          reader->fail(FakeOp::vmm_map, CudaErr::invalid_value, 1);
          break;
        case 3:
          reader->fail(FakeOp::vmm_set_access, CudaErr::invalid_value, 1);
          break;
        case 4:
          expected = kBuffers + 1;  // a segment that claims another slot count
          break;
        case 5:
          size = bytes + 1;  // not a multiple of the granularity
          break;
        default:
          break;
      }
      VmmImporter imported(reader, 0, std::exchange(h.device_fds, {}), expected, size, "r: ");
      CHECK(imported.buffers().size() == kBuffers);
    } catch (const Error&) {
      ++failed;
    }
  }
  CHECK(failed == expected_failures);
  CHECK(open_descriptors() == before);
  CHECK(reader->vmm_handles() == 0);
  CHECK(reader->vmm_ranges() == 0);
  CHECK(ch.world->vmm_allocations() == static_cast<int>(kBuffers));  // the producer's only
}

TEST_CASE("cuda_vmm: a stream-written word orders the reader's work after the fill") {
  auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xd4)});
  auto producer = world->process();
  auto reader = world->process();
  // The word lives in host memory both processes registered (the control segment's, in the pool).
  alignas(64) static std::uint64_t word = 0;
  REQUIRE(producer->host_register(&word, sizeof word) == CudaErr::success);
  REQUIRE(reader->host_register(&word, sizeof word) == CudaErr::success);
  void* pdev = nullptr;
  void* rdev = nullptr;
  REQUIRE(producer->host_device_pointer(&pdev, &word) == CudaErr::success);
  REQUIRE(reader->host_device_pointer(&rdev, &word) == CudaErr::success);
  const CudaStream ps = producer->make_stream(true);
  const CudaStream rs = reader->make_stream(true);
  const std::uint64_t fill = producer->launch(ps, true);  // the producer's kernel, held
  detail::cuda::vmm_signal_filled(*producer, ps, pdev, 5, "p: ");
  detail::cuda::vmm_wait_filled(*reader, rs, rdev, 5, "r: ");
  const std::uint64_t use = reader->launch(rs, false);  // the reader's kernel
  CHECK_FALSE(reader->done(use));                       // waits for the fill
  CHECK(word == 0);
  producer->finish(fill);
  CHECK(word == 5);
  CHECK(reader->done(use));
  CHECK(producer->host_unregister(&word) == CudaErr::success);
  CHECK(reader->host_unregister(&word) == CudaErr::success);
}
