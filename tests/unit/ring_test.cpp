// ring_test.cpp — the slot protocol on an in-memory segment, one step at a time.
//
// Each protocol step of ring.hpp is one atomic operation (a load-then-CAS loop that succeeds or
// fails as a unit), so the interleavings that matter can be driven deterministically from one
// thread: a reader's view taken before the producer moves, then the reader's next step. These are
// the cases the model (model/ipcring.pml) explores exhaustively; here they run against the real
// C++ code: the slot atomics of ring.hpp, the producer's search, preparation and publication
// (ring/writer.hpp) and the reader's cursor (ring/cursor.hpp), the same functions Producer and
// Reader run.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "backend/pool.hpp"
#include "common/clock.hpp"
#include "ring/claim_clock.hpp"
#include "ring/cursor.hpp"
#include "ring/observe.hpp"
#include "ring/ring.hpp"
#include "ring/writer.hpp"
#include "segment/layout.hpp"

using namespace ipcring;
using namespace ipcring::detail;

namespace {

// Frame buffers in ordinary memory; prepare_write and before_publish answer what a test sets.
class TestProducerPool final : public ProducerPool {
 public:
  std::byte* buffer(std::uint32_t slot) noexcept override { return bytes + slot; }
  Status prepare_write(std::uint32_t, CudaStream) noexcept override { return prepare; }
  Status before_publish(std::uint32_t, CudaStream, std::uint64_t) noexcept override {
    return publish;
  }
  Status prepare = Status::ok;
  Status publish = Status::ok;
  std::byte bytes[64] = {};
};

class TestReaderPool final : public ReaderPool {
 public:
  const std::byte* buffer(std::uint32_t slot, std::uint64_t, std::uint64_t) noexcept override {
    return fail ? nullptr : bytes + slot;
  }
  bool fail = false;
  std::byte bytes[64] = {};
};

// A control segment in ordinary memory, laid out as in shared memory.
struct MemorySegment {
  explicit MemorySegment(std::uint32_t slots, std::uint32_t readers = 4, std::uint32_t held = 1) {
    const Geometry g = compute_geometry(slots, readers, held, 4096, kBackendHost, 4096);
    memory.reset(static_cast<unsigned char*>(std::aligned_alloc(kLine, g.segment_bytes)));
    std::memset(memory.get(), 0, g.segment_bytes);
    view = SegmentView{memory.get(), g};
  }
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  std::unique_ptr<unsigned char, Free> memory;
  SegmentView view;

