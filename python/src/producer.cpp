// producer.cpp — the Python class Producer: create a channel, loan, publish, send.
//
// Producer.loan waits with the GIL released in slices of kSignalSlice; between slices it takes
// the GIL back and runs PyErr_CheckSignals(), so Ctrl-C raises KeyboardInterrupt within about one
// slice. Create and large copies release the GIL for their duration.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "common.hpp"
#include "errors.hpp"
#include "state.hpp"
#include "tensors.hpp"
#include "views.hpp"

namespace ipcring::python {

using namespace pybind11::literals;

namespace {

constexpr int kDlpackCuda = 2;  // kDLCUDA

// DLPack device type of `obj` (its __dlpack_device__), or -1 when it has none.
int dlpack_device_type(const py::handle& obj) {
  if (!py::hasattr(obj, "__dlpack_device__")) return -1;
  const py::tuple dev = obj.attr("__dlpack_device__")();
  return dev.size() == 2 ? dev[0].cast<int>() : -1;
}
std::string device_text(const py::handle& obj) {
  return py::str(obj.attr("__dlpack_device__")());
}
std::string type_name(const py::handle& obj) {
  return py::str(py::type::of(obj).attr("__qualname__"));
}

class PyProducer {
 public:
  PyProducer(const std::string& name, std::int64_t slots, std::int64_t max_readers,
             std::int64_t max_held, std::int64_t frame_bytes, const std::string& backend,
             std::int64_t mode, int cuda_device, double reap_period, std::int64_t metadata_bytes,
             const std::optional<std::string>& dir, const std::vector<std::int64_t>& allow_uids,
             const std::vector<std::int64_t>& allow_gids)
      : state_(std::make_shared<ProducerState>()) {
    ChannelConfig c;
    c.slots = config_u32(slots, name, "slots");
    c.max_readers = config_u32(max_readers, name, "max_readers");
    c.max_held = config_u32(max_held, name, "max_held");
    if (frame_bytes < 0) {
      raise_errc(Errc::invalid_config, channel_prefix(name) + "frame_bytes=" +
                                           std::to_string(frame_bytes) + " is negative");
    }
    c.frame_bytes = static_cast<std::size_t>(frame_bytes);
    c.backend = parse_backend(backend, name);
    if (mode < 0 || mode > 07777) {
      raise_errc(Errc::invalid_config, channel_prefix(name) + "mode=" + std::to_string(mode) +
                                           " is not a permission mode");
    }
    c.mode = static_cast<unsigned>(mode);
    c.cuda_device = cuda_device;
    c.reap_period = seconds_option(reap_period, name, "reap_period");
    c.metadata_bytes = config_u32(metadata_bytes, name, "metadata_bytes");
    if (dir) c.dir = *dir;
    c.allow_uids = id_list(allow_uids, name, "allow_uids");
    c.allow_gids = id_list(allow_gids, name, "allow_gids");
    validate_name(name);
    state_->name = name;
    // The channel's backend (host or cuda): a pinned CUDA path is a request of create, and the
    // frames of all three CUDA requests are device memory alike.
    state_->backend = is_cuda(c.backend) ? Backend::cuda : Backend::host;
    state_->device = device_for_backend(state_->backend, cuda_device, name);
    py::gil_scoped_release nogil;  // create may wait on a prober for a few milliseconds
    state_->producer.emplace(Producer::create(name, c));
  }

