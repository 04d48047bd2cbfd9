// module.cpp — the extension ipcring._ipcring: Producer, Loan, Reader, Frame, inspect and friends.
//
// Waiting calls (Reader.read, Producer.loan) release the GIL and wait in slices of kSignalSlice;
// between slices they take the GIL back and run PyErr_CheckSignals(), so Ctrl-C raises
// KeyboardInterrupt within about one slice. Other calls that may take a while (create, attach,
// inspect, remove, large copies) release the GIL for their duration.
//
// Release of frames never depends on the garbage collector: a Frame's slot is released when the
// last reference to its FrameHold goes (the Frame object, or a view); CPython's reference counting
// does that at once. Only a reference cycle defers it to the collector (documented, tested).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <thread>

#include "errors.hpp"
#include "state.hpp"
#include "tensors.hpp"
#include "views.hpp"

namespace py = pybind11;
using namespace pybind11::literals;

namespace ipcring::python {

namespace {

// Longest wait with the GIL released before signals are checked.
constexpr std::chrono::nanoseconds kSignalSlice = std::chrono::milliseconds(50);

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", s);
  return b;
}

// A timeout in seconds: None (or +inf) waits forever; 0 tries once.
struct Deadline {
  bool forever = true;
  std::uint64_t end_ns = 0;

  std::chrono::nanoseconds next_slice() const {
    if (forever) return kSignalSlice;
    const std::uint64_t now = now_ns();
    const std::uint64_t left = end_ns > now ? end_ns - now : 0;
    return std::min<std::chrono::nanoseconds>(kSignalSlice, std::chrono::nanoseconds(left));
  }
  bool passed() const { return !forever && now_ns() >= end_ns; }
};

Deadline make_deadline(const std::optional<double>& timeout, const std::string& channel,
                       const char* what) {
  Deadline d;
  if (!timeout || (std::isinf(*timeout) && *timeout > 0)) return d;
  const double s = *timeout;
  if (std::isnan(s) || s < 0) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + what +
                                           "(timeout=" + seconds_text(s) +
                                           "): timeout must be None or a number of seconds >= 0");
  }
  if (s > 1e9) return d;  // ~31 years: forever
  d.forever = false;
  d.end_ns = now_ns() + static_cast<std::uint64_t>(std::llround(s * 1e9));
  return d;
}

std::chrono::nanoseconds seconds_option(double s, const std::string& channel, const char* what) {
  if (std::isnan(s) || s < 0 || s > 1e6) {
    raise_errc(Errc::invalid_argument, channel_prefix(channel) + what + "=" + seconds_text(s) +
                                           ": must be a number of seconds in [0, 1e6]");
  }
  return std::chrono::nanoseconds(std::llround(s * 1e9));
}

