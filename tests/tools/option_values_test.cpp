// option_values_test.cpp — the tools' option values (tools/cli.hpp) and their stop on Ctrl-C
// (tools/wait.hpp): counts and times refuse negatives with the option, the value and the range
// on one line; CLI11's own texts never reach the user; sizes take suffixes; Ctrl-C while a tool
// waits for its channel ends it with exit 0 (and ringsub's summary), as it does later; ringsub's
// last_sequence survives the producer's exit.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ipcring/ipcring.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

using ipcring::test::run_on_terminal;
using ipcring::test::run_tool;
using ipcring::test::ScopedChannel;
using ipcring::test::ToolResult;

namespace {

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) + "\nstdout:\n" +
         r.out + "\nstderr:\n" + r.err;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The first line of a tool's stderr.
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}

}  // namespace

TEST_CASE("counts and times: a negative or malformed value is refused with its option and range") {
  struct Case {
    std::vector<std::string> argv;
    std::string message;  // the whole first line of stderr
  };
  const std::vector<Case> cases = {
      // Once a silent switch-off of the lag check (-1 wrapped round to 2^64 - 1).
      {{RINGDUMP_PATH, "check", "x", "--max-lag", "-1"},
       "ringdump: --max-lag: '-1' is not a whole number, 0 or more"},
      // Once "Value 0 not in range 0.000000 to 1797693..." with 309 digits.
      {{RINGDUMP_PATH, "watch", "x", "--interval", "0"},
       "ringdump: --interval: '0' is out of range (it must be more than 0 and at most 86400)"},
      {{RINGDUMP_PATH, "check", "x", "--max-idle", "0"},
       "ringdump: --max-idle: '0' is out of range (it must be more than 0 and at most 1e+06)"},
      {{RINGDUMP_PATH, "hz", "x", "--window", "0"},
       "ringdump: --window: '0' is out of range; give a whole number from 1 to 1000000"},
      {{RINGDUMP_PATH, "echo", "x", "--count", "-3"},
       "ringdump: --count: '-3' is not a whole number, 0 or more"},
      {{RINGDUMP_PATH, "show", "x", "--rate-window-ms", "1.5"},
       "ringdump: --rate-window-ms: '1.5' is not a whole number from 0 to 60000"},
      // Once "Could not convert: --slots = many".
      {{RINGPUB_PATH, "x", "--slots", "many"},
       "ringpub: --slots: 'many' is not a whole number from 0 to 4294967295"},
      {{RINGPUB_PATH, "x", "--readers", "-2"},
       "ringpub: --readers: '-2' is not a whole number from 0 to 4294967295"},
      {{RINGPUB_PATH, "x", "--slots", "99999999999"},
       "ringpub: --slots: '99999999999' is out of range; give a whole number from 0 to 4294967295"},
      {{RINGPUB_PATH, "x", "--count", "-1"},
       "ringpub: --count: '-1' is not a whole number, 0 or more"},
      {{RINGPUB_PATH, "x", "--rate", "-5"},
       "ringpub: --rate: '-5' is negative (a number from 0 to 1e+09)"},
      // Once "--count: At Most 1 required but received 2".
      {{RINGPUB_PATH, "x", "--count", "1", "--count", "2"},
       "ringpub: --count: given 2 times; give it once"},
      {{RINGSUB_PATH, "x", "--count", "-1"},
       "ringsub: --count: '-1' is not a whole number, 0 or more"},
      {{RINGSUB_PATH, "x", "--wait-for-channel", "soon"},
       "ringsub: --wait-for-channel: 'soon' is not a number (a number from 0 to 1e+06); or "
       "forever"},
      {{RINGPUB_PATH, "x", "--frame-bytes", "8XB"},
       "ringpub: --frame-bytes: '8XB' is not a size (bytes from 1 to 1099511627776; suffixes k, "
       "M, G, KiB, MiB, GiB)"},
      {{RINGPUB_PATH, "x", "--frame-bytes", "0k"},
       "ringpub: --frame-bytes: '0k' (0 bytes) is out of range (bytes from 1 to 1099511627776; "
       "suffixes k, M, G, KiB, MiB, GiB)"},
  };
  for (const auto& c : cases) {
    const ToolResult r = run_tool(c.argv);
    CAPTURE(c.message);
    INFO(describe(r));
    CHECK(r.rc == 2);
    CHECK(first_line(r.err) == c.message);
    CHECK_FALSE(contains(r.err, "179769"));
    CHECK_FALSE(contains(r.err, "Could not convert"));
    CHECK_FALSE(contains(r.err, "At Most"));
  }
}

