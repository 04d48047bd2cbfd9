// doctor_test.cpp — ringdump doctor in container-like setups: a private PID namespace
// (unshare -p -f --mount-proc), a small /dev/shm that others may write (unshare -m and a tmpfs), a
// logind.conf with and without a drop-in (a tmpfs over /etc/systemd), and a machine without a
// driver. Each setup is made with util-linux's unshare around the ringdump binary, so the test
// process's own namespaces are untouched; the namespace cases need root (they say so and pass
// vacuously otherwise, like the other privileged cases).
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
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

std::string describe(const ToolResult& r) {
  return "rc=" + std::to_string(r.rc) + " signal=" + std::to_string(r.signal) +
         (r.timed_out ? " TIMED OUT" : "") + "\n--- stdout\n" + r.out + "--- stderr\n" + r.err;
}

// Runs `sh -c script` inside `unshare args` ("" : no unshare); the script names ringdump $RD.
ToolResult in_setup(const std::vector<std::string>& unshare, const std::string& script) {
  std::vector<std::string> argv;
  if (!unshare.empty()) {
    argv.emplace_back("/usr/bin/unshare");
    argv.insert(argv.end(), unshare.begin(), unshare.end());
    argv.emplace_back("--");
  }
  argv.emplace_back("/bin/sh");
  argv.emplace_back("-c");
  argv.emplace_back("RD=" + std::string(RINGDUMP_PATH) + "; " + script);
  return run_tool(argv, 30s);
}

bool can_unshare() {
  if (geteuid() != 0) return false;
  return in_setup({"-m", "-p", "-f", "--mount-proc"}, "true").rc == 0;
}