  // The producer's publication of `seq` into slot i (P1 claim must have happened): the real
  // publish_frame, descriptor, slot word, log entry and head.
  void publish(std::uint32_t i, std::uint64_t seq) {
    writer.next_sequence = seq;
    std::uint64_t published = 0;
    REQUIRE(publish_frame(view, pool, writer, i, 16, nullptr, published) == Status::ok);
    REQUIRE(published == seq);
  }
  WriterState writer;
  TestProducerPool pool;
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

// ---- the producer's search, preparation and publication (ring/writer.hpp) ----------------------

namespace {

struct CountingReap {
  int calls = 0;
  static void run(void* self) noexcept { ++static_cast<CountingReap*>(self)->calls; }
  ReapHook hook() { return ReapHook{&CountingReap::run, this}; }
};

// A reader holding slot i (its bit set in the word), as after (R3).
void hold(MemorySegment& seg, std::uint32_t i, std::uint64_t bit) {
  std::uint64_t gen = 0;
  REQUIRE(claim_for_read(seg.view.slot(i), bit, gen) == ClaimResult::claimed);
}

}  // namespace

TEST_CASE("the search keeps the newest frame while another slot is free, and reaps only then") {
  MemorySegment seg(3);
  CountingReap reap;
  for (std::uint64_t seq = 1; seq <= 3; ++seq) {
    const std::uint32_t i = claim_free_slot(seg.view, seg.writer, reap.hook());
    REQUIRE(i != kNoSlot);
    REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::ok);
    seg.publish(i, seq);
  }
  CHECK(reap.calls == 0);
  const std::uint32_t newest = seg.writer.newest_slot;
  hold(seg, (newest + 1) % 3, kReader0);
  hold(seg, (newest + 2) % 3, kReader1);
  // Only the newest frame's slot is free: the first pass skips it, the reap runs, and the sizing
  // rule's passes (which may take the newest) claim it.
  CHECK(claim_free_slot(seg.view, seg.writer, reap.hook()) == newest);
  CHECK(reap.calls == 1);
  CHECK(seg.writer.cursor == newest);
  CHECK(seg.writer.loan_failures == 0);
}

TEST_CASE("a search that finds nothing counts a loan failure; an undersized channel stops early") {
  // 2 slots, 4 readers, max_held 1: the sizing rule (slots >= readers * held + 2) does not hold,
  // so the search ends at the first pass that sees the previous one's words.
  MemorySegment seg(2);
  CountingReap reap;
  for (std::uint32_t i = 0; i < 2; ++i) {
    REQUIRE(claim_for_write(seg.view.slot(i)));
    seg.publish(i, i + 1);
    hold(seg, i, kReader0);
  }
  CHECK(claim_free_slot(seg.view, seg.writer, reap.hook()) == kNoSlot);
  CHECK(reap.calls == 1);
  CHECK(seg.writer.loan_failures == 1);
  CHECK(seg.view.producer().loan_failures.load() == 1);
}

TEST_CASE("prepare_slot empties the descriptor and frame header; a refused slot keeps its frame") {
  MemorySegment seg(2);
  CountingReap reap;
  std::uint32_t i = claim_free_slot(seg.view, seg.writer, reap.hook());
  REQUIRE(i != kNoSlot);
  REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::ok);
  seg.view.frame_header(i).metadata_bytes.store(12);
  seg.view.frame_header(i).capture_time_ns.store(99);
  seg.publish(i, 1);
  REQUIRE(seg.view.slot(i).sequence.load() == 1);
  // Claimed again (as a loan would): prepared, the old publication is gone from the descriptor.
  REQUIRE(claim_for_write(seg.view.slot(i)));
  REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::ok);
  CHECK(seg.view.slot(i).sequence.load() == 0);
  CHECK(seg.view.frame_header(i).sequence.load() == 0);
  CHECK(seg.view.frame_header(i).metadata_bytes.load() == 0);
  CHECK(seg.view.frame_header(i).capture_time_ns.load() == 0);
  CHECK(seg.writer.newest_slot == kNoSlot);
  seg.publish(i, 2);
  // The pool refuses (CUDA: a reader's GPU work still reads the buffer): unclaimed, frame kept.
  seg.pool.prepare = Status::no_free_slot;
  REQUIRE(claim_for_write(seg.view.slot(i)));
  CHECK(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::no_free_slot);
  CHECK_FALSE(SlotWord::writing(seg.word(i)));
  CHECK(seg.view.slot(i).sequence.load() == 2);
  CHECK(seg.writer.newest_slot == i);
}

