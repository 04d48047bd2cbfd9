// access_options_test.cpp — ringpub --allow-uid hands a channel to another user's ringsub, and
// only to that user; ringsub --trust-uid and both --allow options check their ids. Runs the real
// tools; the other users are uids of their own (setpriv), so it needs root, as CI has.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "test_util.hpp"
#include "tools/tool_util.hpp"

using ipcring::test::run_tool;
using ipcring::test::ToolResult;

namespace {

constexpr const char* kAllowed = "64105";
constexpr const char* kOther = "64106";
constexpr const char* kGroup = "64150";  // both are in it: both may connect, one is allowed

// `ringsub` (a copy other users can run: the build tree may be private) run as `uid`, a member of
// kGroup, on channel `name` of directory `dir`.
ToolResult ringsub_as(const char* uid, const std::string& ringsub, const std::string& dir,
                      const std::string& name) {
  return run_tool({"/usr/bin/setpriv", std::string("--reuid=") + uid, std::string("--regid=") + uid,
                   std::string("--groups=") + kGroup, ringsub, "--dir", dir, name, "--count", "20",
                   "--wait-for-channel", "10"},
                  std::chrono::seconds(30));
}

}  // namespace

TEST_CASE("ringpub --allow-uid: that user's ringsub reads the frames, another user's is refused") {
  if (geteuid() != 0 || run_tool({"/usr/bin/setpriv", "--version"}).rc != 0) {
    MESSAGE("skipped: needs root and setpriv to run ringsub as other users");
    return;
  }
  char tmpl[] = "/tmp/ipcring-allow-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  // The group's members may enter and reach the socket (setgid: the socket's group, mode 0660);
  // not group-writable, so not a group-shared directory: membership alone hands nothing out.
  REQUIRE(chown(dir.c_str(), 0, 64150) == 0);
  REQUIRE(chmod(dir.c_str(), 02750) == 0);
  const std::string ringsub = dir + "/ringsub";
  std::filesystem::copy_file(RINGSUB_PATH, ringsub);
  REQUIRE(chmod(ringsub.c_str(), 0755) == 0);
  const std::string name = "allow-" + std::to_string(getpid());
  ToolResult pub;
  std::thread producer([&] {
    pub = run_tool({RINGPUB_PATH, "--dir", dir, name, "--mode", "0660", "--allow-uid", kAllowed,
                    "--rate", "200", "--duration", "8"},
                   std::chrono::seconds(30));
  });
  const ToolResult allowed = ringsub_as(kAllowed, ringsub, dir, name);
  const ToolResult other = ringsub_as(kOther, ringsub, dir, name);
  producer.join();
  INFO("allowed: rc=" << allowed.rc << " out=" << allowed.out << " err=" << allowed.err);
  INFO("other: rc=" << other.rc << " out=" << other.out << " err=" << other.err);
  CHECK(pub.rc == 0);
  CHECK(allowed.rc == 0);
  CHECK(allowed.out.find("frames=20 ") != std::string::npos);
  CHECK(allowed.out.find("corrupt=0") != std::string::npos);
  CHECK(other.rc != 0);
  CHECK(other.err.find(std::string("refuses uid ") + kOther) != std::string::npos);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

TEST_CASE("--allow-uid, --allow-gid and --trust-uid take user and group ids only") {
  for (const char* bad : {"-1", "4294967295", "x"}) {
    CAPTURE(bad);
    const ToolResult p = run_tool({RINGPUB_PATH, "ids-check", "--allow-uid", bad});
    CHECK(p.rc == 2);
    CHECK(p.err.find("--allow-uid") != std::string::npos);
    const ToolResult g = run_tool({RINGPUB_PATH, "ids-check", "--allow-gid", bad});
    CHECK(g.rc == 2);
    CHECK(g.err.find("--allow-gid") != std::string::npos);
    const ToolResult s = run_tool({RINGSUB_PATH, "ids-check", "--trust-uid", bad});
    CHECK(s.rc == 2);
    CHECK(s.err.find("--trust-uid") != std::string::npos);
  }
}
