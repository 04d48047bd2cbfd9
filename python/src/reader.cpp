// reader.cpp — the Python class Reader: attach to a channel, read frames.
//
// Reader.read waits with the GIL released in slices of kSignalSlice; between slices it takes the
// GIL back and runs PyErr_CheckSignals(), so Ctrl-C raises KeyboardInterrupt within about one
// slice. Attaching (and waiting for the channel) releases the GIL too.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "backend/cuda/cuda_pool.hpp"
#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "state.hpp"
#include "views.hpp"

namespace ipcring::python {

namespace {

class PyReader {
 public:
  PyReader(const std::string& name, const std::string& policy, double spin, double producer_probe,
           double wait_for_channel, bool observer, const std::optional<std::string>& dir,
           const std::vector<std::int64_t>& trust_uids)
      : state_(std::make_shared<ReaderState>()) {
    ReaderOptions o;
    if (policy == "latest") {
      o.policy = ReadPolicy::latest;
    } else if (policy == "sequential") {
      o.policy = ReadPolicy::sequential;
    } else {
      raise_errc(Errc::invalid_argument, channel_prefix(name) + "policy='" + policy +
                                             "': expected 'latest' or 'sequential'");
    }
    o.spin = seconds_option(spin, name, "spin");
    o.producer_probe = seconds_option(producer_probe, name, "producer_probe");
    const std::chrono::nanoseconds wait =
        seconds_option(wait_for_channel, name, "wait_for_channel");
    // Tensors handed to Python cannot be marked read-only (DLPack 0.6): map the pool
    // copy-on-write, so an in-place op on a frame's tensor changes a private copy, never faults.
    o.copy_on_write = true;
    // An observer (docs/observers.md) takes no reader entry; its frames are copies it owns.
    o.observer = observer;
    if (dir) o.dir = *dir;
    o.trust_uids = id_list(trust_uids, name, "trust_uids");
    state_->name = name;
    attach_waiting(name, o, wait);
    adopt_backend();
    policy_ = o.policy;
  }

  // The backend and device of the channel the C++ Reader is on now: at attach, and again when it
  // followed the channel's name to an object of another backend (a restart as a CUDA channel).
  void adopt_backend() {
    const Backend backend = state_->reader->backend();
    state_->backend = backend;
    state_->device =
        device_for_backend(backend, backend == Backend::cuda ? reader_device() : 0, state_->name);
  }

  // The CUDA device the reader maps frames into: the calling thread's current device at attach
  // (the reader pool asked the same thread just now), so the kDLCUDA device id of its frames.
  static int reader_device() {
    int device = 0;
    const std::shared_ptr<detail::CudaApi> api =
        detail::cuda_api_for_testing() ? detail::cuda_api_for_testing() : detail::cudart_api();
    if (api) {
      py::gil_scoped_release nogil;
      if (api->get_device(device) != detail::CudaErr::success) device = 0;
      (void)api->get_last_error();
    }
    return device;
  }

