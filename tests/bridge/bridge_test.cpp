// bridge_test.cpp — ringbridge over loopback: ringpub A -> ringbridge export -> DDS ->
// ringbridge import -> channel B -> ringsub B, as separate processes (bridge_util.hpp), and the
// sample checks of wire.hpp driven directly.
//
// Every bridge runs with --interface lo and without CYCLONEDDS_URI (its own configuration), in a
// DDS domain of its own (from the test's pid), on topics and channels named after the test's pid:
// runs of the suite in several build trees at once do not see each other.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <dds/ddsi/ddsi_serdata.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "bridge_util.hpp"
#include "dds.hpp"
#include "ipcring/ipcring.hpp"
#include "pattern.hpp"
#include "wire.hpp"

using namespace std::chrono_literals;
using ipcring::test::field;
using ipcring::test::Proc;
using ipcring::test::wait_until;

namespace {

struct Names {
  std::string dir;
  std::string a;
  std::string b;
  std::string topic;
  std::string domain;

  explicit Names(const std::string& test) {
    char tmpl[] = "/tmp/ipcring-bridge-XXXXXX";
    const char* d = mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    dir = d;
    const std::string base = "brt" + std::to_string(getpid()) + test;
    a = base + "A";
    b = base + "B";
    topic = base + "t";
    domain = std::to_string(1 + getpid() % 100);
  }
  Names(const Names&) = delete;
  Names& operator=(const Names&) = delete;
  ~Names() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  std::string log(const std::string& what) const { return dir + "/" + what; }
};

// The export starts before its channel's producer in most cases: it waits for the channel until
// stopped unless the case gives its own --wait.
std::vector<std::string> export_args(const Names& n, std::vector<std::string> extra = {}) {
  std::vector<std::string> v{RINGBRIDGE_PATH, "export", n.a,           "--topic", n.topic,
                             "--domain",      n.domain, "--interface", "lo"};
  if (std::find(extra.begin(), extra.end(), "--wait") == extra.end()) {
    v.insert(v.end(), {"--wait-for-channel", "forever"});
  }
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

std::vector<std::string> import_args(const Names& n, std::vector<std::string> extra = {}) {
  std::vector<std::string> v{RINGBRIDGE_PATH, "import", n.topic,       "--channel", n.b,
                             "--domain",      n.domain, "--interface", "lo"};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

std::vector<std::string> ringsub_args(const Names& n) {
  return {RINGSUB_PATH,        n.b,      "--policy", "sequential",
          "--origin-sequence", "--wait", "30",       "--quiet"};
}

std::vector<std::string> ringpub_args(const Names& n, const std::string& bytes,
                                      std::vector<std::string> extra) {
  std::vector<std::string> v{RINGPUB_PATH, n.a, "--frame-bytes", bytes};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

// The C subscriber is a plain Cyclone DDS program: loopback through CYCLONEDDS_URI.
const std::vector<std::string> kLoopbackEnv{
    "CYCLONEDDS_URI=<General><Interfaces><NetworkInterface name=\"lo\"/></Interfaces></General>"};

bool listed(const std::string& name) {
  for (const auto& c : ipcring::list_channels()) {
    if (c == name) return true;
  }
  return false;
}

// Producer fields of channel `name` (0 when it cannot be inspected).
std::uint64_t published(const std::string& name) {
  try {
    return ipcring::inspect(name).producer.published;
  } catch (const std::exception&) {
    return 0;
  }
}

// True when every live reader of `name` has read up to the channel's head.
bool readers_caught_up(const std::string& name) {
  try {
    const auto s = ipcring::inspect(name);
    for (const auto& r : s.readers) {
      if (r.alive && r.last_sequence < s.producer.head) return false;
    }
    return true;
  } catch (const std::exception&) {
    return true;  // gone
  }
}

}  // namespace

TEST_CASE("reliable: every frame the export reads arrives in B with its pattern intact") {
  Names n("rel");
  // Sequential readers on both sides: 32 slots give each a few hundred ms of slack on a loaded
  // machine before an overrun would show up as a gap.
  Proc imp(import_args(n, {"--frame-bytes", "65536", "--slots", "32"}), n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  Proc sub(ringsub_args(n), n.log("ringsub"));
  Proc exp(export_args(n), n.log("export"));
  // Publisher and subscriber matched and the export is waiting for A: start the producer now,
  // so that the export misses as few of its first frames as possible (it attaches by polling).
  REQUIRE_MESSAGE(exp.wait_for_output("1 subscriber(s) matched", true, 30s), exp.describe());
  REQUIRE_MESSAGE(exp.wait_for_output("waiting for the channel", true, 10s), exp.describe());
  Proc pub(ringpub_args(n, "65536", {"--rate", "200", "--count", "400", "--slots", "32"}),
           n.log("ringpub"));

  // While it runs: the export never holds more frames of A than A's max_held.
  std::uint64_t samples = 0;
  while (!pub.exited() && samples < 400) {
    try {
      const auto s = ipcring::inspect(n.a);
      for (const auto& r : s.readers) CHECK(r.held_slots.size() <= s.max_held);
      ++samples;
    } catch (const std::exception&) {
      // not created yet, or already gone
    }
    std::this_thread::sleep_for(5ms);
  }
  REQUIRE_MESSAGE(pub.wait_exit(30s) == 0, pub.describe());
  CHECK(samples > 0);
  // Drain: everything exported is published into B and read by ringsub before B goes away.
  REQUIRE_MESSAGE(exp.terminate() == 0, exp.describe());
  const std::string eout = exp.out();
  const std::uint64_t sent = field(eout, "sent");
  INFO(exp.describe());
  REQUIRE(wait_until([&] { return published(n.b) >= sent; }, 20s));
  REQUIRE(wait_until([&] { return readers_caught_up(n.b); }, 20s));
  REQUIRE_MESSAGE(sub.terminate() == 0, sub.describe());  // rc 0: no corrupt frame
  REQUIRE_MESSAGE(imp.terminate() == 0, imp.describe());
  const std::string iout = imp.out();
  const std::string sout = sub.out();
  INFO(imp.describe());
  INFO(sub.describe());
  INFO(pub.describe());
  CHECK(sent > 200);  // all but those published before the export attached (it polls)
  CHECK(field(eout, "overruns") == 0);
  CHECK(field(eout, "write_errors") == 0);
  CHECK(field(iout, "published") == sent);
  CHECK(field(iout, "lost") == 0);
  CHECK(field(iout, "too_large") == 0);
  CHECK(field(iout, "bad") == 0);
  CHECK(field(sout, "frames") == sent);
  CHECK(field(sout, "corrupt") == 0);
  CHECK(field(sout, "origin_gaps") == 0);
  // The tensor description and capture time travel with every frame (ringsub counts frames whose
  // description is missing or wrong as untyped).
  CHECK(field(iout, "untyped") == 0);
  CHECK(field(sout, "untyped") == 0);
  CHECK(field(sout, "last_sequence") <= 400);
}

TEST_CASE("bridge killed and restarted mid-stream resumes; producer restart is followed") {
  Names n("rst");
  auto imp = std::make_unique<Proc>(import_args(n, {"--frame-bytes", "16384"}), n.log("import1"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp->describe());
  Proc sub(ringsub_args(n), n.log("ringsub"));
  auto exp = std::make_unique<Proc>(export_args(n), n.log("export1"));
  REQUIRE_MESSAGE(exp->wait_for_output("1 subscriber(s) matched", true, 30s), exp->describe());
  auto pub = std::make_unique<Proc>(ringpub_args(n, "16384", {"--rate", "200"}), n.log("pub1"));
  const auto b_grows_by = [&](std::uint64_t k) {
    const std::uint64_t start = published(n.b);
    return wait_until([&] { return published(n.b) >= start + k; }, 30s);
  };
  REQUIRE_MESSAGE(b_grows_by(100), (exp->describe() + imp->describe()));

  // 1. The export dies (SIGKILL) and a new one starts: B gets A's frames again.
  exp->kill9();
  exp = std::make_unique<Proc>(export_args(n), n.log("export2"));
  REQUIRE_MESSAGE(b_grows_by(100), (exp->describe() + imp->describe()));

  // 2. The import dies (SIGKILL, B's producer gone); a new one makes B anew (the next epoch) and
  //    ringsub, still attached to B by name, follows it and reads on.
  imp->kill9();
  imp = std::make_unique<Proc>(import_args(n, {"--frame-bytes", "16384"}), n.log("import2"));
  REQUIRE_MESSAGE(b_grows_by(100), (exp->describe() + imp->describe()));

  // 3. A's producer dies and a new one makes A anew (its sequences start again): the export
  //    follows it.
  pub->kill9();
  pub = std::make_unique<Proc>(ringpub_args(n, "16384", {"--rate", "200", "--count", "200"}),
                               n.log("pub2"));
  REQUIRE_MESSAGE(pub->wait_exit(30s) == 0, pub->describe());
  REQUIRE_MESSAGE(exp->terminate() == 0, exp->describe());
  const std::uint64_t sent = field(exp->out(), "sent");
  REQUIRE(wait_until([&] { return readers_caught_up(n.b); }, 20s));
  REQUIRE_MESSAGE(sub.terminate() == 0, sub.describe());
  REQUIRE_MESSAGE(imp->terminate() == 0, imp->describe());
  const std::string sout = sub.out();
  INFO(exp->describe());
  INFO(imp->describe());
  INFO(sub.describe());
  CHECK(field(exp->out(), "producer_gone") >= 1);  // A's producer died under it
  CHECK(sent > 0);
  CHECK(field(imp->out(), "source_restarts") >= 1);  // frames of A's second epoch came through
  CHECK(field(sout, "corrupt") == 0);
  CHECK(field(sout, "producer_gone") >= 1);  // B's first producer died under ringsub
  // Frames of A's second producer reached ringsub: the stream resumed (ringsub sees the origin's
  // sequence start again once).
  CHECK(field(sout, "origin_restarts") == 1);
  CHECK(field(sout, "last_sequence") >= 100);
}

TEST_CASE("a producer that closes its channel and creates it again at once is followed") {
  Names n("cln");
  Proc imp(import_args(n, {"--frame-bytes", "4096"}), n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  Proc exp(export_args(n), n.log("export"));
  REQUIRE_MESSAGE(exp.wait_for_output("1 subscriber(s) matched", true, 30s), exp.describe());
  Proc pub1(ringpub_args(n, "4096", {"--rate", "200", "--count", "100"}), n.log("pub1"));
  REQUIRE_MESSAGE(pub1.wait_exit(30s) == 0, pub1.describe());
  // The same name again, right away: a new channel (new creation time, sequences from 1).
  Proc pub2(ringpub_args(n, "4096", {"--rate", "200", "--count", "300"}), n.log("pub2"));
  REQUIRE_MESSAGE(pub2.wait_exit(30s) == 0, pub2.describe());
  REQUIRE_MESSAGE(exp.terminate() == 0, exp.describe());
  const std::uint64_t sent = field(exp.out(), "sent");
  REQUIRE(wait_until([&] { return published(n.b) >= sent; }, 20s));
  REQUIRE_MESSAGE(imp.terminate() == 0, imp.describe());
  INFO(exp.describe());
  INFO(imp.describe());
  CHECK(field(exp.out(), "reattached") >= 1);
  CHECK(sent > 150);  // the second channel's frames went out too
  CHECK(field(imp.out(), "published") == sent);
  CHECK(field(imp.out(), "source_restarts") >= 1);  // its sequence numbers started again
}

TEST_CASE("samples larger than the channel's frames are counted and dropped") {
  Names n("big");
  Proc imp(import_args(n, {"--frame-bytes", "4096"}), n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  Proc exp(export_args(n), n.log("export"));
  REQUIRE_MESSAGE(exp.wait_for_output("1 subscriber(s) matched", true, 30s), exp.describe());
  Proc pub(ringpub_args(n, "8192", {"--rate", "200", "--count", "100"}), n.log("ringpub"));
  REQUIRE_MESSAGE(pub.wait_exit(30s) == 0, pub.describe());
  REQUIRE_MESSAGE(exp.terminate() == 0, exp.describe());
  const std::uint64_t sent = field(exp.out(), "sent");
  const auto drops = [&] {
    const std::string e = imp.err();
    std::uint64_t k = 0;
    for (auto p = e.find("too_large"); p != std::string::npos; p = e.find("too_large", p + 1)) ++k;
    return k;
  };
  REQUIRE(wait_until([&] { return drops() >= sent; }, 20s));  // reliable: all of them arrive
  REQUIRE_MESSAGE(imp.terminate() == 0, imp.describe());
  INFO(exp.describe());
  INFO(imp.describe());
  CHECK(sent > 0);
  CHECK(field(imp.out(), "too_large") == sent);
  CHECK(field(imp.out(), "published") == 0);
}

TEST_CASE("--ros2: a C subscriber of sensor_msgs/msg/Image decodes the exported frames") {
  Names n("ros");
  constexpr int kWidth = 64;
  constexpr int kHeight = 48;  // rgb8: 9216 bytes, a multiple of ringpub's 8-byte words
  Proc csub({ROS2_IMAGE_SUB_PATH, "rt/" + n.topic, "20", "60", n.domain, std::to_string(kWidth),
             std::to_string(kHeight), "rgb8", "camera_optical"},
            n.log("csub"), kLoopbackEnv);
  REQUIRE_MESSAGE(csub.wait_for_output("subscribed", false, 20s), csub.describe());
  Proc exp(export_args(
               n, {"--ros2", "--width", std::to_string(kWidth), "--height", std::to_string(kHeight),
                   "--encoding", "rgb8", "--frame-id", "camera_optical"}),
           n.log("export"));
  // The C program has two readers (typed, and serialised for the hand decoding).
  REQUIRE_MESSAGE(exp.wait_for_output("2 subscriber(s) matched", true, 30s), exp.describe());
  Proc pub(ringpub_args(n, std::to_string(kWidth * kHeight * 3), {"--rate", "100"}),
           n.log("ringpub"));
  const int rc = csub.wait_exit(60s);
  INFO(csub.describe());
  INFO(exp.describe());
  CHECK(rc == 0);
  const std::string out = csub.out();
  CHECK(out.find("images good=20 bad=0; hand-decoded CDR good=") != std::string::npos);
  CHECK(out.find("CDR good=0") == std::string::npos);
  CHECK(out.find(" bad=0\n") != std::string::npos);
  CHECK(out.find("cdr ") != std::string::npos);
  CHECK(out.find("image width=64 height=48 encoding=rgb8 step=192 is_bigendian=0 "
                 "frame_id=camera_optical") != std::string::npos);
  CHECK(pub.terminate() == 0);
  CHECK(exp.terminate() == 0);
  CHECK(field(exp.out(), "not_image") == 0);
}

TEST_CASE("--ros2 both ways: images exported and imported arrive intact in B") {
  Names n("r2r");
  // ROS 2's reliable profile is keep-last: a depth above the frame count keeps every frame.
  Proc imp(import_args(n, {"--ros2", "--reliable", "--depth", "256", "--frame-bytes", "9216"}),
           n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  Proc sub(ringsub_args(n), n.log("ringsub"));
  Proc exp(export_args(n, {"--ros2", "--reliable", "--depth", "256", "--width", "64", "--height",
                           "48", "--encoding", "rgb8"}),
           n.log("export"));
  REQUIRE_MESSAGE(exp.wait_for_output("1 subscriber(s) matched", true, 30s), exp.describe());
  Proc pub(ringpub_args(n, "9216", {"--rate", "200", "--count", "200"}), n.log("ringpub"));
  REQUIRE_MESSAGE(pub.wait_exit(30s) == 0, pub.describe());
  REQUIRE_MESSAGE(exp.terminate() == 0, exp.describe());
  const std::uint64_t sent = field(exp.out(), "sent");
  REQUIRE(wait_until([&] { return published(n.b) >= sent; }, 20s));
  REQUIRE(wait_until([&] { return readers_caught_up(n.b); }, 20s));
  REQUIRE_MESSAGE(sub.terminate() == 0, sub.describe());
  REQUIRE_MESSAGE(imp.terminate() == 0, imp.describe());
  INFO(exp.describe());
  INFO(imp.describe());
  INFO(sub.describe());
  CHECK(sent > 0);
  CHECK(field(imp.out(), "published") == sent);
  CHECK(field(imp.out(), "bad") == 0);
  CHECK(field(sub.out(), "frames") == sent);
  CHECK(field(sub.out(), "corrupt") == 0);
}

TEST_CASE("--ros2: frames that are not image-shaped are counted, not sent") {
  Names n("nim");
  Proc csub({ROS2_IMAGE_SUB_PATH, "rt/" + n.topic, "1", "60", n.domain, "64", "48", "rgb8", "x"},
            n.log("csub"), kLoopbackEnv);
  REQUIRE_MESSAGE(csub.wait_for_output("subscribed", false, 20s), csub.describe());
  Proc exp(export_args(n, {"--ros2", "--width", "64", "--height", "48", "--encoding", "rgb8"}),
           n.log("export"));
  REQUIRE_MESSAGE(exp.wait_for_output("2 subscriber(s) matched", true, 30s), exp.describe());
  Proc pub(ringpub_args(n, "4096", {"--rate", "200", "--count", "50"}), n.log("ringpub"));
  REQUIRE_MESSAGE(pub.wait_exit(30s) == 0, pub.describe());
  REQUIRE_MESSAGE(exp.terminate() == 0, exp.describe());
  INFO(exp.describe());
  INFO(csub.describe());
  CHECK(csub.out().find("image width") == std::string::npos);  // got nothing
  csub.kill9();
  CHECK(field(exp.out(), "sent") == 0);
  CHECK(field(exp.out(), "not_image") == field(exp.out(), "read"));
  CHECK(field(exp.out(), "read") > 0);
}

TEST_CASE("import: malformed and oversized samples written straight to DDS are counted") {
  // A hostile or buggy writer of the ipcring frame type, in this process.
  Names n("hst");
  Proc imp(import_args(n, {"--frame-bytes", "1024"}), n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  const auto domain = static_cast<dds_domainid_t>(std::stoul(n.domain));
  const std::string config = ipcring::bridge::default_cyclone_config("lo");
  ipcring::bridge::Entity dom(dds_create_domain(domain, config.c_str()));
  REQUIRE(dom.get() > 0);
  ipcring::bridge::Entity pp(dds_create_participant(domain, nullptr, nullptr));
  REQUIRE(pp.get() > 0);
  ipcring::bridge::DdsOptions o;
  o.keep_all = true;
  dds_qos_t* qos = ipcring::bridge::make_qos(o);
  const dds_entity_t topic =
      dds_create_topic(pp.get(), &ipcring_bridge_Frame_desc, n.topic.c_str(), nullptr, nullptr);
  const dds_entity_t writer = dds_create_writer(pp.get(), topic, qos, nullptr);
  dds_delete_qos(qos);
  REQUIRE(writer > 0);
  REQUIRE(wait_until(
      [&] {
        dds_publication_matched_status_t st{};
        return dds_get_publication_matched_status(writer, &st) >= 0 && st.current_count == 1;
      },
      30s));
  std::vector<std::uint8_t> payload(2048);
  ipcring::pattern::fill(reinterpret_cast<std::byte*>(payload.data()), payload.size(), 1);
  ipcring_bridge_Frame s{};
  std::strcpy(s.channel, "hostile");
  s.producer_epoch = 1;
  s.data._buffer = payload.data();
  s.data._release = false;
  // 1. a tensor description with 9 dimensions
  s.sequence_number = 1;
  s.has_tensor = true;
  s.tensor.ndim = 9;
  s.data._length = s.data._maximum = 512;
  CHECK(dds_write(writer, &s) == DDS_RETCODE_OK);
  // 2. a payload larger than the channel's frames
  s.sequence_number = 2;
  s.has_tensor = false;
  s.tensor.ndim = 0;
  s.data._length = s.data._maximum = 2048;
  CHECK(dds_write(writer, &s) == DDS_RETCODE_OK);
  // 3. a good one
  s.sequence_number = 3;
  s.data._length = s.data._maximum = 1024;
  CHECK(dds_write(writer, &s) == DDS_RETCODE_OK);
  REQUIRE(wait_until([&] { return published(n.b) >= 1; }, 20s));
  std::this_thread::sleep_for(200ms);
  REQUIRE_MESSAGE(imp.terminate() == 0, imp.describe());
  INFO(imp.describe());
  const std::string out = imp.out();
  CHECK(field(out, "received") == 3);
  CHECK(field(out, "bad") == 1);
  CHECK(field(out, "too_large") == 1);
  CHECK(field(out, "published") == 1);
}

TEST_CASE("usage errors exit 2, --version 0, a missing channel with --wait exits 1") {
  Names n("use");
  Proc v({RINGBRIDGE_PATH, "--version"}, n.log("version"));
  CHECK(v.wait_exit(20s) == 0);
  CHECK(v.out().find("ringbridge ") == 0);
  Proc none({RINGBRIDGE_PATH}, n.log("none"));
  CHECK(none.wait_exit(20s) == 2);
  Proc both({RINGBRIDGE_PATH, "export", n.a, "--reliable", "--best-effort"}, n.log("both"));
  CHECK(both.wait_exit(20s) == 2);
  // --ros2 needs no --width/--height (they come from each frame's tensor), but a bad one is
  // refused with the option's range.
  Proc noshape({RINGBRIDGE_PATH, "export", n.a, "--ros2", "--width", "0"}, n.log("noshape"));
  CHECK(noshape.wait_exit(20s) == 2);
  CHECK(noshape.err().find("--width: '0' is out of range") != std::string::npos);
  Proc gone(export_args(n, {"--wait", "0.3"}), n.log("gone"));
  CHECK(gone.wait_exit(20s) == 1);
  CHECK(gone.err().find(n.a) != std::string::npos);
}

// ---- the sample checks, without DDS traffic -----------------------------------------------------

TEST_CASE("check_frame_sample: oversized and malformed samples are refused") {
  using namespace ipcring::bridge;
  std::vector<std::uint8_t> data(100, 7);
  std::vector<std::uint8_t> meta(ipcring::kMaxMetadataBytes + 16, 1);
  ipcring_bridge_Frame s{};
  s.data._buffer = data.data();
  s.data._length = 100;
  CHECK(check_frame_sample(s, 100) == Verdict::ok);
  CHECK(check_frame_sample(s, 99) == Verdict::too_large);
  s.metadata._buffer = meta.data();
  s.metadata._length = ipcring::kMaxMetadataBytes + 1;
  CHECK(check_frame_sample(s, 100) == Verdict::bad_metadata);
  s.metadata._length = ipcring::kMaxMetadataBytes;
  CHECK(check_frame_sample(s, 100) == Verdict::ok);
  s.has_tensor = true;
  s.tensor.ndim = 9;
  CHECK(check_frame_sample(s, 100) == Verdict::bad_tensor);
  s.tensor.ndim = 8;
  CHECK(check_frame_sample(s, 100) == Verdict::ok);
  s.data._buffer = nullptr;
  CHECK(check_frame_sample(s, 100) == Verdict::bad_shape);
}

TEST_CASE("check_image_sample: step, height and data length must agree") {
  using namespace ipcring::bridge;
  std::vector<std::uint8_t> data(std::size_t{4} * 3 * 2, 0);
  char enc[] = "rgb8";
  sensor_msgs_msg_dds__Image_ m{};
  m.width = 4;
  m.height = 2;
  m.step = 12;
  m.encoding = enc;
  m.data._buffer = data.data();
  m.data._length = 24;
  CHECK(check_image_sample(m, 24) == Verdict::ok);
  CHECK(check_image_sample(m, 23) == Verdict::too_large);
  m.step = 13;  // step * height != length
  CHECK(check_image_sample(m, 100) == Verdict::bad_shape);
  m.step = 6;
  m.height = 4;  // 6 * 4 == 24, but a row of 4 rgb8 pixels needs 12 bytes
  CHECK(check_image_sample(m, 100) == Verdict::bad_shape);
  m.height = 0xffffffffu;  // step * height overflows 32 bits: still refused
  m.step = 0x10000u;
  CHECK(check_image_sample(m, 100) == Verdict::bad_shape);
}

TEST_CASE("fill_image_sample: only frames of exactly height * width * bytes per pixel") {
  using namespace ipcring::bridge;
  std::vector<std::byte> bytes(std::size_t{64} * 48 * 3);
  FrameView f{bytes, {}, 5, 1, 123, 0, std::nullopt};
  ImageFormat fmt{"rgb8", 64, 48};
  const std::string id = "cam";
  sensor_msgs_msg_dds__Image_ m{};
  REQUIRE(fill_image_sample(m, f, fmt, id, 1'700'000'000'123'456'789ULL) == Verdict::ok);
  CHECK(m.step == 192);
  CHECK(m.data._length == bytes.size());
  CHECK(m.header.stamp.sec == 1'700'000'000);
  CHECK(m.header.stamp.nanosec == 123'456'789u);
  CHECK(std::strcmp(m.encoding, "rgb8") == 0);
  FrameView shorter{
      std::span<const std::byte>(bytes).first(bytes.size() - 1), {}, 5, 1, 123, 0, std::nullopt};
  CHECK(fill_image_sample(m, shorter, fmt, id, 1) == Verdict::not_image);
  ImageFormat unknown{"yuv422", 64, 48};
  CHECK(fill_image_sample(m, f, unknown, id, 1) == Verdict::not_image);
}

TEST_CASE("fill_frame_sample carries sequence, epoch, time and metadata") {
  using namespace ipcring::bridge;
  std::vector<std::byte> bytes(32, std::byte{3});
  std::vector<std::byte> meta(10, std::byte{9});
  FrameView f{bytes, meta, 42, 7, 555, 0, std::nullopt};
  ipcring_bridge_Frame s{};
  fill_frame_sample(s, f, "camera", 999);
  CHECK(std::string(s.channel) == "camera");
  CHECK(s.sequence_number == 42);
  CHECK(s.producer_epoch == 7);
  CHECK(s.publish_time_ns == 555);
  CHECK(s.send_realtime_ns == 999);
  CHECK(s.data._length == 32);
  CHECK(s.metadata._length == 10);
  CHECK_FALSE(s.has_tensor);
  CHECK(s.capture_time_ns == 0);
  CHECK(check_frame_sample(s, 32) == Verdict::ok);
  CHECK_FALSE(sample_tensor(s).has_value());
}

TEST_CASE("fill_frame_sample and sample_tensor carry the tensor description and capture time") {
  using namespace ipcring::bridge;
  std::vector<std::byte> bytes(std::size_t{2} * 3 * 4, std::byte{1});
  const ipcring::TensorDesc t = ipcring::TensorDesc::contiguous(ipcring::DType::float_, 32, {2, 3});
  FrameView f{bytes, {}, 1, 1, 10, 12345, t};
  ipcring_bridge_Frame s{};
  fill_frame_sample(s, f, "camera", 0);
  CHECK(s.has_tensor);
  CHECK(s.capture_time_ns == 12345);
  const auto back = sample_tensor(s);
  REQUIRE(back.has_value());
  CHECK(back->dtype_code == t.dtype_code);
  CHECK(back->dtype_bits == 32);
  CHECK(back->ndim == 2);
  CHECK(back->shape[0] == 2);
  CHECK(back->shape[1] == 3);
  CHECK(ipcring::tensor_fits(*back, bytes.size()));
  // A hostile ndim is refused at the check, and never turned into a description.
  s.tensor.ndim = 9;
  CHECK(check_frame_sample(s, bytes.size()) == Verdict::bad_tensor);
  CHECK_FALSE(sample_tensor(s).has_value());
}

TEST_CASE("pattern::origin_sequence inverts the payload pattern") {
  std::vector<std::byte> frame(64);
  for (const std::uint64_t seq : {1ULL, 2ULL, 1000ULL, 0xfedcba9876543210ULL}) {
    ipcring::pattern::fill(frame.data(), frame.size(), seq);
    std::uint64_t got = 0;
    REQUIRE(ipcring::pattern::origin_sequence(frame.data(), frame.size(), got));
    CHECK(got == seq);
  }
  std::uint64_t got = 0;
  CHECK_FALSE(ipcring::pattern::origin_sequence(frame.data(), 7, got));
}

TEST_CASE("image_format_of: width, height, encoding and step from the frame's tensor") {
  using namespace ipcring::bridge;
  using ipcring::DType;
  using ipcring::TensorDesc;
  const ImageFormat none{};
  // A numpy (480, 640, 3) uint8 array: rgb8, step 1920.
  const auto rgb = TensorDesc::contiguous(DType::uint, 8, {480, 640, 3});
  auto f = image_format_of(none, rgb);
  REQUIRE(f.has_value());
  CHECK(f->width == 640);
  CHECK(f->height == 480);
  CHECK(f->encoding == "rgb8");
  CHECK(f->step == 1920);
  // (H, W) is mono8; (H, W, 4) rgba8; a given encoding of the same pixel size wins.
  CHECK(image_format_of(none, TensorDesc::contiguous(DType::uint, 8, {48, 64}))->encoding ==
        "mono8");
  CHECK(image_format_of(none, TensorDesc::contiguous(DType::uint, 8, {48, 64, 4}))->encoding ==
        "rgba8");
  CHECK(image_format_of(ImageFormat{"bgr8", 0, 0}, rgb)->encoding == "bgr8");
  CHECK_FALSE(image_format_of(ImageFormat{"mono8", 0, 0}, rgb).has_value());  // 1 != 3 bytes
  // Padded rows (a crop of a wider image): the row stride is the step.
  auto padded = rgb;
  padded.shape[1] = 600;
  padded.strides[0] = 1920;
  padded.strides[1] = 3;
  padded.strides[2] = 1;
  CHECK(image_format_of(none, padded)->step == 1920);
  // Not an image: float32, 1-D bytes (ringpub's frames), no tensor; flags then decide.
  CHECK_FALSE(image_format_of(none, TensorDesc::contiguous(DType::float_, 32, {48, 64, 3})));
  CHECK_FALSE(image_format_of(none, TensorDesc::contiguous(DType::uint, 8, {9216})));
  CHECK_FALSE(image_format_of(none, std::nullopt));
  const auto flags = image_format_of(ImageFormat{"rgb8", 64, 48}, std::nullopt);
  REQUIRE(flags.has_value());
  CHECK(flags->step == 0);  // width * 3, the frame must be exactly the image
  // Flags override the tensor's shape.
  CHECK(image_format_of(ImageFormat{"", 320, 0}, rgb)->width == 320);
}

TEST_CASE("image_tensor and image_stamp_ns: an Image is an (H, W, C) uint8 tensor") {
  using namespace ipcring::bridge;
  sensor_msgs_msg_dds__Image_ m{};
  m.width = 64;
  m.height = 48;
  m.step = 192;
  m.encoding = const_cast<char*>("rgb8");
  m.header.stamp.sec = 1'700'000'000;
  m.header.stamp.nanosec = 5;
  auto t = image_tensor(m);
  REQUIRE(t.has_value());
  CHECK(t->dtype_name() == "uint8");
  CHECK(t->shape_text() == "(48, 64, 3)");
  CHECK(t->is_contiguous());
  CHECK(image_stamp_ns(m) == 1'700'000'000'000'000'005ULL);
  m.step = 200;  // padded rows
  t = image_tensor(m);
  REQUIRE(t.has_value());
  CHECK(t->stride(0) == 200);
  CHECK(ipcring::tensor_fits(*t, std::uint64_t{200} * 48));
  m.encoding = const_cast<char*>("mono8");
  CHECK(image_tensor(m)->shape_text() == "(48, 64, 1)");
  m.encoding = const_cast<char*>("32FC1");  // not an encoding ringbridge handles
  CHECK_FALSE(image_tensor(m).has_value());
}

TEST_CASE("--ros2 both ways with a typed channel: no flags, and B's frames are (H, W, C) uint8") {
  Names n("typed");
  constexpr std::int64_t kH = 48, kW = 64, kC = 3;
  constexpr std::size_t kBytes = kH * kW * kC;
  Proc imp(import_args(n, {"--ros2", "--reliable", "--depth", "64", "--frame-bytes",
                           std::to_string(kBytes)}),
           n.log("import"));
  REQUIRE_MESSAGE(wait_until([&] { return listed(n.b); }, 20s), imp.describe());
  // Once refused: "--ros2 needs --width and --height (got 0x0)".
  Proc exp(export_args(n, {"--ros2", "--reliable", "--depth", "64"}), n.log("export"));
  REQUIRE_MESSAGE(exp.wait_for_output("1 subscriber(s) matched", true, 30s), exp.describe());
  auto reader = ipcring::Reader::attach(
      n.b, {.policy = ipcring::ReadPolicy::sequential, .wait_for_channel = 10s});
  // What a numpy (48, 64, 3) uint8 array published from Python is.
  auto producer =
      ipcring::Producer::create(n.a, {.slots = 8, .max_readers = 2, .frame_bytes = kBytes});
  const auto image = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {kH, kW, kC});
  std::optional<ipcring::Frame> got;
  for (int i = 0; i < 200 && !got; ++i) {
    auto loan = producer.loan();
    if (loan) {
      for (std::size_t k = 0; k < kBytes; ++k) loan->data()[k] = static_cast<std::byte>(k % 251);
      REQUIRE(loan->set_tensor(image));
      producer.publish(std::move(*loan), kBytes);
    }
    auto f = reader.read(50ms);
    if (f) got.emplace(std::move(*f));
  }
  INFO(exp.describe());
  INFO(imp.describe());
  REQUIRE(got.has_value());
  const auto t = got->tensor();
  REQUIRE(t.has_value());
  CHECK(t->dtype_name() == "uint8");
  CHECK(t->shape_text() == "(48, 64, 3)");  // what torch.from_dlpack(frame).shape says
  CHECK(got->size() == kBytes);
  CHECK(got->capture_time_ns() != 0);  // the Image's header stamp
  bool same = true;
  for (std::size_t k = 0; k < kBytes; ++k)
    same = same && got->data()[k] == static_cast<std::byte>(k % 251);
  CHECK(same);
  got.reset();
  CHECK(exp.terminate() == 0);
  CHECK(imp.terminate() == 0);
  CHECK(field(exp.out(), "not_image") == 0);
}

// ---- decoding serialised samples in place (what the import takes: dds_takecdr) -----------------

namespace {

// Cyclone's own serialisation of `sample`: written and taken back serialised in one participant
// (local delivery, no network), the bytes as the wire carries them.
std::vector<std::byte> cyclone_cdr(const dds_topic_descriptor_t* desc, const void* sample,
                                   const std::string& topic_name) {
  const auto domain = static_cast<dds_domainid_t>(150 + getpid() % 50);
  const std::string config = ipcring::bridge::default_cyclone_config("lo");
  ipcring::bridge::Entity dom(dds_create_domain(domain, config.c_str()));
  REQUIRE(dom.get() > 0);
  ipcring::bridge::Entity pp(dds_create_participant(domain, nullptr, nullptr));
  REQUIRE(pp.get() > 0);
  ipcring::bridge::DdsOptions o;
  o.keep_all = true;
  dds_qos_t* qos = ipcring::bridge::make_qos(o);
  const dds_entity_t topic = dds_create_topic(pp.get(), desc, topic_name.c_str(), nullptr, nullptr);
  const dds_entity_t reader = dds_create_reader(pp.get(), topic, qos, nullptr);
  const dds_entity_t writer = dds_create_writer(pp.get(), topic, qos, nullptr);
  dds_delete_qos(qos);
  REQUIRE(reader > 0);
  REQUIRE(writer > 0);
  REQUIRE(dds_write(writer, sample) == DDS_RETCODE_OK);
  std::vector<std::byte> bytes;
  REQUIRE(wait_until(
      [&] {
        ddsi_serdata* d = nullptr;
        dds_sample_info_t info;
        if (dds_takecdr(reader, &d, 1, &info, DDS_ANY_STATE) != 1) return false;
        bytes.resize(ddsi_serdata_size(d));
        ddsi_serdata_to_ser(d, 0, bytes.size(), bytes.data());
        ddsi_serdata_unref(d);
        return true;
      },
      10s));
  return bytes;
}

// A CDR writer of the encodings decode_*_sample reads, to build samples Cyclone would not write
// here (big-endian, XCDR2) and malformed ones.
struct CdrOut {
  explicit CdrOut(std::uint8_t id)
      : swap((id == 0 || id == 6) != (std::endian::native == std::endian::big)),
        max_align(id >= 6 ? 4 : 8) {
    bytes = {std::byte{0}, std::byte{id}, std::byte{0}, std::byte{0}};
  }
  template <class T>
  void put(T v) {
    const std::size_t a = std::min(sizeof v, max_align);
    while ((bytes.size() - 4) % a != 0) bytes.push_back(std::byte{0});
    std::byte b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    if (swap) std::reverse(std::begin(b), std::end(b));
    bytes.insert(bytes.end(), std::begin(b), std::end(b));
  }
  void str(const std::string& s) {
    put(static_cast<std::uint32_t>(s.size() + 1));
    for (const char c : s) bytes.push_back(static_cast<std::byte>(c));
    bytes.push_back(std::byte{0});
  }
  void octets(const std::vector<std::uint8_t>& v) {
    put(static_cast<std::uint32_t>(v.size()));
    for (const auto c : v) bytes.push_back(static_cast<std::byte>(c));
  }
  bool swap;
  std::size_t max_align;
  std::vector<std::byte> bytes;
};

void put_frame(CdrOut& c, const std::string& channel, const std::vector<std::uint8_t>& meta,
               const std::vector<std::uint8_t>& data) {
  c.str(channel);
  for (std::uint64_t v : {7ULL, 42ULL, 1000ULL, 2000ULL, 3000ULL}) c.put(v);
  c.put(std::uint8_t{1});  // has_tensor
  c.put(std::uint8_t{1});  // dtype uint
  c.put(std::uint8_t{8});
  c.put(std::uint8_t{2});  // ndim
  for (int i = 0; i < 8; ++i) c.put(std::int64_t{i < 2 ? 10 - i : 0});
  for (int i = 0; i < 8; ++i) c.put(std::int64_t{0});
  c.put(std::uint64_t{0});
  c.octets(meta);
  c.octets(data);
}

}  // namespace

TEST_CASE("decode_frame_sample: Cyclone's serialisation, decoded in place, every field") {
  using namespace ipcring::bridge;
  std::vector<std::uint8_t> payload(1000);
  ipcring::pattern::fill(reinterpret_cast<std::byte*>(payload.data()), payload.size(), 42);
  std::vector<std::uint8_t> meta{'h', 'e', 'l', 'l', 'o'};
  ipcring_bridge_Frame in{};
  const auto tensor = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {10, 100});
  const FrameView view{{reinterpret_cast<const std::byte*>(payload.data()), payload.size()},
                       {reinterpret_cast<const std::byte*>(meta.data()), meta.size()},
                       42,
                       7,
                       1000,
                       3000,
                       tensor};
  fill_frame_sample(in, view, "camera", 2000);
  const std::vector<std::byte> cdr =
      cyclone_cdr(&ipcring_bridge_Frame_desc, &in, "brt" + std::to_string(getpid()) + "cdr");
  // What Cyclone writes for the @final type: plain little-endian CDR (XCDR1), header 00 01.
  REQUIRE(cdr.size() > 4);
  CHECK(cdr[0] == std::byte{0});
  CHECK(cdr[1] == std::byte{1});
  ipcring_bridge_Frame s{};
  REQUIRE(decode_frame_sample(cdr, s) == Verdict::ok);
  CHECK(std::string(s.channel) == "camera");
  CHECK(s.producer_epoch == 7);
  CHECK(s.sequence_number == 42);
  CHECK(s.publish_time_ns == 1000);
  CHECK(s.send_realtime_ns == 2000);
  CHECK(s.capture_time_ns == 3000);
  CHECK(s.has_tensor);
  const auto t = sample_tensor(s);
  REQUIRE(t.has_value());
  CHECK(t->shape_text() == "(10, 100)");
  CHECK(t->dtype_name() == "uint8");
  REQUIRE(s.metadata._length == meta.size());
  CHECK(std::memcmp(s.metadata._buffer, meta.data(), meta.size()) == 0);
  REQUIRE(s.data._length == payload.size());
  CHECK(std::memcmp(s.data._buffer, payload.data(), payload.size()) == 0);
  // In place: the payload is the serialised bytes themselves, not a copy.
  CHECK(reinterpret_cast<const std::byte*>(s.data._buffer) >= cdr.data());
  CHECK(reinterpret_cast<const std::byte*>(s.data._buffer) + s.data._length <=
        cdr.data() + cdr.size());
  CHECK_FALSE(s.data._release);
  CHECK(check_frame_sample(s, payload.size()) == Verdict::ok);

  // Cut anywhere: every shorter prefix is refused, and the sample left empty.
  std::size_t refused = 0;
  for (std::size_t n = 0; n < cdr.size(); ++n) {
    ipcring_bridge_Frame cut{};
    if (decode_frame_sample(std::span(cdr).first(n), cut) == Verdict::bad_encoding &&
        cut.data._buffer == nullptr) {
      ++refused;
    }
  }
  CHECK(refused == cdr.size());
  // Padding after the last field (fewer than 4 bytes) is fine; more is not this type.
  std::vector<std::byte> longer = cdr;
  longer.resize(cdr.size() + 3);
  CHECK(decode_frame_sample(longer, s) == Verdict::ok);
  longer.resize(cdr.size() + 4);
  CHECK(decode_frame_sample(longer, s) == Verdict::bad_encoding);
  // An encapsulation it does not know (PL_CDR_LE, a mutable type's).
  std::vector<std::byte> other = cdr;
  other[1] = std::byte{3};
  CHECK(decode_frame_sample(other, s) == Verdict::bad_encoding);
  // has_tensor (after the 4-byte header, "camera"'s 4 + 7 bytes padded to 16, five uint64s) is
  // a boolean: 0 or 1.
  other = cdr;
  REQUIRE(other[4 + 56] == std::byte{1});
  other[4 + 56] = std::byte{2};
  CHECK(decode_frame_sample(other, s) == Verdict::bad_encoding);
  // The data's length one more than the bytes there.
  other = cdr;
  const std::size_t len_at = cdr.size() - payload.size() - 4;
  std::uint32_t len = 0;
  std::memcpy(&len, other.data() + len_at, 4);
  REQUIRE(len == payload.size());
  ++len;
  std::memcpy(other.data() + len_at, &len, 4);
  CHECK(decode_frame_sample(other, s) == Verdict::bad_encoding);
  len = 0xffffffffU;  // and a length that would wrap a 32-bit offset
  std::memcpy(other.data() + len_at, &len, 4);
  CHECK(decode_frame_sample(other, s) == Verdict::bad_encoding);
}

TEST_CASE("decode_frame_sample: big-endian and XCDR2 samples; strings checked") {
  using namespace ipcring::bridge;
  const std::vector<std::uint8_t> meta{1, 2, 3};
  const std::vector<std::uint8_t> data{9, 8, 7, 6, 5};
  for (const int id : {0, 1, 6, 7}) {  // CDR_BE, CDR_LE, PLAIN_CDR2_BE, PLAIN_CDR2_LE
    CAPTURE(id);
    CdrOut c(static_cast<std::uint8_t>(id));
    put_frame(c, "cam", meta, data);
    ipcring_bridge_Frame s{};
    REQUIRE(decode_frame_sample(c.bytes, s) == Verdict::ok);
    CHECK(std::string(s.channel) == "cam");
    CHECK(s.producer_epoch == 7);
    CHECK(s.sequence_number == 42);
    CHECK(s.publish_time_ns == 1000);
    CHECK(s.send_realtime_ns == 2000);
    CHECK(s.capture_time_ns == 3000);
    CHECK(s.tensor.ndim == 2);
    CHECK(s.tensor.shape[0] == 10);
    CHECK(s.tensor.shape[1] == 9);
    REQUIRE(s.metadata._length == 3);
    CHECK(s.metadata._buffer[2] == 3);
    REQUIRE(s.data._length == 5);
    CHECK(s.data._buffer[0] == 9);
    CHECK(s.data._buffer[4] == 5);
  }
  // XCDR2 aligns 8-byte fields to 4: the tensor's shape follows its three octets at body offset
  // 52, where XCDR1 pads to 56.
  CdrOut x2(7);
  put_frame(x2, "cam", meta, data);
  CdrOut x1(1);
  put_frame(x1, "cam", meta, data);
  CHECK(x2.bytes.size() < x1.bytes.size());

  ipcring_bridge_Frame s{};
  CdrOut longest(1);
  put_frame(longest, std::string(200, 'c'), meta, data);  // string<200>: the bound itself
  CHECK(decode_frame_sample(longest.bytes, s) == Verdict::ok);
  CHECK(std::strlen(s.channel) == 200);
  CdrOut too_long(1);
  put_frame(too_long, std::string(201, 'c'), meta, data);
  CHECK(decode_frame_sample(too_long.bytes, s) == Verdict::bad_encoding);
  CdrOut no_nul(1);
  put_frame(no_nul, "cam", meta, data);
  no_nul.bytes[4 + 4 + 3] = std::byte{'x'};  // the NUL of "cam"
  CHECK(decode_frame_sample(no_nul.bytes, s) == Verdict::bad_encoding);
  CdrOut empty(1);
  empty.put(std::uint32_t{0});  // a string of length 0 (CDR strings count their NUL)
  CHECK(decode_frame_sample(empty.bytes, s) == Verdict::bad_encoding);
  // Over-long metadata decodes (it is CDR), then the frame check refuses it as before.
  CdrOut big_meta(1);
  put_frame(big_meta, "cam", std::vector<std::uint8_t>(ipcring::kMaxMetadataBytes + 1, 0), data);
  REQUIRE(decode_frame_sample(big_meta.bytes, s) == Verdict::ok);
  CHECK(check_frame_sample(s, 100) == Verdict::bad_metadata);
}

TEST_CASE("decode_image_sample: Cyclone's serialisation of sensor_msgs/msg/Image, in place") {
  using namespace ipcring::bridge;
  std::vector<std::uint8_t> pixels(std::size_t{4} * 3 * 2);
  for (std::size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<std::uint8_t>(k);
  const std::string frame_id = "camera_optical";
  const ImageFormat format{"rgb8", 4, 2, 0, 0};
  FrameView view;
  view.data = {reinterpret_cast<const std::byte*>(pixels.data()), pixels.size()};
  sensor_msgs_msg_dds__Image_ in{};
  REQUIRE(fill_image_sample(in, view, format, frame_id, 5'000'000'123ULL) == Verdict::ok);
  const std::vector<std::byte> cdr = cyclone_cdr(&sensor_msgs_msg_dds__Image__desc, &in,
                                                 "rt/brt" + std::to_string(getpid()) + "img");
  sensor_msgs_msg_dds__Image_ s{};
  REQUIRE(decode_image_sample(cdr, s) == Verdict::ok);
  CHECK(s.header.stamp.sec == 5);
  CHECK(s.header.stamp.nanosec == 123);
  REQUIRE(s.header.frame_id != nullptr);
  CHECK(std::string(s.header.frame_id) == frame_id);
  CHECK(s.height == 2);
  CHECK(s.width == 4);
  REQUIRE(s.encoding != nullptr);
  CHECK(std::string(s.encoding) == "rgb8");
  CHECK(s.is_bigendian == 0);
  CHECK(s.step == 12);
  REQUIRE(s.data._length == pixels.size());
  CHECK(std::memcmp(s.data._buffer, pixels.data(), pixels.size()) == 0);
  CHECK(reinterpret_cast<const std::byte*>(s.data._buffer) > cdr.data());
  CHECK(check_image_sample(s, pixels.size()) == Verdict::ok);
  std::size_t refused = 0;
  for (std::size_t n = 0; n < cdr.size(); ++n) {
    sensor_msgs_msg_dds__Image_ cut{};
    if (decode_image_sample(std::span(cdr).first(n), cut) == Verdict::bad_encoding &&
        cut.encoding == nullptr && cut.data._buffer == nullptr) {
      ++refused;
    }
  }
  CHECK(refused == cdr.size());
}
