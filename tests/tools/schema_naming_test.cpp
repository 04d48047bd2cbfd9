// schema_naming_test.cpp — the one source of names (ipcring/naming.hpp), of message spelling
// (ipcring/error.hpp), of enum names, and of the Snapshot schema (for_each_field), which
// ringdump's JSON must follow key for key.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "common/naming.hpp"
#include "ipcring/ipcring.hpp"
#include "test_util.hpp"
#include "tools/tool_util.hpp"

using namespace ipcring;
using namespace std::chrono_literals;
using test::ScopedChannel;
using Json = nlohmann::json;

namespace {

// The field names of a record's schema, nested records and lists of records by their own
// schemas (each list visited through a default record, so an empty list still names its fields).
struct SchemaNames {
  std::set<std::string> top, producer, slot, reader;
  std::set<std::string>* into = &top;
  template <class T>
  void operator()(const char* name, const T&) {
    into->insert(name);
  }
  template <class R>
  void record(const char* name, const R& r) {
    into->insert(name);
    auto* outer = into;
    into = &producer;
    for_each_field(r, *this);
    into = outer;
  }
  template <class R>
  void records(const char* name, const std::vector<R>&) {
    into->insert(name);
    auto* outer = into;
    into = std::is_same_v<R, SlotInfo> ? &slot : &reader;
    for_each_field(R{}, *this);
    into = outer;
  }
};

std::set<std::string> keys(const Json& j) {
  std::set<std::string> out;
  for (const auto& [k, v] : j.items()) out.insert(k);
  return out;
}

// Every schema name is a key of the JSON object (the JSON may add derived keys).
void check_covers(const std::set<std::string>& json_keys, const std::set<std::string>& schema,
                  const char* where) {
  for (const auto& name : schema) {
    INFO(where << ": " << name);
    CHECK(json_keys.count(name) == 1);
  }
}

}  // namespace

TEST_CASE("naming: the channel directory, the names in it and their inverse") {
  CHECK(channel_directory("/srv/cams") == "/srv/cams");
  CHECK(channel_directory() == (std::getenv("IPCRING_DIR") != nullptr &&       // NOLINT
                                        *std::getenv("IPCRING_DIR") != '\0'    // NOLINT
                                    ? std::string(std::getenv("IPCRING_DIR"))  // NOLINT
                                    : "/dev/shm/ipcring-" + std::to_string(geteuid())));
  CHECK(lock_path("cam0", "/d") == "/d/cam0.lock");
  CHECK(socket_path("camera/front/image_raw", "/d") == "/d/camera/front/image_raw.sock");
  CHECK(channel_of_lock("cam-0_x.lock") == std::optional<std::string>("cam-0_x"));
  CHECK(channel_of_lock("camera/front.lock") == std::optional<std::string>("camera/front"));
  CHECK_FALSE(channel_of_lock("cam0.sock"));
  CHECK_FALSE(channel_of_lock(".lock"));
  CHECK_FALSE(channel_of_lock("a//b.lock"));
  CHECK_FALSE(channel_of_lock("../b.lock"));
}

