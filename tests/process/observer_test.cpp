// observer_test.cpp — ReaderOptions::observer: a reader that takes no reader entry and sets no bit,
// copying each frame and re-checking its slot afterwards (src/ring/observe.hpp).
#include <doctest/doctest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {

ReaderOptions observer_options(ReadPolicy policy = ReadPolicy::latest) {
  ReaderOptions o;
  o.policy = policy;
  o.observer = true;
  o.producer_probe = 20ms;
  return o;
}

void publish_pattern(Producer& producer, std::size_t bytes) {
  auto loan = producer.loan();
  REQUIRE(loan);
  test::fill_pattern(loan->data(), bytes, loan->sequence());
  producer.publish(std::move(*loan), bytes);
}

}  // namespace

TEST_CASE("an observer reads a channel whose every reader entry is taken, and takes none") {
  ScopedChannel ch("observer-full");
  ChannelConfig cfg;
  cfg.slots = 3;
  cfg.max_readers = 1;
  cfg.frame_bytes = 4096;
  auto producer = Producer::create(ch, cfg);
  Reader reader = Reader::attach(ch);
  // A second reader is refused: the one entry is taken.
  CHECK_THROWS_AS(Reader::attach(ch), Error);
  Reader observer = Reader::attach(ch, observer_options());
  CHECK(observer.observer());
  CHECK_FALSE(reader.observer());
  CHECK(observer.index() == Reader::kObserverIndex);
  {
    auto loan = producer.loan();
    REQUIRE(loan);
    test::fill_pattern(loan->data(), 1000, loan->sequence());
    const unsigned char meta[] = {'c', 'a', 'm', '0'};
    REQUIRE(loan->set_metadata(std::as_bytes(std::span(meta))));
    loan->set_capture_time_ns(12345);
    TensorDesc t;
    t.dtype_code = 1;
    t.dtype_bits = 8;
    t.ndim = 2;
    t.shape[0] = 10;
    t.shape[1] = 100;
    REQUIRE(loan->set_tensor(t));
    producer.publish(std::move(*loan), 1000);
  }
  auto f = observer.read(2s);
  REQUIRE(f);
  CHECK(f->size() == 1000);
  CHECK(test::check_pattern(f->data(), f->size(), f->sequence()));
  CHECK(f->capture_time_ns() == 12345);
  REQUIRE(f->metadata().size() == 4);
  CHECK(std::memcmp(f->metadata().data(), "cam0", 4) == 0);
  REQUIRE(f->tensor());
  CHECK(f->tensor()->shape[1] == 100);
  // At most one frame held: the copy it points at is the observer's one buffer.
  publish_pattern(producer, 500);
  auto second = observer.try_read();
  CHECK(second.status() == Status::max_held);
  // The copy stays intact while held, whatever the producer does to the slot meanwhile.
  for (int k = 0; k < 6; ++k) publish_pattern(producer, 700);
  CHECK(test::check_pattern(f->data(), f->size(), f->sequence()));
  const std::uint64_t first_sequence = f->sequence();
  f->release();
  auto third = observer.try_read();
  REQUIRE(third);
  CHECK(third->sequence() > first_sequence);
  CHECK(third->size() == 700);
  CHECK(test::check_pattern(third->data(), third->size(), third->sequence()));
  // The snapshot lists only the one reader; the observer's held copy holds no slot.
  const Snapshot snap = inspect(ch);
  CHECK(snap.readers.size() == 1);
  for (const auto& s : snap.slots) CHECK(s.reader_mask == 0);
  // The real reader is not disturbed: it reads the newest frame.
  auto r = reader.try_read();
  REQUIRE(r);
  CHECK(r->sequence() == third->sequence());
}

TEST_CASE("an observer of a producer publishing fast never accepts a torn frame") {
  ScopedChannel ch("observer-torn");
  constexpr std::size_t kBytes = std::size_t{256} * 1024;  // long copies: the producer laps them
  test::Shared<std::atomic<int>> stop;
  test::Shared<std::atomic<int>> ready;
  const pid_t child = test::spawn([&]() -> int {
    ChannelConfig cfg;
    cfg.slots = 2;  // max_readers * max_held + 2 with no reader: every slot is rewritten at once
    cfg.max_readers = 1;
    cfg.frame_bytes = kBytes;
    auto producer = Producer::create(ch, cfg);
    ready->store(1);
    while (stop->load() == 0) {
      auto loan = producer.loan();
      if (!loan) continue;
      test::fill_pattern(loan->data(), kBytes, loan->sequence());
      producer.publish(std::move(*loan), kBytes);
    }
    return 0;
  });
  REQUIRE(child > 0);
  REQUIRE(test::eventually([&] { return ready->load() == 1; }, 30s));
  for (const ReadPolicy policy : {ReadPolicy::latest, ReadPolicy::sequential}) {
    Reader observer = Reader::attach(ch, observer_options(policy));
    std::uint64_t accepted = 0;
    std::uint64_t torn = 0;
    std::uint64_t last = 0;
    bool ordered = true;
    const auto end = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < end) {
      auto f = observer.read(500ms);
      if (!f) {
        REQUIRE(f.status() == Status::timeout);
        continue;
      }
      ++accepted;
      if (f->size() != kBytes || !test::check_pattern(f->data(), f->size(), f->sequence())) ++torn;
      if (f->sequence() <= last) ordered = false;
      last = f->sequence();
    }
    MESSAGE("policy " << std::string(to_string(policy)) << ": " << accepted << " frames accepted, "
                      << observer.observer_dropped() << " copies dropped by the re-check, "
                      << observer.overruns() << " overruns");
    CHECK(accepted > 10);
    CHECK(torn == 0);
    CHECK(ordered);
  }
  stop->store(1);
  CHECK(test::wait_exit(child) == 0);
}

TEST_CASE("an observer reports producer_gone and follows the channel to its next producer") {
  ScopedChannel ch("observer-follow");
  ChannelConfig cfg;
  cfg.slots = 3;
  cfg.max_readers = 1;
  cfg.frame_bytes = 4096;
  auto producer = std::make_unique<Producer>(Producer::create(ch, cfg));
  Reader observer = Reader::attach(ch, observer_options(ReadPolicy::sequential));
  publish_pattern(*producer, 100);
  {
    auto f = observer.read(2s);
    REQUIRE(f);
    CHECK(f->epoch() == observer.epoch());
  }
  producer.reset();  // a clean end
  auto gone = observer.read(2s);
  CHECK(gone.status() == Status::producer_gone);
  producer = std::make_unique<Producer>(Producer::create(ch, cfg));
  publish_pattern(*producer, 200);
  // The observer attaches to the new producer's memory by itself and reads its frames.
  Result<Frame> f = Status::timeout;
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (std::chrono::steady_clock::now() < end) {
    f = observer.read(200ms);
    if (f) break;
    REQUIRE((f.status() == Status::timeout || f.status() == Status::no_frame));
  }
  REQUIRE(f);
  CHECK(f->size() == 200);
  CHECK(test::check_pattern(f->data(), f->size(), f->sequence()));
  CHECK(observer.observer());
  CHECK(observer.index() == Reader::kObserverIndex);
}
