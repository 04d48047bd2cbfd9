// ringdump_test.cpp — ringdump against live channels: a producer and readers run as forked child
// processes using the public API; ringdump runs as a subprocess (RINGDUMP_PATH).
//
// gc is always given the test's own channel name as its pattern: other suites may run at the same
// time and keep stale channels on purpose (takeover tests).
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_producer.hpp"
#include "ipcring/ipcring.hpp"
#include "process/process_util.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::Child;
using test::run_tool;
using test::ScopedChannel;
using test::ToolResult;
using Json = nlohmann::json;

namespace {

ToolResult ringdump(std::vector<std::string> args) {
  args.insert(args.begin(), RINGDUMP_PATH);
  return run_tool(args);
}

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) +
         (r.timed_out ? " TIMED OUT" : "") + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

Json parse_json(const ToolResult& r) {
  INFO(describe(r));
  REQUIRE(r.rc == 0);
  Json j = Json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

ChannelConfig config(std::uint32_t slots = 8, std::uint32_t readers = 4) {
  ChannelConfig c;
  c.slots = slots;
  c.max_readers = readers;
  c.max_held = 1;
  c.frame_bytes = 4096;
  return c;
}

const Json* find_channel(const Json& list, const std::string& name) {
  for (const auto& c : list["channels"]) {
    if (c["name"] == name) return &c;
  }
  return nullptr;
}

const Json* find_reader(const Json& show, std::uint32_t index) {
  for (const auto& r : show["readers"]) {
    if (r["index"] == index) return &r;
  }
  return nullptr;
}

// Waits until `pred` holds for inspect(name) (bounded).
template <class Pred>
bool wait_for(const std::string& name, Pred pred, std::chrono::milliseconds timeout = 5s) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    try {
      if (pred(inspect(name))) return true;
    } catch (const Error&) {
    }
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

// Hands out (through `fake`, a hostile producer) a control segment for `name` that claims another
// layout version (only the header matters: openers check the version before anything else).
void craft_segment(test::FakeProducer& fake, const std::string& name, std::uint64_t magic,
                   std::uint32_t layout_version, std::uint32_t slots = 4) {
  std::vector<unsigned char> bytes(8192, 0);
  detail::SegmentHeader h;
  std::memset(static_cast<void*>(&h), 0, sizeof h);
  h.magic.store(magic, std::memory_order_relaxed);
  h.layout_version = layout_version;
  h.endian_mark = detail::kEndianMark;
  h.header_bytes = sizeof(detail::SegmentHeader);
  h.producer_bytes = sizeof(detail::ProducerBlock);
  h.reader_entry_bytes = sizeof(detail::ReaderEntry);
  h.slot_bytes = sizeof(detail::Slot);
  h.cuda_slot_bytes = sizeof(detail::CudaSlot);
  h.mutex_bytes = sizeof(pthread_mutex_t);
  std::strncpy(h.libc_id, detail::libc_identity(), sizeof h.libc_id - 1);
  h.slots = slots;
  std::memcpy(h.name, name.data(), name.size());
  std::memcpy(bytes.data(), static_cast<const void*>(&h), sizeof h);
  detail::HandoutMessage m{};
  m.control_bytes = bytes.size();
  const int fd = test::memfd_with(bytes.data(), bytes.size(), F_SEAL_SHRINK | F_SEAL_GROW);
  REQUIRE(fd >= 0);
  fake.set(m, {fd});
}

}  // namespace

TEST_CASE("ringdump: usage errors exit 2, help exits 0") {
  CHECK(ringdump({}).rc == 2);
  CHECK(ringdump({"frobnicate"}).rc == 2);
  CHECK(ringdump({"show"}).rc == 2);
  CHECK(ringdump({"check", "x", "--max-lag", "lots"}).rc == 2);
  CHECK(ringdump({"watch", "x", "--interval", "-1"}).rc == 2);
  CHECK(ringdump({"show", "bad name"}).rc == 2);
  CHECK(ringdump({"show", "x", "--no-such-flag"}).rc == 2);
  const ToolResult help = ringdump({"--help"});
  CHECK(help.rc == 0);
  CHECK(help.out.find("Exit status") != std::string::npos);
  CHECK(ringdump({"show", "--help"}).rc == 0);
  CHECK(ringdump({"--version"}).rc == 0);
}