// The document, checked against doctor's schema: every check has a known level, a summary, a fix
// exactly when it is a warning or a problem, and the counts agree with the levels.
Json validated(const ToolResult& r) {
  INFO(describe(r));
  Json j = Json::parse(r.out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  REQUIRE(j["schema_version"] == 1);
  REQUIRE(j["directory"].is_string());
  REQUIRE(j["checks"].is_array());
  int problems = 0;
  int warnings = 0;
  for (const auto& c : j["checks"]) {
    REQUIRE(c["check"].is_string());
    const std::string level = c["level"];
    CHECK((level == "ok" || level == "note" || level == "warning" || level == "problem" ||
           level == "unknown"));
    CHECK(c["summary"].is_string());
    CHECK_FALSE(c["summary"].get<std::string>().empty());
    CHECK(c["values"].is_object());
    const bool needs_fix = level == "warning" || level == "problem";
    CHECK(c["fix"].is_string() == needs_fix);
    if (needs_fix) CHECK_FALSE(c["fix"].get<std::string>().empty());
    problems += level == "problem" ? 1 : 0;
    warnings += level == "warning" ? 1 : 0;
  }
  CHECK(j["problems"] == problems);
  CHECK(j["warnings"] == warnings);
  CHECK(j["can_work"] == (problems == 0));
  CHECK(r.rc == (problems == 0 ? 0 : 3));
  return j;
}

const Json& check_of(const Json& j, const std::string& id) {
  for (const auto& c : j["checks"]) {
    if (c["check"] == id) return c;
  }
  FAIL("doctor has no check " << id << ":\n" << j.dump(2));
  static const Json none;
  return none;
}

bool contains(const Json& s, const std::string& what) {
  return s.is_string() && s.get<std::string>().find(what) != std::string::npos;
}

// A private channel directory for one test (mode 0700 under /tmp).
struct PrivateDir {
  PrivateDir() {
    path = "/tmp/ipcring-doctor-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    std::filesystem::create_directory(path);
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ~PrivateDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string path;
  static inline int counter = 0;
};

ChannelConfig small_config(const std::string& dir) {
  ChannelConfig c;
  c.slots = 4;
  c.max_readers = 2;
  c.frame_bytes = 4096;
  c.dir = dir;
  return c;
}

}  // namespace

TEST_CASE("doctor: a machine without a driver and a private directory can work (exit 0)") {
  PrivateDir dir;
  const ToolResult r = in_setup({}, "IPCRING_DIR=" + dir.path + " exec $RD doctor --json");
  const Json j = validated(r);
  CHECK(r.rc == 0);
  CHECK(j["channel"].is_null());
  CHECK(j["directory"] == dir.path);
  CHECK(check_of(j, "channel_directory")["level"] == "ok");
  CHECK(contains(check_of(j, "channel_directory")["summary"], "trusted"));
  // A directory outside /dev/shm: RemoveIPC cannot touch it.
  CHECK(check_of(j, "remove_ipc")["level"] == "ok");
  const Json& driver = check_of(j, "nvidia_driver");
  CHECK(driver["values"]["libcuda_loadable"].is_boolean());
  CHECK(driver["values"]["device_files"].is_array());
  if (!driver["values"]["libcuda_loadable"].get<bool>() ||
      driver["values"]["device_files"].empty()) {
    // No driver: CUDA is a note (host channels need none), and the GPU path says why not.
    CHECK(driver["level"] == "note");
    const Json& path = check_of(j, "gpu_path");
    CHECK(path["values"]["chosen"] == "none");
    CHECK(path["values"]["not_chosen"]["cuda_legacy"].size() >= 1);
    CHECK(path["values"]["not_chosen"]["cuda_vmm"].size() >= 1);
  }
  CHECK(check_of(j, "memlock")["values"].contains("soft_bytes"));

  // The text view says the same, with the verdict last.
  const ToolResult text = in_setup({}, "IPCRING_DIR=" + dir.path + " exec $RD doctor");
  INFO(describe(text));
  CHECK(text.rc == 0);
  CHECK(text.out.find("this setup can work") != std::string::npos);
  CHECK(text.out.find("channel directory") != std::string::npos);
}

TEST_CASE("doctor: usage errors exit 2") {
  CHECK(in_setup({}, "exec $RD doctor 'bad name'").rc == 2);
  CHECK(in_setup({}, "exec $RD doctor x --no-such-flag").rc == 2);
}

TEST_CASE("doctor: a producer in another PID namespace is named as such") {
  if (!can_unshare()) {
    MESSAGE("needs root and unshare(1): not run");
    return;
  }
  PrivateDir dir;
  ScopedChannel ch("doctor-pidns");
  Child producer = test::spawn_producer(ch.name(), small_config(dir.path));
  producer.wait_report();
  const std::string cmd = "IPCRING_DIR=" + dir.path + " exec $RD doctor " + ch.name() + " --json";

  SUBCASE("same namespaces") {
    const Json j = validated(in_setup({}, cmd));
    const Json& ns = check_of(j, "namespaces");
    CHECK(ns["values"]["pid"] == "same");
    CHECK(ns["values"]["user"] == "same");
    CHECK(ns["values"]["producer_pid_here"] == producer.pid());
    CHECK(ns["level"] == "ok");
    CHECK(check_of(j, "gpu_path")["values"]["chosen"] == "host");
    CHECK(j["can_work"] == true);
  }
  SUBCASE("doctor in a private PID namespace") {
    const Json j = validated(in_setup({"-p", "-f", "--mount-proc"}, cmd));
    const Json& ns = check_of(j, "namespaces");
    CHECK(ns["values"]["pid"] == "different");
    CHECK(ns["values"]["producer_pid_here"] == 0);
    CHECK(ns["values"]["net"] == "unknown");
    CHECK(contains(ns["summary"], "not visible in this PID namespace"));
    // A host channel works across PID namespaces: a note, and exit 0.
    CHECK(ns["level"] == "note");
    CHECK(j["can_work"] == true);
  }
}

TEST_CASE("doctor: a small, full /dev/shm that everyone may write cannot work (exit 3)") {
  if (!can_unshare()) {
    MESSAGE("needs root and unshare(1): not run");
    return;
  }
  // A container's /dev/shm: 64 KiB, filled, mode 0777 without the sticky bit.
  const std::string script =
      "mount -t tmpfs -o size=64k,mode=0777 tmpfs /dev/shm || exit 90; "
      "dd if=/dev/zero of=/dev/shm/fill bs=4096 count=16 2>/dev/null; "
      "unset IPCRING_DIR; exec $RD doctor --json";
  const ToolResult r = in_setup({"-m"}, script);
  REQUIRE(r.rc != 90);
  const Json j = validated(r);
  CHECK(r.rc == 3);
  const Json& d = check_of(j, "channel_directory");
  CHECK(d["level"] == "problem");
  CHECK(contains(d["summary"], "/dev/shm"));
  CHECK(contains(d["summary"], "others could rename it away"));
  CHECK_FALSE(contains(d["summary"], "channel 'doctor'"));
  CHECK(contains(d["fix"], "IPCRING_DIR"));
  const Json& shm = check_of(j, "dev_shm");
  CHECK(shm["level"] == "problem");
  CHECK(shm["values"]["size_bytes"] == 65536);
  CHECK(shm["values"]["free_bytes"].get<std::uint64_t>() < 65536);
  CHECK(contains(shm["fix"], "--shm-size"));

  // Sticky and roomy again: the same container can work.
  const ToolResult ok =
      in_setup({"-m"},
               "mount -t tmpfs -o size=1m,mode=1777 tmpfs /dev/shm || exit 90; unset IPCRING_DIR; "
               "exec $RD doctor --json");
  REQUIRE(ok.rc != 90);
  const Json k = validated(ok);
  CHECK(ok.rc == 0);
  CHECK(check_of(k, "channel_directory")["level"] == "note");  // not made yet
  CHECK(check_of(k, "dev_shm")["level"] == "note");            // small: said, not a problem
}

TEST_CASE("doctor: RemoveIPC from logind.conf and its drop-ins, for a regular user") {
  if (!can_unshare()) {
    MESSAGE("needs root and unshare(1): not run");
    return;
  }
  // A tmpfs over /etc/systemd holds the configuration; doctor runs as uid 4242 with the default
  // channel directory (in /dev/shm).
  const std::string as_user =
      "unset IPCRING_DIR; exec setpriv --reuid=4242 --regid=4242 --clear-groups $RD doctor --json";
  const std::string base =
      "mount -t tmpfs tmpfs /etc/systemd || exit 90; "
      "printf '[Login]\\nRemoveIPC=yes\\n' > /etc/systemd/logind.conf; ";

  SUBCASE("yes in logind.conf") {
    const ToolResult r = in_setup({"-m"}, base + as_user);
    REQUIRE(r.rc != 90);
    const Json j = validated(r);
    const Json& c = check_of(j, "remove_ipc");
    CHECK(c["level"] == "warning");
    CHECK(c["values"]["remove_ipc"] == true);
    CHECK(c["values"]["uid"] == 4242);
    CHECK(c["values"]["set_in"] == "/etc/systemd/logind.conf");
    CHECK(contains(c["fix"], "RemoveIPC=no"));
    CHECK(contains(c["fix"], "enable-linger"));
  }
  SUBCASE("no in a drop-in, which wins") {
    const ToolResult r = in_setup(
        {"-m"}, base +
                    "mkdir /etc/systemd/logind.conf.d && printf '[Login]\\nRemoveIPC=no\\n' > "
                    "/etc/systemd/logind.conf.d/50-ipcring.conf; " +
                    as_user);
    REQUIRE(r.rc != 90);
    const Json j = validated(r);
    const Json& c = check_of(j, "remove_ipc");
    CHECK(c["level"] == "ok");
    CHECK(c["values"]["remove_ipc"] == false);
    CHECK(c["values"]["set_in"] == "/etc/systemd/logind.conf.d/50-ipcring.conf");
  }
  SUBCASE("unset: systemd's default (yes); root is exempt") {
    const ToolResult r = in_setup({"-m"},
                                  "mount -t tmpfs tmpfs /etc/systemd || exit 90; "
                                  "printf '[Login]\\n#RemoveIPC=no\\n' > /etc/systemd/logind.conf; "
                                  "unset IPCRING_DIR; exec $RD doctor --json");
    REQUIRE(r.rc != 90);
    const Json j = validated(r);
    const Json& c = check_of(j, "remove_ipc");
    CHECK(c["values"]["remove_ipc"] == true);
    CHECK(c["values"]["set_in"].is_null());
    CHECK(c["level"] == "ok");
    CHECK(contains(c["summary"], "system user"));
  }
}

// ---- the GPU path on fake devices ---------------------------------------------------------------
// ringdump runs on the fake CUDA module (IPCRING_CUDA_PLUGIN), its one device's attributes set by
// IPCRING_FAKE_CUDA_DEVICE (python/tests/fake_cuda_plugin.cpp).

#ifdef FAKE_CUDA_PLUGIN_PATH
namespace {

std::string on_fake(const std::string& device, const std::string& dir) {
  return "IPCRING_CUDA_PLUGIN=" + std::string(FAKE_CUDA_PLUGIN_PATH) +
         " IPCRING_FAKE_CUDA_DEVICE=" + device + " IPCRING_DIR=" + dir + " exec $RD doctor";
}

const Json& device0(const Json& j) {
  const Json& cuda = check_of(j, "cuda");
  INFO(cuda.dump(2));
  REQUIRE(cuda["values"]["module_loaded"] == true);
  REQUIRE(cuda["values"]["devices"].size() == 1);
  return cuda["values"]["devices"][0];
}

bool any_contains(const Json& list, const std::string& what) {
  for (const auto& s : list) {
    if (contains(s, what)) return true;
  }
  return false;
}

}  // namespace
#endif

TEST_CASE(
    "doctor: a device without VMM descriptors: Backend::cuda takes legacy CUDA IPC, and why") {
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): not run");
#else
  PrivateDir dir;
  const ToolResult r = in_setup({}, on_fake("vmm_posix_fd=0", dir.path) + " --json");
  const Json j = validated(r);
  CHECK(r.rc == 0);
  const Json& dev = device0(j);
  CHECK(dev["vmm_posix_fd"] == false);
  CHECK(dev["path"] == "legacy_ipc");
  CHECK(contains(dev["path_reason"],
                 "legacy CUDA IPC (readers must share the producer's PID "
                 "namespace), because CUDA VMM cannot be used"));
  CHECK(contains(dev["path_reason"], "cannot export CUDA VMM allocations as file descriptors"));
  CHECK(dev["legacy_ipc_refusals"].empty());
  REQUIRE(dev["vmm_refusals"].size() == 1);
  CHECK(contains(dev["vmm_refusals"][0], "CUDA device 0 cannot export CUDA VMM allocations"));
  const Json& path = check_of(j, "gpu_path");
  CHECK(path["level"] == "ok");
  CHECK(path["values"]["chosen"] == "cuda_legacy");
  CHECK(path["values"]["cuda_path"] == "legacy_ipc");
  CHECK(path["values"]["reason"] == dev["path_reason"]);
  CHECK(path["values"]["not_chosen"]["cuda_vmm"] == dev["vmm_refusals"]);
  CHECK_FALSE(path["values"]["not_chosen"].contains("cuda_legacy"));
  CHECK(contains(path["summary"], "would use legacy CUDA IPC"));

  const ToolResult text = in_setup({}, on_fake("vmm_posix_fd=0", dir.path));
  INFO(describe(text));
  CHECK(text.rc == 0);
  CHECK(text.out.find("VMM descriptors no") != std::string::npos);
  CHECK(text.out.find("Backend::cuda on device 0: legacy_ipc, legacy CUDA IPC") !=
        std::string::npos);
  CHECK(text.out.find("cuda_vmm not used: CUDA device 0 cannot export CUDA VMM allocations") !=
        std::string::npos);
#endif
}

