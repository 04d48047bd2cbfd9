// stream_test.cpp — ringdump echo, hz and bw, and the readers' delay telemetry, against a ringpub
// of known rate (RINGPUB_PATH) and ringsub readers (RINGSUB_PATH). Rates are checked as ratios
// to ringpub's configured rate with a wide band (ringpub paces itself by deadlines, and hz
// measures from publish timestamps, so a busy machine moves the ratio little); what follows
// exactly from the definitions (bandwidth = mean size x rate, one delay sample per frame read)
// is checked exactly.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ipcring/ipcring.hpp"
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

constexpr double kRate = 200.0;
constexpr std::size_t kFrameBytes = 16384;

ToolResult ringdump(std::vector<std::string> args, std::chrono::milliseconds timeout = 30s) {
  args.insert(args.begin(), RINGDUMP_PATH);
  return run_tool(args, timeout);
}

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) +
         " timed_out=" + std::to_string(r.timed_out) + "\nstdout:\n" + r.out + "\nstderr:\n" +
         r.err;
}

// A tool run in a forked child (killed by the Child's destructor).
Child spawn_tool(std::vector<std::string> argv) {
  return Child([argv](int) {
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int null = open("/dev/null", O_WRONLY);
    dup2(null, STDOUT_FILENO);
    dup2(null, STDERR_FILENO);
    execv(args[0], args.data());
    _exit(127);
  });
}

Child spawn_ringpub(const std::string& name, double seconds, std::uint32_t readers = 8) {
  Child c = spawn_tool({RINGPUB_PATH, name, "--rate", std::to_string(kRate), "--duration",
                        std::to_string(seconds), "--frame-bytes", std::to_string(kFrameBytes),
                        "--readers", std::to_string(readers), "--slots", "40"});
  for (int i = 0; i < 500; ++i) {  // until it published
    try {
      if (inspect(name).producer.head > 0) break;
    } catch (const Error&) {
    }
    std::this_thread::sleep_for(10ms);
  }
  return c;
}

std::vector<Json> json_lines(const std::string& out) {
  std::vector<Json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(Json::parse(line));
  }
  return lines;
}

}  // namespace

TEST_CASE("ringdump hz and bw measure a ringpub of known rate") {
  ScopedChannel ch("hz");
  Child pub = spawn_ringpub(ch.name(), 8);
  const ToolResult hz = ringdump({"hz", ch.name(), "--window", "200", "--interval", "1.5",
                                  "--count", "2", "--json", "--wait", "5"});
  REQUIRE_MESSAGE(hz.rc == 0, describe(hz));
  const auto reports = json_lines(hz.out);
  REQUIRE(reports.size() == 2);
  const Json& last = reports.back();
  REQUIRE_MESSAGE(!last["rate_hz"].is_null(), hz.out);
  const double ratio = last["rate_hz"].get<double>() / kRate;
  MESSAGE("hz: measured / configured rate = " << ratio);
  CHECK(ratio > 0.5);
  CHECK(ratio < 1.5);
  CHECK(last["window_frames"].get<std::uint64_t>() >= 100);
  CHECK(last["min_interval_ns"].get<double>() <= last["max_interval_ns"].get<double>());
  CHECK(last["std_dev_ns"].get<double>() >= 0);
  CHECK(last["frames"].get<std::uint64_t>() >= last["window_frames"].get<std::uint64_t>());

  const ToolResult bw =
      ringdump({"bw", ch.name(), "--interval", "1", "--count", "1", "--json", "--wait", "5"});
  REQUIRE_MESSAGE(bw.rc == 0, describe(bw));
  const auto b = json_lines(bw.out);
  REQUIRE(b.size() == 1);
  REQUIRE_MESSAGE(!b[0]["bytes_per_s"].is_null(), bw.out);
  CHECK(b[0]["mean_bytes"].get<double>() == doctest::Approx(kFrameBytes));
  CHECK(b[0]["min_bytes"].get<std::uint64_t>() == kFrameBytes);
  CHECK(b[0]["max_bytes"].get<std::uint64_t>() == kFrameBytes);
  // Bandwidth is size x rate, by definition; and the rate is ringpub's.
  CHECK(b[0]["bytes_per_s"].get<double>() / b[0]["rate_hz"].get<double>() ==
        doctest::Approx(kFrameBytes));
  const double bw_ratio = b[0]["bytes_per_s"].get<double>() / (kRate * kFrameBytes);
  MESSAGE("bw: measured / configured bandwidth = " << bw_ratio);
  CHECK(bw_ratio > 0.5);
  CHECK(bw_ratio < 1.5);

  // The text form says the same.
  const ToolResult text = ringdump({"hz", ch.name(), "--interval", "0.5", "--count", "1"});
  REQUIRE_MESSAGE(text.rc == 0, describe(text));
  CHECK(text.out.find("average rate") != std::string::npos);
  CHECK(text.out.find("std dev") != std::string::npos);
}