TEST_CASE("publish_frame stores descriptor, log entry and head; a pool failure publishes nothing") {
  MemorySegment seg(2);
  REQUIRE(claim_for_write(seg.view.slot(1)));
  seg.writer.epoch = 3;
  seg.writer.next_sequence = 5;
  std::uint64_t seq = 0;
  REQUIRE(publish_frame(seg.view, seg.pool, seg.writer, 1, 40, nullptr, seq) == Status::ok);
  CHECK(seq == 5);
  CHECK(seg.writer.next_sequence == 6);
  CHECK(seg.view.slot(1).epoch.load() == 3);
  CHECK(seg.view.slot(1).bytes.load() == 40);
  CHECK(seg.view.slot(1).buffer_index.load() == 1);
  CHECK(seg.view.frame_header(1).sequence.load() == 5);
  CHECK(seg.view.log(5).load() == LogWord::make(5, 1));
  CHECK(seg.view.producer().head.load() == LogWord::make(5, 1));
  CHECK(seg.view.producer().published.load() == 1);
  CHECK(seg.writer.newest_slot == 1);
  CHECK_FALSE(SlotWord::writing(seg.word(1)));
  // before_publish fails (CUDA: the write-done event could not be recorded): a Status, the slot
  // stays claimed, head and the sequence counter do not move.
  REQUIRE(claim_for_write(seg.view.slot(0)));
  seg.pool.publish = Status::backend_error;
  std::uint64_t none = 0;
  CHECK(publish_frame(seg.view, seg.pool, seg.writer, 0, 8, nullptr, none) ==
        Status::backend_error);
  CHECK(none == 0);
  CHECK(SlotWord::writing(seg.word(0)));
  CHECK(seg.writer.next_sequence == 6);
  CHECK(seg.view.producer().head.load() == LogWord::make(5, 1));
}

// ---- the reader's cursor (ring/cursor.hpp) -----------------------------------------------------

namespace {

// A reader holding entry 0 of generation 1 under producer epoch 1, as attach leaves it.
struct TestReader {
  explicit TestReader(MemorySegment& segment, ReadPolicy policy, std::uint32_t index = 0)
      : seg(segment) {
    seg.view.producer().lease_word.store(LeaseWord::make(1, LeaseState::active));
    seg.writer.epoch = 1;
    seg.view.reader(index).lease_word.store(LeaseWord::make(1, LeaseState::active));
    cursor.policy = policy;
    cursor.index = index;
    cursor.bit = SlotWord::bit(index);
    cursor.entry_generation = 1;
    cursor.epoch = 1;
  }
  Status next(FrameFields& f) { return next_frame(seg.view, pool, cursor, held, f); }
  std::uint32_t release(const FrameFields& f) {
    return release_frame(seg.view, pool, cursor, held, f, nullptr);
  }
  MemorySegment& seg;
  TestReaderPool pool;
  CursorState cursor;
  std::atomic<std::uint32_t> held{0};
};

void produce(MemorySegment& seg, std::uint64_t frames) {
  CountingReap reap;
  for (std::uint64_t k = 0; k < frames; ++k) {
    const std::uint32_t i = claim_free_slot(seg.view, seg.writer, reap.hook());
    REQUIRE(i != kNoSlot);
    REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::ok);
    std::uint64_t seq = 0;
    REQUIRE(publish_frame(seg.view, seg.pool, seg.writer, i, 16, nullptr, seq) == Status::ok);
  }
}

}  // namespace

TEST_CASE("cursor, latest policy: the newest frame, frames skipped counted, then no_frame") {
  MemorySegment seg(4, 2, 2);
  TestReader r(seg, ReadPolicy::latest);
  FrameFields f;
  CHECK(r.next(f) == Status::no_frame);
  produce(seg, 1);
  REQUIRE(r.next(f) == Status::ok);
  CHECK(f.sequence == 1);
  CHECK(f.skipped == 0);
  CHECK(r.release(f) == 1);
  produce(seg, 3);
  FrameFields g;
  REQUIRE(r.next(g) == Status::ok);
  CHECK(g.sequence == 4);
  CHECK(g.skipped == 2);
  CHECK(g.data == r.pool.bytes + g.slot);
  CHECK(g.size == 16);
  CHECK(g.epoch == 1);
  CHECK((SlotWord::mask(seg.word(g.slot)) & r.cursor.bit) != 0);
  CHECK(r.held.load() == 1);
  CHECK(seg.view.reader(0).frames_read.load() == 2);
  FrameFields none;
  CHECK(r.next(none) == Status::no_frame);
  CHECK(r.release(g) == 1);
  CHECK(SlotWord::mask(seg.word(g.slot)) == 0);
  CHECK(r.cursor.overruns == 0);  // latest: skipping is not an overrun
}