TEST_CASE("ringdump: a channel that does not exist exits 1") {
  ScopedChannel ch("rd-missing");
  for (const char* cmd : {"show", "check", "reap", "rm"}) {
    const ToolResult r = ringdump({cmd, ch.name()});
    INFO(cmd << ": " << describe(r));
    CHECK(r.rc == 1);
  }
  // watch keeps watching a channel that is not there (yet); --count bounds it.
  const ToolResult watch = ringdump({"watch", ch.name(), "--count", "2", "--interval", "0.01"});
  CHECK(watch.rc == 0);
  CHECK(watch.out.find("not present") != std::string::npos);
  const ToolResult show = ringdump({"show", ch.name()});
  CHECK(show.out.empty());
  CHECK(show.err.find("not_found") != std::string::npos);
}

TEST_CASE("ringdump: list, show, watch and check a live channel") {
  ScopedChannel ch("rd-live");
  Child producer = test::spawn_producer(ch.name(), config());
  producer.wait_report();
  Child flowing = test::spawn_reader(ch.name(), false);
  const std::uint32_t flowing_index = flowing.wait_report();
  Child holding = test::spawn_reader(ch.name(), true);
  const std::uint32_t holding_index = holding.wait_report();
  const std::uint32_t held_slot = holding.wait_report();
  REQUIRE(flowing_index != holding_index);

  SUBCASE("list") {
    const Json list = parse_json(ringdump({"list", "--json"}));
    CHECK(list["schema_version"] == 1);
    const Json* c = find_channel(list, ch.name());
    REQUIRE(c != nullptr);
    CHECK((*c)["state"] == "live");
    CHECK((*c)["producer"]["pid"] == producer.pid());
    CHECK((*c)["producer"]["alive"] == true);
    CHECK((*c)["readers_alive"] == 2);
    CHECK((*c)["readers_in_use"] == 2);
    CHECK((*c)["slot_count"] == 8);
    CHECK((*c)["frame_bytes"] == 4096);
    CHECK((*c)["backend"] == "host");
    CHECK((*c)["cuda_path"] == "none");
    CHECK((*c)["layout_version"] == layout_version());
    CHECK((*c)["mode_octal"] == "0600");
    CHECK((*c)["error"].is_null());
    const ToolResult text = ringdump({"list"});
    CHECK(text.rc == 0);
    CHECK(text.out.find(ch.name()) != std::string::npos);
    CHECK(text.out.find("live") != std::string::npos);
  }

  SUBCASE("show") {
    const Json s = parse_json(ringdump({"show", ch.name(), "--json"}));
    CHECK(s["schema_version"] == 1);
    CHECK(s["name"] == ch.name());
    CHECK(s["producer"]["pid"] == producer.pid());
    CHECK(s["producer"]["alive"] == true);
    CHECK(s["producer"]["epoch"] == 1);
    CHECK(s["producer"]["publish_rate_method"] == "two snapshots");
    CHECK(s["producer"]["publish_rate_hz"].get<double>() > 10.0);  // about 1 kHz
    REQUIRE(s["slots"].size() == 8);
    for (std::uint32_t i = 0; i < 8; ++i) CHECK(s["slots"][i]["index"] == i);
    const Json& slot = s["slots"][held_slot];
    CHECK(slot["state"] == "held");
    CHECK((slot["reader_mask"].get<std::uint64_t>() & (1ULL << holding_index)) != 0);
    CHECK(slot["sequence"].get<std::uint64_t>() > 0);
    REQUIRE(s["readers"].size() == 2);
    const Json* h = find_reader(s, holding_index);
    REQUIRE(h != nullptr);
    CHECK((*h)["pid"] == holding.pid());
    CHECK((*h)["alive"] == true);
    CHECK((*h)["held_slots"] == Json::array({held_slot}));
    CHECK((*h)["lag_frames"].get<std::uint64_t>() > 0);  // it stopped reading
    const Json* f = find_reader(s, flowing_index);
    REQUIRE(f != nullptr);
    CHECK((*f)["pid"] == flowing.pid());
    CHECK((*f)["frames_read"].get<std::uint64_t>() > 0);
    CHECK(s["problems"].empty());
    CHECK(s["backend"] == "host");
    CHECK(s["cuda_path"] == "none");

    const ToolResult text = ringdump({"show", ch.name()});
    INFO(describe(text));
    CHECK(text.rc == 0);
    // A host channel's header names no CUDA path.
    CHECK(text.out.find("(layout " + std::to_string(layout_version()) + ", host backend)\n") !=
          std::string::npos);
    CHECK(text.out.find("cuda_path") == std::string::npos);
    CHECK(text.out.find("producer  pid " + std::to_string(producer.pid()) + " alive") !=
          std::string::npos);
    CHECK(text.out.find("held") != std::string::npos);
    CHECK(text.out.find("\x1b[") == std::string::npos);  // no colour into a pipe
  }

  SUBCASE("watch") {
    const ToolResult j =
        ringdump({"watch", ch.name(), "--json", "--interval", "0.1", "--count", "3"});
    INFO(describe(j));
    REQUIRE(j.rc == 0);
    std::istringstream lines(j.out);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      const Json doc = Json::parse(line, nullptr, false);
      REQUIRE_FALSE(doc.is_discarded());
      CHECK(doc["schema_version"] == 1);
      CHECK(doc["producer"]["alive"] == true);
      if (n > 0) CHECK(doc["producer"]["publish_rate_hz"].is_number());
      ++n;
    }
    CHECK(n == 3);
    const ToolResult text = ringdump({"watch", ch.name(), "--interval", "0.05", "--count", "2"});
    CHECK(text.rc == 0);
    CHECK(text.out.find("\x1b[2J") == std::string::npos);  // not a terminal: plain blocks
    std::size_t titles = 0;
    for (std::size_t p = 0; (p = text.out.find("ringdump watch", p)) != std::string::npos; ++p) {
      ++titles;
    }
    CHECK(titles == 2);
  }

  SUBCASE("colour and redrawing only on a terminal, and never with NO_COLOR") {
    if (const auto reason = test::no_terminal_reason()) {
      MESSAGE("skipped: no pseudo-terminal can be had here (" << *reason << ")");
      return;
    }
    const std::vector<std::string> show = {RINGDUMP_PATH, "show", ch.name(), "--rate-window-ms",
                                           "0"};
    const ToolResult coloured = test::run_on_terminal(show);
    CHECK(coloured.rc == 0);
    CHECK(coloured.out.find("\x1b[32malive") != std::string::npos);
    const ToolResult plain = test::run_on_terminal(show, {"NO_COLOR=1"});
    CHECK(plain.rc == 0);
    CHECK(plain.out.find("alive") != std::string::npos);
    CHECK(plain.out.find("\x1b[") == std::string::npos);
    const ToolResult dumb =
        test::run_on_terminal(show, {"TERM=dumb"});  // a terminal without colour
    CHECK(dumb.rc == 0);
    CHECK(dumb.out.find("alive") != std::string::npos);
    CHECK(dumb.out.find("\x1b[") == std::string::npos);
    const ToolResult json = test::run_on_terminal({RINGDUMP_PATH, "show", ch.name(), "--json"});
    CHECK(json.out.find("\x1b[") == std::string::npos);
    const ToolResult watch = test::run_on_terminal(
        {RINGDUMP_PATH, "watch", ch.name(), "--count", "2", "--interval", "0.05"}, {"NO_COLOR=1"});
    CHECK(watch.rc == 0);
    CHECK(watch.out.find("\x1b[2J") != std::string::npos);  // cleared once
    CHECK(watch.out.find("\x1b[H") != std::string::npos);   // then redrawn from the top
    CHECK(watch.out.find("Ctrl-C") != std::string::npos);
  }

  SUBCASE("watch exits 0 on Ctrl-C") {
    int out[2];
    REQUIRE(pipe(out) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      dup2(out[1], STDOUT_FILENO);
      execl(RINGDUMP_PATH, RINGDUMP_PATH, "watch", ch.name().c_str(), "--interval", "0.05",
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(out[1]);
    char buf[256];
    CHECK(read(out[0], buf, sizeof buf) > 0);  // it drew at least once
    kill(pid, SIGINT);
    int status = 0;
    waitpid(pid, &status, 0);
    close(out[0]);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }

  SUBCASE("check") {
    const ToolResult ok = ringdump({"check", ch.name()});
    INFO(describe(ok));
    CHECK(ok.rc == 0);
    CHECK(ok.err.empty());
    // The holding reader stopped reading while frames keep coming: it lags.
    const ToolResult lag = ringdump({"check", ch.name(), "--max-lag", "0"});
    CHECK(lag.rc == 3);
    CHECK(lag.err.find("lags") != std::string::npos);
    const Json verdict = Json::parse(ringdump({"check", ch.name(), "--json"}).out);
    CHECK(verdict["healthy"] == true);
    // A stopped producer is idle.
    producer.signal(SIGSTOP);
    std::this_thread::sleep_for(300ms);
    const ToolResult idle = ringdump({"check", ch.name(), "--max-idle", "0.1"});
    CHECK(idle.rc == 3);
    CHECK(idle.err.find("published nothing") != std::string::npos);
    producer.signal(SIGCONT);
  }

  SUBCASE("rm and gc refuse a live channel") {
    const ToolResult rm = ringdump({"rm", ch.name()});
    CHECK(rm.rc == 1);
    CHECK(rm.err.find("channel_busy") != std::string::npos);
    const ToolResult gc = ringdump({"gc", ch.name()});
    CHECK(gc.rc == 0);
    CHECK(gc.err.find("kept " + ch.name()) != std::string::npos);
    CHECK_FALSE(test::shm_clean(ch.name()));
    struct stat before {};
    REQUIRE(stat(socket_path(ch.name()).c_str(), &before) == 0);
    // --force removes the names. The running producer defends them (docs/operations.md, "When
    // the channel's names are removed"): within its reap period it binds a new socket.
    const ToolResult forced = ringdump({"rm", "--force", ch.name()});
    INFO(describe(forced));
    CHECK(forced.rc == 0);
    CHECK(forced.out.find("removed " + ch.name()) != std::string::npos);
    struct stat after {};
    REQUIRE(test::eventually([&] {
      return stat(socket_path(ch.name()).c_str(), &after) == 0 && after.st_ino != before.st_ino &&
             inspect_name(ch.name()).state == NameState::live;
    }));
    const Json s = parse_json(ringdump({"show", ch.name(), "--json"}));
    CHECK(s["producer"]["pid"] == producer.pid());
    CHECK(s["producer"]["alive"] == true);
  }
}

TEST_CASE("ringdump: a CUDA channel's path in show, watch and list") {
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): not run");
#else
  // The producer child runs on the fake CUDA (a simulated GPU in its own process); ringdump only
  // reads the segment, which records the path the producer's pool took.
  ScopedChannel ch("rd-cuda-path");
  Child producer([&](int fd) {
    // A device without VMM descriptors: Backend::cuda takes legacy CUDA IPC.
    // NOLINTBEGIN(concurrency-mt-unsafe): the forked child is single-threaded
    setenv("IPCRING_CUDA_PLUGIN", FAKE_CUDA_PLUGIN_PATH, 1);
    setenv("IPCRING_FAKE_CUDA_DEVICE", "vmm_posix_fd=0", 1);
    // NOLINTEND(concurrency-mt-unsafe)
    ChannelConfig c = config(4, 2);
    c.backend = Backend::cuda;
    Producer p = Producer::create(ch.name(), c);
    test::report_value(fd, 1);
    std::this_thread::sleep_for(2min);
  });
  producer.wait_report();

  const Json s = parse_json(ringdump({"show", ch.name(), "--json", "--rate-window-ms", "0"}));
  CHECK(s["backend"] == "cuda");
  CHECK(s["cuda_path"] == "legacy_ipc");
  CHECK(inspect(ch.name()).cuda_path == CudaPath::legacy_ipc);

  const ToolResult text = ringdump({"show", ch.name(), "--rate-window-ms", "0"});
  INFO(describe(text));
  CHECK(text.rc == 0);
  CHECK(text.out.find("(layout " + std::to_string(layout_version()) +
                      ", cuda backend, cuda_path legacy_ipc)\n") != std::string::npos);
  // The compact view of a small terminal says it too.
  const ToolResult watch =
      ringdump({"watch", ch.name(), "--count", "1", "--size", "100x8", "--interval", "0.1"});
  INFO(describe(watch));
  CHECK(watch.out.find(", cuda, cuda_path legacy_ipc, 4 slots of") != std::string::npos);

  const Json list = parse_json(ringdump({"list", "--json"}));
  const Json* c = find_channel(list, ch.name());
  REQUIRE(c != nullptr);
  CHECK((*c)["backend"] == "cuda");
  CHECK((*c)["cuda_path"] == "legacy_ipc");
  const ToolResult listed = ringdump({"list"});
  CHECK(listed.out.find("cuda/legacy_ipc") != std::string::npos);
#endif
}