TEST_CASE("doctor: an integrated device: Backend::cuda takes CUDA VMM, and why not legacy IPC") {
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): not run");
#else
  PrivateDir dir;
  const ToolResult r = in_setup({}, on_fake("integrated=1", dir.path) + " --json");
  const Json j = validated(r);
  CHECK(r.rc == 0);
  const Json& dev = device0(j);
  CHECK(dev["integrated"] == true);
  CHECK(dev["path"] == "vmm");
  CHECK(contains(dev["path_reason"], "exports CUDA VMM allocations as file descriptors"));
  CHECK(dev["vmm_refusals"].empty());
  CHECK(any_contains(dev["legacy_ipc_refusals"], "is an integrated GPU"));
  const Json& path = check_of(j, "gpu_path");
  CHECK(path["level"] == "ok");
  CHECK(path["values"]["chosen"] == "cuda_vmm");
  CHECK(path["values"]["cuda_path"] == "vmm");
  CHECK(path["values"]["not_chosen"]["cuda_legacy"] == dev["legacy_ipc_refusals"]);
  CHECK(contains(path["summary"], "would use CUDA VMM"));

  const ToolResult text = in_setup({}, on_fake("integrated=1", dir.path));
  INFO(describe(text));
  CHECK(text.rc == 0);
  CHECK(text.out.find("integrated yes") != std::string::npos);
  CHECK(text.out.find("Backend::cuda on device 0: vmm, CUDA device 0 exports CUDA VMM") !=
        std::string::npos);
  CHECK(text.out.find("cuda_legacy not used: CUDA device 0 is an integrated GPU") !=
        std::string::npos);
