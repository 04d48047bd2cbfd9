// ringsub_follow_test.cpp — ringsub reads on across a producer restart until its --count.
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <thread>

#include "test_util.hpp"
#include "tools/tool_util.hpp"

using ipcring::test::run_tool;
using ipcring::test::ScopedChannel;
using ipcring::test::ToolResult;

TEST_CASE("ringsub reads the frames of two producers across a clean restart") {
  ScopedChannel ch("sub-restart");
  ToolResult sub;
  // 150 frames: more than the first ringpub publishes (100), so it must read the second's too.
  std::thread reader([&] {
    sub = run_tool({RINGSUB_PATH, ch.name(), "--wait-for-channel", "60", "--count", "150",
                    "--policy", "sequential"},
                   std::chrono::seconds(120));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const ToolResult first =
      run_tool({RINGPUB_PATH, ch.name(), "--readers", "2", "--rate", "100", "--count", "100"},
               std::chrono::seconds(60));
  // A clean exit unlinked the channel; the restart makes a fresh one under the same name.
  const ToolResult second =
      run_tool({RINGPUB_PATH, ch.name(), "--readers", "2", "--rate", "100", "--count", "400"},
               std::chrono::seconds(60));
  reader.join();
  INFO("ringsub rc=" << sub.rc << " out=" << sub.out << " err=" << sub.err);
  CHECK(first.rc == 0);
  CHECK(second.rc == 0);
  CHECK(sub.rc == 0);
  CHECK(sub.out.find("frames=150 ") != std::string::npos);
  CHECK(sub.out.find("corrupt=0") != std::string::npos);
  CHECK(sub.out.find("producer_gone=1 ") != std::string::npos);
}