TEST_CASE("ringdump echo prints each new frame: header, tensor, values; and lets it go") {
  ScopedChannel ch("echo");
  Child pub = spawn_ringpub(ch.name(), 6);
  const ToolResult echo =
      ringdump({"echo", ch.name(), "--count", "5", "--sequential", "--json", "--wait", "5"});
  REQUIRE_MESSAGE(echo.rc == 0, describe(echo));
  const auto frames = json_lines(echo.out);
  REQUIRE(frames.size() == 5);
  std::uint64_t previous = 0;
  for (const Json& f : frames) {
    CHECK(f["sequence"].get<std::uint64_t>() > previous);
    previous = f["sequence"].get<std::uint64_t>();
    CHECK(f["bytes"] == kFrameBytes);
    REQUIRE(f["tensor"].is_object());
    CHECK(f["tensor"]["dtype"] == "uint8");
    CHECK(f["tensor"]["shape"] == Json::array({kFrameBytes}));
    CHECK(!f["capture_time_ns"].is_null());  // ringpub sets it
    CHECK(f["capture_time_ns"].get<std::uint64_t>() <= f["timestamp_ns"].get<std::uint64_t>());
    CHECK(f["values"]["count"] == 1000);
    CHECK(f["values"]["of"] == kFrameBytes);
    CHECK(f["values"]["min"].get<double>() <= f["values"]["mean"].get<double>());
    CHECK(f["values"]["mean"].get<double>() <= f["values"]["max"].get<double>());
    CHECK(f["metadata"]["bytes"] == 0);
  }
  // echo detached: no reader entry is left behind, nothing is held.
  const Snapshot s = inspect(ch);
  CHECK(s.readers.empty());
  for (const auto& slot : s.slots) CHECK(slot.reader_mask == 0);

  const ToolResult text = ringdump({"echo", ch.name(), "--count", "1"});
  REQUIRE_MESSAGE(text.rc == 0, describe(text));
  CHECK(text.out.find("tensor     uint8 (16384,)") != std::string::npos);
  CHECK(text.out.find("values     first 1000 of 16384") != std::string::npos);
}

