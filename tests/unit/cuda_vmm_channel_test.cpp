// cuda_vmm_channel_test.cpp — whole channels on the CUDA VMM path through the fake CUDA: the
// producer's choice (Backend::cuda takes VMM where the device exports file descriptors; a pinned
// path is taken or refused), readers in other PID and user namespaces that attach with
// Reader::attach and read the producer's bytes through their own imports, a refused reader that
// receives nothing, no descriptor or import left over by 1000 attach/detach cycles with failures
// injected, the write-done word ordering a reader's stream after the producer's fill, and a
// producer that dies with its fill still queued: the reader's stream does not wait forever.
//
// Readers in other namespaces are real processes (fork, unshare); each makes its own simulated
// machine with the producer's GPU (same UUID), as a process on another driver instance would.
#include <dirent.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "channel/handout.hpp"
#include "ipcring/ipcring.hpp"
#include "test_util.hpp"
#include "unit/child_process.hpp"
#include "unit/fake_cuda.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using detail::CudaErr;
using test::FakeCuda;
using test::FakeGpuWorld;
using test::FakeOp;
using test::in_child;
using test::open_descriptors;
using test::ScopedChannel;
using test::UseApi;

namespace {

constexpr std::uint8_t kGpu = 0xd7;

ChannelConfig vmm_config(Backend backend = Backend::cuda, std::uint32_t slots = 4) {
  ChannelConfig c;
  c.slots = slots;
  c.max_readers = 2;
  c.max_held = 1;
  c.frame_bytes = 5000;
  c.backend = backend;
  return c;
}

Producer make_producer(const std::shared_ptr<FakeCuda>& api, std::string_view name,
                       const ChannelConfig& config) {
  UseApi use(api);
  return Producer::create(name, config);
}

std::uint64_t publish_pattern(Producer& p) {
  auto loan = p.loan();
  REQUIRE(loan);
  test::fill_pattern(loan->data(), 512, loan->sequence());
  return p.publish(std::move(*loan), 512);
}

// A reader's whole attach in this process, with its own machine: attach, read the newest frame,
// check its bytes and that it is complete, detach. 0 when all of it holds.
int read_one(const std::string& name) {
  try {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto api = world->process();
    UseApi use(api);
    Reader r = Reader::attach(name);
    if (r.cuda_path() != CudaPath::vmm) return 10;
    auto f = r.try_read();
    if (!f) return 11;
    if (!test::check_pattern(f->data(), 512, f->sequence())) return 12;
    if (f->wait_on(nullptr) != Status::ok) return 13;
    if (api->vmm_handles() != 4) return 14;  // one import per buffer
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reader: %s\n", e.what());
    return 15;
  }
}

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("cuda_vmm channel: Backend::cuda takes VMM where the device has it; pins are kept") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    {
      ScopedChannel ch("vmm-choice");
      auto p = make_producer(prod, ch, vmm_config(Backend::cuda));
      CHECK(inspect(ch.name()).cuda_path == CudaPath::vmm);
      CHECK(prod->calls(FakeOp::malloc) == 0);  // no legacy allocation
      CHECK(prod->calls(FakeOp::create_ipc_event) == 0);
      CHECK(world->vmm_allocations() == 4);
    }
    CHECK(world->vmm_allocations() == 0);  // released at close
    {
      ScopedChannel ch("vmm-legacy");
      auto p = make_producer(prod, ch, vmm_config(Backend::cuda_legacy));
      CHECK(inspect(ch.name()).cuda_path == CudaPath::legacy_ipc);
      CHECK(world->vmm_allocations() == 0);
    }
    // A device without VMM descriptors: Backend::cuda takes legacy IPC, a VMM pin is refused with
    // the reason, never replaced.
    auto plain = FakeGpuWorld::device(0xd8);
    plain.vmm_posix_fd = false;
    auto old_world = FakeGpuWorld::make({plain});
    auto old_prod = old_world->process();
    {
      ScopedChannel ch("vmm-auto-legacy");
      auto p = make_producer(old_prod, ch, vmm_config(Backend::cuda));
      CHECK(inspect(ch.name()).cuda_path == CudaPath::legacy_ipc);
    }
    {
      ScopedChannel ch("vmm-pinned");
      try {
        (void)make_producer(old_prod, ch, vmm_config(Backend::cuda_vmm));
        FAIL("a VMM pin was accepted on a device without VMM descriptors");
      } catch (const Error& e) {
        CHECK(e.code() == Errc::unsupported);
        const std::string msg = e.what();
        CHECK(msg.find(ch.name()) != std::string::npos);
        CHECK(msg.find("Backend::cuda_vmm") != std::string::npos);
        CHECK(msg.find("POSIX_FILE_DESCRIPTOR") != std::string::npos);
      }
    }
    // An integrated GPU (no legacy IPC): Backend::cuda takes VMM.
    auto jetson = FakeGpuWorld::device(0xd9);
    jetson.integrated = true;
    auto orin = FakeGpuWorld::make({jetson});
    {
      ScopedChannel ch("vmm-integrated");
      auto p = make_producer(orin->process(), ch, vmm_config(Backend::cuda));
      CHECK(inspect(ch.name()).cuda_path == CudaPath::vmm);
    }
    // More slots than one handout carries descriptors: Backend::cuda takes legacy IPC, a VMM pin
    // is refused naming the limit.
    {
      ScopedChannel ch("vmm-slots-auto");
      auto p = make_producer(prod, ch, vmm_config(Backend::cuda, 65));
      CHECK(inspect(ch.name()).cuda_path == CudaPath::legacy_ipc);
    }
    {
      ScopedChannel ch("vmm-slots");
      try {
        (void)make_producer(prod, ch, vmm_config(Backend::cuda_vmm, 65));
        FAIL("65 VMM slots were accepted");
      } catch (const Error& e) {
        CHECK(e.code() == Errc::invalid_config);
        CHECK(std::string(e.what()).find("at most 64") != std::string::npos);
      }
    }
  }

  TEST_CASE(
      "cuda_vmm channel: readers in other PID and user namespaces read the producer's frames") {
    ScopedChannel ch("vmm-ns");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    auto p = make_producer(prod, ch, vmm_config(Backend::cuda_vmm));
    for (int i = 0; i < 3; ++i) publish_pattern(p);
    const std::string name = ch.name();
    auto nothing = [] { return true; };
    auto body = [&] { return read_one(name); };
    CHECK(in_child(nothing, body, false) == 0);
    if (geteuid() != 0) {
      MESSAGE("a new PID namespace needs root: not run");
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
    // A reader the policy refuses gets a refusal naming its uid, and no descriptor.
    if (geteuid() != 0) {
      MESSAGE("needs root to become another uid: not run");
    } else {
      // In a directory the other uid may enter (the user's private one it may not), so the
      // producer's policy is what refuses it.
      char dir[] = "/tmp/ipcring-vmm-refuse-XXXXXX";
      REQUIRE(mkdtemp(dir) != nullptr);
      chmod(dir, 0755);
      ChannelConfig c = vmm_config(Backend::cuda_vmm);
      c.dir = dir;
      c.mode = 0660;
      {
        auto q = make_producer(prod, "vmm-refused", c);
        publish_pattern(q);
        // Still in group 0, the socket's group (mode 0660), so it connects and the producer's
        // policy (its uid, root, nobody else) decides.
        auto other_uid = [] { return setresuid(4243, 4243, 4243) == 0; };
        auto refused = [&] {
          const int before = open_descriptors();
          try {
            auto w = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
            UseApi use(w->process());
            ReaderOptions o;
            o.dir = dir;
            o.trust_uids = {0};
            (void)Reader::attach("vmm-refused", o);
            return 20;
          } catch (const Error& e) {
            if (e.code() != Errc::permission_denied) {
              std::fprintf(stderr, "refused reader: %s\n", e.what());
              return 21;
            }
            if (std::string(e.what()).find("4243") == std::string::npos) {
              std::fprintf(stderr, "refused reader: %s\n", e.what());
              return 22;
            }
          }
          return open_descriptors() == before ? 0 : 23;
        };
        CHECK(in_child(other_uid, refused, false) == 0);
      }
      rmdir(dir);
    }
  }

  TEST_CASE("cuda_vmm channel: 1000 attach/detach cycles, failures included, leave nothing open") {
    ScopedChannel ch("vmm-cycles");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    auto rdr = world->process();  // another simulated process: it imports, as a remote reader does
    auto p = make_producer(prod, ch, vmm_config(Backend::cuda_vmm));
    publish_pattern(p);
    const int before = open_descriptors();
    int failed = 0;
    int expected_failures = 0;
    for (int cycle = 0; cycle < 1000; ++cycle) {
      const int kind = cycle % 5;
      expected_failures += kind != 0 ? 1 : 0;
      switch (kind) {
        case 1:
          rdr->fail(FakeOp::vmm_import_fd, CudaErr::invalid_value, 1);
          break;
        case 2:
          rdr->fail_after(FakeOp::vmm_map, 2, CudaErr::invalid_value);  // the third buffer
          break;
        case 3:
          rdr->fail(FakeOp::vmm_set_access, CudaErr::invalid_value, 1);
          break;
        case 4:
          rdr->fail(FakeOp::vmm_granularity, CudaErr::invalid_value, 1);
          break;
        default:
          break;
      }
      try {
        UseApi use(rdr);
        Reader r = Reader::attach(ch.name());
        auto f = r.try_read();
        REQUIRE(f);
        CHECK(test::check_pattern(f->data(), 512, f->sequence()));
      } catch (const Error& e) {
        ++failed;
        CHECK(std::string(e.what()).find(ch.name()) != std::string::npos);
      }
    }
    CHECK(failed == expected_failures);
    CHECK(open_descriptors() == before);
    CHECK(rdr->vmm_handles() == 0);
    CHECK(rdr->vmm_ranges() == 0);
    CHECK(world->vmm_allocations() == 4);  // the producer's only
  }

  TEST_CASE("cuda_vmm channel: the write-done word orders the reader's stream after the fill") {
    ScopedChannel ch("vmm-order");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, vmm_config(Backend::cuda_vmm));
    Reader r = [&] {
      UseApi use(rdr);
      return Reader::attach(ch.name());
    }();
    CudaStream ps = prod->make_stream();
    CudaStream rs = rdr->make_stream();
    auto loan = p.loan(ps);
    REQUIRE(loan);
    const std::uint64_t writer = prod->launch(ps);  // the kernel filling the frame, still running
    p.publish(std::move(*loan), 64, ps);
    auto f = r.try_read();
    REQUIRE(f);
    const int waits = rdr->calls(FakeOp::stream_wait_value64);
    CHECK(f->wait_on(rs) == Status::ok);
    CHECK(rdr->calls(FakeOp::stream_wait_value64) == waits + 1);  // on the word, not an event
    CHECK(rdr->calls(FakeOp::stream_wait_event) == 0);
    const std::uint64_t consumer = rdr->launch(rs, false);
    CHECK_FALSE(rdr->done(consumer));  // ordered after the fill
    prod->finish(writer);
    CHECK(rdr->done(consumer));
    // Complete now: a second wait queues nothing (a load of the word says so).
    CHECK(f->wait_on(rs) == Status::ok);
    CHECK(rdr->calls(FakeOp::stream_wait_value64) == waits + 1);
    f->release();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda_vmm channel: a producer that dies with a fill queued leaves no stream waiting") {
    ScopedChannel ch("vmm-death");
    const std::string name = ch.name();
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The producer: publishes a frame whose fill never ends, says so, and waits to be killed.
      close(ready[0]);
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
      auto prod = world->process();
      try {
        Producer p = make_producer(prod, name, vmm_config(Backend::cuda_vmm));
        CudaStream ps = prod->make_stream();
        auto loan = p.loan(ps);
        if (!loan) _exit(3);
        (void)prod->launch(ps);  // held forever
        (void)p.publish(std::move(*loan), 64, ps);
        const char one = 1;
        if (write(ready[1], &one, 1) != 1) _exit(4);
        for (;;) pause();
      } catch (...) {
        _exit(5);
      }
    }
    close(ready[1]);
    char got = 0;
    REQUIRE(read(ready[0], &got, 1) == 1);
    close(ready[0]);
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto rdr = world->process();
    {
      Reader r = [&] {
        UseApi use(rdr);
        ReaderOptions o;
        o.producer_probe = 10ms;
        return Reader::attach(name, o);
      }();
      auto f = r.try_read();
      REQUIRE(f);
      CudaStream rs = rdr->make_stream();
      CHECK(f->wait_on(rs) == Status::ok);  // the fill is queued, so is our wait
      const std::uint64_t consumer = rdr->launch(rs, false);
      CHECK_FALSE(rdr->done(consumer));
      kill(child, SIGKILL);
      int status = 0;
      waitpid(child, &status, 0);
      // The pool's watchdog finds the producer dead and ends the wait: our stream runs on.
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (!rdr->done(consumer) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
      }
      CHECK(rdr->done(consumer));
      // The frame came from a producer that died before finishing it: a new wait says so.
      CHECK(f->wait_on(rs) == Status::producer_gone);
    }
    CHECK(world->hangs() == 0);
    CHECK(rdr->vmm_handles() == 0);
  }

  TEST_CASE(
      "cuda_vmm channel: a producer that closes with a fill queued, then dies, ends the wait") {
    ScopedChannel ch("vmm-close-death");
    const std::string name = ch.name();
    int ready[2];
    int closed[2];
    int go[2];
    REQUIRE(pipe(ready) == 0);
    REQUIRE(pipe(closed) == 0);
    REQUIRE(pipe(go) == 0);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      // The producer: publishes a frame whose fill never ends, closes (its close waits 2 s, finds
      // its own fill outstanding and keeps the lease), then is killed.
      close(ready[0]);
      close(closed[0]);
      close(go[1]);
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
      auto prod = world->process();
      const char one = 1;
      try {
        {
          Producer p = make_producer(prod, name, vmm_config(Backend::cuda_vmm));
          CudaStream ps = prod->make_stream();
          auto loan = p.loan(ps);
          if (!loan) _exit(3);
          (void)prod->launch(ps);  // held forever
          (void)p.publish(std::move(*loan), 64, ps);
          if (write(ready[1], &one, 1) != 1) _exit(4);
          char c = 0;
          if (read(go[0], &c, 1) != 1) _exit(6);
        }  // the close
        if (write(closed[1], &one, 1) != 1) _exit(7);
        for (;;) pause();
      } catch (...) {
        _exit(5);
      }
    }
    close(ready[1]);
    close(closed[1]);
    close(go[0]);
    char got = 0;
    REQUIRE(read(ready[0], &got, 1) == 1);
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto rdr = world->process();
    {
      Reader r = [&] {
        UseApi use(rdr);
        return Reader::attach(name);
      }();
      auto f = r.try_read();
      REQUIRE(f);
      CudaStream rs = rdr->make_stream();
      CHECK(f->wait_on(rs) == Status::ok);
      const std::uint64_t consumer = rdr->launch(rs, false);
      f->release(rs);  // nothing of ours holds the slot: only the producer's own fill is left
      const char one = 1;
      REQUIRE(write(go[1], &one, 1) == 1);
      REQUIRE(read(closed[0], &got, 1) == 1);  // closed, alive, lease kept
      CHECK_FALSE(rdr->done(consumer));
      std::this_thread::sleep_for(50ms);  // the watchdog does not take a closing producer for dead
      CHECK_FALSE(rdr->done(consumer));
      kill(child, SIGKILL);
      int status = 0;
      waitpid(child, &status, 0);
      const auto deadline = std::chrono::steady_clock::now() + 5s;
      while (!rdr->done(consumer) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(5ms);
      }
      CHECK(rdr->done(consumer));
    }
    close(ready[0]);
    close(closed[0]);
    close(go[1]);
    CHECK(world->hangs() == 0);
  }

  TEST_CASE(
      "cuda_vmm channel: the closing producer judges its own fills by words no reader writes") {
    ScopedChannel ch("vmm-forged");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    std::uint64_t kernel = 0;
    {
      auto p = make_producer(prod, ch, vmm_config(Backend::cuda_vmm));
      CudaStream ps = prod->make_stream();
      auto loan = p.loan(ps);
      REQUIRE(loan);
      const std::uint32_t slot = loan->slot();
      kernel = prod->launch(ps);  // the fill, still running
      p.publish(std::move(*loan), 64, ps);
      // A reader (any process the channel let in maps the control segment read-write) forges
      // the slot's write-done word.
      detail::OpenedSegment opened = detail::open_channel(ch.name(), {}, {}, 2000ms);
      opened.mapping->view.cuda_slot(slot).filled.store(std::uint64_t{1} << 40,
                                                        std::memory_order_release);
    }  // the close: its own fill is still running, so nothing may be freed or unregistered
    CHECK(world->vmm_allocations() == 4);
    CHECK(prod->registrations() == 2);  // the control segment and the private words, both kept
    prod->finish(kernel);               // the fill ends; its stream writes both words
    CHECK(world->unregistered_writes() == 0);
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda_vmm channel: a slot's write-done word goes forward whichever streams publish") {
    ScopedChannel ch("vmm-streams");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(kGpu)});
    auto prod = world->process();
    ChannelConfig c = vmm_config(Backend::cuda_vmm, 2);
    c.max_readers = 1;
    auto p = make_producer(prod, ch, c);
    detail::OpenedSegment opened = detail::open_channel(ch.name(), {}, {}, 2000ms);
    CudaStream a = prod->make_stream(true);
    CudaStream b = prod->make_stream(true);
    auto first = p.loan(a);
    REQUIRE(first);
    const std::uint32_t slot = first->slot();
    const std::uint64_t slow = prod->launch(a);  // the first fill of the slot, on stream a
    const std::uint64_t s1 = p.publish(std::move(*first), 64, a);
    std::uint64_t s3 = 0;
    for (int i = 0; i < 4 && s3 == 0; ++i) {
      auto l = p.loan(b);
      REQUIRE(l);
      const bool again = l->slot() == slot;
      const std::uint64_t s = p.publish(std::move(*l), 64, b);  // stream b: nothing running
      if (again) s3 = s;
    }
    REQUIRE(s3 > s1);
    std::atomic<std::uint64_t>& filled = opened.mapping->view.cuda_slot(slot).filled;
    // The newer frame's write waits for the older one's, queued on a, which waits for its fill.
    CHECK(filled.load() < s1);
    prod->finish(slow);
    (void)prod->stream_synchronize(b);
    CHECK(filled.load() == s3);  // never the older frame's value last
    CHECK(world->hangs() == 0);
  }
}