void check_signals() {
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

std::uint32_t config_u32(std::int64_t v, const std::string& channel, const char* what) {
  if (v < 0 || v > std::numeric_limits<std::uint32_t>::max()) {
    raise_errc(Errc::invalid_config,
               channel_prefix(channel) + what + "=" + std::to_string(v) + " is out of range");
  }
  return static_cast<std::uint32_t>(v);
}

Backend parse_backend(const std::string& s, const std::string& channel) {
  if (s == "host") return Backend::host;
  if (s == "cuda") return Backend::cuda;
  raise_errc(Errc::invalid_config,
             channel_prefix(channel) + "backend='" + s + "': expected 'host' or 'cuda'");
}

const char* backend_name(Backend b) {
  return b == Backend::cuda ? "cuda" : "host";
}
const char* policy_name(ReadPolicy p) {
  return p == ReadPolicy::sequential ? "sequential" : "latest";
}

py::object shape_tuple(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  py::tuple out(t->ndim);
  for (std::uint8_t d = 0; d < t->ndim; ++d) out[d] = t->shape[d];
  return out;
}

py::object strides_tuple(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  py::tuple out(t->ndim);
  for (std::uint8_t d = 0; d < t->ndim; ++d) out[d] = t->stride(d);
  return out;
}

py::object dtype_name(const std::optional<TensorDesc>& t) {
  if (!t) return py::none();
  const DtypeInfo* d = dtype_info(t->dtype_code, t->dtype_bits);
  return py::str(d != nullptr ? std::string(d->name) : t->dtype_name());
}

// A C-contiguous read-only view of a bytes-like object. A strided one (a transposed numpy array)
// is an InvalidArgument: copy it with numpy.ascontiguousarray first.
class ContiguousBuffer {
 public:
  ContiguousBuffer(const py::handle& obj, const std::string& channel) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_C_CONTIGUOUS) != 0) {
      py::error_already_set original;
      raise_errc(Errc::invalid_argument,
                 channel_prefix(channel) + "data must be a C-contiguous bytes-like object (" +
                     original.what() + "); numpy.ascontiguousarray() makes one");
    }
  }
  ContiguousBuffer(const ContiguousBuffer&) = delete;
  ContiguousBuffer& operator=(const ContiguousBuffer&) = delete;
  ~ContiguousBuffer() { PyBuffer_Release(&view_); }
  const void* data() const { return view_.buf; }
  std::size_t size() const { return static_cast<std::size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

// Locks a state mutex; waits for it with the GIL released when another thread holds it (that
// thread may be blocked in a read slice and needs no GIL to finish it).
std::unique_lock<std::mutex> lock_state(std::mutex& m) {
  std::unique_lock lock(m, std::try_to_lock);
  if (!lock.owns_lock()) {
    py::gil_scoped_release nogil;
    lock.lock();
  }
  return lock;
}

// Loan.set_tensor / ndarray / tensor: describe the loan's bytes; returns the descriptor.
TensorDesc describe_loan(PyLoan& l, const py::handle& shape, const py::handle& dtype,
                         const py::object& strides, std::uint64_t byte_offset) {
  if (!l.state) {
    raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "describing a loan that was " +
                                           (l.published ? "published" : "discarded"));
  }
  const DtypeInfo& d = parse_dtype(dtype, l.channel);
  const std::vector<std::int64_t> dims = parse_shape(shape, l.channel);
  TensorDesc t = make_contiguous(d, dims);
  t.byte_offset = byte_offset;
  if (!strides.is_none()) {
    const std::vector<std::int64_t> st = parse_shape(strides, l.channel);
    if (st.size() != dims.size()) {
      raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + std::to_string(st.size()) +
                                             " strides for " + std::to_string(dims.size()) +
                                             " dimensions");
    }
    for (std::size_t k = 0; k < st.size(); ++k) t.strides[k] = st[k];
  }
  const auto span = tensor_span(t);
  if (!span || *span > l.capacity) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(l.channel) + "a " + std::string(d.name) + " tensor of shape " +
                   t.shape_text() +
                   (span ? " needs " + std::to_string(*span) + " bytes" : " is too large") +
                   "; the frame capacity is " + std::to_string(l.capacity) + " bytes");
  }
  auto lock = lock_state(l.state->producer->mutex);
  if (!l.state->loan.set_tensor(t)) {
    raise_errc(Errc::invalid_argument,
               channel_prefix(l.channel) + "set_tensor() refused (forked child?)");
  }
  l.tensor = t;
  return t;
}

// ---- Producer ------------------------------------------------------------------------------

