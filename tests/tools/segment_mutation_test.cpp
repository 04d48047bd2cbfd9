// segment_mutation_test.cpp — hostile segments without libFuzzer: copies of a REAL channel's
// control segment (producer and readers live in this process, one reader holding a frame) with
// random bytes written at random offsets, handed out under a new name by a hostile producer
// (tests/fake_producer.hpp), then read by inspect() and by `ringdump show`. Each must end in a
// Snapshot or an Error with a clear code, within bounded time.
//
// The seed is fixed so that a failure reproduces; IPCRING_MUTATION_SEED and
// IPCRING_MUTATION_ROUNDS override it and the round count.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "fake_producer.hpp"
#include "inspect_internal.hpp"
#include "ipcring/ipcring.hpp"
#include "segment/layout.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;

namespace {

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);  // NOLINT(concurrency-mt-unsafe): read before any thread
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 0) : fallback;
}

// The only ways a hostile control segment may be refused.
bool clear_code(Errc c) {
  return c == Errc::version_mismatch || c == Errc::corrupt_segment || c == Errc::not_ready;
}

// Checks what a snapshot promises whatever the segment held.
void check_snapshot(const Snapshot& s) {
  REQUIRE(s.slots.size() == s.slot_count);
  REQUIRE(s.slot_count >= 1);
  REQUIRE(s.slot_count <= detail::kMaxSlots);
  REQUIRE(s.max_readers <= detail::kMaxReaders);
  REQUIRE(s.readers.size() <= s.max_readers);
  for (std::uint32_t i = 0; i < s.slot_count; ++i) REQUIRE(s.slots[i].index == i);
  for (const auto& r : s.readers) {
    REQUIRE(r.index < s.max_readers);
    REQUIRE(r.hold_histogram.size() == detail::kHoldBuckets);
    for (auto slot : r.held_slots) REQUIRE(slot < s.slot_count);
  }
}

struct Aligned {
  explicit Aligned(std::size_t n)
      : bytes(static_cast<unsigned char*>(std::aligned_alloc(4096, (n + 4095) / 4096 * 4096))) {}
  ~Aligned() { std::free(bytes); }
  Aligned(const Aligned&) = delete;
  Aligned& operator=(const Aligned&) = delete;
  unsigned char* bytes;
};

// Outcome of one look: "ok" or the error code's name.
std::string outcome_of_inspect(const std::string& name) {
  try {
    check_snapshot(inspect(name));
    return "ok";
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(clear_code(e.code()));
    CHECK(std::string(e.what()).find(name) != std::string::npos);  // names the channel
    return to_string(e.code());
  }
}

std::string outcome_of_image(std::vector<unsigned char> bytes, const std::string& name) {
  Aligned image(bytes.size());
  std::memcpy(image.bytes, bytes.data(), bytes.size());
  try {
    check_snapshot(detail::inspect_image(image.bytes, bytes.size(), name));
    return "ok";
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(clear_code(e.code()));
    return to_string(e.code());
  }
}

// The bytes of a live channel's control segment, as a reader receives it.
std::vector<unsigned char> control_bytes_of(const std::string& name) {
  const int fd = test::control_fd_of(name);
  struct stat st {};
  REQUIRE(fstat(fd, &st) == 0);
  std::vector<unsigned char> bytes(static_cast<std::size_t>(st.st_size));
  REQUIRE(pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
  close(fd);
  return bytes;
}

// Hands `control` out under `fake`'s name, with a well-formed frame pool of the size the
// original header gives.
void hand_out(test::FakeProducer& fake, const std::vector<unsigned char>& control,
              std::uint64_t frames_bytes) {
  detail::HandoutMessage m{};
  m.control_bytes = control.size();
  m.frames_bytes = frames_bytes;
  const int c = test::memfd_with(control.data(), control.size(), F_SEAL_SHRINK | F_SEAL_GROW);
  const int f = test::memfd_with(nullptr, frames_bytes,
                                 F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE, true);
  REQUIRE(c >= 0);
  REQUIRE(f >= 0);
  fake.set(m, {c, f});
}

}  // namespace

