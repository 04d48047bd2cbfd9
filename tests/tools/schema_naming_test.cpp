// schema_naming_test.cpp — the one source of names (ipcring/naming.hpp), of message spelling
// (ipcring/error.hpp), of enum names, and of the Snapshot schema (for_each_field), which
// ringdump's JSON must follow key for key.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
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

TEST_CASE("naming: object names and their inverse") {
  CHECK(object_name("cam0") == "ipcring.cam0");
  CHECK(object_path("cam0") == "/dev/shm/ipcring.cam0");
  CHECK(legacy_frames_object_name("cam0") == "ipcring.cam0.frames");
  CHECK(legacy_frames_object_path("cam0") == "/dev/shm/ipcring.cam0.frames");
  CHECK(channel_of_object(object_name("cam-0_x")) == std::optional<std::string>("cam-0_x"));
  CHECK(channel_of_legacy_frames(legacy_frames_object_name("lidar")) ==
        std::optional<std::string>("lidar"));
  CHECK_FALSE(channel_of_object("ipcring.lidar.frames"));  // a legacy frames object, no channel
  CHECK_FALSE(channel_of_object("ipcring."));
  CHECK_FALSE(channel_of_object("other.cam0"));
  CHECK_FALSE(channel_of_legacy_frames("ipcring.cam0"));
  CHECK_FALSE(channel_of_legacy_frames("ipcring..frames"));
}

TEST_CASE("naming: listing finds channels, and legacy frames objects only when orphaned") {
  ScopedChannel live("nm-live");
  ScopedChannel orphan("nm-orphan");
  ChannelConfig config;
  config.frame_bytes = 64;
  Producer p = Producer::create(live.name(), config);
  // A legacy frames object beside a live channel is not an orphan; one alone is.
  const std::string beside = detail::shm_path(legacy_frames_object_name(live.name()));
  const std::string alone = detail::shm_path(legacy_frames_object_name(orphan.name()));
  REQUIRE(test::write_file_bytes(beside, std::vector<unsigned char>(16, 0)));
  REQUIRE(test::write_file_bytes(alone, std::vector<unsigned char>(16, 0)));
  const auto channels = list_channels();
  const auto orphans = list_orphaned_legacy_frames();
  unlink(beside.c_str());
  unlink(alone.c_str());
  CHECK(std::count(channels.begin(), channels.end(), live.name()) == 1);
  CHECK(std::count(channels.begin(), channels.end(), orphan.name()) == 0);
  CHECK(std::is_sorted(channels.begin(), channels.end()));
  CHECK(std::count(orphans.begin(), orphans.end(), orphan.name()) == 1);
  CHECK(std::count(orphans.begin(), orphans.end(), live.name()) == 0);
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
  CHECK(std::string(to_string(ReadPolicy::latest)) == "latest");
  CHECK(std::string(to_string(ReadPolicy::sequential)) == "sequential");
  CHECK(std::string(to_string(Errc::no_space)) == "no_space");
  CHECK(std::string(to_string(SlotState::writing)) == "writing");
}

TEST_CASE("format: an unsafe mode is refused with the mode in octal") {
  ScopedChannel ch("nm-mode");
  ChannelConfig config;
  config.frame_bytes = 64;
  Producer p = Producer::create(ch.name(), config);
  REQUIRE(chmod(object_path(ch.name()).c_str(), 0606) == 0);  // world-writable
  // Through ringdump, a process without this process's mapping, so the object is checked anew.
  const test::ToolResult r = test::run_tool({RINGDUMP_PATH, "show", ch.name()});
  INFO(r.err);
  CHECK(r.rc != 0);
  CHECK(r.err.find("unsafe mode 0606") != std::string::npos);
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
  const Json& slot = j["slots"][f->slot()];
  check_covers(keys(slot), schema.slot, "slot");
  CHECK(slot["dtype"] == "uint8");
  CHECK(slot["shape"] == Json::array({16, 16}));
  CHECK(slot["strides"] == Json::array({16, 1}));
  CHECK(slot["reader_indices"] == Json::array({r.index()}));
  CHECK(j["readers"][0]["delay_count"] == 1);
}