  PyLoan loan(const std::optional<double>& timeout, const py::object& stream) {
    ProducerState& st = *state_;
    const Deadline deadline = make_deadline(timeout, st.name, "loan");
    // CUDA, stream given: the loan may be a buffer readers' queued GPU work still reads; `stream`
    // is made to wait for that work on the GPU (their release fences), and publish() defaults to
    // recording the write-done event on it. Without a stream, only buffers no reader's GPU work
    // can read are loaned, so any stream may write them.
    bool with_stream = false;
    std::uintptr_t stream_value = 1;
    if (!stream.is_none()) {
      if (st.backend != Backend::cuda) {
        raise_errc(Errc::invalid_argument, channel_prefix(st.name) +
                                               "loan(stream=...) on a host channel: host frames "
                                               "have no stream");
      }
      const StreamArg a = parse_stream(stream, st.name, "loan");
      with_stream = a.sync;
      stream_value = a.value;
    }
    const CudaStream cs = to_cuda_stream(stream_value);
    for (;;) {
      const std::chrono::nanoseconds slice = deadline.next_slice();
      Result<Loan> r = Status::timeout;
      bool closed = false;
      {
        py::gil_scoped_release nogil;
        std::lock_guard lock(st.mutex);
        if (!st.producer) {
          closed = true;
        } else {
          if (with_stream) {
            r = slice.count() > 0 ? st.producer->loan(slice, cs) : st.producer->loan(cs);
          } else {
            r = slice.count() > 0 ? st.producer->loan(slice) : st.producer->loan();
          }
        }
      }
      if (closed) raise_closed();
      if (r) {
        PyLoan l = make_loan(std::move(*r));
        if (with_stream) set_write_stream(l, stream_value);
        return l;
      }
      const Status s = r.status();
      if (s == Status::loan_outstanding) {
        raise_status(s, channel_prefix(st.name) +
                            "a loan is already out; publish or discard it first (a view of a "
                            "discarded loan keeps it out until the view dies)");
      }
      if (s != Status::timeout && s != Status::no_free_slot) {
        raise_status(s, channel_prefix(st.name) + "loan failed: " + to_string(s));
      }
      if (deadline.passed()) {
        const ChannelConfig& c = config();
        raise_status(Status::no_free_slot,
                     channel_prefix(st.name) + "no free slot" +
                         (timeout ? " within " + seconds_text(*timeout) + " s" : "") + ": all " +
                         std::to_string(c.slots) + " slots are held by readers (" +
                         (c.loan_never_fails()
                              ? "unexpected with slots >= max_readers*max_held+2"
                              : "slots < max_readers*max_held+2 = " +
                                    std::to_string(std::uint64_t{c.max_readers} * c.max_held + 2)) +
                         ")");
      }
      check_signals();
    }
  }

  std::uint64_t publish(PyLoan& l, const std::optional<std::int64_t>& nbytes,
                        const py::object& stream) {
    ProducerState& st = *state_;
    if (!l.state) {
      raise_errc(Errc::invalid_argument, channel_prefix(st.name) + "publish() of a loan that was " +
                                             (l.published ? "already published" : "discarded"));
    }
    if (l.state->producer != state_) {
      raise_errc(Errc::invalid_argument, channel_prefix(st.name) +
                                             "publish() of a loan of another producer (channel '" +
                                             l.channel + "')");
    }
    const int exports = l.state->exports.load(std::memory_order_acquire);
    if (exports != 0) {
      raise_buffer_error(channel_prefix(st.name) + "publish() while " + std::to_string(exports) +
                         " view(s) of the loan (memoryview, numpy array, tensor) are alive; "
                         "delete them first, so nothing writes into a published frame");
    }
    // Default: the bytes of the tensor the loan describes, else the whole capacity.
    std::size_t bytes =
        l.tensor ? static_cast<std::size_t>(tensor_span(*l.tensor).value_or(0)) : l.capacity;
    if (nbytes) {
      if (*nbytes < 0 || static_cast<std::uint64_t>(*nbytes) > l.capacity) {
        raise_errc(Errc::invalid_argument, channel_prefix(st.name) + "publish of " +
                                               std::to_string(*nbytes) + " bytes: must be in [0, " +
                                               std::to_string(l.capacity) +
                                               "] (the frame capacity)");
      }
      bytes = static_cast<std::size_t>(*nbytes);
    }
    // CUDA: the write-done event is recorded on the stream that wrote the loan: `stream` when
    // given, else the one a view of the loan was made for (loan.tensor(), __dlpack__(stream)),
    // else the legacy default stream.
    CudaStream write_stream = nullptr;
    bool cuda = st.backend == Backend::cuda;
    if (!cuda && !stream.is_none()) {
      raise_errc(Errc::invalid_argument, channel_prefix(st.name) +
                                             "publish(stream=...) on a host channel: host frames "
                                             "have no stream");
    }
    if (cuda) {
      const StreamArg s = parse_stream(stream, st.name, "publish");
      if (!stream.is_none() && s.sync) {
        write_stream = to_cuda_stream(s.value);
      } else if (l.state->write_stream_set.load(std::memory_order_acquire)) {
        write_stream = to_cuda_stream(l.state->write_stream.load(std::memory_order_acquire));
      }
    }
    std::uint64_t seq = 0;
    {
      auto lock = lock_state(st.mutex);
      if (!st.producer) raise_closed();
      // A failure (a fork child, the backend) is a Status, and the loan is kept.
      const Status s =
          st.producer->try_publish(l.state->loan, bytes, cuda ? write_stream : nullptr, &seq);
      if (s != Status::ok) {
        raise_status(s, channel_prefix(st.name) + "publish failed: " + to_string(s));
      }
    }
    l.state.reset();
    l.published = true;
    return seq;
  }