TEST_CASE("ringdump: looking never changes the segment") {
  ScopedChannel ch("rd-look");
  Child producer = test::spawn_producer(ch.name(), config());
  producer.wait_report();
  Child reader = test::spawn_reader(ch.name(), true);
  reader.wait_report();
  reader.wait_report();
  const int fd = test::control_fd_of(ch.name());  // before it stops: a stopped one answers nobody
  producer.signal(SIGSTOP);  // quiescent: every byte that changes now changed because we looked
  std::this_thread::sleep_for(50ms);
  auto read_all = [fd] {
    struct stat st {};
    REQUIRE(fstat(fd, &st) == 0);
    std::vector<unsigned char> bytes(static_cast<std::size_t>(st.st_size));
    REQUIRE(pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()));
    return bytes;
  };
  const auto before = read_all();
  REQUIRE_FALSE(before.empty());
  CHECK(ringdump({"list"}).rc == 0);
  CHECK(ringdump({"list", "--json"}).rc == 0);
  CHECK(ringdump({"show", ch.name()}).rc == 0);
  CHECK(ringdump({"show", ch.name(), "--json"}).rc == 0);
  CHECK(ringdump({"watch", ch.name(), "--count", "2", "--interval", "0.05"}).rc == 0);
  CHECK(ringdump({"check", ch.name()}).rc == 0);
  CHECK(read_all() == before);
  close(fd);
  producer.signal(SIGCONT);
}

