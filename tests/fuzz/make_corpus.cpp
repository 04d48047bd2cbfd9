// make_corpus.cpp — writes the seed corpus of the fuzz targets:
//   <dir>/segment/*     copies of real control segments (channels made here with the public API,
//                       renamed "fuzz" in their header), plus a synthetic CUDA-geometry segment;
//   <dir>/descriptor/*  operation streams for descriptor_fuzz (well-formed publications and reads).
// Usage: ipcring_fuzz_corpus tests/fuzz/corpus
//        ipcring_fuzz_corpus --check tests/fuzz/corpus   (fails when a segment seed no longer
//        opens, e.g. after a layout version bump: regenerate the seeds then)
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "channel/handout.hpp"
#include "inspect_internal.hpp"
#include "ipcring/ipcring.hpp"
#include "lease/lease.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace {

using namespace ipcring;
using Bytes = std::vector<unsigned char>;

Bytes read_all(const std::string& path) {
  Bytes b;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return b;
  unsigned char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) b.insert(b.end(), buf, buf + n);
  std::fclose(f);
  return b;
}

// The control segment of a live channel, as its producer hands it to a reader.
Bytes control_segment_of(const std::string& name) {
  const auto dir = detail::ChannelDirectory::open(name, {}, false);
  detail::Handout h = detail::fetch_handout(name, dir, {}, std::chrono::milliseconds(2000));
  struct stat st {};
  if (fstat(h.control_fd, &st) != 0) return {};
  Bytes bytes(static_cast<std::size_t>(st.st_size));
  if (pread(h.control_fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    return {};
  }
  return bytes;
}

void write_all(const std::string& path, const Bytes& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr || std::fwrite(b.data(), 1, b.size(), f) != b.size()) {
    std::perror(path.c_str());
    std::exit(1);  // NOLINT(concurrency-mt-unsafe): single-threaded generator
  }
  std::fclose(f);
  std::printf("%s (%zu bytes)\n", path.c_str(), b.size());
}

void rename_to_fuzz(Bytes& b) {
  auto* h = reinterpret_cast<detail::SegmentHeader*>(b.data());
  std::memset(h->name, 0, sizeof h->name);
  std::memcpy(h->name, "fuzz", 4);
}

void publish(Producer& p, int n) {
  for (int i = 0; i < n; ++i) {
    auto loan = p.loan();
    if (!loan) return;
    std::memset(loan->data(), i, 32);
    const unsigned char meta[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    loan->set_metadata(std::as_bytes(std::span(meta)));
    p.publish(std::move(*loan), 32 + static_cast<std::size_t>(i));
  }
}

// A channel shaped by `config`, `readers` attached (the first holds a frame); with `dead_reader`
// one more reader attaches in a child that exits holding a frame (its lease is then owner-dead).
Bytes live_segment(const std::string& name, const ChannelConfig& config, int readers,
                   bool dead_reader) {
  Producer p = Producer::create(name, config);
  std::vector<Reader> rs;
  ReaderOptions seq;
  seq.policy = ReadPolicy::sequential;
  for (int i = 0; i < readers; ++i)
    rs.push_back(Reader::attach(name, i % 2 == 0 ? ReaderOptions{} : seq));
  publish(p, 3);
  std::vector<Frame> held;
  if (!rs.empty()) {
    auto f = rs[0].try_read();
    if (f) held.push_back(std::move(*f));
  }
  for (std::size_t i = 1; i < rs.size(); ++i) {
    auto f = rs[i].try_read();  // read and released at once
  }
  if (dead_reader) {
    const pid_t child = fork();
    if (child == 0) {
      Reader r = Reader::attach(name);
      auto f = r.try_read();
      _exit(f ? 0 : 1);  // dies holding the frame and the lease
    }
    int status = 0;
    waitpid(child, &status, 0);
  }
  publish(p, 2);
  return control_segment_of(name);
}

// A CUDA-backend segment image made without CUDA: header and leases only.
Bytes synthetic_cuda_segment() {
  const detail::Geometry g = detail::compute_geometry(4, 2, 1, 1 << 20, 2, 4096);
  Bytes b(g.segment_bytes, 0);
  auto* h = reinterpret_cast<detail::SegmentHeader*>(b.data());
  ChannelConfig config;
  config.slots = 4;
  config.max_readers = 2;
  config.frame_bytes = 1 << 20;
  config.backend = Backend::cuda;
  detail::write_header(*h, "fuzz", g, config);
  const detail::SegmentView view{b.data(), g};
  detail::init_robust_mutex(view.producer().lease);
  for (std::uint32_t i = 0; i < g.max_readers; ++i) detail::init_robust_mutex(view.reader(i).lease);
  detail::publish_header(*h);
  return b;
}

// descriptor_fuzz operations: [op][index][8-byte value].
void op(Bytes& b, std::uint8_t code, std::uint8_t index, std::uint64_t value) {
  b.push_back(code);
  b.push_back(index);
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<unsigned char>(value >> (8 * i)));
}

