// api_test.cpp — the public API in one process: publish, read, release, policies, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ipcring/ipcring.hpp"
#include "lease/lease.hpp"
#include "segment/layout.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {
ChannelConfig small(std::uint32_t slots = 4, std::uint32_t readers = 2, std::uint32_t held = 1) {
  ChannelConfig c;
  c.slots = slots;
  c.max_readers = readers;
  c.max_held = held;
  c.frame_bytes = 4096;
  return c;
}
std::uint64_t publish_seq(Producer& p, std::size_t bytes = 64) {
  auto loan = p.loan();
  REQUIRE(loan);
  test::fill_pattern(loan->data(), bytes, loan->sequence());
  return p.publish(std::move(*loan), bytes);
}
}  // namespace

TEST_CASE("publish and read one frame without a copy") {
  ScopedChannel ch("basic");
  auto p = Producer::create(ch, small());
  auto r = Reader::attach(ch);
  CHECK(r.try_read().status() == Status::no_frame);
  auto loan = p.loan();
  REQUIRE(loan);
  CHECK(loan->capacity() == 4096);
  CHECK(loan->sequence() == 1);
  test::fill_pattern(loan->data(), 256, 1);
  const std::uint32_t slot = loan->slot();
  CHECK(p.publish(std::move(*loan), 256) == 1);
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->sequence() == 1);
  CHECK(f->size() == 256);
  CHECK(f->slot() == slot);
  CHECK(test::check_pattern(f->data(), 256, 1));
  CHECK(r.held() == 1);
  auto snap = inspect(ch);
  CHECK(snap.slots[slot].state == SlotState::held);
  CHECK(snap.slots[slot].reader_mask == (1u << r.index()));
  f->release();
  f->release();  // idempotent
  CHECK(r.held() == 0);
  CHECK(inspect(ch).slots[slot].reader_mask == 0);
  CHECK(r.try_read().status() == Status::no_frame);  // nothing newer
}

TEST_CASE("reader data is a read-only mapping of the producer's buffer") {
  ScopedChannel ch("zerocopy");
  auto p = Producer::create(ch, small());
  auto r = Reader::attach(ch);
  auto loan = p.loan();
  REQUIRE(loan);
  std::byte* w = loan->data();
  w[0] = std::byte{42};
  p.publish(std::move(*loan), 1);
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->data()[0] == std::byte{42});
  CHECK(reinterpret_cast<std::uintptr_t>(f->data()) % 4096 == 0);  // page aligned
}

TEST_CASE("latest policy skips to the newest frame; sequential reads every frame") {
  ScopedChannel ch("policy");
  auto p = Producer::create(ch, small(8, 2, 1));
  auto latest = Reader::attach(ch, {.policy = ReadPolicy::latest});
  auto seq = Reader::attach(ch, {.policy = ReadPolicy::sequential});
  for (int i = 0; i < 3; ++i) publish_seq(p);
  {
    auto f = latest.try_read();
    REQUIRE(f);
    CHECK(f->sequence() == 3);
  }
  for (std::uint64_t want = 1; want <= 3; ++want) {
    auto f = seq.try_read();
    REQUIRE(f);
    CHECK(f->sequence() == want);
  }
  CHECK(seq.try_read().status() == Status::no_frame);
  CHECK(seq.overruns() == 0);
}

TEST_CASE("sequential reader counts overruns when the producer laps it") {
  ScopedChannel ch("overrun");
  auto p = Producer::create(ch, small(4, 1, 1));
  auto r = Reader::attach(ch, {.policy = ReadPolicy::sequential});
  publish_seq(p);
  {
    auto f = r.try_read();
    REQUIRE(f);
    CHECK(f->sequence() == 1);
  }
  for (int i = 0; i < 40; ++i) publish_seq(p);  // 41 published; a 4-slot pool keeps the newest
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->sequence() > 2);
  CHECK(r.overruns() == f->sequence() - 2);
  CHECK(f->skipped() == f->sequence() - 2);
}