TEST_CASE("ringdump: a reader SIGKILLed while holding a frame is shown dead, reaped by reap") {
  ScopedChannel ch("rd-kill");
  Child producer = test::spawn_producer(ch.name(), config());
  producer.wait_report();
  Child a = test::spawn_reader(ch.name(), false);
  a.wait_report();
  Child b = test::spawn_reader(ch.name(), false);
  b.wait_report();
  Child victim = test::spawn_reader(ch.name(), true);
  const std::uint32_t victim_index = victim.wait_report();
  const std::uint32_t victim_slot = victim.wait_report();

  // Stop the producer so that its own periodic reap does not beat ringdump to it (the 3 a.m. case:
  // a stalled pipeline).
  producer.signal(SIGSTOP);
  victim.kill_now();

  const Json s = parse_json(ringdump({"show", ch.name(), "--json"}));
  const Json* v = find_reader(s, victim_index);
  REQUIRE(v != nullptr);
  CHECK((*v)["alive"] == false);
  CHECK((*v)["held_slots"] == Json::array({victim_slot}));
  CHECK((s["slots"][victim_slot]["reader_mask"].get<std::uint64_t>() & (1ULL << victim_index)) !=
        0);
  CHECK(s["producer"]["alive"] == true);  // stopped is not dead

  const ToolResult text = ringdump({"show", ch.name()});
  CHECK(text.out.find("dead") != std::string::npos);

  const ToolResult sick = ringdump({"check", ch.name()});
  INFO(describe(sick));
  CHECK(sick.rc == 3);
  CHECK(sick.err.find("reader " + std::to_string(victim_index)) != std::string::npos);
  CHECK(sick.err.find("dead") != std::string::npos);
  CHECK(sick.err.find("slot(s) " + std::to_string(victim_slot)) != std::string::npos);

  const ToolResult reap = ringdump({"reap", ch.name()});
  INFO(describe(reap));
  CHECK(reap.rc == 0);
  CHECK(reap.out.find("reaped 1 dead reader") != std::string::npos);

  const Json after = parse_json(ringdump({"show", ch.name(), "--json"}));
  CHECK(find_reader(after, victim_index) == nullptr);
  CHECK((after["slots"][victim_slot]["reader_mask"].get<std::uint64_t>() &
         (1ULL << victim_index)) == 0);
  CHECK(after["producer"]["readers_reaped"] == 1);

  CHECK(ringdump({"check", ch.name()}).rc == 0);
  producer.signal(SIGCONT);
  CHECK(ringdump({"check", ch.name()}).rc == 0);
  CHECK(ringdump({"reap", ch.name()}).out.find("reaped 0") != std::string::npos);
}