  // Convenience: loan, copy `obj`'s elements in (C order), describe them (dtype, shape), set
  // the capture time and metadata, publish.
  std::uint64_t send(const py::object& obj, const std::optional<std::int64_t>& capture_time_ns,
                     const std::optional<py::bytes>& metadata,
                     const std::optional<double>& timeout) {
    const bool cuda_source = dlpack_device_type(obj) == kDlpackCuda;
    if (state_->backend == Backend::cuda) {
      return send_cuda(obj, capture_time_ns, metadata, timeout);
    }
    if (cuda_source) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(state_->name) + "this is a host channel, but send() got a CUDA " +
                     type_name(obj) + " (DLPack device " + device_text(obj) +
                     "); copy it to the host first (tensor.cpu()) or create the channel with "
                     "backend='cuda'");
    }
    const SendSource source(obj, state_->name);
    const std::size_t bytes = source.bytes();
    check_send(source.tensor(), bytes, capture_time_ns, metadata);
    PyLoan l = loan(timeout, py::none());
    if (metadata) set_loan_metadata(l, *metadata);
    {
      auto lock = lock_state(state_->mutex);
      l.state->loan.set_tensor(source.tensor());  // fits: bytes <= frame_bytes
      if (capture_time_ns) {
        l.state->loan.set_capture_time_ns(static_cast<std::uint64_t>(*capture_time_ns));
      }
    }
    l.tensor = source.tensor();
    {
      py::gil_scoped_release nogil;
      source.copy_to(l.data);
    }
    return publish(l, static_cast<std::int64_t>(bytes), py::none());
  }

  // send() on a CUDA channel: `obj` is a CUDA torch tensor or anything torch.from_dlpack takes
  // with device kDLCUDA. The copy is device to device, queued by torch on its current stream of
  // the channel's device; publish() records the write-done event on that stream (no CPU sync).
  std::uint64_t send_cuda(const py::object& obj, const std::optional<std::int64_t>& capture_time_ns,
                          const std::optional<py::bytes>& metadata,
                          const std::optional<double>& timeout) {
    const std::string ch = channel_prefix(state_->name);
    const std::string device = std::to_string(state_->device.index);
    if (dlpack_device_type(obj) != kDlpackCuda) {
      raise_errc(Errc::invalid_argument, ch + "this is a CUDA channel (device " + device +
                                             "), but send() got a host " + type_name(obj) +
                                             (py::hasattr(obj, "__dlpack_device__")
                                                  ? " (DLPack device " + device_text(obj) + ")"
                                                  : std::string()) +
                                             "; send a CUDA tensor (tensor.to('cuda:" + device +
                                             "')) or use a channel with backend='host'");
    }
    py::module_ torch;
    try {
      torch = py::module_::import("torch");
    } catch (const py::error_already_set&) {
      raise_errc(Errc::unsupported, ch + "send() of a CUDA " + type_name(obj) +
                                        " needs torch for the device-to-device copy (import "
                                        "torch failed); fill loan.tensor() instead");
    }
    py::object src = obj;
    if (!py::isinstance(obj, torch.attr("Tensor"))) {
      src = torch.attr("utils").attr("dlpack").attr("from_dlpack")(obj);
    }
    const DtypeInfo& d = parse_dtype(src.attr("dtype"), state_->name);
    const std::vector<std::int64_t> dims = parse_shape(src.attr("shape"), state_->name);
    const TensorDesc t = make_contiguous(d, dims);
    const auto bytes = static_cast<std::size_t>(tensor_span(t).value_or(0));
    check_send(t, bytes, capture_time_ns, metadata);
    PyLoan l = loan(timeout, py::none());
    if (metadata) set_loan_metadata(l, *metadata);
    if (capture_time_ns) {
      auto lock = lock_state(state_->mutex);
      l.state->loan.set_capture_time_ns(static_cast<std::uint64_t>(*capture_time_ns));
    }
    {
      py::object dst = loan_tensor(l, src.attr("shape"), src.attr("dtype"));
      dst.attr("copy_")(src, "non_blocking"_a = true);  // on torch's current stream of dst
    }  // the view dies here: publish() refuses while one lives
    return publish(l, static_cast<std::int64_t>(bytes), py::none());
  }