TEST_CASE("cursor, sequential policy: every frame in order, lost ones counted as overruns") {
  MemorySegment seg(4, 2, 2);
  TestReader r(seg, ReadPolicy::sequential);
  produce(seg, 2);
  FrameFields f;
  REQUIRE(r.next(f) == Status::ok);
  CHECK(f.sequence == 1);
  r.release(f);
  REQUIRE(r.next(f) == Status::ok);
  CHECK(f.sequence == 2);
  r.release(f);
  // Ten more frames through four slots: the log keeps the last log_size, slots the last few.
  produce(seg, 10);
  REQUIRE(r.next(f) == Status::ok);
  CHECK(f.sequence > 3);
  CHECK(r.cursor.overruns == f.sequence - 3);
  CHECK(f.skipped == f.sequence - 3);
  CHECK(seg.view.reader(0).overruns.load() == r.cursor.overruns);
  r.release(f);
}

TEST_CASE("cursor: max_held, the evicted reader, the backend error and the epoch change") {
  MemorySegment seg(4, 2, 1);
  TestReader r(seg, ReadPolicy::latest);
  produce(seg, 1);
  FrameFields f;
  REQUIRE(r.next(f) == Status::ok);
  produce(seg, 1);
  FrameFields g;
  CHECK(r.next(g) == Status::max_held);
  // The owner's flag above the frame count does not count as a frame.
  r.held.fetch_or(~kHeldFramesMask);
  CHECK(r.release(f) == (~kHeldFramesMask | 1U));
  CHECK(frames_held(r.held.load()) == 0);
  // The pool cannot map the buffer: backend_error, and the claim is undone.
  r.pool.fail = true;
  CHECK(r.next(g) == Status::backend_error);
  CHECK(SlotWord::mask(seg.word(seg.writer.newest_slot)) == 0);
  r.pool.fail = false;
  // A takeover: the new epoch is reported once as producer_gone, then its frames are read.
  seg.view.producer().lease_word.store(LeaseWord::make(2, LeaseState::active));
  seg.writer.epoch = 2;
  produce(seg, 1);
  CHECK(r.next(g) == Status::producer_gone);
  REQUIRE(r.next(g) == Status::ok);
  CHECK(g.epoch == 2);
  // Reaped: evicted, and the late release leaves the (reaper-cleared) slot alone.
  clear_reader_bits(seg.view, 0);
  seg.view.reader(0).lease_word.store(LeaseWord::make(1, LeaseState::free));
  FrameFields h;
  CHECK(r.next(h) == Status::evicted);
  hold(seg, g.slot, kReader1);
  r.release(g);
  CHECK(SlotWord::mask(seg.word(g.slot)) == kReader1);
}

TEST_CASE("cursor: a frame of an ended epoch is never handed out once the new epoch is visible") {
  MemorySegment seg(4, 2, 1);
  TestReader r(seg, ReadPolicy::latest);
  produce(seg, 1);  // epoch 1's frame
  // The new producer's lease word is visible, but the reader has not seen the epoch change yet.
  const std::uint64_t head = seg.view.producer().head.load();
  seg.view.producer().lease_word.store(LeaseWord::make(2, LeaseState::active));
  bool lost = false;
  FrameFields f;
  CHECK(claim_frame(seg.view, r.pool, r.cursor, 1, head, lost, f) == Status::no_frame);
  CHECK(lost);
  CHECK(SlotWord::mask(seg.word(LogWord::slot(head))) == 0);  // the claim was undone
}

// ---- the observer's copy and re-check (ring/observe.hpp) ---------------------------------------

