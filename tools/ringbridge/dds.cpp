// dds.cpp — Cyclone DDS configuration, QoS and error handling for ringbridge.
#include "dds.hpp"

#include <malloc.h>

#include <cstdlib>
#include <ctime>

namespace ipcring::bridge {

std::string default_cyclone_config(const std::string& interface_name) {
  std::string general;
  if (!interface_name.empty()) {
    general += "<Interfaces><NetworkInterface name=\"" + interface_name + "\"/></Interfaces>";
  }
  // UDP datagrams up to 64 KiB: 1-8 MiB frames travel in ~16-130 fragments instead of thousands
  // of 1344-byte ones (Cyclone's default fragment size).
  general += "<MaxMessageSize>65500B</MaxMessageSize><FragmentSize>62000B</FragmentSize>";
  return "<CycloneDDS><Domain id=\"any\"><General>" + general +
         "</General>"
         // A peer that vanishes without saying so (SIGKILL, cable) is dropped after 3 s instead
         // of 10: until then a reliable writer keeps waiting for its acknowledgements.
         "<Discovery><LeaseDuration>3s</LeaseDuration></Discovery><Internal>"
         // Room for a few whole frames in the kernel: a best-effort frame is lost when any of its
         // fragments is. The kernel caps these at net.core.rmem_max / wmem_max (max=, not min=:
         // a smaller cap is not an error).
         "<SocketReceiveBufferSize min=\"default\" max=\"16MiB\"/>"
         "<SocketSendBufferSize min=\"default\" max=\"16MiB\"/>"
         // Unacknowledged bytes a reliable writer keeps before it blocks (default 500 kB, less
         // than one frame).
         "<Watermarks><WhcHigh>32MiB</WhcHigh></Watermarks>"
         "</Internal></Domain></CycloneDDS>";
}

std::string configure_cyclone(const std::string& interface_name) {
  // Single-threaded at this point (before any participant or Reader thread exists).
  const char* user = std::getenv("CYCLONEDDS_URI");  // NOLINT(concurrency-mt-unsafe)
  if (user != nullptr && user[0] != '\0') return "(from CYCLONEDDS_URI)";
  const std::string config = default_cyclone_config(interface_name);
  setenv("CYCLONEDDS_URI", config.c_str(), 1);  // NOLINT(concurrency-mt-unsafe)
  return config;
}

void keep_frame_buffers_in_heap() noexcept {
  // 32 MiB is glibc's largest mmap threshold on 64-bit (setting it also stops glibc's own
  // adjustment of both thresholds); freed memory up to 256 MiB stays with the process.
  // Single-threaded at this point (before any participant or Reader thread exists).
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);   // NOLINT(concurrency-mt-unsafe)
  mallopt(M_TRIM_THRESHOLD, 256 * 1024 * 1024);  // NOLINT(concurrency-mt-unsafe)
}

dds_entity_t check(dds_entity_t rc, const char* what, const std::string& topic) {
  if (rc < 0) {
    throw BridgeError(std::string(what) + " on topic '" + topic +
                      "' failed: " + dds_strretcode(rc) + " (" + std::to_string(rc) + ")");
  }
  return rc;
}

dds_qos_t* make_qos(const DdsOptions& options) {
  dds_qos_t* q = dds_create_qos();
  dds_qset_durability(q, DDS_DURABILITY_VOLATILE);
  if (options.reliability == Reliability::reliable) {
    // A writer blocks at most this long when its history is full, then write() times out; the
    // exporter retries, so the bound only keeps it responsive to SIGTERM.
    dds_qset_reliability(q, DDS_RELIABILITY_RELIABLE, DDS_MSECS(100));
  } else {
    dds_qset_reliability(q, DDS_RELIABILITY_BEST_EFFORT, 0);
  }
  if (options.keep_all) {
    dds_qset_history(q, DDS_HISTORY_KEEP_ALL, 0);
  } else {
    dds_qset_history(q, DDS_HISTORY_KEEP_LAST, options.depth);
  }
  return q;
}

std::string dds_topic_name(const std::string& topic, bool ros2) {
  if (!ros2) return topic;
  const std::string t = !topic.empty() && topic.front() == '/' ? topic.substr(1) : topic;
  return "rt/" + t;
}

std::uint64_t realtime_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

}  // namespace ipcring::bridge
