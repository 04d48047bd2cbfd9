// health.cpp — rates between two snapshots, and what makes a channel unhealthy (ringdump check).

#include "ringdump/ringdump.hpp"

namespace ringdump {

// Rates from two snapshots of the same channel, `before` taken first.
Rates rates_between(const Snapshot& before, const Snapshot& after) {
  Rates r;
  if (after.taken_ns <= before.taken_ns) return r;
  r.method = "two snapshots";
  r.window_ns = after.taken_ns - before.taken_ns;
  const double secs = static_cast<double>(r.window_ns) / 1e9;
  if (after.producer.published >= before.producer.published &&
      after.producer.instance_id == before.producer.instance_id) {
    r.publish_hz = static_cast<double>(after.producer.published - before.producer.published) / secs;
  }
  for (const auto& a : after.readers) {
    for (const auto& b : before.readers) {
      if (a.index == b.index && a.generation == b.generation && a.frames_read >= b.frames_read) {
        r.read_hz[a.index] = static_cast<double>(a.frames_read - b.frames_read) / secs;
      }
    }
  }
  return r;
}

std::vector<std::string> health_reasons(const Snapshot& s, const CheckLimits& limits) {
  std::vector<std::string> why;
  const auto& p = s.producer;
  if (p.closed) {
    why.push_back("producer pid " + std::to_string(p.pid) + " closed the channel (epoch " +
                  std::to_string(p.epoch) + ")");
  } else if (!p.alive) {
    why.push_back("producer pid " + std::to_string(p.pid) + " is dead (epoch " +
                  std::to_string(p.epoch) + "); a new producer can take the channel over");
  }
  if (limits.max_idle_ns && p.alive) {
    const auto idle = age(p.last_publish_ns != 0 ? p.last_publish_ns : p.started_ns, s.taken_ns);
    if (idle && *idle > *limits.max_idle_ns) {
      why.push_back("producer pid " + std::to_string(p.pid) + " has published nothing for " +
                    format_duration(*idle) + " (max " + format_duration(*limits.max_idle_ns) + ")");
    }
  }
  for (const auto& r : s.readers) {
    if (!r.alive) {
      why.push_back(
          "reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
          ") is dead and not reaped" +
          (r.held_slots.empty() ? std::string() : "; it holds slot(s) " + join(r.held_slots)) +
          " (run 'ringdump reap " + s.name + "')");
      continue;
    }
    const auto lag = reader_lag(r, p.head);
    if (limits.max_lag && lag && *lag > *limits.max_lag) {
      why.push_back("reader " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) +
                    ") lags " + std::to_string(*lag) + " frames behind head " +
                    std::to_string(p.head) + " (max " + std::to_string(*limits.max_lag) + ")");
    }
  }
  for (const auto& problem : s.problems) why.push_back("segment: " + problem);
  return why;
}

}  // namespace ringdump
