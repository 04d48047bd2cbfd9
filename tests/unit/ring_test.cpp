// ring_test.cpp — the slot protocol on an in-memory segment, one step at a time.
//
// Each protocol step of ring.hpp is one atomic operation (a load-then-CAS loop that succeeds or
// fails as a unit), so the interleavings that matter can be driven deterministically from one
// thread: a reader's view taken before the producer moves, then the reader's next step. These are
// the cases the model (model/ipcring.pml) explores exhaustively; here they run against the real
// C++ code.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "ring/ring.hpp"
#include "segment/layout.hpp"

using namespace ipcring::detail;

namespace {

// A control segment in ordinary memory, laid out as in shared memory.
struct MemorySegment {
  explicit MemorySegment(std::uint32_t slots, std::uint32_t readers = 4) {
    const Geometry g = compute_geometry(slots, readers, 1, 4096, 1, 4096);
    memory.reset(static_cast<unsigned char*>(std::aligned_alloc(kLine, g.segment_bytes)));
    std::memset(memory.get(), 0, g.segment_bytes);
    view = SegmentView{memory.get(), g};
  }
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> memory;
  SegmentView view;

  // The producer's publication of `seq` into slot i (P1 claim must have happened).
  void publish(std::uint32_t i, std::uint64_t seq) {
    view.slot(i).sequence.store(seq);
    publish_slot(view.slot(i));
    view.log(seq).store(LogWord::make(seq, i));
  }
  std::uint64_t word(std::uint32_t i) { return view.slot(i).state.load(); }
};

constexpr std::uint64_t kReader0 = SlotWord::bit(0);
constexpr std::uint64_t kReader1 = SlotWord::bit(1);

}  // namespace

TEST_CASE("producer claims only free, published-or-empty slots") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  CHECK(SlotWord::writing(seg.word(0)));
  CHECK_FALSE(claim_for_write(s));  // already W
  seg.publish(0, 1);
  CHECK(SlotWord::generation(seg.word(0)) == 1);
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(s, kReader0, gen) == ClaimResult::claimed);
  CHECK_FALSE(claim_for_write(s));  // a reader holds it
  CHECK(release_read(s, kReader0, gen));
  CHECK(claim_for_write(s));  // free again
}

TEST_CASE("a reader never claims a slot the producer is writing") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  REQUIRE(claim_for_write(s));  // producer reclaims it for frame 2
  std::uint64_t gen = 0;
  CHECK(claim_for_read(s, kReader0, gen) == ClaimResult::lost);
  CHECK(SlotWord::mask(seg.word(0)) == 0);
}

TEST_CASE("ABA: a claim that lands on a later publication is caught by the sequence re-check") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  // Reader: sees frame 1 in slot 0 (log entry / head) ...
  const std::uint64_t e = seg.view.log(1).load();
  REQUIRE(LogWord::slot(e) == 0);
  // ... producer: reuses slot 0 for frame 2 before the reader's claim ...
  REQUIRE(claim_for_write(s));
  seg.publish(0, 2);
  // ... reader: the claim succeeds (the word is not W), but on generation 2, not frame 1.
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(s, kReader0, gen) == ClaimResult::claimed);
  CHECK(gen == 2);
  // (R4): the re-check sees sequence 2 != 1, and the reader must undo its claim.
  CHECK(s.sequence.load() != LogWord::sequence(e));
  CHECK(release_read(s, kReader0, gen));
  CHECK(SlotWord::mask(seg.word(0)) == 0);
  CHECK(claim_for_write(s));
}

TEST_CASE("a generation wrap cannot fool the claim: the sequence re-check closes it") {
  MemorySegment seg(1);
  Slot& s = seg.view.slot(0);
  // Put the slot at the last generation, publish frame 7, then wrap to generation 0 with frame 8.
  s.state.store(SlotWord::make(SlotWord::kGenMask, false, 0));
  REQUIRE(claim_for_write(s));
  seg.publish(0, 7);
  CHECK(SlotWord::generation(seg.word(0)) == 0);  // wrapped
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(s, kReader0, gen) == ClaimResult::claimed);
  CHECK(s.sequence.load() == 7);
}

