// cuda_pool_test.cpp — the CUDA backend's logic on the CPU: the pools driven through the fake CUDA
// of fake_cuda.hpp, end to end through the public API (a producer and readers in separate
// simulated processes) and directly on an in-memory segment (takeover, reader death).
#include <doctest/doctest.h>
#include <pthread.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_fence.hpp"
#include "backend/cuda/cuda_import.hpp"
#include "backend/cuda/cuda_pool.hpp"
#include "core.hpp"
#include "ipcring/ipcring.hpp"
#include "lease/lease.hpp"
#include "ring/ring.hpp"
#include "test_util.hpp"
#include "unit/fake_cuda.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using detail::CudaErr;
using test::FakeCuda;
using test::FakeDevice;
using test::FakeGpuWorld;
using test::FakeOp;
using test::ScopedChannel;
using test::UseApi;

namespace {

ChannelConfig cuda_config(std::uint32_t slots = 4, std::uint32_t readers = 2) {
  ChannelConfig c;
  c.slots = slots;
  c.max_readers = readers;
  c.max_held = 1;
  c.frame_bytes = 1000;
  c.backend = Backend::cuda_legacy;  // these cases test the legacy IPC path
  return c;
}

Producer make_producer(const std::shared_ptr<FakeCuda>& api, std::string_view name,
                       const ChannelConfig& config) {
  UseApi use(api);
  return Producer::create(name, config);
}

Reader attach(const std::shared_ptr<FakeCuda>& api, std::string_view name) {
  UseApi use(api);
  return Reader::attach(name);
}

// Publishes one frame whose bytes follow the test pattern (the fake's device memory is host
// memory, so the CPU can write it).
std::uint64_t publish_pattern(Producer& p, CudaStream stream = nullptr) {
  auto loan = stream != nullptr ? p.loan(stream) : p.loan();
  REQUIRE(loan);
  test::fill_pattern(loan->data(), 512, loan->sequence());
  return p.publish(std::move(*loan), 512, stream);
}

std::string error_of(const std::function<void()>& f, Errc& code) {
  try {
    f();
  } catch (const Error& e) {
    code = e.code();
    return e.what();
  }
  code = Errc{};
  return {};
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// An in-memory control segment of the CUDA backend, for driving the pools directly.
class TestSegment {
 public:
  explicit TestSegment(std::uint32_t slots = 4, std::uint32_t readers = 2) {
    geo_ = detail::compute_geometry(slots, readers, 1, 4096, 2, 4096);
    mem_ = static_cast<unsigned char*>(std::aligned_alloc(4096, geo_.segment_bytes));
    std::memset(mem_, 0, geo_.segment_bytes);
    view.base = mem_;
    view.geo = geo_;
    detail::SegmentHeader& h = view.header();
    h.slots = slots;
    h.max_readers = readers;
    h.backend = 2;
    h.frame_bytes = 4096;
    h.reap_period_ns = 4'000'000;  // watchdog tick 1 ms
    REQUIRE(detail::init_robust_mutex(view.producer().lease) == 0);
    for (std::uint32_t r = 0; r < readers; ++r) {
      REQUIRE(detail::init_robust_mutex(view.reader(r).lease) == 0);
      view.reader(r).lease_word.store(0, std::memory_order_relaxed);
    }
  }
  ~TestSegment() {
    for (std::uint32_t r = 0; r < geo_.max_readers; ++r) {
      if (held_[r]) pthread_mutex_unlock(detail::as_mutex(view.reader(r).lease));
    }
    std::free(mem_);
  }
  TestSegment(const TestSegment&) = delete;
  TestSegment& operator=(const TestSegment&) = delete;

  // create: a producer's request, with the owner's reaper (as the core passes it).
  detail::PoolRequest request(bool create, int device = 0) const {
    detail::PoolRequest r;
    r.name = "t-cuda-mem";
    r.view = view;
    r.cuda_device = device;
    r.create = create;
    r.backend = Backend::cuda_legacy;  // these cases test the legacy IPC path
    if (create) r.reap = [v = view] { (void)detail::reap_dead_readers(v); };
    return r;
  }
  // A producer of `epoch` and `instance` owns the channel (as the core sets it before a loan).
  void producer(std::uint64_t epoch, std::uint64_t instance) {
    view.producer().instance_id.store(instance, std::memory_order_relaxed);
    view.producer().lease_word.store(detail::LeaseWord::make(epoch, detail::LeaseState::active),
                                     std::memory_order_release);
  }
  // Reader entry r is held by a live reader of lease generation `gen` (this thread holds its
  // robust mutex, as a reader's lease keeper would).
  std::uint64_t reader_alive(std::uint32_t r, std::uint64_t gen) {
    if (!held_[r]) REQUIRE(pthread_mutex_lock(detail::as_mutex(view.reader(r).lease)) == 0);
    held_[r] = true;
    const std::uint64_t w = detail::LeaseWord::make(gen, detail::LeaseState::active);
    view.reader(r).lease_word.store(w, std::memory_order_release);
    return w;
  }
  // Its process dies: the mutex is no longer held, the entry still reads active.
  void reader_dies(std::uint32_t r) {
    REQUIRE(held_[r]);
    pthread_mutex_unlock(detail::as_mutex(view.reader(r).lease));
    held_[r] = false;
  }
  std::uint32_t fences(std::uint32_t slot) const {
    return view.cuda_slot(slot).release_recorded.load(std::memory_order_relaxed);
  }

  detail::SegmentView view;

 private:
  detail::Geometry geo_;
  unsigned char* mem_ = nullptr;
  bool held_[detail::kMaxReaders] = {};
};

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = 3000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

}  // namespace

// ---- hot path is noexcept ----------------------------------------------------------------------
static_assert(noexcept(std::declval<Producer&>().loan(CudaStream{})));
static_assert(noexcept(std::declval<Producer&>().loan(std::declval<std::chrono::nanoseconds>(),
                                                      CudaStream{})));
static_assert(noexcept(std::declval<Frame&>().wait_on(CudaStream{})));
static_assert(noexcept(std::declval<Frame&>().release(CudaStream{})));

TEST_SUITE("cuda") {
  // ---- end to end through the public API ------------------------------------------------------

  TEST_CASE("cuda: the producer allocates and exports one 2 MiB-rounded buffer per slot, once") {
    ScopedChannel ch("cuda-export");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto p = make_producer(prod, ch, cuda_config(4, 2));
    CHECK(prod->calls(FakeOp::malloc) == 4);
    CHECK(prod->calls(FakeOp::ipc_get_mem_handle) == 4);
    CHECK(prod->calls(FakeOp::create_ipc_event) == 4);  // write-done only: fences are words
    CHECK(prod->calls(FakeOp::ipc_get_event_handle) == 4);
    CHECK(prod->registrations() == 1);  // the control segment, for the fence words
    std::set<const std::byte*> buffers;
    for (int i = 0; i < 10; ++i) {
      auto loan = p.loan();
      REQUIRE(loan);
      CHECK(world->bytes_allocated(loan->data()) == detail::kCudaBufferAlignment);
      CHECK(loan->capacity() == 1000);
      buffers.insert(loan->data());
      p.publish(std::move(*loan), 8);
    }
    CHECK(buffers.size() == 4);
    CHECK(prod->calls(FakeOp::malloc) == 4);  // exported once, reused
    CHECK(prod->calls(FakeOp::ipc_get_mem_handle) == 4);
    CHECK(prod->calls(FakeOp::record_event) == 10);  // write-done per publication
  }

  TEST_CASE("cuda: a reader maps each buffer once per process and sees the producer's bytes") {
    ScopedChannel ch("cuda-cache");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config(4, 2));
    std::set<std::uint32_t> slots;
    {
      auto r1 = attach(rdr, ch);
      for (int i = 0; i < 12; ++i) {
        publish_pattern(p);
        auto f = r1.try_read();
        REQUIRE(f);
        CHECK(test::check_pattern(f->data(), 512, f->sequence()));
        slots.insert(f->slot());
      }
      CHECK(rdr->calls(FakeOp::ipc_open_mem_handle) == static_cast<int>(slots.size()));
      CHECK(rdr->open_mappings() == static_cast<int>(slots.size()));
      // A second Reader of the same process shares the mappings: nothing is opened again.
      auto r2 = attach(rdr, ch);
      const int opens = rdr->calls(FakeOp::ipc_open_mem_handle);
      for (int i = 0; i < 8; ++i) {
        publish_pattern(p);
        auto f = r2.try_read();
        REQUIRE(f);
        CHECK(test::check_pattern(f->data(), 512, f->sequence()));
        slots.insert(f->slot());
      }
      // Only slots r1 had not seen were opened.
      CHECK(rdr->calls(FakeOp::ipc_open_mem_handle) == static_cast<int>(slots.size()));
      CHECK(opens <= rdr->calls(FakeOp::ipc_open_mem_handle));
    }
    // Both detached: every mapping closed, each with the device it was opened on.
    CHECK(rdr->open_mappings() == 0);
    CHECK(rdr->calls(FakeOp::ipc_close_mem_handle) == rdr->calls(FakeOp::ipc_open_mem_handle));
    CHECK(world->wrong_device_closes() == 0);
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: wait_on makes the reader's stream wait for the producer's writes") {
    ScopedChannel ch("cuda-wait");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config());
    auto r = attach(rdr, ch);
    CudaStream ps = prod->make_stream();
    CudaStream rs = rdr->make_stream();
    auto loan = p.loan(ps);
    REQUIRE(loan);
    const std::uint64_t writer = prod->launch(ps);  // the kernel writing the frame, still running
    p.publish(std::move(*loan), 64, ps);
    auto f = r.try_read();
    REQUIRE(f);
    CHECK(f->wait_on(rs) == Status::ok);
    const std::uint64_t consumer = rdr->launch(rs, false);
    CHECK_FALSE(rdr->done(consumer));  // ordered after the write-done event
    prod->finish(writer);
    CHECK(rdr->done(consumer));
    // The legacy stream works too (nullptr).
    CHECK(f->wait_on(nullptr) == Status::ok);
  }

  TEST_CASE("cuda: a buffer is rewritten only after the reader's release fence") {
    ScopedChannel ch("cuda-fence");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config(3, 1));
    auto r = attach(rdr, ch);
    CudaStream ps = prod->make_stream();
    CudaStream rs = rdr->make_stream(true);

    publish_pattern(p);
    auto f = r.try_read();
    REQUIRE(f);
    const std::uint32_t held_slot = f->slot();
    REQUIRE(f->wait_on(rs) == Status::ok);
    const std::uint64_t kernel = rdr->launch(rs);  // still reading the frame
    f->release(rs);                                // released at once, fenced on the GPU
    CHECK(r.held() == 0);

    SUBCASE("plain loan() refuses the slot while the fence runs") {
      int refused = 0;
      for (int i = 0; i < 12; ++i) {
        auto loan = p.loan();
        if (!loan) {
          CHECK(loan.status() == Status::no_free_slot);
          ++refused;
          continue;
        }
        CHECK(loan->slot() != held_slot);
        p.publish(std::move(*loan), 8);
      }
      CHECK(refused > 0);
      rdr->finish(kernel);
      bool got = false;
      for (int i = 0; i < 4 && !got; ++i) {
        auto loan = p.loan();
        REQUIRE(loan);
        got = loan->slot() == held_slot;
        p.publish(std::move(*loan), 8);
      }
      CHECK(got);
    }
    SUBCASE("loan(stream) makes the producer's stream wait on the GPU") {
      for (int i = 0; i < 6; ++i) {
        auto loan = p.loan(ps);
        REQUIRE(loan);
        if (loan->slot() == held_slot) {
          const std::uint64_t writer = prod->launch(ps, false);
          CHECK_FALSE(prod->done(writer));  // behind the reader's fence
          rdr->finish(kernel);
          CHECK(prod->done(writer));
          p.publish(std::move(*loan), 8, ps);
          break;
        }
        p.publish(std::move(*loan), 8, ps);
        CHECK(i < 5);
      }
    }
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: release() without a stream fences the work of the reader's blocking streams") {
    ScopedChannel ch("cuda-legacy");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config(3, 1));
    auto r = attach(rdr, ch);
    CudaStream blocking = rdr->make_stream(false);
    publish_pattern(p);
    auto f = r.try_read();
    REQUIRE(f);
    const std::uint32_t held_slot = f->slot();
    const std::uint64_t kernel = rdr->launch(blocking);
    f->release();  // the fence goes on the legacy stream, after `kernel`
    CHECK((world->hangs() == 0));
    int refused = 0;
    for (int i = 0; i < 8; ++i) {
      auto loan = p.loan();
      if (!loan) {
        ++refused;
        continue;
      }
      CHECK(loan->slot() != held_slot);
      p.publish(std::move(*loan), 8);
    }
    CHECK(refused > 0);
    rdr->finish(kernel);
    bool got = false;
    for (int i = 0; i < 4 && !got; ++i) {
      auto loan = p.loan();
      REQUIRE(loan);
      got = loan->slot() == held_slot;
      p.publish(std::move(*loan), 8);
    }
    CHECK(got);
  }

  TEST_CASE("cuda: machines that cannot run the CUDA backend get a clear error") {
    ScopedChannel ch("cuda-caps");
    Errc code{};
    SUBCASE("no driver") {
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)}, false);
      const std::string msg =
          error_of([&] { make_producer(world->process(), ch, cuda_config()); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "driver"));
      CHECK(contains(msg, "Backend::host"));
      CHECK(contains(msg, ch.name().c_str()));
    }
    SUBCASE("no device") {
      auto world = FakeGpuWorld::make({});
      const std::string msg =
          error_of([&] { make_producer(world->process(), ch, cuda_config()); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "CUDA_VISIBLE_DEVICES"));
      CHECK(contains(msg, "Backend::host"));
    }
    SUBCASE("integrated GPU (Jetson/Orin)") {
      auto dev = FakeGpuWorld::device(0xa1);
      dev.integrated = true;
      auto world = FakeGpuWorld::make({dev});
      const std::string msg =
          error_of([&] { make_producer(world->process(), ch, cuda_config()); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "integrated"));
      CHECK(contains(msg, "Backend::host"));
    }
    SUBCASE("a GPU in compute mode prohibited or exclusive-process") {
      for (const int mode : {2, 3}) {
        auto dev = FakeGpuWorld::device(0xa1);
        dev.compute_mode = mode;
        auto world = FakeGpuWorld::make({dev});
        auto prod = world->process();
        const std::string msg = error_of([&] { make_producer(prod, ch, cuda_config()); }, code);
        INFO(msg);
        CHECK(code == Errc::unsupported);
        CHECK(contains(msg, mode == 2 ? "compute mode prohibited" : "exclusive-process"));
        CHECK(contains(msg, "nvidia-smi -c DEFAULT"));
        CHECK(contains(msg, ch.name().c_str()));
        CHECK(prod->calls(FakeOp::malloc) == 0);  // refused before anything was allocated
      }
    }
    SUBCASE("IPC not supported where the probe did not tell") {
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
      auto prod = world->process();
      prod->fail(FakeOp::ipc_get_mem_handle, CudaErr::not_supported);
      const std::string msg = error_of([&] { make_producer(prod, ch, cuda_config()); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "cudaIpcGetMemHandle"));
      CHECK(contains(msg, "Backend::host"));
      CHECK(prod->calls(FakeOp::free) == prod->calls(FakeOp::malloc));  // nothing leaked
    }
    SUBCASE("a cuda_device this process does not have") {
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
      auto config = cuda_config();
      config.cuda_device = 3;
      const std::string msg = error_of([&] { make_producer(world->process(), ch, config); }, code);
      CHECK(code == Errc::invalid_config);
      CHECK(contains(msg, "cuda_device = 3"));
    }
    SUBCASE("cudaMalloc fails") {
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
      auto prod = world->process();
      prod->fail(FakeOp::malloc, CudaErr::memory_allocation);
      const std::string msg = error_of([&] { make_producer(prod, ch, cuda_config()); }, code);
      CHECK(code == Errc::cuda_error);
      CHECK(contains(msg, "cudaErrorMemoryAllocation"));
    }
    SUBCASE("a reader whose process has no driver") {
      auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
      auto p = make_producer(world->process(), ch, cuda_config());
      auto broken = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)}, false);
      const std::string msg = error_of([&] { attach(broken->process(), ch); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "Backend::host"));
      CHECK(inspect(ch).readers.empty());  // the failed attach left no entry behind
    }
    // A failed create leaves no channel behind.
    CHECK_THROWS_AS(inspect(ch), Error);
  }

  TEST_CASE("cuda: readers find the frames' GPU by UUID, not by ordinal") {
    ScopedChannel ch("cuda-uuid");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), FakeGpuWorld::device(0xb2)});
    auto config = cuda_config();
    config.cuda_device = 1;  // the producer's GPU is world device 1 (UUID b2...)
    auto p = make_producer(world->process(), ch, config);
    Errc code{};

    SUBCASE("renumbered by CUDA_VISIBLE_DEVICES") {
      auto rdr = world->process({1, 0});  // device 1 is this process's ordinal 0
      auto r = attach(rdr, ch);
      publish_pattern(p);
      auto f = r.try_read();
      REQUIRE(f);
      CHECK(test::check_pattern(f->data(), 512, f->sequence()));
    }
    SUBCASE("hidden by CUDA_VISIBLE_DEVICES") {
      const std::string msg = error_of([&] { attach(world->process({0}), ch); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "GPU-b2b2b2b2-b2b2-b2b2-b2b2-b2b2b2b2b2b2"));
      CHECK(contains(msg, "CUDA_VISIBLE_DEVICES"));
    }
    SUBCASE("another GPU without peer access") {
      auto rdr = world->process();  // current device 0 (a1), frames on 1 (b2)
      const std::string msg = error_of([&] { attach(rdr, ch); }, code);
      CHECK(code == Errc::unsupported);
      CHECK(contains(msg, "peer"));
      CHECK(contains(msg, "cudaSetDevice(1)"));
    }
    SUBCASE("another GPU with peer access") {
      world->set_peer_access(0, 1, true);
      auto rdr = world->process();
      auto r = attach(rdr, ch);
      publish_pattern(p);
      auto f = r.try_read();
      REQUIRE(f);
      CHECK(test::check_pattern(f->data(), 512, f->sequence()));
      CHECK(rdr->open_mappings() == 1);
    }
    SUBCASE("a takeover on another GPU is refused") {
      // Simulated here at the pool level: the header names b2, the new producer uses a1.
      TestSegment seg;
      std::memset(seg.view.header().cuda_uuid, 0xb2, 16);
      const std::string msg = error_of(
          [&] { detail::make_cuda_producer_pool(seg.request(false, 0), world->process()); }, code);
      CHECK(code == Errc::config_mismatch);
      CHECK(contains(msg, "same GPU"));
    }
  }

  TEST_CASE("cuda: a MIG compute instance is named as nvidia-smi names it") {
    // The runtime's UUID bytes of a MIG instance carry no marker; nvidia-smi -L and
    // CUDA_VISIBLE_DEVICES spell it MIG-<uuid>, so the messages do too (NVML tells which).
    ScopedChannel ch("cuda-mig");
    FakeDevice mig = FakeGpuWorld::device(0xc3);
    mig.mig = true;
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), mig});
    auto config = cuda_config();
    config.cuda_device = 1;
    auto p = make_producer(world->process(), ch, config);
    Errc code{};
    const std::string msg = error_of([&] { attach(world->process({0}), ch); }, code);
    CHECK(code == Errc::unsupported);
    CHECK(contains(msg, "its frames live on MIG-c3c3c3c3-c3c3-c3c3-c3c3-c3c3c3c3c3c3"));
    CHECK(contains(msg, "visible: GPU-a1a1a1a1-a1a1-a1a1-a1a1-a1a1a1a1a1a1 (0)"));
  }

  TEST_CASE("cuda: a reader in the producer's own process uses its buffers without IPC") {
    ScopedChannel ch("cuda-local");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto proc = world->process();
    auto p = make_producer(proc, ch, cuda_config());
    auto r = attach(proc, ch);
    const std::byte* written = nullptr;
    {
      auto loan = p.loan();
      REQUIRE(loan);
      written = loan->data();
      test::fill_pattern(loan->data(), 512, loan->sequence());
      p.publish(std::move(*loan), 512);
    }
    auto f = r.try_read();
    REQUIRE(f);
    CHECK(f->data() == written);
    CHECK(proc->calls(FakeOp::ipc_open_mem_handle) == 0);
    CHECK(proc->calls(FakeOp::ipc_open_event_handle) == 0);
    CudaStream s = proc->make_stream();
    CHECK(f->wait_on(s) == Status::ok);
    f->release(s);
  }

  TEST_CASE("cuda: cudaErrorAlreadyMapped fails one read cleanly") {
    ScopedChannel ch("cuda-mapped");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    world->already_mapped_mode = true;  // an older driver: a second open in a process fails
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config());
    {
      // Two Readers of one process share the mappings, so no handle is ever opened twice.
      auto r1 = attach(rdr, ch);
      auto r2 = attach(rdr, ch);
      for (int i = 0; i < 6; ++i) {
        publish_pattern(p);
        auto f1 = r1.try_read();
        auto f2 = r2.try_read();
        REQUIRE(f1);
        REQUIRE(f2);
        CHECK(f1->data() == f2->data());
        CHECK(test::check_pattern(f2->data(), 512, f2->sequence()));
      }
    }
    CHECK(rdr->open_mappings() == 0);
    // Mapped outside ipcring (user code opened the same handle): that read fails, nothing sticks.
    auto r = attach(rdr, ch);
    rdr->fail(FakeOp::ipc_open_mem_handle, CudaErr::already_mapped);
    publish_pattern(p);
    auto bad = r.try_read();
    CHECK(bad.status() == Status::backend_error);
    CHECK(rdr->get_last_error() == CudaErr::success);  // consumed, not left for the next call
    CHECK(r.held() == 0);                              // the claim was given back
    publish_pattern(p);
    auto good = r.try_read();
    REQUIRE(good);
    CHECK(test::check_pattern(good->data(), 512, good->sequence()));
  }

  TEST_CASE(
      "cuda: Backend::cuda with the real CUDA runtime: works on a GPU, a clear error elsewhere") {
    ScopedChannel ch("cuda-real");
    detail::set_cuda_api_for_testing(nullptr);
    auto runtime = detail::cudart_api();
    int devices = 0;
    const bool gpu =
        runtime && runtime->get_device_count(devices) == CudaErr::success && devices > 0;
    if (runtime) (void)runtime->get_last_error();
    if (gpu) {
      auto p = Producer::create(ch, cuda_config());
      auto r = Reader::attach(ch);
      auto loan = p.loan();
      REQUIRE(loan);
      p.publish(std::move(*loan), 16);
      auto f = r.try_read();
      REQUIRE(f);
      CHECK(f->wait_on(nullptr) == Status::ok);
      f->release();
      return;
    }
    Errc code{};
    const std::string msg = error_of([&] { (void)Producer::create(ch, cuda_config()); }, code);
    MESSAGE("no GPU here: " << msg);
    CHECK(code == Errc::unsupported);
    CHECK(contains(msg, "Backend::host"));
    CHECK_THROWS_AS(inspect(ch), Error);  // nothing left behind
    // The host backend still works in the same process.
    auto config = cuda_config();
    config.backend = Backend::host;
    auto p = Producer::create(ch, config);
    CHECK(p.loan());
  }

  // ---- the pools on an in-memory segment
  // ----------------------------------------------------------

  TEST_CASE("cuda: a takeover re-maps the slot and closes the old mapping with its own device") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), FakeGpuWorld::device(0xb2)});
    TestSegment seg;
    auto p1proc = world->process();
    auto rdr = world->process();
    seg.producer(1, 0x1111);
    auto p1 = detail::make_cuda_producer_pool(seg.request(true), p1proc);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);  // opens on device 0
    reader->attached(0);
    REQUIRE(p1->prepare_write(0, nullptr) == Status::ok);
    const std::byte* old = reader->buffer(0, 1, 0x1111);
    REQUIRE(old != nullptr);
    CHECK(reader->buffer(0, 1, 0x1111) == old);  // cached
    CHECK(rdr->calls(FakeOp::ipc_open_mem_handle) == 1);
    reader->release_fence(0, 0, nullptr);

    // The user's thread now works on device 1; the producer dies and another takes over.
    REQUIRE(rdr->set_device(1) == CudaErr::success);
    p1proc->kill();
    auto p2proc = world->process();
    seg.producer(2, 0x2222);
    auto p2 = detail::make_cuda_producer_pool(seg.request(false), p2proc);

    SUBCASE("handles not yet published by the new producer are not used") {
      CHECK(reader->buffer(0, 2, 0x2222) == nullptr);
    }
    SUBCASE("frames of the new epoch map the new buffer") {
      REQUIRE(p2->prepare_write(0, nullptr) == Status::ok);
      const std::byte* fresh = reader->buffer(0, 2, 0x2222);
      REQUIRE(fresh != nullptr);
      CHECK(fresh != old);
      CHECK(rdr->calls(FakeOp::ipc_close_mem_handle) == 1);  // the old one, closed once
      CHECK(world->wrong_device_closes() == 0);              // ... with device 0, current at open
      CHECK(rdr->current_device() == 1);                     // and the user's device restored
      CHECK(rdr->open_mappings() == 1);
      // A reader still in epoch 1 that claims a slot never maps the new producer's buffer.
      CHECK(reader->buffer(1, 1, 0x2222) == nullptr);
      CHECK(reader->buffer(1, 1, 0x1111) == nullptr);
      reader->release_fence(0, 0, nullptr);
    }
    reader.reset();
    CHECK(rdr->open_mappings() == 0);
    CHECK(world->wrong_device_closes() == 0);
  }

  TEST_CASE("cuda: the dead-reader rule") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(4, 2);
    auto prod = world->process();
    seg.producer(1, 0x1111);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);  // publishes the handles
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);

    // Reader 1 (its own process) reads slot 0, queues a kernel on it and releases with a fence.
    auto rdr = world->process();
    const std::uint64_t lease = seg.reader_alive(1, 3);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(1);
    REQUIRE(reader->buffer(0, 1, 0x1111) != nullptr);
    CudaStream rs = rdr->make_stream(true);
    REQUIRE(reader->wait_on(0, rs) == Status::ok);
    const std::uint64_t kernel = rdr->launch(rs);
    reader->release_fence(0, 1, rs);
    CHECK(seg.fences(0) == 0b10);
    CudaStream ps = prod->make_stream();

    SUBCASE("a live reader's running fence keeps the slot from a plain loan") {
      CHECK(pool->prepare_write(0, nullptr) == Status::no_free_slot);
      CHECK(seg.fences(0) == 0b10);
      rdr->finish(kernel);
      CHECK(pool->prepare_write(0, nullptr) == Status::ok);
      CHECK(seg.fences(0) == 0);
    }
    SUBCASE("a reader that died is reaped and its fence forgotten") {
      rdr->kill();  // the fence will never complete
      seg.reader_dies(1);
      CHECK(pool->prepare_write(0, nullptr) == Status::ok);  // reaped inside, not waited for
      CHECK(seg.fences(0) == 0);
      CHECK(detail::LeaseWord::state(seg.view.reader(1).lease_word.load()) ==
            static_cast<std::uint8_t>(detail::LeaseState::free));
    }
    SUBCASE("a GPU wait queued before the reader died is released when the producer reaps it") {
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      const std::uint64_t writer = prod->launch(ps, false);
      CHECK_FALSE(prod->done(writer));
      rdr->kill();
      seg.reader_dies(1);
      // What Producer::loan does (the watchdog's probe may get there first; either releases it).
      (void)detail::reap_dead_readers(seg.view);
      CHECK(eventually([&] { return prod->done(writer); }));
    }
    SUBCASE("... and by the watchdog when another process reaped it") {
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      const std::uint64_t writer = prod->launch(ps, false);
      rdr->kill();
      seg.reader_dies(1);
      (void)detail::reap_dead_readers(seg.view);  // e.g. ringdump reap
      CHECK(eventually([&] { return prod->done(writer); }));
    }
    SUBCASE("... and by the watchdog's own probe when nobody reaped it") {
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      const std::uint64_t writer = prod->launch(ps, false);
      rdr->kill();
      seg.reader_dies(1);
      CHECK(eventually([&] { return prod->done(writer); }));
      CHECK(detail::LeaseWord::state(seg.view.reader(1).lease_word.load()) ==
            static_cast<std::uint8_t>(detail::LeaseState::free));
    }
    SUBCASE("... and by a successor that takes over the dead reader's entry") {
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      const std::uint64_t writer = prod->launch(ps, false);
      rdr->kill();
      // A new reader takes the dead one's entry directly (attach's trylock finds the owner dead):
      // take_reader_entry clears its bits and runs the backend's hook, then a new lease
      // generation. (This thread keeps holding the entry's mutex: it now stands for the
      // successor's lease keeper.)
      detail::clear_reader_bits(seg.view, 1);
      detail::reader_fences_reaped(seg.view, 1, detail::LeaseWord::generation(lease));
      const std::uint64_t next = seg.reader_alive(1, 5);
      CHECK(next != lease);
      CHECK(eventually([&] { return prod->done(writer); }));
    }
    CHECK(world->hangs() == 0);
    reader.reset();
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE(
      "cuda: a detaching reader waits (bounded) for its fences; past the bound it keeps the "
      "mapping") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(3, 1);
    auto prod = world->process();
    seg.producer(1, 0x77);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(2, nullptr) == Status::ok);
    REQUIRE(pool->before_publish(2, nullptr, 1) == Status::ok);
    seg.view.slot(2).sequence.store(9);
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    REQUIRE(reader->buffer(2, 1, 0x77) != nullptr);
    CudaStream rs = rdr->make_stream(true);
    const std::uint64_t kernel = rdr->launch(rs);
    reader->release_fence(2, 0, rs);
    REQUIRE(seg.fences(2) == 0b1);
    const auto start = std::chrono::steady_clock::now();
    std::size_t kept_before = 0;
    {
      std::lock_guard lock(detail::cuda::registry_mutex());
      kept_before = detail::cuda::kept_mappings();
    }
    SUBCASE("its kernel finishes: detach waits for it, then unmaps and unregisters") {
      std::thread gpu([&] {
        std::this_thread::sleep_for(50ms);
        rdr->finish(kernel);
      });
      reader.reset();  // detach
      gpu.join();
      CHECK(std::chrono::steady_clock::now() - start >= 50ms);
      CHECK(rdr->open_mappings() == 0);
      CHECK(rdr->registrations() == 0);
      CHECK(seg.fences(2) == 0);  // complete, so forgotten at detach
      CHECK(pool->prepare_write(2, nullptr) == Status::ok);
    }
    SUBCASE("its kernel still runs: the mapping stays open and the producer keeps waiting for it") {
      reader.reset();
      const auto took = std::chrono::steady_clock::now() - start;
      CHECK(took >= 1s);
      CHECK(took < 10s);
      CHECK_FALSE(rdr->done(kernel));
      CHECK(rdr->open_mappings() == 1);  // never unmapped under a running kernel
      CHECK(rdr->registrations() == 1);  // its queued fence write still targets the segment
      {
        std::lock_guard lock(detail::cuda::registry_mutex());
        CHECK(detail::cuda::kept_mappings() == kept_before + 1);
      }
      // The entry may be taken by a successor: the producer still waits under the detached
      // reader's own generation, and the fence completes when its kernel does.
      seg.reader_alive(0, 3);
      CHECK(pool->prepare_write(2, nullptr) == Status::no_free_slot);
      rdr->finish(kernel);
      CHECK(pool->prepare_write(2, nullptr) == Status::ok);
      CHECK(world->unregistered_writes() == 0);
    }
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: the reaper's hook completes exactly the dead incarnation's fences") {
    TestSegment seg(3, 3);
    using detail::FenceWord;
    for (std::uint32_t i = 0; i < 3; ++i) {
      seg.view.cuda_slot(i).release_recorded.store(0b111, std::memory_order_relaxed);
      seg.view.cuda_slot(i).fence_generation[1].store(7, std::memory_order_relaxed);
      seg.view.cuda_slot(i).fence_epoch[1].store(3, std::memory_order_relaxed);
      seg.view.cuda_slot(i).release_fence[1][1].store(FenceWord::make(3, 10 + i));
      seg.view.cuda_slot(i).release_fence[0][1].store(FenceWord::make(2, 50));
    }
    // Slot 2's last fence of entry 1 is an earlier incarnation's (it detached with its kernel
    // still running): the hook must leave it to that process.
    seg.view.cuda_slot(2).fence_generation[1].store(5, std::memory_order_relaxed);
    seg.view.cuda_slot(2).fence_epoch[1].store(2, std::memory_order_relaxed);
    seg.view.cuda_slot(2).release_fence[0][1].store(FenceWord::make(2, 3));
    detail::reader_fences_reaped(seg.view, 1, 7);
    for (std::uint32_t i = 0; i < 2; ++i) {
      CHECK(seg.fences(i) == 0b101);
      CHECK(FenceWord::reached(seg.view.cuda_slot(i).release_fence[1][1].load(),
                               FenceWord::make(3, 1ULL << 47)));
      CHECK_FALSE(FenceWord::reached(seg.view.cuda_slot(i).release_fence[1][1].load(),
                                     FenceWord::make(5, 1)));  // a successor's are its own
      // The other word of the pair (the recorder before it) is left as it was.
      CHECK(seg.view.cuda_slot(i).release_fence[0][1].load() == FenceWord::make(2, 50));
    }
    CHECK(seg.fences(2) == 0b111);
    CHECK(seg.view.cuda_slot(2).release_fence[0][1].load() == FenceWord::make(2, 3));
    CHECK(seg.view.cuda_slot(2).release_fence[1][1].load() == FenceWord::make(3, 12));
    // The ring's reaper step itself no longer knows CUDA.
    detail::clear_reader_bits(seg.view, 0);
    CHECK(seg.fences(0) == 0b101);
  }

  // ---- the fake models documented semantics only -----------------------------------------------

  TEST_CASE("fake CUDA: a newer record does not release a wait queued on an earlier one") {
    // cudaEventRecord: "Other APIs such as cudaStreamWaitEvent use the most recently captured
    // state at the time of the API call, and are not affected by later calls to cudaEventRecord".
    // The rescue record the backend once relied on would need the opposite.
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto p = world->process();
    REQUIRE(p->set_device(0) == CudaErr::success);
    detail::CudaEvent e = nullptr;
    REQUIRE(p->create_ipc_event(e) == CudaErr::success);
    CudaStream a = p->make_stream(true);
    CudaStream b = p->make_stream(true);
    CudaStream c = p->make_stream(true);
    const std::uint64_t stuck = p->launch(a);  // never finishes on its own (a dead peer's work)
    REQUIRE(p->record_event(e, a) == CudaErr::success);
    REQUIRE(p->stream_wait_event(b, e) == CudaErr::success);
    const std::uint64_t after = p->launch(b, false);
    REQUIRE(p->record_event(e, c) == CudaErr::success);  // completes at once on the idle stream
    CHECK(p->query_event(e) == CudaErr::success);        // the query sees the newest record...
    CHECK_FALSE(p->done(after));                         // ...the queued wait does not
    p->finish(stuck);
    CHECK(p->done(after));
  }

  TEST_CASE("fake CUDA: stream memory operations on registered memory only; GEQ is cyclic") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto p = world->process();
    REQUIRE(p->set_device(0) == CudaErr::success);
    alignas(64) static std::uint64_t words[8] = {};
    CudaStream s = p->make_stream(true);
    CHECK(p->stream_write_value64(s, &words[0], 1) == CudaErr::invalid_value);
    REQUIRE(p->host_register(words, sizeof words) == CudaErr::success);
    CHECK(p->host_register(words, sizeof words) == CudaErr::host_memory_already_registered);
    void* d = nullptr;
    REQUIRE(p->host_device_pointer(&d, &words[1]) == CudaErr::success);
    words[1] = ~0ULL - 1;                                          // -2
    REQUIRE(p->stream_wait_value64(s, d, 1) == CudaErr::success);  // waits for (int64)(w-1) >= 0
    const std::uint64_t work = p->launch(s, false);
    CHECK_FALSE(p->done(work));
    std::atomic_ref<std::uint64_t>(words[1]).store(1);  // a CPU store (a reaper's) releases it
    CHECK(p->done(work));
    REQUIRE(p->host_unregister(words) == CudaErr::success);
  }

  // ---- the fence, the reaper and the race of a late reaper ----------------------------------

  TEST_CASE("cuda: a late reaper of a dead reader cannot complete its successor's fence") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(2, 2);
    auto prod = world->process();
    seg.producer(1, 0x5151);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
    seg.view.slot(0).sequence.store(1);

    // The dead incarnation (generation 3) of entry 1 released frame 1 with its kernel queued.
    auto dead = world->process();
    const std::uint64_t dead_lease = seg.reader_alive(1, 3);
    auto d = detail::make_cuda_reader_pool(seg.request(false), dead);
    d->attached(1);
    REQUIRE(d->buffer(0, 1, 0x5151) != nullptr);
    CudaStream ds = dead->make_stream(true);
    (void)dead->launch(ds);
    d->release_fence(0, 1, ds);
    dead->kill();
    seg.reader_dies(1);
    // A reaper (ringdump reap, say) probes the entry and finds it dead... and is delayed.
    // Meanwhile the producer reaps it itself and reuses the slot.
    CHECK(detail::reap_dead_readers(seg.view) == 1);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
    seg.view.slot(0).sequence.store(2);
    // A successor (generation 5) takes the entry, reads frame 2 and releases it with a kernel
    // still running.
    auto next = world->process();
    seg.reader_alive(1, 5);
    auto n = detail::make_cuda_reader_pool(seg.request(false), next);
    n->attached(1);
    REQUIRE(n->buffer(0, 1, 0x5151) != nullptr);
    CudaStream ns = next->make_stream(true);
    const std::uint64_t kernel = next->launch(ns);
    n->release_fence(0, 1, ns);
    // The delayed reaper now acts on what it saw: the dead incarnation. It must not complete the
    // successor's fence.
    detail::clear_reader_bits(seg.view, 1);
    detail::reader_fences_reaped(seg.view, 1, detail::LeaseWord::generation(dead_lease));
    CHECK(pool->prepare_write(0, nullptr) == Status::no_free_slot);
    next->finish(kernel);
    CHECK(pool->prepare_write(0, nullptr) == Status::ok);
    d.reset();
    n.reset();
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE(
      "cuda: a dead reader's fence write that lands after its successor's release lowers "
      "nothing") {
    // A dying process releases its robust futexes (its lease reads dead, so it is reaped and its
    // entry handed over) before its device files close: its context may still perform a queued
    // fence write after its successor released the same slot.
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(2, 2);
    auto prod = world->process();
    REQUIRE(prod->set_device(0) == CudaErr::success);
    seg.producer(1, 0x6161);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
    seg.view.slot(0).sequence.store(1);

    auto dead = world->process();
    REQUIRE(dead->set_device(0) == CudaErr::success);  // a reader thread with its context
    seg.reader_alive(1, 3);
    auto d = detail::make_cuda_reader_pool(seg.request(false), dead);
    d->attached(1);
    REQUIRE(d->buffer(0, 1, 0x6161) != nullptr);
    CudaStream ds = dead->make_stream(true);
    (void)dead->launch(ds);
    d->release_fence(0, 1, ds);
    dead->kill_leaving_writes();
    seg.reader_dies(1);
    CHECK(detail::reap_dead_readers(seg.view) == 1);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);  // the reaper completed its fence
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
    seg.view.slot(0).sequence.store(2);

    // The successor takes the entry, reads frame 2 of the same slot and releases it; its kernel
    // ends and its fence lands. Then the dead context's queued write lands.
    auto next = world->process();
    REQUIRE(next->set_device(0) == CudaErr::success);
    seg.reader_alive(1, 5);
    auto n = detail::make_cuda_reader_pool(seg.request(false), next);
    n->attached(1);
    REQUIRE(n->buffer(0, 1, 0x6161) != nullptr);
    CudaStream ns = next->make_stream(true);
    const std::uint64_t kernel = next->launch(ns);
    n->release_fence(0, 1, ns);
    next->finish(kernel);
    CHECK(dead->land_late_writes() == 1);

    SUBCASE("plain loan(): the slot is free again") {
      CHECK(pool->prepare_write(0, nullptr) == Status::ok);
    }
    SUBCASE("loan(stream): the producer's GPU wait ends") {
      CudaStream ps = prod->make_stream();
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      const std::uint64_t writer = prod->launch(ps, false);
      CHECK(eventually([&] { return prod->done(writer); }, 500ms));
    }
    CHECK(world->unregistered_writes() == 0);
    d.reset();
    n.reset();
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE(
      "cuda: 70000 attach/detach cycles of one entry never make an old fence read as "
      "reached") {
    // The lease generation moves on every attach and detach; a fence word written by an
    // incarnation that many cycles ago must still read "not reached" for a new recorder's target
    // (the gaps below are those at which a 16-bit cyclic generation would read "reached").
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(1, 1);
    auto prod = world->process();
    REQUIRE(prod->set_device(0) == CudaErr::success);
    seg.producer(1, 0x7070);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    CudaStream ps = prod->make_stream();
    auto rdr = world->process();
    REQUIRE(rdr->set_device(0) == CudaErr::success);
    CudaStream rs = rdr->make_stream(true);
    const std::set<std::uint64_t> record_at = {1, 1 + 32768, 1 + 32768 + 40000,
                                               1 + 32768 + 40000 + 65534};
    std::uint64_t seq = 0;
    int recorded = 0;
    for (std::uint64_t cycle = 0; cycle < 70000; ++cycle) {
      const std::uint64_t gen = 2 * cycle + 1;  // attach: +1, detach: +1
      seg.reader_alive(0, gen);
      auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
      reader->attached(0);
      if (record_at.count(gen) != 0) {
        REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
        REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
        seg.view.slot(0).sequence.store(++seq);
        REQUIRE(reader->buffer(0, 1, 0x7070) != nullptr);
        const std::uint64_t kernel = rdr->launch(rs);
        reader->release_fence(0, 0, rs);
        INFO("recorded at lease generation " << gen);
        CHECK(pool->prepare_write(0, nullptr) == Status::no_free_slot);
        REQUIRE(pool->prepare_write(0, ps) == Status::ok);
        const std::uint64_t writer = prod->launch(ps, false);
        CHECK_FALSE(prod->done(writer));  // behind the reader's kernel
        rdr->finish(kernel);
        CHECK(prod->done(writer));
        ++recorded;
      }
      reader.reset();  // detach
    }
    CHECK(recorded == 4);
    CHECK(rdr->calls(FakeOp::get_device_count) >= 70000);  // every cycle built a reader pool
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: a frame whose producer died with its writes queued is dropped by wait_on") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(2, 1);
    auto prod = world->process();
    seg.producer(1, 0x3131);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
    CudaStream ps = prod->make_stream();
    const std::uint64_t fill = prod->launch(ps);  // the producer's fill, still queued
    REQUIRE(pool->before_publish(0, ps, 1) == Status::ok);
    seg.view.slot(0).sequence.store(1);
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    REQUIRE(reader->buffer(0, 1, 0x3131) != nullptr);
    CudaStream rs = rdr->make_stream(true);

    SUBCASE("a live producer: the reader's stream waits for the fill") {
      REQUIRE(reader->wait_on(0, rs) == Status::ok);
      const std::uint64_t kernel = rdr->launch(rs, false);
      CHECK_FALSE(rdr->done(kernel));
      prod->finish(fill);
      CHECK(rdr->done(kernel));
    }
    SUBCASE("a producer that closed: its event is still there, and still waited for") {
      seg.view.producer().lease_word.store(detail::LeaseWord::make(1, detail::LeaseState::closed));
      REQUIRE(reader->wait_on(0, rs) == Status::ok);
      const std::uint64_t kernel = rdr->launch(rs, false);
      CHECK_FALSE(rdr->done(kernel));
      prod->finish(fill);
      CHECK(rdr->done(kernel));
    }
    SUBCASE("a producer killed mid-fill and taken over: the frame is dropped, not read") {
      prod->kill();
      seg.producer(2, 0x3232);
      CHECK(reader->wait_on(0, rs) == Status::producer_gone);
      CHECK(reader->wait_on(0, nullptr) == Status::producer_gone);
    }
    reader->release_fence(0, 0, rs);
    reader.reset();
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: calls on a caller's stream from a thread without a context bind none") {
    // A garbage collector's thread, say, releases a frame with the stream it was used on.
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), FakeGpuWorld::device(0xb2)});
    TestSegment seg(3, 1);
    auto prod = world->process();
    REQUIRE(prod->set_device(1) == CudaErr::success);
    seg.producer(1, 0x4141);
    auto pool = detail::make_cuda_producer_pool(seg.request(true, 1), prod);
    CudaStream ps = prod->make_stream();  // on device 1
    auto rdr = world->process();
    REQUIRE(rdr->set_device(1) == CudaErr::success);
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    CudaStream rs = rdr->make_stream(true);  // on device 1
    const int inits = world->implicit_inits();
    std::uint64_t kernel = 0;
    std::thread([&] {
      CHECK(prod->current_device() == -1);
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);
      REQUIRE(pool->before_publish(0, ps, 1) == Status::ok);
      seg.view.slot(0).sequence.store(1);
      REQUIRE(reader->buffer(0, 1, 0x4141) != nullptr);
      CHECK(reader->wait_on(0, rs) == Status::ok);
      kernel = rdr->launch(rs);
      reader->release_fence(0, 0, rs);
      CHECK(seg.fences(0) == 0b1);                        // a GPU fence, not a CPU synchronisation
      REQUIRE(pool->prepare_write(0, ps) == Status::ok);  // a GPU wait on it
      CHECK(prod->current_device() == -1);
      CHECK(rdr->current_device() == -1);
    }).join();
    CHECK(world->implicit_inits() == inits);
    CHECK(rdr->calls(FakeOp::stream_synchronize) == 0);
    CHECK(prod->calls(FakeOp::stream_wait_value64) == 1);
    CHECK_FALSE(rdr->done(kernel));  // nothing synchronised it
    rdr->finish(kernel);
    reader.reset();
    pool.reset();
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: negative control: IPCRING_CUDA_TEST_BREAK=release_fence loses the ordering") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(2, 1);
    auto prod = world->process();
    seg.producer(1, 0x99);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(1, nullptr) == Status::ok);
    seg.view.slot(1).sequence.store(4);
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    // This test's thread is the only one touching the environment while it runs.
    ::setenv("IPCRING_CUDA_TEST_BREAK", "release_fence", 1);  // NOLINT(concurrency-mt-unsafe)
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    ::unsetenv("IPCRING_CUDA_TEST_BREAK");  // NOLINT(concurrency-mt-unsafe)
    reader->attached(0);
    REQUIRE(reader->buffer(1, 1, 0x99) != nullptr);
    CudaStream rs = rdr->make_stream(true);
    const std::uint64_t kernel = rdr->launch(rs);
    reader->release_fence(1, 0, rs);
    // Broken on purpose: the producer may rewrite the buffer while the reader's kernel runs. The
    // GPU tests use this switch to prove they can see the difference.
    CHECK(pool->prepare_write(1, nullptr) == Status::ok);
    CHECK_FALSE(rdr->done(kernel));
    rdr->finish(kernel);
  }

  // ---- close order ---------------------------------------------------------------------------

  TEST_CASE("cuda: a closing producer frees only what no reader or queued work can still use") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(3, 1);
    auto prod = world->process();
    seg.producer(1, 0x4242);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    void* buf[3];
    for (std::uint32_t i = 0; i < 3; ++i) {
      REQUIRE(pool->prepare_write(i, nullptr) == Status::ok);
      REQUIRE(pool->before_publish(i, nullptr, 1) == Status::ok);
      seg.view.slot(i).sequence.store(i + 1);
      buf[i] = pool->buffer(i);
    }
    // Slot 0: a reader released it with its kernel still running. Slot 1: a reader still holds
    // it. Slot 2: nobody.
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    REQUIRE(reader->buffer(0, 1, 0x4242) != nullptr);
    CudaStream rs = rdr->make_stream(true);
    const std::uint64_t kernel = rdr->launch(rs);
    reader->release_fence(0, 0, rs);
    seg.view.slot(1).state.store(detail::SlotWord::make(1, false, detail::SlotWord::bit(0)));
    const auto start = std::chrono::steady_clock::now();
    pool.reset();  // the core marked the epoch closed first
    CHECK(std::chrono::steady_clock::now() - start >= 1s);  // it waited (bounded) for them
    CHECK(world->bytes_allocated(buf[0]) != 0);             // a reader's kernel may still read it
    CHECK(world->bytes_allocated(buf[1]) != 0);             // a reader holds it
    CHECK(world->bytes_allocated(buf[2]) == 0);             // freed
    CHECK(world->use_after_destroy() == 0);
    rdr->finish(kernel);
    CHECK(world->hangs() == 0);
  }

  TEST_CASE("cuda: a reader never destroys its copy of an event its exporter destroyed") {
    // cudaIpcOpenEventHandle: operations on the imported event after the exporter's
    // cudaEventDestroy are undefined. A producer that closes first destroys its events once no
    // reader holds the slot; a reader that detaches later must leave its copy alone.
    ScopedChannel ch("cuda-evorder");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    std::optional<Producer> p(make_producer(prod, ch, cuda_config(2, 1)));
    std::optional<Reader> r(attach(rdr, ch));
    publish_pattern(*p);
    {
      auto f = r->try_read();
      REQUIRE(f);
      REQUIRE(f->wait_on(nullptr) == Status::ok);  // the reader imported the slot's event
    }
    SUBCASE("the producer closes first") {
      p.reset();
      r.reset();
      CHECK(world->use_after_destroy() == 0);
    }
    SUBCASE("the reader detaches first: its copy is destroyed, not leaked") {
      const int before = rdr->calls(FakeOp::destroy_event);
      r.reset();
      CHECK(rdr->calls(FakeOp::destroy_event) == before + 1);
      p.reset();
      CHECK(world->use_after_destroy() == 0);
    }
  }

  TEST_CASE("cuda: a closing producer frees no buffer a reader still maps") {
    // cudaIpcOpenMemHandle: freeing memory that another process maps is undefined. Readers keep
    // their mappings cached after releasing the frames; a closing producer waits (bounded) until
    // they closed them, which they do when they see it end.
    ScopedChannel ch("cuda-mapped-close");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    std::vector<const std::byte*> bufs;
    std::optional<Producer> p(make_producer(prod, ch, cuda_config(3, 1)));
    std::optional<Reader> r(attach(rdr, ch));
    CudaStream s = rdr->make_stream(true);
    for (int i = 0; i < 3; ++i) {
      publish_pattern(*p);
      auto f = r->try_read();
      REQUIRE(f);
      bufs.push_back(f->data());
      REQUIRE(f->wait_on(s) == Status::ok);
      f->release(s);
    }
    REQUIRE(rdr->calls(FakeOp::ipc_open_mem_handle) == 3);  // all three stay mapped
    const int closes_before = rdr->calls(FakeOp::ipc_close_mem_handle);

    SUBCASE("a reader that reads on sees the end and closes its mappings: all freed at once") {
      std::atomic<bool> gone{false};
      std::thread reading([&] {
        for (int k = 0; k < 400 && !gone.load(); ++k) {
          auto f = r->read(5ms);
          if (!f && f.status() == Status::producer_gone) gone.store(true);
        }
        for (int k = 0; k < 3; ++k) (void)r->try_read();  // reads after the end sweep too
      });
      const auto start = std::chrono::steady_clock::now();
      p.reset();
      const auto took = std::chrono::steady_clock::now() - start;
      reading.join();
      CHECK(gone.load());
      CHECK(took < 1500ms);  // not the 2 s bound: the reader let go
      CHECK(rdr->calls(FakeOp::ipc_close_mem_handle) == closes_before + 3);
      for (const std::byte* b : bufs) {
        CHECK(world->bytes_allocated(const_cast<std::byte*>(b)) == 0);
      }
    }
    SUBCASE("a reader that keeps its mappings past the bound: nothing is freed under it") {
      const auto start = std::chrono::steady_clock::now();
      p.reset();  // the reader reads nothing meanwhile
      CHECK(std::chrono::steady_clock::now() - start >= 1500ms);
      for (const std::byte* b : bufs) {
        CHECK(world->bytes_allocated(const_cast<std::byte*>(b)) != 0);  // kept
      }
      r.reset();  // closes its mappings; leaves its event copies (the exporter may be gone)
      CHECK(rdr->calls(FakeOp::ipc_close_mem_handle) == closes_before + 3);
    }
    CHECK(world->freed_while_mapped() == 0);
    CHECK(world->use_after_destroy() == 0);
  }

  TEST_CASE("cuda: a reader that dies costs a closing producer no wait for its mappings") {
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(2, 1);
    auto prod = world->process();
    seg.producer(1, 0x4343);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    for (std::uint32_t i = 0; i < 2; ++i) {
      REQUIRE(pool->prepare_write(i, nullptr) == Status::ok);
      REQUIRE(pool->before_publish(i, nullptr, 1) == Status::ok);
      seg.view.slot(i).sequence.store(i + 1);
    }
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    REQUIRE(reader->buffer(0, 1, 0x4343) != nullptr);
    reader->release_fence(0, 0, nullptr);
    CHECK(seg.view.cuda_slot(0).mapped.load() == 1U);
    CHECK(seg.view.cuda_slot(1).mapped.load() == 0U);
    seg.reader_dies(0);
    seg.view.producer().lease_word.store(
        detail::LeaseWord::make(1, detail::LeaseState::closed));  // as the core does first
    const auto start = std::chrono::steady_clock::now();
    pool.reset();
    CHECK(std::chrono::steady_clock::now() - start < 1500ms);  // reaped, not waited for
    CHECK(seg.view.cuda_slot(0).mapped.load() == 0U);
    CHECK(seg.view.cuda_slot(0).memory_generation.load() == 0U);  // handles withdrawn
  }

  TEST_CASE("cuda: a reader never maps a buffer of a producer that closed") {
    // The `mapped` bit and the producer's closed lease, each followed by a fence, then the other's
    // load: a reader that set its bit after the close must see the close and map nothing.
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    TestSegment seg(1, 1);
    auto prod = world->process();
    seg.producer(1, 0x4444);
    auto pool = detail::make_cuda_producer_pool(seg.request(true), prod);
    REQUIRE(pool->prepare_write(0, nullptr) == Status::ok);
    REQUIRE(pool->before_publish(0, nullptr, 1) == Status::ok);
    seg.view.slot(0).sequence.store(1);
    auto rdr = world->process();
    seg.reader_alive(0, 1);
    auto reader = detail::make_cuda_reader_pool(seg.request(false), rdr);
    reader->attached(0);
    seg.view.producer().lease_word.store(detail::LeaseWord::make(1, detail::LeaseState::closed));
    CHECK(reader->buffer(0, 1, 0x4444) == nullptr);
    CHECK(seg.view.cuda_slot(0).mapped.load() == 0U);  // taken back
    CHECK(rdr->calls(FakeOp::ipc_open_mem_handle) == 0);
  }

  TEST_CASE("cuda: a producer closing after its readers finished frees everything at once") {
    ScopedChannel ch("cuda-close");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1)});
    auto prod = world->process();
    auto rdr = world->process();
    std::vector<const std::byte*> bufs;
    std::optional<Producer> p(make_producer(prod, ch, cuda_config(3, 1)));
    std::optional<Reader> r(attach(rdr, ch));
    for (int i = 0; i < 3; ++i) {
      publish_pattern(*p);
      auto f = r->try_read();
      REQUIRE(f);
      bufs.push_back(f->data());
      CudaStream s = rdr->make_stream(true);
      REQUIRE(f->wait_on(s) == Status::ok);
      f->release(s);
    }
    r.reset();  // detaches: its fences are complete, its mappings close
    const auto start = std::chrono::steady_clock::now();
    p.reset();
    CHECK(std::chrono::steady_clock::now() - start < 1s);  // nothing to wait for
    for (const std::byte* b : bufs) CHECK(world->bytes_allocated(const_cast<std::byte*>(b)) == 0);
    CHECK(world->freed_while_mapped() == 0);
    CHECK(world->use_after_destroy() == 0);
    CHECK(prod->registrations() == 0);
    CHECK(rdr->registrations() == 0);
  }

  // ---- contexts and devices ------------------------------------------------------------------

  TEST_CASE("cuda: two Readers of one process on different devices map the buffer once each") {
    ScopedChannel ch("cuda-2dev");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), FakeGpuWorld::device(0xb2)});
    world->set_peer_access(1, 0, true);
    auto prod = world->process();
    auto rdr = world->process();
    auto p = make_producer(prod, ch, cuda_config(4, 2));
    REQUIRE(rdr->set_device(0) == CudaErr::success);
    std::optional<Reader> r0(attach(rdr, ch));
    REQUIRE(rdr->set_device(1) == CudaErr::success);
    std::optional<Reader> r1(attach(rdr, ch));
    publish_pattern(p);
    {
      auto f0 = r0->try_read();
      auto f1 = r1->try_read();
      REQUIRE(f0);
      REQUIRE(f1);
      CHECK(test::check_pattern(f1->data(), 512, f1->sequence()));
      CHECK(rdr->open_mappings() == 2);  // one per device's context, not shared across them
      CHECK(rdr->calls(FakeOp::ipc_open_mem_handle) == 2);
    }
    REQUIRE(rdr->set_device(0) == CudaErr::success);  // whatever the thread has now
    r0.reset();
    r1.reset();
    CHECK(rdr->open_mappings() == 0);
    CHECK(world->wrong_device_closes() == 0);
  }

  TEST_CASE("cuda: pool calls keep the caller's context and never bind one implicitly") {
    ScopedChannel ch("cuda-ctx");
    auto world = FakeGpuWorld::make({FakeGpuWorld::device(0xa1), FakeGpuWorld::device(0xb2)});
    auto prod = world->process();
    auto rdr = world->process();
    std::optional<Producer> p;
    std::optional<Reader> r;
    // Made on a thread of their own, used here, destroyed on yet another thread that never touched
    // CUDA: a destructor's calls must not make the runtime bind device 0's primary context.
    std::thread([&] {
      REQUIRE(prod->set_device(1) == CudaErr::success);
      ChannelConfig c = cuda_config(4, 1);
      c.cuda_device = 1;
      p.emplace(make_producer(prod, ch, c));
      REQUIRE(rdr->set_device(1) == CudaErr::success);
      r.emplace(attach(rdr, ch));
    }).join();
    // The user's thread has a non-primary context current (cuCtxCreate style).
    const detail::CudaContext mine = rdr->make_context(0);  // not the reader's device
    REQUIRE(rdr->set_context(mine) == CudaErr::success);
    const detail::CudaContext pmine = prod->make_context(0);
    REQUIRE(prod->set_context(pmine) == CudaErr::success);
    for (int i = 0; i < 3; ++i) {
      publish_pattern(*p);  // plain loan and publish on the legacy stream
      auto f = r->try_read();
      REQUIRE(f);
      CHECK(f->wait_on(nullptr) == Status::ok);
      f->release();
    }
    detail::CudaContext now = nullptr;
    REQUIRE(rdr->get_context(now) == CudaErr::success);
    CHECK(now == mine);
    REQUIRE(prod->get_context(now) == CudaErr::success);
    CHECK(now == pmine);
    std::thread([&] {
      r.reset();
      p.reset();
    }).join();
    CHECK(world->implicit_inits() == 0);
    CHECK(world->wrong_device_closes() == 0);
  }

}  // TEST_SUITE