namespace {

constexpr std::size_t kObservedBytes = 64;

// Frame buffers the test writes as the producer would (64 bytes a slot); `during_copy` runs the
// producer's steps from inside buffer(), after the observer's (O1) and before its copy, so that a
// rewrite under the copy is driven deterministically through next_observed itself.
class ObservedPool final : public ReaderPool {
 public:
  const std::byte* buffer(std::uint32_t slot, std::uint64_t, std::uint64_t) noexcept override {
    if (during_copy != nullptr) std::exchange(during_copy, nullptr)(context, slot);
    return bytes + std::size_t{slot} * kObservedBytes;
  }
  bool during_copy_ran() const noexcept { return during_copy == nullptr; }
  void (*during_copy)(void*, std::uint32_t) = nullptr;
  void* context = nullptr;
  std::byte bytes[8 * kObservedBytes] = {};
};

// An observer under producer epoch 1, as attach leaves it: no entry, no bit.
struct TestObserver {
  explicit TestObserver(MemorySegment& segment, ReadPolicy policy) : seg(segment) {
    seg.view.producer().lease_word.store(LeaseWord::make(1, LeaseState::active));
    seg.writer.epoch = 1;
    cursor.policy = policy;
    cursor.epoch = 1;
    buffer = {copy, kObservedBytes, sizeof copy - kObservedBytes};
  }
  Status next(FrameFields& f) { return next_observed(seg.view, pool, cursor, buffer, f); }
  MemorySegment& seg;
  ObservedPool pool;
  CursorState cursor;
  std::byte copy[kObservedBytes + 4096] = {};
  ObserverBuffer buffer;
};

// The producer's whole publication of `seq` into slot i: claim (P1), prepare, the payload (every
// byte = seq), publish (P2..P4).
void publish_into(MemorySegment& seg, ObservedPool& pool, std::uint32_t i, std::uint64_t seq) {
  REQUIRE(claim_for_write(seg.view.slot(i)));
  REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, i, nullptr) == Status::ok);
  std::memset(pool.bytes + std::size_t{i} * kObservedBytes, static_cast<int>(seq & 0xff),
              kObservedBytes);
  seg.publish(i, seq);
}