TEST_CASE("naming: names with '/' are checked part by part") {
  CHECK_NOTHROW(validate_name("camera/front/image_raw"));
  CHECK_NOTHROW(validate_name("lidar.top"));
  for (const char* bad : {"", "/cam", "cam/", "a//b", "a/../b", "..", "a/./b", "cam 0", "cam\n"}) {
    INFO(bad);
    try {
      validate_name(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      CHECK(e.code() == Errc::invalid_name);
    }
  }
  CHECK_THROWS_AS(validate_name(std::string(kMaxLeafLength + 1, 'x')), Error);
  CHECK_NOTHROW(validate_name(std::string(kMaxLeafLength, 'x')));
  CHECK_NOTHROW(validate_name(std::string(100, 'd') + "/" + std::string(kMaxLeafLength, 'x')));
}

TEST_CASE("naming: listing finds live channels, stale names and names in subdirectories") {
  ScopedChannel live("nm-live");
  const std::string nested = "t-nm/" + std::to_string(getpid()) + "/image_raw";
  ChannelConfig config;
  config.frame_bytes = 64;
  Producer p = Producer::create(live.name(), config);
  std::vector<std::string> channels;
  {
    Producer q = Producer::create(nested, config);
    CHECK(inspect(nested).producer.alive);
    channels = list_channels();
  }
  CHECK(std::count(channels.begin(), channels.end(), live.name()) == 1);
  CHECK(std::count(channels.begin(), channels.end(), nested) == 1);
  CHECK(std::is_sorted(channels.begin(), channels.end()));
  // A clean exit removes its names: only the (now empty) subdirectories are left.
  const auto after = list_channels();
  CHECK(std::count(after.begin(), after.end(), nested) == 0);
  CHECK(inspect_name(live.name()).state == NameState::live);
  CHECK(inspect_name(nested).state == NameState::missing);
  const std::string sub = channel_directory() + "/t-nm/" + std::to_string(getpid());
  CHECK(rmdir(sub.c_str()) == 0);
  rmdir((channel_directory() + "/t-nm").c_str());  // another test process may still use it
}

TEST_CASE("format: channel prefix, octal modes, hex, enum names") {
  CHECK(channel_prefix("cam0") == "ipcring: channel 'cam0': ");
  CHECK(format_mode(0600) == "0600");
  CHECK(format_mode(02775) == "02775");
  CHECK(format_mode(0) == "0000");
  CHECK(format_hex(10, 2) == "0x0a");
  CHECK(format_hex(0xdeadbeefULL) == "0xdeadbeef");
  CHECK(std::string(to_string(Backend::host)) == "host");
  CHECK(std::string(to_string(Backend::cuda)) == "cuda");
  CHECK(std::string(to_string(Backend::cuda_legacy)) == "cuda_legacy");
  CHECK(std::string(to_string(Backend::cuda_vmm)) == "cuda_vmm");
  CHECK(std::string(to_string(CudaPath::none)) == "none");
  CHECK(std::string(to_string(CudaPath::legacy_ipc)) == "legacy_ipc");
  CHECK(std::string(to_string(CudaPath::vmm)) == "vmm");
  CHECK(std::string(to_string(ReadPolicy::latest)) == "latest");
  CHECK(std::string(to_string(ReadPolicy::sequential)) == "sequential");
  CHECK(std::string(to_string(Errc::no_space)) == "no_space");
  CHECK(std::string(to_string(SlotState::writing)) == "writing");
}

TEST_CASE("format: a directory writable by others is refused with its mode in octal") {
  char tmpl[] = "/tmp/ipcring-nm-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  REQUIRE(chmod(dir.c_str(), 0707) == 0);  // world-writable
  ChannelConfig config;
  config.frame_bytes = 64;
  config.dir = dir;
  try {
    Producer p = Producer::create("nm-mode", config);
    FAIL("a world-writable directory was accepted");
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.code() == Errc::permission_denied);
    CHECK(std::string(e.what()).find("mode 0707") != std::string::npos);
    CHECK(std::string(e.what()).find("chmod o-w " + dir) != std::string::npos);
  }
  // ringdump says the same, naming the fix.
  const test::ToolResult r = test::run_tool({RINGDUMP_PATH, "show", "nm-mode", "--dir", dir});
  INFO(r.err);
  CHECK(r.rc == 1);
  CHECK(r.err.find("chmod o-w") != std::string::npos);
  rmdir(dir.c_str());
}

TEST_CASE("schema: ringdump --json carries every Snapshot field under its schema name") {
  ScopedChannel ch("nm-schema");
  ChannelConfig config;
  config.frame_bytes = 256;
  Producer p = Producer::create(ch.name(), config);
  Reader r = Reader::attach(ch.name());
  auto loan = p.loan();
  REQUIRE(loan);
  TensorDesc t;
  t.dtype_code = 1;  // uint
  t.dtype_bits = 8;
  t.ndim = 2;
  t.shape[0] = 16;
  t.shape[1] = 16;
  REQUIRE(loan->set_tensor(t));
  p.publish(std::move(*loan), 256);
  auto f = r.read(1s);
  REQUIRE(f);

  SchemaNames schema;
  for_each_field(inspect(ch.name()), schema);
  CHECK(schema.top.count("slot_count") == 1);
  CHECK(schema.top.count("slots") == 1);
  CHECK(schema.reader.count("delay_count") == 1);
  CHECK(schema.top.count("cuda_path") == 1);

  const test::ToolResult shown =
      test::run_tool({RINGDUMP_PATH, "show", ch.name(), "--json", "--rate-window-ms", "0"});
  REQUIRE(shown.rc == 0);
  const Json j = Json::parse(shown.out);
  check_covers(keys(j), schema.top, "top level");
  check_covers(keys(j["producer"]), schema.producer, "producer");
  REQUIRE(j["readers"].size() == 1);
  check_covers(keys(j["readers"][0]), schema.reader, "reader");
  REQUIRE(j["slots"].size() == config.slots);
  CHECK(j["slot_count"] == config.slots);
  CHECK(j["backend"] == "host");
  CHECK(j["cuda_path"] == "none");  // a host channel: no CUDA path, said rather than left out
  const Json& slot = j["slots"][f->slot()];
  check_covers(keys(slot), schema.slot, "slot");
  CHECK(slot["dtype"] == "uint8");
  CHECK(slot["shape"] == Json::array({16, 16}));
  CHECK(slot["strides"] == Json::array({16, 1}));
  CHECK(slot["reader_indices"] == Json::array({r.index()}));
  CHECK(j["readers"][0]["delay_count"] == 1);
}