TEST_CASE("max_held is enforced and the sizing rule keeps loan working") {
  ScopedChannel ch("maxheld");
  auto cfg = small(6, 2, 2);  // 6 >= 2*2 + 2
  CHECK(cfg.loan_never_fails());
  auto p = Producer::create(ch, cfg);
  auto a = Reader::attach(ch, {.policy = ReadPolicy::sequential});
  auto b = Reader::attach(ch, {.policy = ReadPolicy::sequential});
  std::vector<Frame> held;
  publish_seq(p);
  publish_seq(p);
  for (auto* r : {&a, &b}) {
    for (int k = 0; k < 2; ++k) {
      auto f = r->try_read();
      REQUIRE(f);
      held.push_back(std::move(*f));
    }
  }
  publish_seq(p);
  CHECK(a.try_read().status() == Status::max_held);
  // Readers pin 2 slots (both hold frames 1 and 2); the producer keeps publishing.
  for (int i = 0; i < 100; ++i) {
    auto loan = p.loan();
    REQUIRE(loan);
    p.publish(std::move(*loan), 8);
  }
  for (auto& f : held) CHECK(f.held());
}

TEST_CASE("a dropped loan returns its slot; one loan at a time") {
  ScopedChannel ch("droploan");
  auto p = Producer::create(ch, small(3, 1, 1));
  {
    auto l = p.loan();
    REQUIRE(l);
    CHECK(p.loan().status() == Status::loan_outstanding);
  }
  auto l2 = p.loan();
  CHECK(l2);
}

TEST_CASE("bad inputs throw Error with a code and a message naming the channel") {
  ScopedChannel ch("bad");
  auto code_of = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.code();
    }
    return Errc{};
  };
  CHECK(code_of([] { Producer::create("", ChannelConfig{.frame_bytes = 8}); }) ==
        Errc::invalid_name);
  CHECK(code_of([] { Producer::create("a/../b", ChannelConfig{.frame_bytes = 8}); }) ==
        Errc::invalid_name);
  CHECK(code_of([] { Producer::create(std::string(201, 'x'), ChannelConfig{.frame_bytes = 8}); }) ==
        Errc::invalid_name);
  CHECK(code_of([&] { Producer::create(ch, ChannelConfig{.slots = 0, .frame_bytes = 8}); }) ==
        Errc::invalid_config);
  CHECK(code_of([&] { Producer::create(ch, ChannelConfig{.frame_bytes = 0}); }) ==
        Errc::invalid_config);
  CHECK(code_of([&] {
          Producer::create(ch, ChannelConfig{.max_readers = 33, .frame_bytes = 8});
        }) == Errc::invalid_config);
  CHECK(code_of([&] { Producer::create(ch, ChannelConfig{.max_held = 0, .frame_bytes = 8}); }) ==
        Errc::invalid_config);
  CHECK(code_of([&] { Reader::attach("no-such-channel-xyz"); }) == Errc::not_found);
  try {
    Producer::create(ch, ChannelConfig{.slots = 0, .frame_bytes = 8});
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(ch.name()) != std::string::npos);
    CHECK(std::string(e.what()).find("slots = 0") != std::string::npos);
  }
  auto p = Producer::create(ch, small(4, 1, 1));
  CHECK(code_of([&] { Producer::create(ch, small(4, 1, 1)); }) == Errc::producer_exists);
  auto r = Reader::attach(ch);
  CHECK(code_of([&] { Reader::attach(ch); }) == Errc::too_many_readers);
  auto loan = p.loan();
  REQUIRE(loan);
  CHECK(code_of([&] { p.publish(std::move(*loan), 4097); }) == Errc::invalid_argument);
  CHECK(loan->valid());  // nothing lost: the loan is still ours
  p.publish(std::move(*loan), 4096);
}

