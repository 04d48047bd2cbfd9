// segment_fuzz.cpp — libFuzzer target: any bytes as a control segment.
//
// Input: the bytes of a control segment image (the seeds in corpus/segment are real segments of
// channels named "fuzz", written by make_corpus). Two properties, invariant 7 of DESIGN.md:
//  1. validate_header() on the first 512 bytes (zero-padded) returns a geometry or throws Error
//     with version_mismatch / corrupt_segment, and an accepted geometry lies inside the image;
//  2. inspect_image() on the whole image (what `ringdump show` does after mapping) returns a
//     Snapshot whose indices are all in range, or throws one of those clear errors (or not_ready
//     for magic 0). Never a crash, an out-of-bounds access (ASan), UB (UBSan) or a hang.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "inspect_internal.hpp"
#include "ipcring/error.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace {

using namespace ipcring;
using namespace ipcring::detail;

constexpr const char* kName = "fuzz";

[[noreturn]] void fail(const char* why) {
  std::fprintf(stderr, "segment_fuzz: property violated: %s\n", why);
  std::abort();
}

void expect_clear(const Error& e) {
  if (e.code() != Errc::version_mismatch && e.code() != Errc::corrupt_segment &&
      e.code() != Errc::not_ready) {
    std::fprintf(stderr, "unexpected error code %s: %s\n", to_string(e.code()), e.what());
    fail("error code");
  }
  if (std::strstr(e.what(), kName) == nullptr) fail("error message does not name the channel");
}

void check_header(const std::uint8_t* data, std::size_t size) {
  SegmentHeader h;
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  std::memcpy(static_cast<void*>(&h), data, std::min(size, sizeof h));
  try {
    const Geometry g = validate_header(h, size, kName);
    if (g.segment_bytes != size) fail("accepted a geometry that is not the image's size");
    if (g.log_offset + std::uint64_t{g.log_size} * 8 > size) fail("log beyond the image");
    if (g.slot_table_offset + std::uint64_t{g.slots} * sizeof(Slot) > g.log_offset) {
      fail("slot table overlaps the log");
    }
    if (g.cuda_offset != 0 && g.cuda_offset + std::uint64_t{g.slots} * sizeof(CudaSlot) > size) {
      fail("CUDA slots beyond the image");
    }
  } catch (const Error& e) {
    expect_clear(e);
  }
}

void check_image(const std::uint8_t* data, std::size_t size) {
  if (size < sizeof(SegmentHeader)) return;
  const std::size_t rounded = (size + kLine - 1) / kLine * kLine;
  auto* image = static_cast<unsigned char*>(std::aligned_alloc(kLine, rounded));
  std::memcpy(image, data, size);
  try {
    const Snapshot s = inspect_image(image, size, kName);
    if (s.slots.size() != s.slot_count || s.slot_count < 1 || s.slot_count > kMaxSlots)
      fail("slots");
    if (s.max_readers < 1 || s.max_readers > kMaxReaders) fail("max_readers");
    if (s.readers.size() > s.max_readers) fail("more readers than entries");
    for (const auto& r : s.readers) {
      if (r.index >= s.max_readers) fail("reader index");
      for (auto slot : r.held_slots) {
        if (slot >= s.slot_count) fail("held slot index");
      }
    }
    for (std::uint32_t i = 0; i < s.slot_count; ++i) {
      if (s.slots[i].index != i) fail("slot index");
    }
  } catch (const Error& e) {
    expect_clear(e);
  }
  std::free(image);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  check_header(data, size);
  check_image(data, size);
  return 0;
}
