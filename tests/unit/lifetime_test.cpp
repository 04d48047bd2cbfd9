// lifetime_test.cpp — who ends a channel end, and when: a Frame that outlives its Reader, a Loan
// that outlives its Producer, and publish's failures that are not exceptions.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <thread>

#include "ipcring/ipcring.hpp"
#include "test_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {

ChannelConfig small() {
  ChannelConfig c;
  c.slots = 4;
  c.max_readers = 2;
  c.max_held = 2;
  c.frame_bytes = 4096;
  return c;
}

std::uint64_t publish_one(Producer& p) {
  auto loan = p.loan();
  REQUIRE(loan);
  return p.publish(std::move(*loan), 64);
}

template <class Pred>
bool eventually(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(1ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("frames that outlive their Reader keep its entry until the last is released") {
  ScopedChannel ch("c13-outlive");
  auto p = Producer::create(ch, small());
  std::optional<Reader> r(Reader::attach(ch));
  publish_one(p);
  auto first = r->try_read();
  REQUIRE(first);
  publish_one(p);
  auto second = r->try_read();
  REQUIRE(second);
  r.reset();  // the Reader goes; its frames stay readable
  REQUIRE(inspect(ch).readers.size() == 1);
  CHECK(inspect(ch).readers[0].alive);
  CHECK(first->held());
  CHECK(first->data() != nullptr);
  first->release();
  CHECK(inspect(ch).readers.size() == 1);  // the second frame still holds the entry
  CHECK(second->data() != nullptr);
  // The last release, on another thread: the entry is given back (by the library's thread, not
  // inside release), and its slots are free for the producer again.
  std::thread([&] { second->release(); }).join();
  CHECK_FALSE(second->held());
  CHECK(eventually([&] { return inspect(ch).readers.empty(); }));
  for (int k = 0; k < 8; ++k) CHECK(publish_one(p) != 0);
}

TEST_CASE("a Loan that outlives its Producer keeps the channel until it is dropped") {
  ScopedChannel ch("c13-loan");
  std::optional<Producer> p(Producer::create(ch, small()));
  auto loan = p->loan();
  REQUIRE(loan);
  p.reset();
  CHECK_FALSE(inspect(ch).producer.closed);  // the core lives on for the loan
  loan->set_capture_time_ns(1);              // the loan still writes into the channel
  CHECK(loan->valid());
  { Loan dropped = std::move(*loan); }  // the drop ends the producer: closed and unlinked
  CHECK_THROWS_AS(inspect(ch), Error);
  // A new producer creates the channel afresh.
  auto again = Producer::create(ch, small());
  CHECK(again.epoch() == 1);
}

TEST_CASE("try_publish: caller errors are Status::invalid_loan, and the loan is kept") {
  ScopedChannel ch("c13-trypub");
  auto p = Producer::create(ch, small());
  auto r = Reader::attach(ch);
  auto loan = p.loan();
  REQUIRE(loan);
  std::uint64_t seq = 0;
  CHECK(p.try_publish(*loan, 4097, nullptr, &seq) == Status::invalid_loan);
  CHECK(loan->valid());
  CHECK(seq == 0);
  Loan empty;
  CHECK(p.try_publish(empty, 0) == Status::invalid_loan);
  REQUIRE(p.try_publish(*loan, 64, nullptr, &seq) == Status::ok);
  CHECK(seq == 1);
  CHECK_FALSE(loan->valid());
  CHECK(p.try_publish(*loan, 64) == Status::invalid_loan);  // already published
  auto f = r.try_read();
  REQUIRE(f);
  CHECK(f->sequence() == 1);
  CHECK(f->size() == 64);
}

TEST_CASE("publish in a fork child does not throw: 0 and Status::forked, the loan kept") {
  ScopedChannel ch("c13-forkpub");
  auto p = Producer::create(ch, small());
  auto loan = p.loan();
  REQUIRE(loan);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 0;
    try {
      if (p.publish(std::move(*loan), 64) != 0) code = 1;
      if (!loan->valid()) code = 2;
      if (p.try_publish(*loan, 64) != Status::forked) code = 3;
    } catch (...) {
      code = 4;
    }
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  // The parent's loan is untouched by the child.
  CHECK(p.publish(std::move(*loan), 64) == 1);
}