TEST_CASE("readers record their delay; show, JSON and a 100x20 watch report it") {
  ScopedChannel ch("delay");
  Child pub = spawn_ringpub(ch.name(), 8, 24);
  std::vector<Child> subs;
  for (int i = 0; i < 20; ++i) {
    subs.push_back(spawn_tool({RINGSUB_PATH, ch.name(), "--duration", "6", "--quiet"}));
  }
  bool all = false;
  for (int i = 0; i < 500 && !all; ++i) {
    std::this_thread::sleep_for(10ms);
    const Snapshot s = inspect(ch);
    all = s.readers.size() == 20;
    for (const auto& r : s.readers) all = all && r.frames_read >= 20;
  }
  REQUIRE(all);

  const ToolResult show = ringdump({"show", ch.name(), "--json"});
  REQUIRE_MESSAGE(show.rc == 0, describe(show));
  const Json j = Json::parse(show.out);
  REQUIRE(j["readers"].size() == 20);
  for (const Json& r : j["readers"]) {
    // One delay sample per frame read (both read while the reader runs: allow one in flight).
    const auto delays = r["delay_count"].get<std::uint64_t>();
    const auto read = r["frames_read"].get<std::uint64_t>();
    CHECK(delays + 1 >= read);
    CHECK(delays <= read + 1);
    REQUIRE(!r["delay_p50_ns"].is_null());
    CHECK(r["delay_p50_ns"].get<std::uint64_t>() <= r["delay_p99_ns"].get<std::uint64_t>());
    CHECK(r["delay_histogram"].size() == 64);
  }
  for (const Json& slot : j["slots"]) {
    if (slot["sequence"] == 0) continue;
    CHECK(slot["dtype"] == "uint8");
    CHECK(slot["shape"] == Json::array({kFrameBytes}));
  }
  const ToolResult text = ringdump({"show", ch.name()});
  CHECK(text.out.find("DELAY_P50") != std::string::npos);
  CHECK(text.out.find("uint8(16384,)") != std::string::npos);

  // 20 readers do not fit 20 rows in full: watch shows the compact view, clipped, no line longer
  // than 100 columns and no more than 19 (the last row stays for the cursor).
  const ToolResult watch =
      ringdump({"watch", ch.name(), "--count", "1", "--size", "100x20", "--interval", "0.2"});
  REQUIRE_MESSAGE(watch.rc == 0, describe(watch));
  std::istringstream in(watch.out);
  std::size_t lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    CHECK_MESSAGE(line.size() <= 100, line);
  }
  CHECK(lines <= 19);
  CHECK(lines >= 10);
  CHECK(watch.out.find("DELAY_P50") != std::string::npos);
  CHECK(watch.out.find("more line(s)") != std::string::npos);
  const ToolResult big =
      ringdump({"watch", ch.name(), "--count", "1", "--size", "250x120", "--interval", "0.2"});
  CHECK(big.out.find("SEQUENCE") != std::string::npos);  // the full view fits there
}

TEST_CASE("ringdump echo and hz read as observers: they work when every reader entry is taken") {
  ScopedChannel ch("observer-tools");
  Child pub = spawn_ringpub(ch.name(), 20, 1);  // max_readers 1
  REQUIRE(inspect(ch).producer.head > 0);
  Reader reader = Reader::attach(ch);  // takes the one entry
  CHECK_THROWS_AS(Reader::attach(ch), Error);
  const ToolResult echo = ringdump({"echo", ch.name(), "--count", "3", "--json"});
  REQUIRE_MESSAGE(echo.rc == 0, describe(echo));
  const std::vector<Json> frames = json_lines(echo.out);
  REQUIRE(frames.size() == 3);
  for (const Json& f : frames) {
    CHECK(f["bytes"].get<std::uint64_t>() == kFrameBytes);
    CHECK(f.contains("observer_dropped"));
  }
  CHECK(frames[1]["sequence"].get<std::uint64_t>() > frames[0]["sequence"].get<std::uint64_t>());
  const ToolResult hz = ringdump({"hz", ch.name(), "--count", "1", "--interval", "1", "--json"});
  REQUIRE_MESSAGE(hz.rc == 0, describe(hz));
  const std::vector<Json> reports = json_lines(hz.out);
  REQUIRE(reports.size() == 1);
  REQUIRE(reports[0]["rate_hz"].is_number());
  const double rate = reports[0]["rate_hz"].get<double>();
  CHECK(rate > kRate * 0.5);
  CHECK(rate < kRate * 2);
  CHECK(reports[0].contains("observer_dropped"));
  // The reader kept its entry all along and still reads; no other entry was ever taken.
  const Snapshot snap = inspect(ch);
  REQUIRE(snap.readers.size() == 1);
  CHECK(snap.readers[0].pid == static_cast<std::uint32_t>(getpid()));
  auto f = reader.read(2s);
  CHECK(f);
}