TEST_CASE(
    "mutated copies of a live segment: inspect and ringdump give a Snapshot or a clear Error") {
  ScopedChannel source("mut-src");
  ChannelConfig cfg;
  cfg.slots = 6;
  cfg.max_readers = 4;
  cfg.frame_bytes = 4096;
  Producer producer = Producer::create(source, cfg);
  Reader holding = Reader::attach(source);
  ReaderOptions seq;
  seq.policy = ReadPolicy::sequential;
  Reader sequential = Reader::attach(source, seq);
  for (int i = 0; i < 5; ++i) {
    auto loan = producer.loan();
    REQUIRE(loan);
    producer.publish(std::move(*loan), 100);
    auto f = sequential.try_read();
    REQUIRE(f);
  }
  auto held = holding.try_read();
  REQUIRE(held);  // a held slot, a reader bit, a non-empty histogram in the copy

  const std::vector<unsigned char> base = control_bytes_of(source.name());
  REQUIRE(base.size() >= sizeof(detail::SegmentHeader));
  const std::uint64_t frames_bytes =
      reinterpret_cast<const detail::SegmentHeader*>(base.data())->frames_segment_bytes;

  ScopedChannel target("mut");
  test::FakeProducer fake(target.name());
  std::vector<unsigned char> renamed = base;
  {
    // The copy names itself after its new object, or every open would stop at the name check.
    auto* h = reinterpret_cast<detail::SegmentHeader*>(renamed.data());
    std::memset(h->name, 0, sizeof h->name);
    std::memcpy(h->name, target.name().data(), target.name().size());
  }
  hand_out(fake, renamed, frames_bytes);
  {
    const Snapshot s = inspect(target.name());
    check_snapshot(s);
    CHECK(s.problems.empty());
    CHECK(s.readers.size() == 2);
    CHECK(outcome_of_image(renamed, target.name()) == "ok");
  }

  const std::uint64_t seed = env_or("IPCRING_MUTATION_SEED", 20240601);
  const std::uint64_t rounds = env_or("IPCRING_MUTATION_ROUNDS", 1500);
  MESSAGE("seed " << seed << ", " << rounds << " rounds over a " << base.size() << "-byte segment");
  std::mt19937_64 rng(seed);
  std::size_t refused = 0;
  std::size_t with_problems = 0;
  for (std::uint64_t round = 0; round < rounds; ++round) {
    std::vector<unsigned char> bytes = renamed;
    const int edits = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < edits; ++k) {
      const std::uint64_t kind = rng() % 4;
      // A quarter of the edits land in the header, the rest anywhere.
      const std::size_t limit = kind == 0 ? sizeof(detail::SegmentHeader) : bytes.size();
      if (kind == 3) {
        // A whole aligned 64-bit word (atomics are 64-bit: sequences, masks, lease words).
        const std::size_t at = (rng() % (limit / 8)) * 8;
        const std::uint64_t v = rng() % 3 == 0 ? ~0ULL : rng();
        std::memcpy(bytes.data() + at, &v, 8);
      } else {
        bytes[rng() % limit] = static_cast<unsigned char>(rng());
      }
    }
    hand_out(fake, bytes, frames_bytes);
    const auto t0 = std::chrono::steady_clock::now();
    const std::string by_name = outcome_of_inspect(target.name());
    const std::string by_image = outcome_of_image(bytes, target.name());
    INFO("round " << round << ": inspect " << by_name << ", inspect_image " << by_image);
    CHECK(std::chrono::steady_clock::now() - t0 < 3s);
    // Same verdict in memory and through /dev/shm (not_ready: magic 0 reads as unfinished).
    CHECK(by_name == by_image);
    if (by_name != "ok") ++refused;
    if (by_name == "ok") {
      try {
        if (!inspect(target.name()).problems.empty()) ++with_problems;
      } catch (const Error&) {
      }
    }
    if (round % 50 == 0) {
      const test::ToolResult r = test::run_tool(
          {RINGDUMP_PATH, "show", target.name(), "--json", "--rate-window-ms", "0"}, 10s);
      INFO("round " << round << ": ringdump rc " << r.rc << " signal " << r.signal << "\n"
                    << r.err);
      CHECK_FALSE(r.timed_out);
      CHECK(r.signal == 0);
      CHECK(r.err.find("Sanitizer") == std::string::npos);  // sanitizer builds report, exit 1
      CHECK(r.err.find("runtime error") == std::string::npos);
      CHECK((r.rc == 0 || r.rc == 1 || r.rc == 4));
      if (r.rc == 0) {
        CHECK_FALSE(nlohmann::json::parse(r.out, nullptr, false).is_discarded());
      } else {
        CHECK(r.out.empty());
        CHECK(r.err.find(target.name()) != std::string::npos);
      }
    }
  }
  MESSAGE(refused << " of " << rounds << " mutated segments refused, " << with_problems
                  << " opened with problems reported");
  CHECK(refused > 0);
  CHECK(refused < rounds);
}