TEST_CASE("release clears only the caller's bit, only in the generation it claimed") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  std::uint64_t g0 = 0, g1 = 0;
  REQUIRE(claim_for_read(s, kReader0, g0) == ClaimResult::claimed);
  REQUIRE(claim_for_read(s, kReader1, g1) == ClaimResult::claimed);
  CHECK(release_read(s, kReader0, g0));
  CHECK_FALSE(release_read(s, kReader0, g0));  // twice: nothing happens
  CHECK(SlotWord::mask(seg.word(0)) == kReader1);
  // Reader 0 claiming again in the same generation and releasing with a stale generation.
  REQUIRE(claim_for_read(s, kReader0, g0) == ClaimResult::claimed);
  CHECK_FALSE(release_read(s, kReader0, g0 + 1));
  CHECK(SlotWord::mask(seg.word(0)) == (kReader0 | kReader1));
}

TEST_CASE("a reader's bit already set: the wanted frame is not in this slot") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(s, kReader0, gen) == ClaimResult::claimed);
  std::uint64_t again = 0;
  CHECK(claim_for_read(s, kReader0, again) == ClaimResult::already_held);
}

TEST_CASE("the reaper clears a dead reader's bits everywhere and nobody else's") {
  MemorySegment seg(3);
  std::uint64_t gens[3] = {};
  for (std::uint32_t i = 0; i < 3; ++i) {
    REQUIRE(claim_for_write(seg.view.slot(i)));
    seg.publish(i, i + 1);
    REQUIRE(claim_for_read(seg.view.slot(i), kReader0, gens[i]) == ClaimResult::claimed);
  }
  std::uint64_t g = 0;
  REQUIRE(claim_for_read(seg.view.slot(1), kReader1, g) == ClaimResult::claimed);
  CHECK(clear_reader_bits(seg.view, 0) == 3);
  CHECK(SlotWord::mask(seg.word(0)) == 0);
  CHECK(SlotWord::mask(seg.word(1)) == kReader1);
  CHECK(SlotWord::mask(seg.word(2)) == 0);
  // The dead reader's own late release (it was killed between its CAS and its return) is a no-op.
  CHECK_FALSE(release_read(seg.view.slot(1), kReader0, gens[1]));
  CHECK(SlotWord::mask(seg.word(1)) == kReader1);
  // Reaping again changes nothing (idempotent: a reaper that died mid-way is finished by the next).
  CHECK(clear_reader_bits(seg.view, 0) == 0);
}

TEST_CASE("a reaped slot reused by the producer is not touched by the dead reader's release") {
  MemorySegment seg(2);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(s, kReader0, gen) == ClaimResult::claimed);
  clear_reader_bits(seg.view, 0);  // reaped
  REQUIRE(claim_for_write(s));     // producer rewrites it ...
  seg.publish(0, 2);
  std::uint64_t g2 = 0;
  REQUIRE(claim_for_read(s, kReader0, g2) == ClaimResult::claimed);  // ... a new reader 0 holds it
  CHECK_FALSE(release_read(s, kReader0, gen));  // the old claim's release: another generation
  CHECK(SlotWord::mask(seg.word(0)) == kReader0);
}

TEST_CASE("a dropped loan leaves the slot claimable and its generation unchanged") {
  MemorySegment seg(1);
  Slot& s = seg.view.slot(0);
  REQUIRE(claim_for_write(s));
  seg.publish(0, 1);
  REQUIRE(claim_for_write(s));
  unclaim(s);
  CHECK_FALSE(SlotWord::writing(seg.word(0)));
  CHECK(SlotWord::generation(seg.word(0)) == 1);
  CHECK(claim_for_write(s));
}