class PyProducer {
 public:
  PyProducer(const std::string& name, std::int64_t slots, std::int64_t max_readers,
             std::int64_t max_held, std::int64_t frame_bytes, const std::string& backend,
             std::int64_t mode, int cuda_device, double reap_period, std::int64_t metadata_bytes)
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
    validate_name(name);
    state_->name = name;
    state_->backend = c.backend;
    state_->device = device_for_backend(c.backend, cuda_device, name);
    py::gil_scoped_release nogil;  // create may wait on a prober for a few milliseconds
    state_->producer.emplace(Producer::create(name, c));
  }

  PyLoan loan(const std::optional<double>& timeout) {
    ProducerState& st = *state_;
    const Deadline deadline = make_deadline(timeout, st.name, "loan");
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
          r = slice.count() > 0 ? st.producer->loan(slice) : st.producer->loan();
        }
      }
      if (closed) raise_closed();
      if (r) return make_loan(std::move(*r));
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

  std::uint64_t publish(PyLoan& l, const std::optional<std::int64_t>& nbytes) {
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
    std::uint64_t seq = 0;
    {
      auto lock = lock_state(st.mutex);
      if (!st.producer) raise_closed();
      // A failure (a fork child, the backend) is a Status, and the loan is kept.
      const Status s = st.producer->try_publish(l.state->loan, bytes, nullptr, &seq);
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
    const SendSource source(obj, state_->name);
    const std::size_t bytes = source.bytes();
    if (bytes > config().frame_bytes) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(state_->name) + "send() of a " + source.tensor().dtype_name() +
                     " array of shape " + source.tensor().shape_text() + " (" +
                     std::to_string(bytes) + " bytes) exceeds the frame capacity of " +
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
    PyLoan l = loan(timeout);
    if (metadata) set_metadata(l, *metadata);
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
    return publish(l, static_cast<std::int64_t>(bytes));
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
  const char* backend() const { return backend_name(state_->backend); }

  static void set_metadata(PyLoan& l, const py::bytes& metadata) {
    if (!l.state) {
      raise_errc(Errc::invalid_argument, channel_prefix(l.channel) +
                                             "set_metadata() on a loan "
                                             "that was published or discarded");
    }
    const std::string m = metadata;
    auto lock = lock_state(l.state->producer->mutex);
    if (m.size() > l.state->loan.metadata_capacity()) {
      raise_errc(Errc::invalid_argument, channel_prefix(l.channel) + "metadata of " +
                                             std::to_string(m.size()) +
                                             " bytes exceeds the channel's metadata_bytes = " +
                                             std::to_string(l.state->loan.metadata_capacity()));
    }
    if (!l.state->loan.set_metadata(
            std::span(reinterpret_cast<const std::byte*>(m.data()), m.size()))) {
      raise_errc(Errc::invalid_argument,
                 channel_prefix(l.channel) + "set_metadata() refused (forked child?)");
    }
  }

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

// ---- Reader --------------------------------------------------------------------------------

class PyReader {
 public:
  PyReader(const std::string& name, const std::string& policy, double spin, double producer_probe,
           double wait_for_channel)
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
    state_->name = name;
    attach_waiting(name, o, wait);
    Backend backend = Backend::host;
    {
      py::gil_scoped_release nogil;
      // The public Reader does not say which backend its channel uses; the snapshot does.
      backend = ipcring::inspect(name).backend;
    }
    state_->backend = backend;
    try {
      state_->device = device_for_backend(backend, 0, name);
    } catch (...) {
      py::gil_scoped_release nogil;
      state_->reader.reset();
      throw;
    }
    policy_ = o.policy;
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
  const char* policy() const { return policy_name(policy_); }
  const char* backend() const { return backend_name(state_->backend); }
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
                            "producer that takes the channel over");
      case Status::evicted:
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

// ---- inspect ---------------------------------------------------------------------------------

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

std::string frame_repr(const PyFrame& f) {
  std::string tensor;
  if (f.tensor) {
    tensor = " " + std::string(py::str(dtype_name(f.tensor))) + f.tensor->shape_text();
  }
  return "<ipcring.Frame channel='" + f.channel + "' sequence=" + std::to_string(f.sequence) +
         tensor + " size=" + std::to_string(f.size) + " slot=" + std::to_string(f.slot) +
         (f.hold ? " held>" : (f.watch.expired() ? " released>" : " released, views alive>"));
}

std::string loan_repr(const PyLoan& l) {
  return "<ipcring.Loan channel='" + l.channel + "' sequence=" + std::to_string(l.sequence) +
         " capacity=" + std::to_string(l.capacity) + " slot=" + std::to_string(l.slot) +
         (l.state ? ">" : (l.published ? " published>" : " discarded>"));
}

}  // namespace

}  // namespace ipcring::python