#endif
}

TEST_CASE(
    "doctor: a device with both paths: Backend::cuda prefers VMM; with neither it is a note") {
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): not run");
#else
  PrivateDir dir;
  const Json both = validated(in_setup({}, on_fake("", dir.path) + " --json"));
  CHECK(device0(both)["path"] == "vmm");
  const Json& path = check_of(both, "gpu_path");
  CHECK(path["values"]["chosen"] == "cuda_vmm");
  REQUIRE(path["values"]["not_chosen"]["cuda_legacy"].size() == 1);
  CHECK(contains(path["values"]["not_chosen"]["cuda_legacy"][0], "Backend::cuda prefers CUDA VMM"));

  // Exclusive-process mode: neither path can serve a producer and its readers.
  const ToolResult r = in_setup({}, on_fake("compute_mode=3", dir.path) + " --json");
  const Json neither = validated(r);
  CHECK(r.rc == 0);  // host channels still work
  CHECK(device0(neither)["path"] == "none");
  CHECK(contains(device0(neither)["path_reason"], "neither way of sharing GPU memory works"));
  const Json& none = check_of(neither, "gpu_path");
  CHECK(none["level"] == "note");
  CHECK(none["values"]["chosen"] == "none");
  CHECK(any_contains(none["values"]["not_chosen"]["cuda_legacy"], "exclusive"));
  CHECK(any_contains(none["values"]["not_chosen"]["cuda_vmm"], "exclusive"));

  // A setting the fake does not know is refused, not ignored.
  const Json bad = validated(in_setup({}, on_fake("integrated=yes", dir.path) + " --json"));
  CHECK(contains(check_of(bad, "cuda")["summary"], "IPCRING_FAKE_CUDA_DEVICE: 'integrated=yes'"));