TEST_CASE("a producer's clean exit removes the channel and readers see producer_gone") {
  ScopedChannel ch("close");
  std::optional<Producer> p(Producer::create(ch, small()));
  auto r = Reader::attach(ch);
  publish_seq(*p);
  p.reset();
  const auto names = list_channels();
  CHECK(std::find(names.begin(), names.end(), ch.name()) == names.end());
  auto f = r.try_read();
  CHECK(f.status() == Status::producer_gone);
  // Reported once per epoch: later calls wait for a new producer instead of spinning on it.
  CHECK(r.try_read().status() == Status::no_frame);
  CHECK(r.read(50ms).status() == Status::timeout);
}

TEST_CASE("read blocks until a frame arrives from another thread") {
  ScopedChannel ch("block");
  auto p = Producer::create(ch, small());
  auto r = Reader::attach(ch);
  std::thread t([&] {
    std::this_thread::sleep_for(50ms);
    publish_seq(p);
  });
  auto f = r.read(5s);
  t.join();
  REQUIRE(f);
  CHECK(f->sequence() == 1);
  CHECK(r.read(20ms).status() == Status::max_held);  // max_held = 1 and f is still held
  f->release();
  CHECK(r.read(20ms).status() == Status::timeout);
}

TEST_CASE("a reader attached on a thread that exits stays alive") {
  ScopedChannel ch("thread");
  auto p = Producer::create(ch, small());
  std::optional<Reader> r;
  std::thread([&] { r.emplace(Reader::attach(ch)); }).join();
  CHECK(p.reap_dead_readers() == 0);
  auto snap = inspect(ch);
  REQUIRE(snap.readers.size() == 1);
  CHECK(snap.readers[0].alive);
  publish_seq(p);
  CHECK(r->try_read());
}

TEST_CASE("metadata travels with the frame") {
  ScopedChannel ch("meta");
  auto p = Producer::create(ch, small());
  auto r = Reader::attach(ch);
  auto loan = p.loan();
  REQUIRE(loan);
  const char text[] = "1920x1080 rgba";
  CHECK(loan->set_metadata(std::as_bytes(std::span(text))));
  std::byte big[kDefaultMetadataBytes + 1] = {};
  CHECK_FALSE(loan->set_metadata(big));
  p.publish(std::move(*loan), 0);
  auto f = r.try_read();
  REQUIRE(f);
  REQUIRE(f->metadata().size() == sizeof text);
  CHECK(std::memcmp(f->metadata().data(), text, sizeof text) == 0);
}

TEST_CASE("hostile lease mutex bytes never reach glibc: attach and reap survive them") {
  ScopedChannel ch("hostilemutex");
  auto p = Producer::create(ch, small(4, 2, 1));
  // Scribble a priority-protect kind with an absurd ceiling over reader entry 0's mutex, as a
  // corrupt or hostile segment could; glibc aborts if such a mutex reaches pthread_mutex_trylock.
  const int fd = test::control_fd_of(ch.name());
  REQUIRE(fd >= 0);
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  void* base = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                    MAP_SHARED, fd, 0);
  REQUIRE(base != MAP_FAILED);
  auto* seg = static_cast<unsigned char*>(base);
  const auto& header = *reinterpret_cast<const detail::SegmentHeader*>(seg);
  auto& entry = *reinterpret_cast<detail::ReaderEntry*>(seg + header.reader_table_offset);
  const int pp_kind = 0x40 /* PTHREAD_MUTEX_PRIO_PROTECT_NP */ | (5000 << 19);
  std::memcpy(entry.lease.bytes + offsetof(pthread_mutex_t, __data.__kind), &pp_kind,
              sizeof pp_kind);
  entry.lease_word.store(detail::LeaseWord::make(3, detail::LeaseState::active));
  CHECK_FALSE(detail::lease_mutex_plausible(entry.lease));
  auto r = Reader::attach(ch);  // skips the implausible entry
  CHECK(r.index() == 1);
  CHECK(p.reap_dead_readers() == 0);
  munmap(base, static_cast<std::size_t>(st.st_size));
  close(fd);
}
