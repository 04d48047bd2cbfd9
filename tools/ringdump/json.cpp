// json.cpp — ringdump's --json documents. A snapshot's fields come from its schema
// (ipcring::for_each_field, the one the Python module's inspect() uses too); this file adds only
// the values derived at display time.
#include <string>
#include <vector>

#include "ringdump/ringdump.hpp"

namespace ringdump {

namespace {

// Fills a JSON object from a record's schema, field by field.
class JsonFields {
 public:
  explicit JsonFields(Json& j) : j_(j) {}
  template <class T>
  void operator()(const char* name, const T& value) {
    j_[name] = json_of(value);
  }
  template <class R>
  void record(const char* name, const R& r) {
    j_[name] = object_of(r);
  }
  template <class R>
  void records(const char* name, const std::vector<R>& rs) {
    Json list = Json::array();
    for (const R& r : rs) list.push_back(object_of(r));
    j_[name] = list;
  }
  template <class R>
  static Json object_of(const R& r) {
    Json j = Json::object();
    JsonFields fields(j);
    ipcring::for_each_field(r, fields);
    return j;
  }

 private:
  template <class T>
  static Json json_of(const std::optional<T>& v) {
    return v ? Json(*v) : Json(nullptr);
  }
  template <class T>
  static Json json_of(const T& v) {
    return Json(v);
  }
  Json& j_;
};

void add_producer_extras(Json& pj, const Snapshot& s, const Rates& rates) {
  const auto& p = s.producer;
  pj["publish_rate_hz"] = opt_json(rates.publish_hz);
  pj["publish_rate_method"] = rates.method;
  pj["publish_rate_window_ns"] = rates.window_ns;
  pj["last_publish_age_ns"] = opt_json(age(p.last_publish_ns, s.taken_ns));
  pj["uptime_ns"] = opt_json(age(p.started_ns, s.taken_ns));
}

void add_reader_extras(Json& rj, const ipcring::ReaderInfo& r, const Snapshot& s,
                       const Rates& rates) {
  const auto hz = rates.read_hz.find(r.index);
  rj["read_rate_hz"] = hz != rates.read_hz.end() ? Json(hz->second) : Json(nullptr);
  rj["lag_frames"] = opt_json(reader_lag(r, s.producer.head));
  rj["last_read_age_ns"] = opt_json(age(r.last_read_ns, s.taken_ns));
  rj["holds"] = hold_count(r.hold_histogram);
  rj["hold_p50_ns"] = opt_json(hold_percentile(r.hold_histogram, 0.50));
  rj["hold_p99_ns"] = opt_json(hold_percentile(r.hold_histogram, 0.99));
}

}  // namespace

Json opt_json(std::optional<std::uint64_t> v) {
  return v ? Json(*v) : Json(nullptr);
}
Json opt_json(std::optional<double> v) {
  return v ? Json(*v) : Json(nullptr);
}

Json snapshot_json(const Snapshot& s, const Rates& rates) {
  Json j;
  j["schema_version"] = kSchemaVersion;
  JsonFields fields(j);
  ipcring::for_each_field(s, fields);
  j["owner_name"] = user_name(s.owner_uid);
  j["mode_octal"] = ipcring::format_mode(s.mode);
  add_producer_extras(j["producer"], s, rates);
  for (std::size_t i = 0; i < s.slots.size(); ++i) {
    const auto& si = s.slots[i];
    j["slots"][i]["age_ns"] =
        si.sequence != 0 ? opt_json(age(si.timestamp_ns, s.taken_ns)) : Json(nullptr);
  }
  for (std::size_t i = 0; i < s.readers.size(); ++i) {
    add_reader_extras(j["readers"][i], s.readers[i], s, rates);
  }
  return j;
}

Json error_json(const ipcring::Error& e) {
  Json j;
  j["code"] = ipcring::to_string(e.code());
  j["errc"] = static_cast<int>(e.code());
  j["message"] = e.what();
  return j;
}

}  // namespace ringdump