#endif
}

TEST_CASE("doctor: a legacy CUDA IPC channel across PID namespaces cannot work, and says VMM can") {
#ifndef FAKE_CUDA_PLUGIN_PATH
  MESSAGE("needs the fake CUDA module (built with the Python module): not run");
#else
  PrivateDir dir;
  ScopedChannel ch("doctor-legacy");
  Child producer([&](int fd) {
    // A device without VMM descriptors: Backend::cuda takes legacy CUDA IPC.
    // NOLINTBEGIN(concurrency-mt-unsafe): the forked child is single-threaded
    setenv("IPCRING_CUDA_PLUGIN", FAKE_CUDA_PLUGIN_PATH, 1);
    setenv("IPCRING_FAKE_CUDA_DEVICE", "vmm_posix_fd=0", 1);
    // NOLINTEND(concurrency-mt-unsafe)
    ChannelConfig c = small_config(dir.path);
    c.backend = Backend::cuda;
    Producer p = Producer::create(ch.name(), c);
    test::report_value(fd, 1);
    std::this_thread::sleep_for(2min);
  });
  producer.wait_report();
  const std::string cmd = "IPCRING_CUDA_PLUGIN=" + std::string(FAKE_CUDA_PLUGIN_PATH) +
                          " IPCRING_DIR=" + dir.path + " exec $RD doctor " + ch.name();

  SUBCASE("same namespaces") {
    const ToolResult r = in_setup({}, cmd + " --json");
    const Json j = validated(r);
    CHECK(r.rc == 0);
    const Json& path = check_of(j, "gpu_path");
    CHECK(path["values"]["chosen"] == "cuda_legacy");
    CHECK(path["values"]["cuda_path"] == "legacy_ipc");
    CHECK(path["values"]["not_chosen"]["host"].size() == 1);
    CHECK(any_contains(path["values"]["not_chosen"]["cuda_vmm"], "the producer took legacy_ipc"));
    CHECK(contains(path["summary"], ch.name() + " carries GPU frames over legacy CUDA IPC"));
    CHECK(check_of(j, "namespaces")["level"] == "ok");
  }
  SUBCASE("doctor in a private PID namespace") {
    if (!can_unshare()) {
      MESSAGE("needs root and unshare(1): not run");
      return;
    }
    const ToolResult r = in_setup({"-p", "-f", "--mount-proc"}, cmd + " --json");
    const Json j = validated(r);
    CHECK(r.rc == 3);
    CHECK(j["can_work"] == false);
    const Json& ns = check_of(j, "namespaces");
    CHECK(ns["level"] == "problem");
    CHECK(ns["values"]["pid"] == "different");
    CHECK(contains(ns["summary"], ch.name() + " uses legacy CUDA IPC"));
    CHECK(contains(ns["fix"], "--pid=host"));
    CHECK(contains(ns["fix"], "Backend::cuda_vmm, or Backend::cuda on a device that supports VMM"));

    const ToolResult text = in_setup({"-p", "-f", "--mount-proc"}, cmd);
    INFO(describe(text));
    CHECK(text.rc == 3);
    CHECK(text.out.find("fix: share the producer's PID namespace") != std::string::npos);
    CHECK(text.out.find("this setup cannot work") != std::string::npos);
  }
#endif
}