TEST_CASE("inspect_image refuses a misaligned or short image") {
  Aligned image(8192);
  std::memset(image.bytes, 0, 8192);
  try {
    detail::inspect_image(image.bytes + 8, 4096, "x");
    FAIL("misaligned image accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::invalid_argument);
  }
  try {
    detail::inspect_image(image.bytes, 100, "x");
    FAIL("short image accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::corrupt_segment);
  }
  try {
    detail::inspect_image(image.bytes, 8192, "x");
    FAIL("image without magic accepted");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::not_ready);
  }
}

TEST_CASE("a lease that is not a robust mutex is reported, never probed") {
  // glibc aborts in pthread_mutex_trylock on a priority-protect mutex whose ceiling is out of
  // range; such bytes in a segment must be reported, not handed to the C library.
  ScopedChannel source("mut-pp");
  ChannelConfig cfg;
  cfg.slots = 4;
  cfg.max_readers = 2;
  cfg.frame_bytes = 4096;
  Producer producer = Producer::create(source, cfg);
  Reader reader = Reader::attach(source);
  std::vector<unsigned char> bytes = control_bytes_of(source.name());
  REQUIRE_FALSE(bytes.empty());
  Aligned image(bytes.size());
  std::memcpy(image.bytes, bytes.data(), bytes.size());
  auto* h = reinterpret_cast<detail::SegmentHeader*>(image.bytes);
  auto* entry =
      reinterpret_cast<detail::ReaderEntry*>(image.bytes + h->reader_table_offset) + reader.index();
  auto* other = reinterpret_cast<detail::ReaderEntry*>(image.bytes + h->reader_table_offset) +
                (1 - reader.index());  // the free entry (max_readers 2)
  for (detail::ReaderEntry* e : {entry, other}) {
    auto* m = reinterpret_cast<pthread_mutex_t*>(e->lease.bytes);
    m->__data.__kind = 64 | 128;                       // PTHREAD_MUTEX_PRIO_PROTECT_NP | pshared
    m->__data.__lock = static_cast<int>(5000U << 19);  // ceiling 5000: beyond SCHED_FIFO's range
  }
  const Snapshot s = detail::inspect_image(image.bytes, bytes.size(), source.name());
  REQUIRE(s.readers.size() == 1);
  CHECK_FALSE(s.readers[0].alive);
  REQUIRE(s.problems.size() == 2);
  const std::string free_entry = "free reader entry " + std::to_string(1 - reader.index());
  CHECK(std::any_of(s.problems.begin(), s.problems.end(),
                    [&](const std::string& p) { return p.find(free_entry) != std::string::npos; }));
  for (const auto& p : s.problems) {
    CHECK(p.find("not a robust process-shared mutex") != std::string::npos);
  }
  // The public reap refuses such a segment rather than trylock the bytes.
  const std::string copy = source.name() + "-copy";
  std::vector<unsigned char> corrupt(image.bytes, image.bytes + bytes.size());
  auto* ch = reinterpret_cast<detail::SegmentHeader*>(corrupt.data());
  std::memset(ch->name, 0, sizeof ch->name);
  std::memcpy(ch->name, copy.data(), copy.size());
  test::FakeProducer fake(copy);
  hand_out(fake, corrupt, h->frames_segment_bytes);
  try {
    reap_dead_readers(copy);
    FAIL("reaped a segment with a corrupt lease");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::corrupt_segment);
  }
  const test::ToolResult check = test::run_tool({RINGDUMP_PATH, "check", copy});
  CHECK(check.rc == 3);
  CHECK(check.err.find("not a robust process-shared mutex") != std::string::npos);
  remove_channel(copy, true);
}
