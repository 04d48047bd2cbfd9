// device_copy_test.cpp — ringdump record's copy of CUDA frames to page-locked host memory
// (tools/ringdump/device_copy.hpp), driven through the fake CUDA of fake_cuda.hpp: a producer and
// the recorder's reader in separate simulated processes.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "backend/cuda/cuda_pool.hpp"
#include "ipcring/ipcring.hpp"
#include "ringdump/device_copy.hpp"
#include "test_util.hpp"
#include "unit/fake_cuda.hpp"

using namespace ipcring;
using test::FakeCuda;
using test::FakeGpuWorld;
using test::FakeOp;
using test::ScopedChannel;
using test::UseApi;

namespace {

ChannelConfig cuda_config() {
  ChannelConfig c;
  c.slots = 4;
  c.max_readers = 2;
  c.max_held = 1;
  c.frame_bytes = 1000;
  c.backend = Backend::cuda;
  return c;
}

struct Rig {
  ScopedChannel ch;
  std::shared_ptr<FakeGpuWorld> world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
  std::shared_ptr<FakeCuda> prod = world->process();
  std::shared_ptr<FakeCuda> rdr = world->process();
  Producer p;
  Reader r;
  explicit Rig(const char* name)
      : ch(name),
        p([&] {
          UseApi use(prod);
          return Producer::create(ch, cuda_config());
        }()),
        r([&] {
          UseApi use(rdr);
          ReaderOptions o;
          o.policy = ReadPolicy::sequential;
          return Reader::attach(ch, o);
        }()) {}
};

}  // namespace

TEST_SUITE("cuda") {
  TEST_CASE("record's device copy: the frame is released only after its copy completed") {
    Rig rig("devcopy-order");
    ringdump::DeviceCopy copy(rig.rdr, std::string(rig.ch.name()), 16);  // grows to the frame
    CHECK(rig.rdr->pinned_allocations() == 1);
    CudaStream ps = rig.prod->make_stream();
    for (int i = 0; i < 6; ++i) {
      auto loan = rig.p.loan(ps);
      REQUIRE(loan);
      test::fill_pattern(loan->data(), 512, loan->sequence());
      const std::uint64_t writer = rig.prod->launch(ps);  // the producer's kernel, still running
      rig.p.publish(std::move(*loan), 512, ps);
      auto f = rig.r.try_read();
      REQUIRE(f);
      const std::uint64_t sequence = f->sequence();
      rig.prod->finish(writer);  // the write completes; the copy is queued after it
      bool used = false;
      const bool ok = copy.copy_then_release(*f, [&](const Frame& held, auto payload) {
        used = true;
        // The copy is complete and the frame still held (its buffer cannot be rewritten).
        CHECK(held.data() != nullptr);
        CHECK(rig.r.held() == 1);
        CHECK(payload.size() == 512);
        CHECK(test::check_pattern(payload.data(), 512, sequence));
      });
      CHECK(ok);
      CHECK(used);
      CHECK(rig.r.held() == 0);  // released after use
      CHECK(f->data() == nullptr);
    }
    CHECK(rig.rdr->calls(FakeOp::memcpy_to_host) == 6);
    CHECK(rig.rdr->calls(FakeOp::stream_synchronize) >= 6);
    CHECK(rig.rdr->pinned_allocations() == 1);
    CHECK(copy.failures() == 0);
    CHECK(rig.world->hangs() == 0);
  }

  TEST_CASE("record's device copy: a copy that cannot complete drops the frame, named") {
    Rig rig("devcopy-hang");
    ringdump::DeviceCopy copy(rig.rdr, std::string(rig.ch.name()), 1000);
    CudaStream ps = rig.prod->make_stream();
    auto loan = rig.p.loan(ps);
    REQUIRE(loan);
    const std::uint64_t writer = rig.prod->launch(ps);  // never finished before the copy
    rig.p.publish(std::move(*loan), 64, ps);
    auto f = rig.r.try_read();
    REQUIRE(f);
    bool used = false;
    CHECK_FALSE(copy.copy_then_release(*f, [&](const Frame&, auto) { used = true; }));
    CHECK_FALSE(used);
    CHECK(rig.r.held() == 0);  // dropped: released
    CHECK(copy.failures() == 1);
    INFO(copy.error());
    CHECK(copy.error().find(std::string(rig.ch.name()) + ": frame 1 dropped") == 0);
    CHECK(copy.error().find("waiting for the copy to host memory") != std::string::npos);
    rig.prod->finish(writer);
  }

  TEST_CASE("record's device copy: a failed copy call drops and counts the frame") {
    Rig rig("devcopy-fail");
    ringdump::DeviceCopy copy(rig.rdr, std::string(rig.ch.name()), 1000);
    for (int i = 0; i < 3; ++i) {
      auto loan = rig.p.loan();
      REQUIRE(loan);
      test::fill_pattern(loan->data(), 256, loan->sequence());
      rig.p.publish(std::move(*loan), 256);
    }
    rig.rdr->fail(FakeOp::memcpy_to_host, detail::CudaErr::invalid_value);
    int used = 0;
    auto f = rig.r.try_read();
    REQUIRE(f);
    CHECK_FALSE(copy.copy_then_release(*f, [&](const Frame&, auto) { ++used; }));
    CHECK(rig.r.held() == 0);
    CHECK(copy.error().find(std::string(rig.ch.name()) + ": frame ") == 0);
    CHECK(copy.error().find("copy to host memory (256 bytes)") != std::string::npos);
    // The next frame is copied: one failure does not stick.
    auto g = rig.r.try_read();
    REQUIRE(g);
    const std::uint64_t sequence = g->sequence();
    CHECK(copy.copy_then_release(*g, [&](const Frame&, auto payload) {
      ++used;
      CHECK(test::check_pattern(payload.data(), 256, sequence));
    }));
    CHECK(used == 1);
    CHECK(copy.failures() == 1);
  }

  TEST_CASE("record's device copy: no page-locked memory is a clear error naming the channel") {
    Rig rig("devcopy-alloc");
    rig.rdr->fail(FakeOp::host_alloc, detail::CudaErr::memory_allocation);
    std::string what;
    try {
      ringdump::DeviceCopy copy(rig.rdr, "cam-alloc", 1000);
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
    INFO(what);
    CHECK(what.find("cam-alloc: cannot allocate 1000 bytes of page-locked host memory") == 0);
  }
}