// ---- module ------------------------------------------------------------------------------------

PYBIND11_MODULE(_ipcring, m) {
  using namespace ipcring;
  using namespace ipcring::python;
  m.doc() = "ipcring: zero-copy frames between processes (compiled part; import ipcring)";
  init_errors(m);
  m.attr("__version__") = kVersion;

  py::class_<FrameView>(m, "_FrameView",
                        "Internal: what a frame's memoryview refers to; holds the frame's slot.")
      .def_property_readonly("sequence", [](const FrameView& v) { return v.sequence; })
      .def("__repr__", [](const FrameView& v) {
        return "<ipcring._FrameView sequence=" + std::to_string(v.sequence) + ">";
      });

  py::class_<LoanView>(m, "_LoanView",
                       "Internal: what a loan's memoryview refers to; counts as a live view.")
      .def_property_readonly("sequence", [](const LoanView& v) { return v.sequence; })
      .def("__repr__", [](const LoanView& v) {
        return "<ipcring._LoanView sequence=" + std::to_string(v.sequence) + ">";
      });

  // ---- Frame ----
  py::class_<PyFrame> frame(m, "Frame", py::buffer_protocol(), R"doc(
A published frame held by a Reader. Not constructible from Python: Reader.read()/try_read() make
them.

The slot stays held (the producer cannot reuse its buffer) until the last of these goes: this
object's reference (release(), the end of a `with` block, or the object dying), and every view
made from it (memoryview(frame), numpy.asarray(frame), torch.from_dlpack(frame)). The views are
read-only memory: writing through a DLPack tensor faults (DLPack 0.6 cannot mark it read-only).
)doc");
  install_frame_buffer(frame);
  frame.def_property_readonly("sequence", [](const PyFrame& f) { return f.sequence; })
      .def_property_readonly("size", [](const PyFrame& f) { return f.size; })
      .def_property_readonly("epoch", [](const PyFrame& f) { return f.epoch; })
      .def_property_readonly(
          "timestamp_ns", [](const PyFrame& f) { return f.timestamp_ns; },
          "CLOCK_MONOTONIC at publish (time.monotonic_ns() scale)")
      .def_property_readonly(
          "skipped", [](const PyFrame& f) { return f.skipped; },
          "frames skipped since the previous read (overruns for sequential)")
      .def_property_readonly("slot", [](const PyFrame& f) { return f.slot; })
      .def_property_readonly(
          "metadata", [](const PyFrame& f) { return py::bytes(f.metadata); },
          "the producer's metadata (bytes; empty when it set none)")
      .def_property_readonly(
          "shape", [](const PyFrame& f) { return shape_tuple(f.tensor); },
          "the producer's tensor shape (tuple), or None for a frame of plain bytes")
      .def_property_readonly(
          "dtype", [](const PyFrame& f) { return dtype_name(f.tensor); },
          "the element type's NumPy name ('uint8', 'float32', 'bfloat16' ...), or None")
      .def_property_readonly(
          "strides", [](const PyFrame& f) { return strides_tuple(f.tensor); },
          "strides in elements (tuple), or None")
      .def_property_readonly(
          "byte_offset",
          [](const PyFrame& f) {
            return f.tensor ? py::object(py::int_(f.tensor->byte_offset)) : py::none();
          },
          "offset of the tensor's first element in the frame, or None")
      .def_property_readonly(
          "tensor_invalid", [](const PyFrame& f) { return f.tensor_invalid; },
          "the producer's tensor descriptor did not describe this frame and was dropped")
      .def_property_readonly(
          "capture_time_ns",
          [](const PyFrame& f) {
            return f.capture_time_ns != 0 ? py::object(py::int_(f.capture_time_ns)) : py::none();
          },
          "the producer's capture time (send(capture_time_ns=...)), or None")
      .def_property_readonly("channel", [](const PyFrame& f) { return f.channel; })
      .def_property_readonly(
          "address", [](const PyFrame& f) { return reinterpret_cast<std::uintptr_t>(f.data); },
          "address of the payload in this process (compare with tensor.data_ptr())")
      .def_property_readonly(
          "held", [](const PyFrame& f) { return static_cast<bool>(f.hold); },
          "this object still holds its reference (not released)")
      .def_property_readonly(
          "slot_held", [](const PyFrame& f) { return !f.watch.expired(); },
          "the slot is still held, by this object or by views of it")
      .def(
          "release", [](PyFrame& f) { f.hold.reset(); },
          "Drop this object's hold on the slot (idempotent). Views made from the frame keep "
          "the slot held until they die.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyFrame& f, const py::args&) {
             f.hold.reset();
             return false;
           })
      .def("__dlpack__", &frame_dlpack, py::arg("stream") = py::none(),
           "DLPack capsule of a 1-D uint8 tensor of `size` bytes sharing the frame's memory.")
      .def("__dlpack_device__", [](const PyFrame& f) { return dlpack_device(f.device); })
      .def_property_readonly(
          "__cuda_array_interface__",
          [](const PyFrame& f) -> py::object {
            // Host frames have none (so consumers fall back to DLPack or the buffer protocol).
            if (f.device.kind == DeviceKind::cpu) {
              throw py::attribute_error("host frames have no __cuda_array_interface__");
            }
            raise_errc(Errc::unsupported, channel_prefix(f.channel) +
                                              "__cuda_array_interface__ is not implemented yet");
          })
      .def("__repr__", &frame_repr);

  // ---- Loan ----
  py::class_<PyLoan> loan(m, "Loan", py::buffer_protocol(), R"doc(
A slot the producer is filling: a writable buffer of `capacity` bytes (buffer protocol and
__dlpack__). Producer.publish(loan, nbytes) publishes it; discard() (or the end of a `with` block
without publish, or the object dying) returns the slot. publish() refuses with BufferError while
a view of the loan (memoryview, numpy array, tensor) is alive.
)doc");
  install_loan_buffer(loan);
  loan.def_property_readonly("capacity", [](const PyLoan& l) { return l.capacity; })
      .def_property_readonly(
          "sequence", [](const PyLoan& l) { return l.sequence; },
          "the sequence number publish() will give this frame")
      .def_property_readonly("slot", [](const PyLoan& l) { return l.slot; })
      .def_property_readonly("channel", [](const PyLoan& l) { return l.channel; })
      .def_property_readonly(
          "address", [](const PyLoan& l) { return reinterpret_cast<std::uintptr_t>(l.data); })
      .def_property_readonly("published", [](const PyLoan& l) { return l.published; })
      .def_property_readonly(
          "valid", [](const PyLoan& l) { return static_cast<bool>(l.state); },
          "not yet published or discarded")
      .def("set_metadata", &PyProducer::set_metadata, py::arg("metadata"),
           "Up to metadata_capacity bytes published with the frame (Frame.metadata).")
      .def_property_readonly(
          "metadata_capacity",
          [](PyLoan& l) -> std::size_t {
            if (!l.state) return 0;
            auto lock = lock_state(l.state->producer->mutex);
            return l.state->loan.metadata_capacity();
          },
          "the channel's metadata_bytes")
      .def(
          "set_tensor",
          [](PyLoan& l, const py::object& shape, const py::object& dtype, const py::object& strides,
             std::uint64_t byte_offset) { describe_loan(l, shape, dtype, strides, byte_offset); },
          py::arg("shape"), py::arg("dtype"), py::arg("strides") = py::none(),
          py::arg("byte_offset") = 0,
          "Describe the loan's bytes as a tensor (strides in elements; None: C order); "
          "publish() then defaults to the tensor's size.")
      .def(
          "set_capture_time_ns",
          [](PyLoan& l, std::int64_t ns) {
            if (!l.state || ns < 0) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "set_capture_time_ns(" + std::to_string(ns) +
                             "): " + (l.state ? "must be >= 0" : "the loan is gone"));
            }
            auto lock = lock_state(l.state->producer->mutex);
            l.state->loan.set_capture_time_ns(static_cast<std::uint64_t>(ns));
          },
          py::arg("ns"), "When the frame's content was captured (any clock; Frame.capture_time_ns)")
      .def(
          "ndarray",
          [](const py::object& self, const py::object& shape, const py::object& dtype) {
            auto& l = self.cast<PyLoan&>();
            const TensorDesc t = describe_loan(l, shape, dtype, py::none(), 0);
            const DtypeInfo* d = dtype_info(t.dtype_code, t.dtype_bits);
            if (d == nullptr || d->format == nullptr) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "numpy has no " + t.dtype_name() +
                             " arrays; use loan.tensor(shape, dtype) with torch");
            }
            const py::module_ np = py::module_::import("numpy");
            // A memoryview of the loan: counted as a live view, writable, zero-copy.
            const py::object bytes =
                py::reinterpret_steal<py::object>(PyMemoryView_FromObject(self.ptr()));
            if (!bytes) throw py::error_already_set();
            py::tuple dims(t.ndim);
            for (std::uint8_t k = 0; k < t.ndim; ++k) dims[k] = t.shape[k];
            return np
                .attr("frombuffer")(bytes, "dtype"_a = d->name,
                                    "count"_a = static_cast<std::int64_t>(t.elements()))
                .attr("reshape")(dims);
          },
          py::arg("shape"), py::arg("dtype"),
          "A writable numpy array of `shape` and `dtype` over the loan's memory (zero-copy); "
          "also describes the frame (set_tensor). Delete it before publish().")
      .def(
          "tensor",
          [](PyLoan& l, const py::object& shape, const py::object& dtype) {
            const TensorDesc t = describe_loan(l, shape, dtype, py::none(), 0);
            const py::object capsule = loan_dlpack_typed(l, t);
            return py::module_::import("torch.utils.dlpack").attr("from_dlpack")(capsule);
          },
          py::arg("shape"), py::arg("dtype"),
          "A writable torch tensor of `shape` and `dtype` (a torch.dtype or a name) over the "
          "loan's memory (zero-copy); also describes the frame. Delete it before publish().")
      .def(
          "write",
          [](PyLoan& l, const py::buffer& data, std::int64_t offset) {
            if (!l.state) {
              raise_errc(Errc::invalid_argument, channel_prefix(l.channel) +
                                                     "write() to a loan that was " +
                                                     (l.published ? "published" : "discarded"));
            }
            const ContiguousBuffer source(data, l.channel);
            const std::uint64_t bytes = source.size();
            if (offset < 0 || static_cast<std::uint64_t>(offset) > l.capacity ||
                bytes > l.capacity - static_cast<std::uint64_t>(offset)) {
              raise_errc(Errc::invalid_argument,
                         channel_prefix(l.channel) + "write of " + std::to_string(bytes) +
                             " bytes at offset " + std::to_string(offset) +
                             " exceeds the capacity of " + std::to_string(l.capacity));
            }
            {
              py::gil_scoped_release nogil;
              std::memcpy(l.data + offset, source.data(), bytes);
            }
            return static_cast<std::uint64_t>(offset) + bytes;
          },
          py::arg("data"), py::arg("offset") = 0,
          "Copy a bytes-like object in at `offset`; returns offset + its length.")
      .def(
          "discard", [](PyLoan& l) { l.state.reset(); },
          "Return the slot without publishing (idempotent; views keep it until they die).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](PyLoan& l, const py::args&) {
             l.state.reset();
             return false;
           })
      .def("__dlpack__", &loan_dlpack, py::arg("stream") = py::none(),
           "DLPack capsule of a writable 1-D uint8 tensor of `capacity` bytes.")
      .def("__dlpack_device__", [](const PyLoan& l) { return dlpack_device(l.device); })
      .def("__repr__", &loan_repr);

  // ---- Producer ----
  py::class_<PyProducer>(m, "Producer", R"doc(
Producer(name, slots=8, max_readers=4, max_held=1, frame_bytes=0, backend='host', mode=0o600,
         cuda_device=0, reap_period=0.1, metadata_bytes=256)

Creates the channel `name` (or takes over one whose producer died) with `slots` frame buffers of
`frame_bytes` bytes each. With slots >= max_readers*max_held + 2, loan() never fails. close() (or
the end of a `with` block) marks the channel closed, wakes readers (they get ProducerGone) and
removes its shared-memory names.
)doc")
      .def(py::init<const std::string&, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                    const std::string&, std::int64_t, int, double, std::int64_t>(),
           py::arg("name"), py::arg("slots") = 8, py::arg("max_readers") = 4,
           py::arg("max_held") = 1, py::arg("frame_bytes") = 0, py::arg("backend") = "host",
           py::arg("mode") = 0600, py::arg("cuda_device") = 0, py::arg("reap_period") = 0.1,
           py::arg("metadata_bytes") = 256)
      .def("loan", &PyProducer::loan, py::arg("timeout") = py::none(),
           "A free slot to fill. timeout: None waits until one is free (Ctrl-C interrupts), 0 "
           "tries once, else seconds. Raises NoFreeSlot, LoanOutstanding.")
      .def("publish", &PyProducer::publish, py::arg("loan"), py::arg("nbytes") = py::none(),
           "Publish the loan's first nbytes (default: capacity); returns the sequence number.")
      .def("send", &PyProducer::send, py::arg("obj"), py::arg("capture_time_ns") = py::none(),
           py::arg("metadata") = py::bytes(), py::arg("timeout") = py::none(),
           "loan + copy `obj` (numpy array, torch tensor, __dlpack__ or bytes-like object; "
           "strided ones are compacted to C order) + its dtype and shape + capture time + "
           "metadata + publish; returns the sequence.")
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

  // ---- Reader ----
  py::class_<PyReader>(m, "Reader", R"doc(
Reader(name, policy='latest', spin=0.0, producer_probe=0.1, wait_for_channel=0.0)

Attaches to the channel `name`. wait_for_channel: seconds to wait for the channel to appear (its
producer not started yet); 0 raises NotFound at once. policy 'latest' returns the newest
frame not yet read; 'sequential' every frame in order (frames lost to the producer lapping the
reader are counted in overruns and Frame.skipped). spin: seconds read() polls before sleeping.
)doc")
      .def(py::init<const std::string&, const std::string&, double, double, double>(),
           py::arg("name"), py::arg("policy") = "latest", py::arg("spin") = 0.0,
           py::arg("producer_probe") = 0.1, py::arg("wait_for_channel") = 0.0)
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
      .def_property_readonly("index", [](PyReader& r) { return r.open().index(); })
      .def_property_readonly(
          "held", [](PyReader& r) { return r.open().held(); },
          "frames held (including released frames whose views live)")
      .def_property_readonly("overruns", [](PyReader& r) { return r.open().overruns(); })
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

  // ---- functions ----
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

  // The public classes are re-exported by the package: show them as ipcring.X.
  for (const char* name : {"Frame", "Loan", "Producer", "Reader"}) {
    m.attr(name).attr("__module__") = "ipcring";
  }
}
