// snapshot.cpp — ipcring.inspect() and the other module functions on channels by name.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"

namespace ipcring::python {

using namespace pybind11::literals;

// The Snapshot as dicts and lists, field by field from its schema (for_each_field in
// ipcring/inspect.hpp), which ringdump --json uses too. ringdump's values derived from the time
// of display (ages, rates, lag, owner name) are left to the caller.
class SnapshotDict {
 public:
  explicit SnapshotDict(py::dict& d) : d_(d) {}
  template <class T>
  void operator()(const char* name, const T& value) {
    d_[name] = object(value);
  }
  template <class R>
  void record(const char* name, const R& r) {
    d_[name] = dict_of(r);
  }
  template <class R>
  void records(const char* name, const std::vector<R>& rs) {
    py::list out;
    for (const R& r : rs) out.append(dict_of(r));
    d_[name] = out;
  }
  template <class R>
  static py::dict dict_of(const R& r) {
    py::dict d;
    SnapshotDict fields(d);
    for_each_field(r, fields);
    return d;
  }

 private:
  template <class T>
  static py::object object(const std::optional<T>& v) {
    return v ? py::cast(*v) : py::none();
  }
  template <class T>
  static py::object object(const T& v) {
    return py::cast(v);
  }
  py::dict& d_;
};

py::dict snapshot_dict(const Snapshot& s) {
  return SnapshotDict::dict_of(s);
}

void bind_functions(py::module_& m) {
  m.def(
      "inspect",
      [](const std::string& name) {
        Snapshot s;
        {
          py::gil_scoped_release nogil;
          s = ipcring::inspect(name);
        }
        return snapshot_dict(s);
      },
      py::arg("name"),
      "A read-only snapshot of a channel as a dict (ringdump's JSON names): producer{pid, alive, "
      "epoch, ...}, slots[{index, sequence, state, reader_mask, ...}], readers[{index, pid, "
      "alive, held_slots, ...}], problems[...].");
  m.def(
      "list_channels", [](const std::string& dir) { return ipcring::list_channels(dir); },
      py::arg("dir") = std::string(),
      "Names of the channels in the channel directory (dir, else $IPCRING_DIR, else "
      "/dev/shm/ipcring-<uid>), sorted.");
  m.def(
      "remove_channel",
      [](const std::string& name, bool force) {
        py::gil_scoped_release nogil;
        return ipcring::remove_channel(name, force);
      },
      py::arg("name"), py::arg("force") = false,
      "Remove a channel's shared-memory objects; ChannelBusy while it is in use unless force. "
      "Returns False when it did not exist.");
  m.def(
      "reap_dead_readers",
      [](const std::string& name) {
        py::gil_scoped_release nogil;
        return ipcring::reap_dead_readers(name);
      },
      py::arg("name"), "Reap the dead readers of a channel from any process (ringdump reap).");
  m.def(
      "validate_name", [](const std::string& name) { ipcring::validate_name(name); },
      py::arg("name"),
      "Raises InvalidName unless name is 1..200 characters: parts of [A-Za-z0-9_.-] separated by "
      "/, none empty, . or .., the last at most 80.");
  m.def("layout_version", &ipcring::layout_version);
}

}  // namespace ipcring::python
