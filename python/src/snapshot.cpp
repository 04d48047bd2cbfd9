// snapshot.cpp — ipcring.inspect() and the other module functions on channels by name.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"

namespace ipcring::python {

using namespace pybind11::literals;

// The raw Snapshot under ringdump's JSON names (tools/ringdump.cpp). ringdump's values derived
// from the time of display (ages, rates, lag, owner name) are left to the caller.
py::dict snapshot_dict(const Snapshot& s) {
  const char* producer_state = s.producer.alive ? "alive" : (s.producer.closed ? "closed" : "dead");
  py::dict producer("pid"_a = s.producer.pid, "alive"_a = s.producer.alive,
                    "closed"_a = s.producer.closed, "state"_a = producer_state,
                    "epoch"_a = s.producer.epoch, "instance_id"_a = s.producer.instance_id,
                    "head"_a = s.producer.head, "published"_a = s.producer.published,
                    "loan_failures"_a = s.producer.loan_failures,
                    "readers_reaped"_a = s.producer.readers_reaped,
                    "last_publish_ns"_a = s.producer.last_publish_ns,
                    "started_ns"_a = s.producer.started_ns, "waiters"_a = s.producer.waiters);
  py::list slots;
  for (const SlotInfo& si : s.slots_info) {
    py::list indices;
    for (std::uint32_t b = 0; b < 64; ++b) {
      if ((si.reader_mask >> b) & 1U) indices.append(b);
    }
    const std::optional<TensorDesc> t =
        si.has_tensor ? std::optional<TensorDesc>(si.tensor) : std::nullopt;
    slots.append(py::dict("index"_a = si.index, "sequence"_a = si.sequence, "epoch"_a = si.epoch,
                          "state"_a = to_string(si.state), "reader_mask"_a = si.reader_mask,
                          "reader_indices"_a = indices, "generation"_a = si.generation,
                          "bytes"_a = si.bytes, "timestamp_ns"_a = si.timestamp_ns,
                          "capture_time_ns"_a = si.capture_time_ns != 0
                                                    ? py::object(py::int_(si.capture_time_ns))
                                                    : py::none(),
                          "dtype"_a = dtype_name(t), "shape"_a = shape_tuple(t),
                          "strides"_a = t && !t->is_contiguous() ? strides_tuple(t) : py::none(),
                          "byte_offset"_a = t ? py::object(py::int_(t->byte_offset)) : py::none(),
                          "metadata_bytes"_a = si.metadata_bytes));
  }
  py::list readers;
  for (const ReaderInfo& r : s.readers) {
    readers.append(py::dict(
        "index"_a = r.index, "pid"_a = r.pid, "alive"_a = r.alive, "generation"_a = r.generation,
        "instance_id"_a = r.instance_id, "policy"_a = policy_name(r.policy),
        "frames_read"_a = r.frames_read, "overruns"_a = r.overruns,
        "last_sequence"_a = r.last_sequence, "last_read_ns"_a = r.last_read_ns,
        "attached_ns"_a = r.attached_ns, "held_slots"_a = r.held_slots,
        "hold_histogram"_a = r.hold_histogram, "delay_count"_a = r.delay_count,
        "delay_p50_ns"_a = r.delay_count != 0 ? py::object(py::int_(r.delay_p50_ns)) : py::none(),
        "delay_p99_ns"_a = r.delay_count != 0 ? py::object(py::int_(r.delay_p99_ns)) : py::none(),
        "delay_histogram"_a = r.delay_histogram));
  }
  return py::dict("name"_a = s.name, "layout_version"_a = s.layout_version,
                  "backend"_a = backend_name(s.backend), "slot_count"_a = s.slots,
                  "max_readers"_a = s.max_readers, "max_held"_a = s.max_held,
                  "frame_bytes"_a = s.frame_bytes, "segment_bytes"_a = s.segment_bytes,
                  "frames_segment_bytes"_a = s.frames_segment_bytes, "owner_uid"_a = s.owner_uid,
                  "mode"_a = s.mode, "taken_ns"_a = s.taken_ns,
                  "created_unix_ns"_a = s.created_unix_ns, "reap_period_ns"_a = s.reap_period_ns,
                  "metadata_bytes"_a = s.metadata_bytes, "producer"_a = producer, "slots"_a = slots,
                  "readers"_a = readers, "problems"_a = s.problems);
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
  m.def("list_channels", &ipcring::list_channels, "Names of the channels in /dev/shm, sorted.");
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
      py::arg("name"), "Raises InvalidName unless name is 1..200 characters of [A-Za-z0-9_-].");
  m.def("layout_version", &ipcring::layout_version);
}

}  // namespace ipcring::python
