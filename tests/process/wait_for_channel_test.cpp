// wait_for_channel_test.cpp — ReaderOptions::wait_for_channel: a reader started before its
// producer (as ROS 2, iceoryx2 and eCAL subscribers may be) waits for the channel to appear.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {

bool listed(const std::string& name) {
  const auto names = list_channels();
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct ReaderProgress {
  std::atomic<int> attaching{0};  // the child is inside Reader::attach
  std::atomic<int> attached{0};   // Reader::attach returned
  std::atomic<int> frames{0};     // frames read and verified
};

}  // namespace

TEST_CASE("a reader started before its producer attaches when the channel appears") {
  ScopedChannel ch("waitfor");
  REQUIRE_FALSE(listed(ch.name()));
  test::Shared<ReaderProgress> progress;
  constexpr int kFrames = 3;
  const pid_t reader = test::spawn([&]() -> int {
    ReaderOptions options;
    options.policy = ReadPolicy::sequential;
    options.wait_for_channel = 60s;  // bounded; the test's producer comes long before
    progress->attaching.store(1);
    Reader r = Reader::attach(ch, options);
    progress->attached.store(1);
    while (progress->frames.load() < kFrames) {
      auto f = r.read(5s);
      if (!f) return 10 + static_cast<int>(f.status());
      if (!test::check_pattern(f->data(), f->size(), f->sequence())) return 2;
      progress->frames.fetch_add(1);
    }
    return 0;
  });
  REQUIRE(reader > 0);
  REQUIRE(test::eventually([&] { return progress->attaching.load() == 1; }));
  std::this_thread::sleep_for(50ms);  // let it find nothing a few times
  // Still waiting (not failed: it has not exited), and nothing has made the channel yet.
  int status = 0;
  REQUIRE(waitpid(reader, &status, WNOHANG) == 0);
  CHECK(progress->attached.load() == 0);
  REQUIRE_FALSE(listed(ch.name()));

  ChannelConfig cfg;
  cfg.slots = 4;
  cfg.max_readers = 1;
  cfg.max_held = 1;
  cfg.frame_bytes = 4096;
  auto producer = Producer::create(ch, cfg);
  REQUIRE(test::eventually([&] { return progress->attached.load() == 1; }, 30s));
  // Publish until the reader has verified its frames (it reads sequentially, from its attach on).
  CHECK(test::eventually(
      [&] {
        if (auto loan = producer.loan()) {
          test::fill_pattern(loan->data(), 256, loan->sequence());
          producer.publish(std::move(*loan), 256);
        }
        std::this_thread::sleep_for(2ms);
        return progress->frames.load() >= kFrames;
      },
      30s));
  CHECK(test::wait_exit(reader) == 0);
}

TEST_CASE("wait_for_channel: when the wait runs out, not_found names the channel and the wait") {
  ScopedChannel ch("waitfor-none");
  CHECK(ReaderOptions{}.wait_for_channel == 0ns);  // default: fail at once
  ReaderOptions options;
  options.wait_for_channel = 30ms;
  try {
    Reader::attach(ch, options);
    FAIL("attach to a channel that never appears returned");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_found);
    const std::string what = e.what();
    CHECK(what.find(ch.name()) != std::string::npos);
    CHECK(what.find("waited") != std::string::npos);
    CHECK(what.find("wait_for_channel") != std::string::npos);
  }
  options.wait_for_channel = -1ns;
  try {
    Reader::attach(ch, options);
    FAIL("a negative wait was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
    CHECK(std::string(e.what()).find("wait_for_channel") != std::string::npos);
  }
  // Refusals other than "not there (yet)" are not waited on.
  options.wait_for_channel = 60s;
  try {
    Reader::attach("bad name!", options);
    FAIL("a bad name was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_name);
  }
}

TEST_CASE("the defaults satisfy the sizing rule: max_readers readers holding max_held frames") {
  const ChannelConfig defaults;
  CHECK(defaults.loan_never_fails());
  CHECK(std::uint64_t{defaults.slots} >=
        std::uint64_t{defaults.max_readers} * defaults.max_held + 2);
  ScopedChannel ch("defaults");
  ChannelConfig cfg;  // only the frame size chosen
  cfg.frame_bytes = 4096;
  auto producer = Producer::create(ch, cfg);
  std::vector<Reader> readers;
  std::vector<Frame> held;
  for (std::uint32_t i = 0; i < cfg.max_readers; ++i) readers.push_back(Reader::attach(ch));
  // Every reader holds as much as it may; loan must still succeed every time.
  for (int round = 0; round < 4 * static_cast<int>(cfg.slots); ++round) {
    auto loan = producer.loan();
    REQUIRE(loan);
    producer.publish(std::move(*loan), 64);
    for (auto& r : readers) {
      if (r.held() < cfg.max_held) {
        if (auto f = r.try_read()) held.push_back(std::move(*f));
      }
    }
  }
  CHECK(held.size() == std::size_t{cfg.max_readers} * cfg.max_held);
}