TEST_CASE("ringdump: a dead producer is unhealthy") {
  ScopedChannel ch("rd-deadprod");
  Child producer = test::spawn_producer(ch.name(), config());
  producer.wait_report();
  Child reader = test::spawn_reader(ch.name(), false);
  reader.wait_report();
  producer.kill_now();
  const ToolResult r = ringdump({"check", ch.name()});
  INFO(describe(r));
  CHECK(r.rc == 3);
  CHECK(r.err.find("no producer") != std::string::npos);
  const Json list = parse_json(ringdump({"list", "--json"}));
  const Json* c = find_channel(list, ch.name());
  REQUIRE(c != nullptr);
  CHECK((*c)["state"] == "stale");
}

TEST_CASE(
    "ringdump: after SIGKILL of every process, list shows the channel stale and gc removes it") {
  ScopedChannel ch("rd-stale");
  Child producer = test::spawn_producer(ch.name(), config());
  producer.wait_report();
  std::vector<Child> readers;
  for (int i = 0; i < 3; ++i) {
    readers.push_back(test::spawn_reader(ch.name(), i == 0));
    readers.back().wait_report();
  }
  readers[0].wait_report();  // the first one holds a frame
  producer.kill_now();
  for (auto& r : readers) r.kill_now();

  const Json list = parse_json(ringdump({"list", "--json"}));
  const Json* c = find_channel(list, ch.name());
  REQUIRE(c != nullptr);
  CHECK((*c)["state"] == "stale");
  const ToolResult text = ringdump({"list"});
  CHECK(text.out.find("stale") != std::string::npos);

  const ToolResult dry = ringdump({"gc", "--dry-run", ch.name()});
  CHECK(dry.rc == 0);
  CHECK(dry.out.find("would remove " + ch.name()) != std::string::npos);
  CHECK_FALSE(test::shm_clean(ch.name()));

  const ToolResult gc = ringdump({"gc", ch.name()});
  INFO(describe(gc));
  CHECK(gc.rc == 0);
  CHECK(gc.out.find("removed " + ch.name()) != std::string::npos);
  CHECK(test::shm_clean(ch.name()));
  const Json again = parse_json(ringdump({"list", "--json"}));
  CHECK(find_channel(again, ch.name()) == nullptr);
}