  // Reader::attach waiting up to `wait` for the channel to exist and be ready (what
  // ReaderOptions::wait_for_channel does in C++), tried every 10 ms without the GIL and with a
  // signal check between tries, so that Ctrl-C interrupts the wait.
  void attach_waiting(const std::string& name, const ReaderOptions& o,
                      std::chrono::nanoseconds wait) {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    for (;;) {
      try {
        py::gil_scoped_release nogil;
        state_->reader.emplace(Reader::attach(name, o));
        return;
      } catch (const Error& e) {
        if (e.code() != Errc::not_found && e.code() != Errc::not_ready) throw;
        const Clock::duration waited = Clock::now() - start;
        if (wait.count() == 0) throw;
        if (waited >= wait) {
          throw Error(e.code(), std::string(e.what()) + " (waited " +
                                    seconds_text(std::chrono::duration<double>(waited).count()) +
                                    " s for it: wait_for_channel)");
        }
      }
      {
        py::gil_scoped_release nogil;
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      check_signals();
    }
  }

  py::object try_read() {
    ReaderState& st = *state_;
    Result<Frame> r = Status::no_frame;
    {
      auto lock = lock_state(st.mutex);
      if (!st.reader) raise_closed();
      r = st.reader->try_read();
    }
    if (r) return make_frame(std::move(*r));
    if (r.status() == Status::no_frame) return py::none();
    raise_read_status(r.status());
  }

  py::object read(const std::optional<double>& timeout) {
    ReaderState& st = *state_;
    const Deadline deadline = make_deadline(timeout, st.name, "read");
    for (;;) {
      const std::chrono::nanoseconds slice = deadline.next_slice();
      Result<Frame> r = Status::timeout;
      bool closed = false;
      {
        py::gil_scoped_release nogil;
        std::lock_guard lock(st.mutex);
        if (!st.reader) {
          closed = true;
        } else {
          r = st.reader->read(slice);
        }
      }
      if (closed) raise_closed();
      if (r) return make_frame(std::move(*r));
      if (r.status() != Status::timeout) raise_read_status(r.status());
      if (deadline.passed()) {
        raise_status(Status::timeout, channel_prefix(st.name) + "no frame within " +
                                          seconds_text(timeout.value_or(0)) + " s");
      }
      check_signals();
    }
  }

  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(state_->mutex);
    state_->reader.reset();  // frames still held keep the reader's lease until released
  }
  bool closed() const { return !state_->reader; }
  const std::string& name() const { return state_->name; }
  const char* policy() const { return to_string(policy_); }
  const char* backend() const { return to_string(state_->backend); }
  Reader& open() {
    if (!state_->reader) raise_closed();
    return *state_->reader;
  }

 private:
  [[noreturn]] void raise_closed() const {
    raise_errc(Errc::invalid_argument, channel_prefix(state_->name) + "the Reader is closed");
  }

  [[noreturn]] void raise_read_status(Status s) {
    const std::string ch = channel_prefix(state_->name);
    switch (s) {
      case Status::producer_gone:
        raise_status(s, ch + "the producer closed or died (epoch " +
                            std::to_string(state_->reader ? state_->reader->epoch() : 0) +
                            " ended); this reader stays attached and reads the frames of a "
                            "producer that takes the channel over or creates it anew");
      case Status::evicted:
        if (state_->reader && !state_->reader->follow_error().empty()) {
          // Not evicted: the channel was created anew and this reader cannot follow it yet (it
          // stays on the old one and looks again every producer_probe).
          raise_status(s, ch + std::string(state_->reader->follow_error()));
        }
        raise_status(s, ch + "this reader's lease was taken away (reaped or repaired); attach a "
                             "new Reader");
      case Status::max_held: {
        const std::uint32_t held = state_->reader ? state_->reader->held() : 0;
        const std::uint32_t max = state_->reader ? state_->reader->max_held() : 0;
        raise_status(s, ch + "this reader holds " + std::to_string(held) +
                            " frame(s), max_held=" + std::to_string(max) +
                            ": release one first (frame.release() or `with`); views of a "
                            "released frame (tensors, arrays, memoryviews) keep it held until "
                            "they die");
      }
      case Status::forked:
        raise_status(s, ch + "this Reader was inherited through fork(); attach a new one in the "
                             "child");
      default:
        raise_status(s, ch + "read failed: " + to_string(s));
    }
  }

  py::object make_frame(Frame&& frame) {
    if (state_->reader && state_->reader->backend() != state_->backend) adopt_backend();
    PyFrame f;
    f.channel = state_->name;
    f.data = frame.data();
    f.size = frame.size();
    f.sequence = frame.sequence();
    f.epoch = frame.epoch();
    f.timestamp_ns = frame.timestamp_ns();
    f.skipped = frame.skipped();
    f.slot = frame.slot();
    const auto m = frame.metadata();
    f.metadata.assign(reinterpret_cast<const char*>(m.data()), m.size());
    f.tensor = frame.tensor();
    f.tensor_invalid = frame.tensor_invalid();
    f.capture_time_ns = frame.capture_time_ns();
    f.device = state_->device;
    f.hold = std::make_shared<FrameHold>();
    f.hold->frame = std::move(frame);
    f.watch = f.hold;
    return py::cast(std::move(f));
  }

