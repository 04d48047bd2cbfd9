// dds.hpp — the Cyclone DDS side of ringbridge: configuration (CYCLONEDDS_URI when the user gave
// none), the QoS of each mode, and owning handles for DDS entities.
//
// Cyclone's C API returns negative dds_return_t codes; every call here that can fail turns them
// into a BridgeError that names the topic and the code's text (dds_strretcode).
#pragma once

#include <dds/dds.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ipcring::bridge {

class BridgeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Reliability { reliable, best_effort };

struct DdsOptions {
  std::uint32_t domain = 0;    // DDS domain id (ROS_DOMAIN_ID)
  std::string interface_name;  // only when CYCLONEDDS_URI is unset; empty: Cyclone's choice
  Reliability reliability = Reliability::reliable;
  std::int32_t depth = 5;  // keep-last depth (best effort, and reliable ROS 2 mode)
  bool keep_all = false;   // reliable ipcring type: keep-all, so every frame arrives
};

// The configuration ringbridge uses when CYCLONEDDS_URI is unset: large UDP messages and
// fragments, larger socket buffers and writer history watermark (docs/bridge.md says why), and
// the interface when one is given. Cyclone's defaults apply to everything else, so it runs on a
// machine whose only network is loopback as well as on a LAN.
std::string default_cyclone_config(const std::string& interface_name);

// Sets CYCLONEDDS_URI to default_cyclone_config() unless the user set it; returns what was used
// ("(from CYCLONEDDS_URI)" when it was the user's). Call before the first participant exists and
// before any thread starts (it changes the environment).
std::string configure_cyclone(const std::string& interface_name);

// Keeps the large blocks Cyclone allocates for each frame (its serialised form in the writer's
// history, the reassembled sample on receipt) in the heap for reuse. By default glibc maps
// blocks over 128 KiB-32 MiB afresh and returns freed heap tops to the kernel, so each 1-8 MiB
// frame costs page faults and zeroed pages on both sides. Call once, first thing, before any
// thread starts.
void keep_frame_buffers_in_heap() noexcept;

// An owned DDS entity; deleting a participant deletes everything created under it.
class Entity {
 public:
  Entity() = default;
  explicit Entity(dds_entity_t e) noexcept : e_(e) {}
  Entity(Entity&& o) noexcept : e_(o.e_) { o.e_ = 0; }
  Entity& operator=(Entity&& o) noexcept {
    if (this != &o) {
      reset();
      e_ = o.e_;
      o.e_ = 0;
    }
    return *this;
  }
  Entity(const Entity&) = delete;
  Entity& operator=(const Entity&) = delete;
  ~Entity() { reset(); }
  dds_entity_t get() const noexcept { return e_; }
  void reset() noexcept {
    if (e_ > 0) dds_delete(e_);
    e_ = 0;
  }

 private:
  dds_entity_t e_ = 0;
};

// Throws BridgeError("<what> on topic <topic>: <code text>") when rc < 0; returns rc.
dds_entity_t check(dds_entity_t rc, const char* what, const std::string& topic);

// QoS for a writer or reader of the given options (caller frees with dds_delete_qos).
dds_qos_t* make_qos(const DdsOptions& options);

// The DDS topic name: ROS 2 puts topic /T on DDS as rt/T.
std::string dds_topic_name(const std::string& topic, bool ros2);

// CLOCK_REALTIME and CLOCK_MONOTONIC now, in nanoseconds.
std::uint64_t realtime_ns() noexcept;
std::uint64_t monotonic_ns() noexcept;

}  // namespace ipcring::bridge