TEST_CASE("ringdump: a segment of another layout version exits 4") {
  ScopedChannel ch("rd-version");
  {
    test::FakeProducer fake(ch.name());
    craft_segment(fake, ch.name(), detail::kMagic, detail::kLayoutVersion + 41);
    for (const char* cmd : {"show", "check", "watch", "reap"}) {
      const ToolResult r = ringdump({cmd, ch.name()});
      INFO(cmd << ": " << describe(r));
      CHECK(r.rc == 4);
      CHECK(r.err.find("layout version is " + std::to_string(detail::kLayoutVersion + 41)) !=
            std::string::npos);
      CHECK(r.err.find("version_mismatch") != std::string::npos);
    }
    // list still lists it, with its error; exit 0 (listing worked).
    const Json list = parse_json(ringdump({"list", "--json"}));
    const Json* c = find_channel(list, ch.name());
    REQUIRE(c != nullptr);
    CHECK((*c)["state"] == "error");
    CHECK((*c)["error"]["code"] == "version_mismatch");
    CHECK((*c)["mode_octal"] == "0600");
    CHECK(ringdump({"list"}).out.find("version_mismatch") != std::string::npos);
    // Not garbage: it belongs to a live program of another version.
    CHECK(ringdump({"gc", ch.name()}).err.find("kept " + ch.name()) != std::string::npos);
    CHECK(ringdump({"rm", ch.name()}).rc == 1);
    CHECK_FALSE(test::shm_clean(ch.name()));

    // A foreign magic is a version mismatch too.
    craft_segment(fake, ch.name(), 0x1122334455667788ULL, detail::kLayoutVersion);
    CHECK(ringdump({"show", ch.name()}).rc == 4);
    // The right version with a corrupt geometry is a runtime error.
    craft_segment(fake, ch.name(), detail::kMagic, detail::kLayoutVersion, /*slots=*/0);
    const ToolResult corrupt = ringdump({"show", ch.name()});
    INFO(describe(corrupt));
    CHECK(corrupt.rc == 1);
    CHECK(corrupt.err.find("corrupt_segment") != std::string::npos);
  }
  // The hostile producer removed its names as it ended.
  CHECK(test::shm_clean(ch.name()));
}