  std::shared_ptr<ReaderState> state_;
  ReadPolicy policy_ = ReadPolicy::latest;
};

}  // namespace

void bind_reader(py::module_& m) {
  py::class_<PyReader>(m, "Reader", R"doc(
Reader(name, policy='latest', spin=0.0, producer_probe=0.1, wait_for_channel=0.0, observer=False,
       dir=None, trust_uids=())

Attaches to the channel `name`. wait_for_channel: seconds to wait for the channel to appear (its
producer not started yet); 0 raises NotFound at once. policy 'latest' returns the newest
frame not yet read; 'sequential' every frame in order (frames lost to the producer lapping the
reader are counted in overruns and Frame.skipped). spin: seconds read() polls before sleeping.
observer=True: take no reader entry (works when all max_readers are taken, never holds a buffer the
producer needs); each frame is a checked copy, one held at a time (MaxHeld while one is), copies
the producer overwrote meanwhile are dropped and counted in observer_dropped; host channels only
(Unsupported on a CUDA channel). See docs/observers.md. dir: the channel directory (None:
$IPCRING_DIR, else /dev/shm/ipcring-<uid>). trust_uids: other users whose producers this reader
accepts (by default its own user, the directory's owner and root); any other is refused with
PermissionDenied before anything is mapped.
)doc")
      .def(py::init<const std::string&, const std::string&, double, double, double, bool,
                    const std::optional<std::string>&, const std::vector<std::int64_t>&>(),
           py::arg("name"), py::arg("policy") = "latest", py::arg("spin") = 0.0,
           py::arg("producer_probe") = 0.1, py::arg("wait_for_channel") = 0.0,
           py::arg("observer") = false, py::arg("dir") = py::none(),
           py::arg("trust_uids") = std::vector<std::int64_t>{})
      .def("try_read", &PyReader::try_read,
           "A Frame, or None when nothing new was published. Raises ProducerGone (once per "
           "ended producer epoch), MaxHeld, Evicted, Forked.")
      .def("read", &PyReader::read, py::arg("timeout") = py::none(),
           "Wait for a frame. timeout: None waits forever (Ctrl-C interrupts), else seconds. "
           "Raises Timeout, ProducerGone, MaxHeld, Evicted, Forked.")
      .def("close", &PyReader::close,
           "Detach (frames still held keep the reader's entry until they are released).")
      .def_property_readonly("closed", &PyReader::closed)
      .def_property_readonly("name", &PyReader::name)
      .def_property_readonly("policy", &PyReader::policy)
      .def_property_readonly("backend", &PyReader::backend)
      .def_property_readonly(
          "cuda_path", [](PyReader& r) { return to_string(r.open().cuda_path()); },
          "how a CUDA channel's buffers reach this reader: 'legacy_ipc' or 'vmm'; 'none' for a "
          "host channel")
      .def_property_readonly("index", [](PyReader& r) { return r.open().index(); })
      .def_property_readonly(
          "held", [](PyReader& r) { return r.open().held(); },
          "frames held (including released frames whose views live)")
      .def_property_readonly("overruns", [](PyReader& r) { return r.open().overruns(); })
      .def_property_readonly("observer", [](PyReader& r) { return r.open().observer(); })
      .def_property_readonly(
          "observer_dropped", [](PyReader& r) { return r.open().observer_dropped(); },
          "copies dropped because the producer overwrote them while they were copied")
      .def_property_readonly("epoch", [](PyReader& r) { return r.open().epoch(); })
      .def_property_readonly("frame_bytes", [](PyReader& r) { return r.open().frame_bytes(); })
      .def_property_readonly("max_held", [](PyReader& r) { return r.open().max_held(); })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyReader& r, const py::args&) {
             r.close();
             return false;
           })
      .def("__repr__", [](PyReader& r) {
        return "<ipcring.Reader channel='" + r.name() + "' policy=" + r.policy() +
               (r.closed() ? " closed>" : ">");
      });
}

}  // namespace ipcring::python
