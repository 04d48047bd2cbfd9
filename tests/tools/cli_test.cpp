// cli_test.cpp — the convention every tool follows (tools/cli.hpp): exit status 0 ok, 1 runtime
// error, 2 usage error (3 unhealthy and 4 layout mismatch are ringdump's, tested beside it),
// --version everywhere, and messages for bad values that name the option.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "ipcring/ipcring.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

using ipcring::test::run_tool;
using ipcring::test::ScopedChannel;
using ipcring::test::ToolResult;

namespace {

const std::vector<std::string> kTools = {RINGPUB_PATH, RINGSUB_PATH, RINGDUMP_PATH};

std::string tool_name(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) + "\nstdout:\n" +
         r.out + "\nstderr:\n" + r.err;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("every tool: --version and --help exit 0, whatever else is on the line") {
  for (const auto& tool : kTools) {
    const std::string name = tool_name(tool);
    CAPTURE(name);
    const ToolResult version = run_tool({tool, "--version"});
    INFO(describe(version));
    CHECK(version.rc == 0);
    CHECK(version.out.rfind(name + " " + ipcring::kVersion + " (layout ", 0) == 0);
    // ringpub once answered "name is required" here: --version wins over missing arguments.
    const ToolResult with_name = run_tool({tool, "some-channel", "--version"});
    CHECK(with_name.rc == 0);
    CHECK(contains(with_name.out, ipcring::kVersion));
    const ToolResult help = run_tool({tool, "--help"});
    CHECK(help.rc == 0);
    CHECK(contains(help.out, "Exit status: 0 ok, 1 runtime error, 2 usage error"));
  }
}

TEST_CASE("every tool: a usage error exits 2 with a message that starts with the tool's name") {
  for (const auto& tool : kTools) {
    const std::string name = tool_name(tool);
    CAPTURE(name);
    const ToolResult none = run_tool({tool});  // a required argument or subcommand missing
    INFO(describe(none));
    CHECK(none.rc == 2);
    CHECK(none.err.rfind(name + ": ", 0) == 0);
    // ringdump's first argument is a subcommand; the others' a channel name.
    const ToolResult unknown =
        run_tool({tool, name == "ringdump" ? "list" : "x", "--no-such-option"});
    INFO(describe(unknown));
    CHECK(unknown.rc == 2);
    CHECK(contains(unknown.err, "--no-such-option"));
  }
}

TEST_CASE("bad option values name the option and exit 2") {
  struct Case {
    std::vector<std::string> argv;
    std::string option;
  };
  const std::vector<Case> cases = {
      {{RINGPUB_PATH, "x", "--mode", "9"}, "--mode"},  // once "ringpub: stoul", exit 1
      {{RINGPUB_PATH, "x", "--mode", "0668"}, "--mode"},
      {{RINGPUB_PATH, "x", "--mode", "17777"}, "--mode"},
      {{RINGPUB_PATH, "x", "--slots", "many"}, "--slots"},
      {{RINGPUB_PATH, "x", "--rate", "-5"}, "--rate"},
      {{RINGPUB_PATH, "x", "--duration", "soon"}, "--duration"},
      {{RINGSUB_PATH, "x", "--hold-ms", "-1"}, "--hold-ms"},
      {{RINGSUB_PATH, "x", "--wait-for-channel", "-1"}, "--wait-for-channel"},
      {{RINGSUB_PATH, "x", "--policy", "newest"}, "--policy"},
      {{RINGDUMP_PATH, "watch", "x", "--interval", "0"}, "--interval"},
  };
  for (const auto& c : cases) {
    const ToolResult r = run_tool(c.argv);
    CAPTURE(c.argv[2]);
    CAPTURE(c.option);
    INFO(describe(r));
    CHECK(r.rc == 2);
    CHECK(contains(r.err, c.option));
  }
}

TEST_CASE("a value the library refuses is a usage error; a missing channel a runtime error") {
  ScopedChannel ch("cli");
  // Sizes the library refuses (invalid_config): the message names the value.
  const ToolResult zero = run_tool({RINGPUB_PATH, ch.name(), "--readers", "0", "--count", "1"});
  INFO(describe(zero));
  CHECK(zero.rc == 2);
  CHECK(contains(zero.err, "max_readers"));
  const ToolResult bad_name = run_tool({RINGPUB_PATH, "bad name", "--count", "1"});
  CHECK(bad_name.rc == 2);
  CHECK(contains(bad_name.err, "invalid_name"));
  // A channel that is not there, after the wait: a runtime error naming the channel.
  const ToolResult missing = run_tool({RINGSUB_PATH, ch.name(), "--wait-for-channel", "0.05"});
  INFO(describe(missing));
  CHECK(missing.rc == 1);
  CHECK(contains(missing.err, ch.name()));
  CHECK(contains(missing.err, "not_found"));
  const ToolResult show = run_tool({RINGDUMP_PATH, "show", ch.name()});
  CHECK(show.rc == 1);
}

TEST_CASE("ringpub with its defaults satisfies the sizing rule: no warning, exit 0") {
  ScopedChannel ch("cli-defaults");
  const ToolResult r = run_tool({RINGPUB_PATH, ch.name(), "--count", "5", "--rate", "0"});
  INFO(describe(r));
  CHECK(r.rc == 0);
  CHECK_FALSE(contains(r.err, "loans can fail"));
  CHECK(contains(r.out, "published=5"));
  // The warning is still there for a configuration that breaks the rule.
  const ToolResult small = run_tool(
      {RINGPUB_PATH, ch.name(), "--slots", "2", "--readers", "2", "--count", "5", "--rate", "0"});
  INFO(describe(small));
  CHECK(small.rc == 0);
  CHECK(contains(small.err, "loans can fail"));
}

TEST_CASE("ringsub --wait-for-channel: started before ringpub, it reads ringpub's frames") {
  ScopedChannel ch("cli-wait");
  // ringsub first; ringpub once ringsub has had time to start and find nothing.
  ToolResult sub_result;
  std::thread reader([&] {
    sub_result = run_tool({RINGSUB_PATH, ch.name(), "--wait-for-channel", "60", "--count", "3",
                           "--policy", "sequential"},
                          std::chrono::seconds(90));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // 300 frames at 100 Hz: ringsub, polling every few milliseconds, attaches long before the end.
  const ToolResult pub =
      run_tool({RINGPUB_PATH, ch.name(), "--readers", "1", "--rate", "100", "--count", "300"},
               std::chrono::seconds(60));
  reader.join();
  INFO(describe(sub_result));
  CHECK(sub_result.rc == 0);
  CHECK(contains(sub_result.out, "frames=3"));
  CHECK(contains(sub_result.out, "corrupt=0"));
  CHECK(pub.rc == 0);
}