  void check_send(const TensorDesc& t, std::size_t bytes,
                  const std::optional<std::int64_t>& capture_time_ns,
                  const std::optional<py::bytes>& metadata) {
    if (bytes > config().frame_bytes) {
      raise_errc(Errc::invalid_argument, channel_prefix(state_->name) + "send() of a " +
                                             t.dtype_name() + " array of shape " + t.shape_text() +
                                             " (" + std::to_string(bytes) +
                                             " bytes) exceeds the frame capacity of " +
                                             std::to_string(config().frame_bytes) + " bytes");
    }
    if (capture_time_ns && *capture_time_ns < 0) {
      raise_errc(Errc::invalid_argument, channel_prefix(state_->name) + "send(capture_time_ns=" +
                                             std::to_string(*capture_time_ns) + "): must be >= 0");
    }
    if (metadata) {
      const std::size_t m = py::len(*metadata);
      if (m > config().metadata_bytes) {
        raise_errc(Errc::invalid_argument, channel_prefix(state_->name) + "metadata of " +
                                               std::to_string(m) +
                                               " bytes exceeds the channel's metadata_bytes = " +
                                               std::to_string(config().metadata_bytes));
      }
    }
  }

  std::size_t reap_dead_readers() {
    auto lock = lock_state(state_->mutex);
    if (!state_->producer) raise_closed();
    return state_->producer->reap_dead_readers();
  }

  void close() {
    py::gil_scoped_release nogil;
    std::lock_guard lock(state_->mutex);
    state_->producer.reset();  // outstanding loans keep the core until they are dropped
  }
  bool closed() const { return !state_->producer; }
  const std::string& name() const { return state_->name; }
  std::uint64_t epoch() { return open().epoch(); }
  const ChannelConfig& config() { return open().config(); }
  const char* backend() const { return to_string(state_->backend); }

 private:
  [[noreturn]] void raise_closed() const {
    raise_errc(Errc::invalid_argument, channel_prefix(state_->name) + "the Producer is closed");
  }
  Producer& open() {
    if (!state_->producer) raise_closed();
    return *state_->producer;
  }

  PyLoan make_loan(Loan&& loan) {
    PyLoan l;
    l.state = std::make_shared<LoanState>(state_);
    l.channel = state_->name;
    l.data = loan.data();
    l.capacity = loan.capacity();
    l.sequence = loan.sequence();
    l.slot = loan.slot();
    l.device = state_->device;
    l.state->loan = std::move(loan);
    return l;
  }

  std::shared_ptr<ProducerState> state_;
};

}  // namespace