TEST_CASE("ringpub --backend: the four names, and a CUDA channel's path") {
  const ToolResult bad = run_tool({RINGPUB_PATH, "x", "--backend", "cuda-vmm"});
  INFO(describe(bad));
  CHECK(bad.rc == 2);
  CHECK(first_line(bad.err) ==
        "ringpub: --backend: 'cuda-vmm' is not one of host, cuda, cuda_legacy, cuda_vmm");
  const ToolResult help = run_tool({RINGPUB_PATH, "--help"});
  CHECK(contains(help.out, "cuda_legacy or cuda_vmm"));
  // --from writes frame bytes, which ringpub cannot do in GPU memory.
  const ToolResult from =
      run_tool({RINGPUB_PATH, "x", "--backend", "cuda_legacy", "--from", "/dev/null"});
  CHECK(from.rc == 2);
  CHECK(contains(from.err, "--from /dev/null with --backend cuda_legacy: ringpub writes no GPU"));
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): the CUDA run is not done");
#else
  // On the fake CUDA (a simulated GPU in ringpub's process) without VMM descriptors: cuda takes
  // legacy CUDA IPC, said on stderr and recorded in the channel, and frames flow.
  ScopedChannel ch("opt-backend");
  const std::string plugin = std::string("IPCRING_CUDA_PLUGIN=") + FAKE_CUDA_PLUGIN_PATH;
  ToolResult pub;
  std::thread producer([&] {
    pub = run_tool({"/usr/bin/env", plugin, "IPCRING_FAKE_CUDA_DEVICE=vmm_posix_fd=0", RINGPUB_PATH,
                    ch.name(), "--backend", "cuda", "--frame-bytes", "4k", "--slots", "3",
                    "--readers", "1", "--rate", "20", "--duration", "2"},
                   std::chrono::seconds(30));
  });
  std::optional<ipcring::Snapshot> seen;
  for (int i = 0; i < 150 && !seen; ++i) {
    try {
      seen = ipcring::inspect(ch.name());
    } catch (const ipcring::Error&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  producer.join();
  INFO(describe(pub));
  CHECK(pub.rc == 0);
  REQUIRE(seen);
  CHECK(seen->backend == ipcring::Backend::cuda);
  CHECK(seen->cuda_path == ipcring::CudaPath::legacy_ipc);
  CHECK(contains(pub.err, "ringpub: " + ch.name() +
                              ": a CUDA channel on device 0 over legacy_ipc; its frames are "
                              "published unwritten"));
  CHECK(contains(pub.out, "published="));
  CHECK_FALSE(contains(pub.out, "published=0 "));
#endif
}

TEST_CASE("--frame-bytes takes k, M, G and KiB, MiB, GiB: the channel has exactly that size") {
  struct Case {
    std::string given;
    std::uint64_t bytes;
  };
  for (const Case& c : {Case{"4k", 4096}, Case{"1M", 1048576}, Case{"8MiB", 8388608},
                        Case{"3KiB", 3072}, Case{"65536", 65536}}) {
    CAPTURE(c.given);
    ScopedChannel ch("opt-size");
    // ringpub publishes one frame and stays (a long --duration) until the size is read.
    ToolResult pub;
    std::thread producer([&] {
      pub = run_tool({RINGPUB_PATH, ch.name(), "--frame-bytes", c.given, "--slots", "3",
                      "--readers", "1", "--rate", "2", "--duration", "2"},
                     std::chrono::seconds(30));
    });
    std::uint64_t seen = 0;
    for (int i = 0; i < 150 && seen == 0; ++i) {
      try {
        seen = ipcring::inspect(ch.name()).frame_bytes;
      } catch (const ipcring::Error&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    producer.join();
    INFO(describe(pub));
    CHECK(pub.rc == 0);
    CHECK(seen == c.bytes);
  }
}

TEST_CASE("--help says what 0 means for --count and --duration, and the wait rule") {
  const ToolResult pub = run_tool({RINGPUB_PATH, "--help"});
  CHECK(contains(pub.out, "Stop after N frames (0: no limit)"));
  CHECK(contains(pub.out, "Stop after SEC seconds (0: no limit)"));
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{RINGSUB_PATH, "--help"},
        std::vector<std::string>{RINGDUMP_PATH, "echo", "--help"},
        std::vector<std::string>{RINGDUMP_PATH, "hz", "--help"}}) {
    const ToolResult r = run_tool(argv);
    CAPTURE(argv[1]);
    CHECK(r.rc == 0);
    CHECK(contains(r.out, "--wait-for-channel"));
    CHECK(contains(r.out, "=5"));  // the one default
    CHECK(contains(r.out, "forever: until stopped"));
  }
}

TEST_CASE("every reading tool waits 5 s for a channel unless told: 0 fails at once") {
  ScopedChannel ch("opt-wait");
  for (const std::vector<std::string>& argv :
       {std::vector<std::string>{RINGSUB_PATH, ch.name(), "--wait", "0"},
        std::vector<std::string>{RINGDUMP_PATH, "echo", ch.name(), "--wait", "0"},
        std::vector<std::string>{RINGDUMP_PATH, "hz", ch.name(), "--wait", "0"}}) {
    const ToolResult r = run_tool(argv);
    CAPTURE(argv[1]);
    INFO(describe(r));
    CHECK(r.rc == 1);
    CHECK(contains(r.err, "not_found"));
    CHECK(contains(r.err, "--wait-for-channel SEC or forever waits longer"));
  }
  // The default: the channel appearing 1 s after the reader started is read.
  ToolResult sub;
  std::thread reader([&] {
    sub = run_tool({RINGSUB_PATH, ch.name(), "--count", "2", "--policy", "sequential"},
                   std::chrono::seconds(30));
  });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const ToolResult pub = run_tool({RINGPUB_PATH, ch.name(), "--rate", "100", "--count", "300"},
                                  std::chrono::seconds(30));
  reader.join();
  INFO(describe(sub));
  CHECK(sub.rc == 0);
  CHECK(contains(sub.err, "waiting up to 5 s for channel '" + ch.name() + "'"));
  CHECK(contains(sub.out, "frames=2"));
  CHECK(pub.rc == 0);
}

TEST_CASE("Ctrl-C on the terminal while a tool waits for its channel: exit 0, as later") {
  if (const auto why = ipcring::test::no_terminal_reason()) {
    MESSAGE("skipped: no pseudo-terminal here: " << *why);
    return;
  }
  ScopedChannel ch("opt-ctrlc");
  // ringsub once died of the SIGINT (status 130, no summary); ringdump echo --wait printed
  // not_found and exited 1.
  const ToolResult sub = run_on_terminal({RINGSUB_PATH, ch.name(), "--wait", "60"}, {},
                                         std::chrono::seconds(30), "(Ctrl-C stops)");
  INFO(describe(sub));
  CHECK(sub.interrupted);
  CHECK(sub.signal == 0);
  CHECK(sub.rc == 0);
  CHECK(contains(sub.out, "ringsub " + ch.name() + " [latest, hold 0.0 ms]: frames=0"));
  for (const std::string command : {"echo", "hz", "bw"}) {
    const ToolResult r = run_on_terminal({RINGDUMP_PATH, command, ch.name(), "--wait", "60"}, {},
                                         std::chrono::seconds(30), "(Ctrl-C stops)");
    CAPTURE(command);
    INFO(describe(r));
    CHECK(r.interrupted);
    CHECK(r.signal == 0);
    CHECK(r.rc == 0);
    CHECK_FALSE(contains(r.out, "not_found"));
  }
}

TEST_CASE("ringsub: last_sequence is the last frame read, also after the producer is gone") {
  ScopedChannel ch("opt-lastseq");
  ToolResult sub;
  std::thread reader([&] {
    sub = run_tool(
        {RINGSUB_PATH, ch.name(), "--policy", "sequential", "--wait", "30", "--duration", "4"},
        std::chrono::seconds(40));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const ToolResult pub = run_tool({RINGPUB_PATH, ch.name(), "--slots", "64", "--readers", "1",
                                   "--rate", "100", "--count", "50"},
                                  std::chrono::seconds(30));
  reader.join();
  INFO(describe(pub));
  INFO(describe(sub));
  REQUIRE(pub.rc == 0);
  CHECK(sub.rc == 0);
  CHECK(contains(sub.out, "producer_gone=1"));
  CHECK(contains(sub.out, "last_sequence=50 "));  // once last_sequence=0 after the exit
}

TEST_CASE("too_many_readers says what to do") {
  using ipcring::test::spawn_producer;
  using ipcring::test::spawn_reader;
  ScopedChannel ch("opt-advice");
  ipcring::ChannelConfig cfg;
  cfg.slots = 4;
  cfg.max_readers = 1;
  cfg.frame_bytes = 64;
  auto producer = spawn_producer(ch.name(), cfg);
  producer.wait_report();
  auto reader = spawn_reader(ch.name(), false);
  reader.wait_report();
  // The one entry is held: a second reader is refused, and told which option sizes the entries
  // and which tools need none (ringdump echo reads as an observer: it works here).
  const ToolResult full = run_tool({RINGSUB_PATH, ch.name(), "--count", "1"});
  INFO(describe(full));
  CHECK(full.rc == 1);
  CHECK(contains(full.err, "[too_many_readers]"));
  CHECK(contains(full.err,
                 "ringsub: the producer's --readers N (ringpub, ringbridge import; "
                 "max_readers in the library) sizes the reader entries; ringdump show, "
                 "list, check, watch, echo, hz, bw, record and serve take none"));
  const ToolResult echo = run_tool({RINGDUMP_PATH, "echo", ch.name(), "--count", "1"});
  INFO(describe(echo));
  CHECK(echo.rc == 0);
  CHECK(contains(echo.out, "--- frame "));
}