bool all_bytes(const std::byte* p, std::size_t n, std::uint64_t seq) {
  for (std::size_t k = 0; k < n; ++k) {
    if (p[k] != static_cast<std::byte>(seq & 0xff)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("observer: a copy of the newest frame, no bit set, no entry touched") {
  MemorySegment seg(4, 2, 1);
  TestObserver o(seg, ReadPolicy::latest);
  FrameFields f;
  CHECK(o.next(f) == Status::no_frame);
  publish_into(seg, o.pool, 2, 1);
  publish_into(seg, o.pool, 3, 2);
  REQUIRE(o.next(f) == Status::ok);
  CHECK(f.sequence == 2);
  CHECK(f.slot == 3);
  CHECK(f.size == 16);
  CHECK(f.data == o.copy);  // the private copy, not the frame pool
  CHECK(all_bytes(f.data, f.size, 2));
  CHECK(f.skipped == 0);
  // Nothing in shared memory is ours: no bit in any slot, no reader entry written.
  for (std::uint32_t i = 0; i < 4; ++i) CHECK(SlotWord::mask(seg.word(i)) == 0);
  CHECK(seg.view.reader(0).frames_read.load() == 0);
  CHECK(seg.view.reader(0).lease_word.load() == 0);
  // The producer may claim the slot at once (no reader holds it) although the copy is "held".
  CHECK(claim_for_write(seg.view.slot(3)));
  unclaim(seg.view.slot(3));
  FrameFields none;
  CHECK(o.next(none) == Status::no_frame);
  CHECK(o.cursor.observer_dropped == 0);
}

TEST_CASE("observer: a slot rewritten between the copy and the re-check is refused") {
  MemorySegment seg(4, 2, 1);
  TestObserver o(seg, ReadPolicy::latest);
  publish_into(seg, o.pool, 1, 1);
  const std::uint64_t head = seg.view.producer().head.load();
  SUBCASE("republished: another generation") {
    Observation seen;
    FrameFields f;
    bool lost = true;
    REQUIRE(observe_copy(seg.view, o.pool, o.cursor, 1, head, o.buffer, lost, seen, f) ==
            Status::ok);
    CHECK_FALSE(lost);
    publish_into(seg, o.pool, 1, 2);  // the producer's steps between the copy and the re-check
    CHECK_FALSE(observe_confirm(seg.view, o.cursor, seen));
  }
  SUBCASE("claimed and being written (W set)") {
    Observation seen;
    FrameFields f;
    bool lost = true;
    REQUIRE(observe_copy(seg.view, o.pool, o.cursor, 1, head, o.buffer, lost, seen, f) ==
            Status::ok);
    REQUIRE(claim_for_write(seg.view.slot(1)));
    CHECK_FALSE(observe_confirm(seg.view, o.cursor, seen));
  }
  SUBCASE("a dropped loan: same generation, W clear, but the sequence was zeroed") {
    Observation seen;
    FrameFields f;
    bool lost = true;
    REQUIRE(observe_copy(seg.view, o.pool, o.cursor, 1, head, o.buffer, lost, seen, f) ==
            Status::ok);
    REQUIRE(claim_for_write(seg.view.slot(1)));
    REQUIRE(prepare_slot(seg.view, seg.pool, seg.writer, 1, nullptr) == Status::ok);
    std::memset(o.pool.bytes + kObservedBytes, 0x55, kObservedBytes);  // written, then dropped
    unclaim(seg.view.slot(1));
    CHECK(SlotWord::generation(seg.word(1)) == seen.generation);
    CHECK_FALSE(observe_confirm(seg.view, o.cursor, seen));
  }
  SUBCASE("a takeover: the producer's epoch moved on") {
    Observation seen;
    FrameFields f;
    bool lost = true;
    REQUIRE(observe_copy(seg.view, o.pool, o.cursor, 1, head, o.buffer, lost, seen, f) ==
            Status::ok);
    seg.view.producer().lease_word.store(LeaseWord::make(2, LeaseState::active));
    CHECK_FALSE(observe_confirm(seg.view, o.cursor, seen));
  }
  SUBCASE("untouched: confirmed") {
    Observation seen;
    FrameFields f;
    bool lost = true;
    REQUIRE(observe_copy(seg.view, o.pool, o.cursor, 1, head, o.buffer, lost, seen, f) ==
            Status::ok);
    // Another reader's claim and release change the mask only: the copy stands.
    hold(seg, 1, kReader1);
    CHECK(observe_confirm(seg.view, o.cursor, seen));
  }
}

TEST_CASE("observer: a copy overwritten under next_observed is dropped, counted, and retried") {
  MemorySegment seg(4, 2, 1);
  TestObserver o(seg, ReadPolicy::latest);
  publish_into(seg, o.pool, 1, 1);
  // While the observer copies frame 1, the producer rewrites slot 1 with frame 2 (payload first,
  // then the publication): the copy may hold bytes of both, and must not be accepted.
  struct Context {
    MemorySegment* seg;
    ObservedPool* pool;
  } context{&seg, &o.pool};
  o.pool.context = &context;
  o.pool.during_copy = [](void* c, std::uint32_t slot) {
    auto* ctx = static_cast<Context*>(c);
    publish_into(*ctx->seg, *ctx->pool, slot, 2);
  };
  FrameFields f;
  REQUIRE(o.next(f) == Status::ok);
  CHECK(o.cursor.observer_dropped == 1);
  CHECK(f.sequence == 2);  // the retry read head again and copied the new frame whole
  CHECK(all_bytes(f.data, f.size, 2));
  CHECK(o.pool.during_copy_ran());  // the rewrite did happen under the copy
}

TEST_CASE("observer, sequential policy: in order, a frame dropped by the re-check is an overrun") {
  MemorySegment seg(4, 2, 1);
  TestObserver o(seg, ReadPolicy::sequential);
  publish_into(seg, o.pool, 0, 1);
  publish_into(seg, o.pool, 1, 2);
  publish_into(seg, o.pool, 2, 3);
  FrameFields f;
  REQUIRE(o.next(f) == Status::ok);
  CHECK(f.sequence == 1);
  // Frame 2's slot is rewritten (frame 4) under the copy: frame 2 is lost, frame 3 comes next.
  struct Context {
    MemorySegment* seg;
    ObservedPool* pool;
  } context{&seg, &o.pool};
  o.pool.context = &context;
  o.pool.during_copy = [](void* c, std::uint32_t slot) {
    auto* ctx = static_cast<Context*>(c);
    publish_into(*ctx->seg, *ctx->pool, slot, 4);
  };
  FrameFields g;
  REQUIRE(o.next(g) == Status::ok);
  CHECK(o.cursor.observer_dropped == 1);
  CHECK(g.sequence == 3);
  CHECK(g.skipped == 1);
  CHECK(o.cursor.overruns == 1);
  CHECK(all_bytes(g.data, g.size, 3));
  FrameFields h;
  REQUIRE(o.next(h) == Status::ok);
  CHECK(h.sequence == 4);
  CHECK(all_bytes(h.data, h.size, 4));
}

TEST_CASE("observer: the epoch change is reported, a frame of an ended epoch never copied") {
  MemorySegment seg(4, 2, 1);
  TestObserver o(seg, ReadPolicy::latest);
  publish_into(seg, o.pool, 0, 1);
  seg.view.producer().lease_word.store(LeaseWord::make(2, LeaseState::active));
  FrameFields f;
  CHECK(o.next(f) == Status::producer_gone);
  CHECK(o.next(f) == Status::no_frame);  // epoch 1's frame is not taken under epoch 2
  seg.writer.epoch = 2;
  publish_into(seg, o.pool, 1, 2);
  REQUIRE(o.next(f) == Status::ok);
  CHECK(f.epoch == 2);
  // A corrupt size is refused before anything is copied.
  publish_into(seg, o.pool, 2, 3);
  seg.view.slot(2).bytes.store(seg.view.geo.frame_bytes + 1);
  FrameFields g;
  CHECK(o.next(g) == Status::no_frame);
}

// ---- the claim clock (ring/claim_clock.hpp) ----------------------------------------------------

// Each value lies between CLOCK_MONOTONIC read just before and just after it (within a margin
// for the anchors' jitter), and no value is smaller than the one before; on a machine where the
// TSC may stand in for the clock it is calibrated after its first 25 ms. Accuracy, not speed: a
// preemption between the reads only widens the window.
TEST_CASE("the claim clock follows CLOCK_MONOTONIC and never goes back") {
  for (const bool use_tsc : {false, true}) {
    CAPTURE(use_tsc);
    ClaimClock clock;
    clock.init(use_tsc && tsc_clock_usable());
    constexpr std::uint64_t kMarginNs = 100'000;
    std::uint64_t previous = 0;
    const std::uint64_t start = monotonic_ns();
    int checked = 0;
    while (monotonic_ns() - start < 3 * ClaimClock::kAnchorNs) {
      const std::uint64_t before = monotonic_ns();
      const std::uint64_t now = clock.now_ns();
      const std::uint64_t after = monotonic_ns();
      REQUIRE(now >= previous);
      REQUIRE(now + kMarginNs >= before);
      REQUIRE(now <= after + kMarginNs);
      previous = now;
      ++checked;
    }
    CHECK(checked > 1000);
    if (use_tsc && tsc_clock_usable()) {
      CHECK(clock.calibrated());
    } else {
      CHECK_FALSE(clock.calibrated());
    }
  }
}