void bind_producer(py::module_& m) {
  py::class_<PyProducer>(m, "Producer", R"doc(
Producer(name, slots=8, max_readers=4, max_held=1, frame_bytes=0, backend='host', mode=0o600,
         cuda_device=0, reap_period=0.1, metadata_bytes=256, dir=None, allow_uids=(),
         allow_gids=())

Creates the channel `name` (or takes over one whose producer died) with `slots` frame buffers of
`frame_bytes` bytes each. With slots >= max_readers*max_held + 2, loan() never fails. close() (or
the end of a `with` block) marks the channel closed, wakes readers (they get ProducerGone) and
removes its names from the channel directory. dir: the channel directory (None: $IPCRING_DIR, else
/dev/shm/ipcring-<uid>). allow_uids / allow_gids: other users, or members of groups, whose readers
receive the channel's memory (by default only this user and root).
)doc")
      .def(py::init<const std::string&, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                    const std::string&, std::int64_t, int, double, std::int64_t,
                    const std::optional<std::string>&, const std::vector<std::int64_t>&,
                    const std::vector<std::int64_t>&>(),
           py::arg("name"), py::arg("slots") = 8, py::arg("max_readers") = 4,
           py::arg("max_held") = 1, py::arg("frame_bytes") = 0, py::arg("backend") = "host",
           py::arg("mode") = 0600, py::arg("cuda_device") = 0, py::arg("reap_period") = 0.1,
           py::arg("metadata_bytes") = 256, py::arg("dir") = py::none(),
           py::arg("allow_uids") = std::vector<std::int64_t>{},
           py::arg("allow_gids") = std::vector<std::int64_t>{})
      .def("loan", &PyProducer::loan, py::arg("timeout") = py::none(),
           py::arg("stream") = py::none(),
           "A free slot to fill. timeout: None waits until one is free (Ctrl-C interrupts), 0 "
           "tries once, else seconds. Raises NoFreeSlot, LoanOutstanding. CUDA channels: with "
           "`stream` (DLPack numbering), a buffer whose readers' GPU work is still queued may be "
           "loaned, and `stream` waits for that work on the GPU (write the loan on `stream`); "
           "without, only buffers no reader's GPU work can read are loaned.")
      .def("publish", &PyProducer::publish, py::arg("loan"), py::arg("nbytes") = py::none(),
           py::arg("stream") = py::none(),
           "Publish the loan's first nbytes (default: its tensor's size, else the capacity); "
           "returns the sequence number. CUDA channels: the write-done event is recorded on "
           "`stream` (DLPack numbering: 1 legacy default, 2 per-thread default, else a "
           "cudaStream_t), default the stream a view of the loan was made for (loan.tensor(): "
           "torch's current stream), else the legacy default stream.")
      .def("send", &PyProducer::send, py::arg("obj"), py::arg("capture_time_ns") = py::none(),
           py::arg("metadata") = py::bytes(), py::arg("timeout") = py::none(),
           "loan + copy `obj` (numpy array, torch tensor, __dlpack__ or bytes-like object; "
           "strided ones are compacted to C order) + its dtype and shape + capture time + "
           "metadata + publish; returns the sequence. CUDA channels take CUDA tensors (a "
           "device-to-device copy on torch's current stream, the write-done event recorded "
           "there); host channels take host memory.")
      .def("reap_dead_readers", &PyProducer::reap_dead_readers,
           "Clear the slots and entries of dead readers now; returns how many were reaped.")
      .def("close", &PyProducer::close)
      .def_property_readonly("closed", &PyProducer::closed)
      .def_property_readonly("name", &PyProducer::name)
      .def_property_readonly("epoch", &PyProducer::epoch)
      .def_property_readonly("backend", &PyProducer::backend)
      .def_property_readonly("slots", [](PyProducer& p) { return p.config().slots; })
      .def_property_readonly("max_readers", [](PyProducer& p) { return p.config().max_readers; })
      .def_property_readonly("max_held", [](PyProducer& p) { return p.config().max_held; })
      .def_property_readonly("frame_bytes", [](PyProducer& p) { return p.config().frame_bytes; })
      .def_property_readonly("metadata_bytes",
                             [](PyProducer& p) { return p.config().metadata_bytes; })
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyProducer& p, const py::args&) {
             p.close();
             return false;
           })
      .def("__repr__", [](PyProducer& p) {
        return "<ipcring.Producer channel='" + p.name() + "'" + (p.closed() ? " closed>" : ">");
      });
}

}  // namespace ipcring::python