// Every segment seed must open as a segment of this build, or the fuzzer starts from nothing.
int check_seeds(const std::string& dir) {
  DIR* d = opendir((dir + "/segment").c_str());
  if (d == nullptr) {
    std::perror((dir + "/segment").c_str());
    return 1;
  }
  int bad = 0;
  int good = 0;
  while (const dirent* e = readdir(d)) {  // NOLINT(concurrency-mt-unsafe): one thread, one stream
    if (e->d_name[0] == '.') continue;
    const std::string path = dir + "/segment/" + e->d_name;
    const Bytes b = read_all(path);
    auto* image = static_cast<unsigned char*>(
        std::aligned_alloc(4096, (b.size() + 4095) / 4096 * 4096 + 4096));
    std::memcpy(image, b.data(), b.size());
    try {
      detail::inspect_image(image, b.size(), "fuzz");
      ++good;
    } catch (const Error& err) {
      std::fprintf(stderr, "%s: %s\n", path.c_str(), err.what());
      ++bad;
    }
    std::free(image);
  }
  closedir(d);
  if (bad != 0) {
    std::fprintf(stderr, "%d stale seed(s): regenerate them with 'ipcring_fuzz_corpus %s'\n", bad,
                 dir.c_str());
    return 1;
  }
  std::printf("%d segment seeds open\n", good);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--check") return check_seeds(argv[2]);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s [--check] CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  mkdir(dir.c_str(), 0755);
  mkdir((dir + "/segment").c_str(), 0755);
  mkdir((dir + "/descriptor").c_str(), 0755);
  const std::string stem = "fuzzseed-" + std::to_string(getpid()) + "-";

  struct Shape {
    const char* file;
    std::uint32_t slots, readers, held;
    int attached;
    bool dead;
  };
  const Shape shapes[] = {
      {"minimal", 1, 1, 1, 0, false},
      {"two-readers", 4, 2, 1, 2, false},
      {"dead-reader", 8, 4, 2, 3, true},
      {"wide", 16, 32, 1, 4, true},
  };
  for (const Shape& s : shapes) {
    ChannelConfig c;
    c.slots = s.slots;
    c.max_readers = s.readers;
    c.max_held = s.held;
    c.frame_bytes = 4096;
    const std::string name = stem + s.file;
    Bytes b = live_segment(name, c, s.attached, s.dead);
    remove_channel(name, true);
    if (b.empty()) {
      std::fprintf(stderr, "could not read the segment of %s\n", name.c_str());
      return 1;
    }
    rename_to_fuzz(b);
    write_all(dir + "/segment/" + s.file, b);
  }
  write_all(dir + "/segment/cuda-geometry", synthetic_cuda_segment());

  // Descriptor streams: byte 0 slots-1, byte 1 flags (1 sequential, 2 max_held 2).
  {
    Bytes b = {3, 0};  // 4 slots, latest
    op(b, 12, 0, 1 | (100ULL << 16));
    op(b, 10, 1, 0);  // read and keep
    op(b, 12, 1, 2 | (256ULL << 16));
    op(b, 10, 0, 0);
    op(b, 11, 0, 0);
    write_all(dir + "/descriptor/latest", b);
  }
  {
    Bytes b = {7, 3};  // 8 slots, sequential, max_held 2
    for (std::uint8_t i = 0; i < 6; ++i) op(b, 12, i, (i + 1ULL) | (64ULL << 16) | (8ULL << 32));
    op(b, 10, 1, 0);
    op(b, 10, 1, 0);
    op(b, 10, 0, 0);
    op(b, 11, 0, 0);
    op(b, 10, 0, 0);
    write_all(dir + "/descriptor/sequential", b);
  }
  {
    Bytes b = {1, 1};  // 2 slots, sequential; hostile words after a publication
    op(b, 12, 0, 5 | (10ULL << 16));
    op(b, 1, 5, (5ULL << 16) | 7);  // log entry pointing past the slots
    op(b, 5, 0, 1ULL << 40);        // bytes beyond frame_bytes
    op(b, 10, 0, 0);
    op(b, 0, 0, (1ULL << 16) | 9);  // head word naming slot 9 of 2
    op(b, 10, 0, 0);
    write_all(dir + "/descriptor/hostile", b);
  }
  {
    Bytes b = {3, 2};  // 4 slots, latest, max_held 2; a publication with a plausible tensor
    op(b, 12, 0, 1 | (256ULL << 16) | (16ULL << 40));  // 256 bytes, 16 metadata bytes
    op(b, 20, 0, 1 | (0ULL << 3) | (2ULL << 5));       // uint8, 2 dimensions
    op(b, 22, 0, 16);
    op(b, 22, 0, 16 | (1ULL << 8));  // 16 x 16 = the whole frame
    op(b, 10, 1, 0);
    op(b, 12, 1, 2 | (64ULL << 16));
    op(b, 20, 1, 2 | (2ULL << 3) | (3ULL << 5) | (8ULL << 16));  // float32, 3 dims, offset 8
    op(b, 22, 1, 2);
    op(b, 22, 1, 3 | (1ULL << 8));
    op(b, 22, 1, 2 | (2ULL << 8));
    op(b, 23, 1, 6);
    op(b, 23, 1, 2 | (1ULL << 8));
    op(b, 23, 1, 1 | (2ULL << 8));
    op(b, 10, 0, 0);
    op(b, 18, 0, 1ULL << 59);  // a huge dimension in slot 0's header
    op(b, 11, 0, 0);
    op(b, 21, 0, 0);
    op(b, 10, 0, 0);
    write_all(dir + "/descriptor/tensor", b);
  }
  {
    // Regression (not a seed): a head word of 2^64-1 made a sequential reader's catch-up loop
    // (`for (; target <= head; ++target)`) wrap around and spin for 2^64 steps (layout 1, where
    // head was a plain sequence; since layout 2 head is a LogWord and decodes to at most 2^48-1).
    mkdir((dir + "/../regressions").c_str(), 0755);
    mkdir((dir + "/../regressions/descriptor").c_str(), 0755);
    Bytes b = {1, 1};
    op(b, 0, 0, ~0ULL);
    op(b, 10, 0, 0);
    write_all(dir + "/../regressions/descriptor/reader-head-max", b);
  }
  return 0;
}