TEST_CASE("ringdump: hostile names in the directory never hang or crash list, show or gc") {
  // In a directory of our own: a FIFO, a directory and a symbolic link where lock files belong, a
  // regular file where a socket belongs, a socket nobody serves, and a producer that never
  // answers.
  char tmpl[] = "/tmp/ipcring-hostile-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  REQUIRE(mkfifo((dir + "/fifo.lock").c_str(), 0600) == 0);
  REQUIRE(mkdir((dir + "/adir.lock").c_str(), 0700) == 0);
  REQUIRE(symlink("/etc/passwd", (dir + "/link.lock").c_str()) == 0);
  REQUIRE(test::write_file_bytes(dir + "/file.lock", std::vector<unsigned char>(4, 'x')));
  REQUIRE(test::write_file_bytes(dir + "/file.sock", std::vector<unsigned char>(4, 'x')));
  REQUIRE(test::write_file_bytes(dir + "/orphan.lock", {}));
  {
    const int s = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string path = dir + "/orphan.sock";
    std::memcpy(sa.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    close(s);  // bound, never listening: a stale socket
  }
  setenv("IPCRING_DIR", dir.c_str(), 1);  // NOLINT(concurrency-mt-unsafe): before any thread here
  std::optional<test::FakeProducer> silent;
  silent.emplace("silent");
  silent->set_silent(true);
  auto bounded = [](const ToolResult& r) {
    INFO(describe(r));
    CHECK_FALSE(r.timed_out);
    CHECK(r.signal == 0);
    CHECK((r.rc == 0 || r.rc == 1 || r.rc == 3));
  };
  const ToolResult list = ringdump({"list", "--dir", dir});
  bounded(list);
  CHECK(list.rc == 0);
  for (const char* name : {"file", "orphan", "silent"}) {
    CHECK(list.out.find(name) != std::string::npos);
  }
  const Json j = parse_json(ringdump({"list", "--json", "--dir", dir}));
  CHECK((*find_channel(j, "orphan"))["state"] == "stale");
  CHECK((*find_channel(j, "file"))["state"] == "broken");
  CHECK((*find_channel(j, "silent"))["state"] == "error");
  for (const char* name : {"fifo", "adir", "link", "file", "orphan", "silent"}) {
    for (const char* cmd : {"show", "check", "reap"}) {
      bounded(ringdump({cmd, name, "--dir", dir}));
    }
  }
  const ToolResult gc = ringdump({"gc", "--dir", dir});
  bounded(gc);
  CHECK(gc.out.find("removed orphan") != std::string::npos);
  CHECK(gc.err.find("kept file") != std::string::npos);
  CHECK(gc.err.find("kept silent") != std::string::npos);
  struct stat st {};
  CHECK(lstat((dir + "/fifo.lock").c_str(), &st) == 0);  // not ipcring's: never touched
  CHECK(lstat((dir + "/link.lock").c_str(), &st) == 0);
  silent.reset();
  unsetenv("IPCRING_DIR");  // NOLINT(concurrency-mt-unsafe)
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}
