// stream.cpp — ringdump echo, hz and bw (see stream.hpp).
//
// Rates and bandwidth are measured from the frames' publish timestamps (Frame::timestamp_ns,
// the producer's CLOCK_MONOTONIC at publish), not from when this reader got them, so a slow or
// descheduled ringdump does not distort them. hz and bw read sequentially: an interval that
// spans frames this reader missed (overruns) counts as that many intervals of equal length.
#include "ringdump/stream.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "npy.hpp"
#include "signals.hpp"
#include "wait.hpp"

namespace ringdump::stream {

namespace {

using Json = nlohmann::ordered_json;
using namespace std::chrono;

using ipcring::tools::kExitError;
using ipcring::tools::kExitOk;

using ipcring::tools::g_stop;
using ipcring::tools::install_stop_handlers;

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count());
}

std::string fmt(const char* format, double v) {
  char b[64];
  std::snprintf(b, sizeof b, format, v);
  return b;
}

std::string duration_text(double ns) {
  if (ns < 1e3) return fmt("%.0f ns", ns);
  if (ns < 1e6) return fmt("%.1f us", ns / 1e3);
  if (ns < 1e9) return fmt("%.2f ms", ns / 1e6);
  return fmt("%.3f s", ns / 1e9);
}

std::string bytes_rate_text(double bps) {
  if (bps < 1e3) return fmt("%.0f B/s", bps);
  if (bps < 1e6) return fmt("%.2f KB/s", bps / 1e3);
  if (bps < 1e9) return fmt("%.2f MB/s", bps / 1e6);
  return fmt("%.2f GB/s", bps / 1e9);
}

// nullopt: stopped (SIGINT/SIGTERM) while waiting for the channel, which ends the command with
// exit 0 as a stop does later. Reads as an observer (docs/observers.md): no reader entry is taken
// and no slot is held, so the channel's readers and producer are not disturbed and a channel whose
// entries are all taken can still be watched. Observers copy frames with the CPU: a CUDA channel
// is read as an ordinary reader instead, and ringdump says so.
std::optional<ipcring::Reader> attach(const Commands& c) {
  ipcring::ReaderOptions options;
  options.policy = c.sequential ? ipcring::ReadPolicy::sequential : ipcring::ReadPolicy::latest;
  options.observer = true;
  try {
    return ipcring::tools::attach_waiting("ringdump", c.name, options, c.wait_s);
  } catch (const ipcring::Error& e) {
    if (e.code() != ipcring::Errc::unsupported) throw;
    std::fprintf(stderr, "ringdump: %s; reading as a reader (it takes a reader entry)\n", e.what());
  }
  options.observer = false;
  return ipcring::tools::attach_waiting("ringdump", c.name, options, c.wait_s);
}

// ---- value summary ---------------------------------------------------------------------------

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h >> 15) & 1U;
  const std::uint32_t exponent = (h >> 10) & 0x1fU;
  const std::uint32_t mantissa = h & 0x3ffU;
  float v = 0;
  if (exponent == 0) {
    v = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    v = mantissa == 0 ? std::numeric_limits<float>::infinity()
                      : std::numeric_limits<float>::quiet_NaN();
  } else {
    v = std::ldexp(static_cast<float>(mantissa | 0x400U), static_cast<int>(exponent) - 25);
  }
  return sign != 0 ? -v : v;
}

// Element at `p` as a double; false for types without one value (complex).
bool element_value(const std::byte* p, std::uint8_t code, std::uint8_t bits, double& out) {
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (code) {
    case 0:  // int
      if (bits == 8) out = load(std::int8_t{});
      if (bits == 16) out = load(std::int16_t{});
      if (bits == 32) out = load(std::int32_t{});
      if (bits == 64) out = static_cast<double>(load(std::int64_t{}));
      return true;
    case 1:  // uint
      if (bits == 8) out = load(std::uint8_t{});
      if (bits == 16) out = load(std::uint16_t{});
      if (bits == 32) out = load(std::uint32_t{});
      if (bits == 64) out = static_cast<double>(load(std::uint64_t{}));
      return true;
    case 2:  // float
      if (bits == 16) out = half_to_float(load(std::uint16_t{}));
      if (bits == 32) out = load(float{});
      if (bits == 64) out = load(double{});
      return true;
    case 4: {  // bfloat16: the high half of a float32
      const std::uint32_t w = std::uint32_t{load(std::uint16_t{})} << 16;
      float f = 0;
      std::memcpy(&f, &w, sizeof f);
      out = f;
      return true;
    }
    case 6:  // bool
      out = load(std::uint8_t{}) != 0 ? 1.0 : 0.0;
      return true;
    default:
      return false;
  }
}

struct Summary {
  std::uint64_t count = 0;  // elements summarised
  std::uint64_t total = 0;  // elements in the frame
  double min = 0, max = 0, mean = 0;
  bool available = false;
  std::string why;  // when not available
};

// The first `limit` elements in C order (strides followed), or the first bytes of a frame without
// a tensor. Reads only inside the frame: the descriptor was validated by the reader.
Summary summarise(const ipcring::Frame& f, bool device_memory, std::uint64_t limit) {
  Summary s;
  if (device_memory) {
    s.why = "device memory (not read by ringdump)";
    return s;
  }
  ipcring::TensorDesc t;
  if (const auto desc = f.tensor()) {
    t = *desc;
  } else {
    t = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8,
                                        {static_cast<std::int64_t>(f.size())});
  }
  s.total = t.elements();
  double probe = 0;
  if (!element_value(f.data(), t.dtype_code, t.dtype_bits, probe) && s.total != 0) {
    s.why = t.dtype_name() + " values are not summarised";
    return s;
  }
  std::int64_t index[ipcring::kMaxTensorDims] = {};
  const auto item = static_cast<std::int64_t>(t.element_bytes());
  double sum = 0;
  for (std::uint64_t k = 0; k < s.total && k < limit; ++k) {
    std::int64_t at = static_cast<std::int64_t>(t.byte_offset);
    for (std::uint8_t d = 0; d < t.ndim; ++d) at += index[d] * t.stride(d) * item;
    double v = 0;
    element_value(f.data() + at, t.dtype_code, t.dtype_bits, v);
    if (s.count == 0 || v < s.min) s.min = v;
    if (s.count == 0 || v > s.max) s.max = v;
    sum += v;
    ++s.count;
    for (std::uint8_t d = t.ndim; d-- > 0;) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
  s.available = s.count != 0;
  if (s.available) s.mean = sum / static_cast<double>(s.count);
  if (!s.available) s.why = "no elements";
  return s;
}

// ---- echo ------------------------------------------------------------------------------------

struct Echoed {
  std::uint64_t sequence = 0, epoch = 0, bytes = 0, timestamp_ns = 0, capture_time_ns = 0;
  std::uint64_t skipped = 0, delay_ns = 0;
  std::uint64_t observer_dropped = 0;  // copies dropped so far by the observer's re-check
  std::uint32_t slot = 0;
  std::optional<ipcring::TensorDesc> tensor;
  bool tensor_invalid = false;
  std::string metadata;
  Summary summary;
  std::string saved;  // --save: the file written, or why none was
};

// --save: the frame's tensor in C order as a .npy file, or its bytes as a .bin file (no tensor,
// or a dtype .npy cannot say); copied out of the frame before it is released, written after.
struct ToSave {
  std::optional<ipcring::TensorDesc> npy;  // C-order, byte_offset 0
  std::vector<std::byte> bytes;
  std::string why_not;  // not empty: nothing to write
};

ToSave copy_for_saving(const ipcring::Frame& f, bool device_memory) {
  ToSave out;
  if (device_memory) {
    out.why_not = "not saved: device memory (not read by ringdump)";
    return out;
  }
  const auto t = f.tensor();
  if (!t || ipcring::tools::npy::descr_of(*t).empty()) {
    out.bytes.assign(f.data(), f.data() + f.size());
    return out;
  }
  ipcring::TensorDesc c = *t;
  c.byte_offset = 0;
  for (auto& stride : c.strides) stride = 0;  // C order
  const std::size_t item = t->element_bytes();
  const std::uint64_t elements = t->elements();
  out.bytes.resize(elements * item);
  std::int64_t index[ipcring::kMaxTensorDims] = {};
  for (std::uint64_t k = 0; k < elements; ++k) {  // in C order, through the strides
    std::int64_t at = static_cast<std::int64_t>(t->byte_offset);
    for (std::uint8_t d = 0; d < t->ndim; ++d) {
      at += index[d] * t->stride(d) * static_cast<std::int64_t>(item);
    }
    std::memcpy(out.bytes.data() + k * item, f.data() + at, item);
    for (std::uint8_t d = t->ndim; d-- > 0;) {
      if (++index[d] < t->shape[d]) break;
      index[d] = 0;
    }
  }
  out.npy = c;
  return out;
}

std::string save(const std::string& dir, std::uint64_t epoch, std::uint64_t sequence,
                 const ToSave& s) {
  if (!s.why_not.empty()) return s.why_not;
  char leaf[64];
  std::snprintf(leaf, sizeof leaf, "epoch%llu-frame%09llu.%s",
                static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(sequence),
                s.npy ? "npy" : "bin");
  const std::string path = dir + "/" + leaf;
  if (s.npy) {
    ipcring::tools::npy::write_file(
        path, ipcring::tools::npy::serialise(*s.npy, s.bytes.data(), s.bytes.size()));
  } else {
    ipcring::tools::npy::write_file(path, s.bytes);
  }
  return path;
}

bool printable(const std::string& m) {
  return std::all_of(m.begin(), m.end(), [](char c) {
    const auto u = static_cast<unsigned char>(c);
    return (u >= 0x20 && u < 0x7f) || c == '\n' || c == '\t';
  });
}

std::string hex_bytes(const std::string& m) {
  std::string out;
  char b[4];
  for (const char c : m) {
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(c));
    out += b;
  }
  return out;
}

Json tensor_json(const ipcring::TensorDesc& t) {
  Json j;
  j["dtype"] = t.dtype_name();
  j["dtype_code"] = t.dtype_code;
  j["dtype_bits"] = t.dtype_bits;
  Json shape = Json::array();
  Json strides = Json::array();
  for (std::uint8_t d = 0; d < t.ndim; ++d) {
    shape.push_back(t.shape[d]);
    strides.push_back(t.stride(d));
  }
  j["shape"] = shape;
  j["strides"] = strides;
  j["contiguous"] = t.is_contiguous();
  j["byte_offset"] = t.byte_offset;
  return j;
}

void print_echo(const Echoed& e, bool json) {
  const bool text = printable(e.metadata);
  if (json) {
    Json j;
    j["sequence"] = e.sequence;
    j["epoch"] = e.epoch;
    j["slot"] = e.slot;
    j["bytes"] = e.bytes;
    j["skipped"] = e.skipped;
    j["timestamp_ns"] = e.timestamp_ns;
    j["capture_time_ns"] = e.capture_time_ns != 0 ? Json(e.capture_time_ns) : Json(nullptr);
    j["delay_ns"] = e.delay_ns;
    j["tensor"] = e.tensor ? tensor_json(*e.tensor) : Json(nullptr);
    j["tensor_invalid"] = e.tensor_invalid;
    j["observer_dropped"] = e.observer_dropped;
    Json m;
    m["bytes"] = e.metadata.size();
    if (text) {
      m["text"] = e.metadata;
    } else {
      m["hex"] = hex_bytes(e.metadata);
    }
    j["metadata"] = m;
    Json s;
    if (e.summary.available) {
      s["count"] = e.summary.count;
      s["of"] = e.summary.total;
      s["min"] = e.summary.min;
      s["max"] = e.summary.max;
      s["mean"] = e.summary.mean;
    } else {
      s["unavailable"] = e.summary.why;
    }
    j["values"] = s;
    if (!e.saved.empty()) j["saved"] = e.saved;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("--- frame %llu  epoch %llu  slot %u  %llu bytes  skipped %llu",
                static_cast<unsigned long long>(e.sequence),
                static_cast<unsigned long long>(e.epoch), e.slot,
                static_cast<unsigned long long>(e.bytes),
                static_cast<unsigned long long>(e.skipped));
    // Copies the producer overwrote while ringdump copied them (never shown torn: dropped).
    if (e.observer_dropped != 0) {
      std::printf("  dropped %llu", static_cast<unsigned long long>(e.observer_dropped));
    }
    std::printf("\n");
    std::printf("  published  %llu ns (monotonic), read %s later\n",
                static_cast<unsigned long long>(e.timestamp_ns),
                duration_text(static_cast<double>(e.delay_ns)).c_str());
    if (e.capture_time_ns != 0) {
      std::printf("  captured   %llu ns\n", static_cast<unsigned long long>(e.capture_time_ns));
    }
    if (e.tensor) {
      std::printf("  tensor     %s %s%s", e.tensor->dtype_name().c_str(),
                  e.tensor->shape_text().c_str(), e.tensor->is_contiguous() ? "" : " strides (");
      if (!e.tensor->is_contiguous()) {
        for (std::uint8_t d = 0; d < e.tensor->ndim; ++d) {
          std::printf("%s%lld", d == 0 ? "" : ", ", static_cast<long long>(e.tensor->strides[d]));
        }
        std::printf(")");
      }
      if (e.tensor->byte_offset != 0) {
        std::printf(" offset %llu", static_cast<unsigned long long>(e.tensor->byte_offset));
      }
      std::printf("\n");
    } else {
      std::printf("  tensor     %s\n",
                  e.tensor_invalid ? "INVALID descriptor (dropped by the reader)" : "none (bytes)");
    }
    if (e.metadata.empty()) {
      std::printf("  metadata   none\n");
    } else if (text) {
      std::printf("  metadata   %zu bytes: \"%s\"\n", e.metadata.size(), e.metadata.c_str());
    } else {
      std::printf("  metadata   %zu bytes: %s\n", e.metadata.size(), hex_bytes(e.metadata).c_str());
    }
    if (e.summary.available) {
      std::printf("  values     first %llu of %llu: min %g  max %g  mean %g\n",
                  static_cast<unsigned long long>(e.summary.count),
                  static_cast<unsigned long long>(e.summary.total), e.summary.min, e.summary.max,
                  e.summary.mean);
    } else {
      std::printf("  values     %s\n", e.summary.why.c_str());
    }
    if (!e.saved.empty()) std::printf("  saved      %s\n", e.saved.c_str());
  }
  std::fflush(stdout);
}

int cmd_echo(const Commands& c) {
  std::optional<ipcring::Reader> attached = attach(c);
  if (!attached) return kExitOk;
  ipcring::Reader& reader = *attached;
  const bool device = reader.backend() == ipcring::Backend::cuda;
  std::uint64_t printed = 0;
  while (g_stop == 0 && (c.count == 0 || printed < c.count)) {
    auto f = reader.read(milliseconds(100));
    if (!f) {
      if (f.status() == ipcring::Status::producer_gone) {
        std::fprintf(stderr, "ringdump: %s: the producer is gone; waiting for a new one\n",
                     c.name.c_str());
        continue;
      }
      if (f.status() == ipcring::Status::timeout || f.status() == ipcring::Status::no_frame) {
        continue;
      }
      std::fprintf(stderr, "ringdump: %s: read failed: %s\n", c.name.c_str(),
                   ipcring::to_string(f.status()));
      return kExitError;
    }
    // Copy out what is printed, then release before printing.
    Echoed e;
    const std::uint64_t got = now_ns();
    e.sequence = f->sequence();
    e.epoch = f->epoch();
    e.slot = f->slot();
    e.bytes = f->size();
    e.skipped = f->skipped();
    e.observer_dropped = reader.observer_dropped();
    e.timestamp_ns = f->timestamp_ns();
    e.delay_ns = got > e.timestamp_ns ? got - e.timestamp_ns : 0;
    e.capture_time_ns = f->capture_time_ns();
    e.tensor = f->tensor();
    e.tensor_invalid = f->tensor_invalid();
    const auto m = f->metadata();
    e.metadata.assign(reinterpret_cast<const char*>(m.data()), m.size());
    e.summary = summarise(*f, device, c.elements);
    ToSave to_save;
    if (!c.save_dir.empty()) to_save = copy_for_saving(*f, device);
    f->release();
    if (!c.save_dir.empty()) e.saved = save(c.save_dir, e.epoch, e.sequence, to_save);
    print_echo(e, c.json);
    ++printed;
  }
  return kExitOk;
}

// ---- hz and bw -------------------------------------------------------------------------------

struct Sample {
  std::uint64_t sequence;
  std::uint64_t timestamp_ns;
  std::uint64_t bytes;
};

struct WindowStats {
  std::uint64_t intervals = 0;  // published intervals covered
  double rate_hz = 0;
  double min_ns = 0, max_ns = 0, std_dev_ns = 0, mean_ns = 0;
  double mean_bytes = 0;
  std::uint64_t min_bytes = 0, max_bytes = 0;
  double bytes_per_s = 0;
};

WindowStats stats_of(const std::deque<Sample>& w) {
  WindowStats s;
  if (w.size() < 2) return s;
  const std::uint64_t seqs = w.back().sequence - w.front().sequence;
  const double span = static_cast<double>(w.back().timestamp_ns - w.front().timestamp_ns);
  if (seqs == 0 || span <= 0) return s;
  s.intervals = seqs;
  s.mean_ns = span / static_cast<double>(seqs);
  s.rate_hz = 1e9 / s.mean_ns;
  // Per-interval spread: an interval over k published frames counts as k intervals of 1/k each.
  double sq = 0;
  bool first = true;
  for (std::size_t i = 1; i < w.size(); ++i) {
    const auto k = static_cast<double>(w[i].sequence - w[i - 1].sequence);
    if (k <= 0) continue;
    const double each = static_cast<double>(w[i].timestamp_ns - w[i - 1].timestamp_ns) / k;
    if (first || each < s.min_ns) s.min_ns = each;
    if (first || each > s.max_ns) s.max_ns = each;
    first = false;
    sq += k * (each - s.mean_ns) * (each - s.mean_ns);
  }
  s.std_dev_ns = std::sqrt(sq / static_cast<double>(seqs));
  double bytes = 0;
  s.min_bytes = w[1].bytes;
  for (std::size_t i = 1; i < w.size(); ++i) {
    bytes += static_cast<double>(w[i].bytes);
    s.min_bytes = std::min(s.min_bytes, w[i].bytes);
    s.max_bytes = std::max(s.max_bytes, w[i].bytes);
  }
  s.mean_bytes = bytes / static_cast<double>(w.size() - 1);
  s.bytes_per_s = s.mean_bytes * s.rate_hz;
  return s;
}

// "  dropped N" when the observer's re-check dropped copies so far (the rate is still the
// publisher's: it is measured from publish timestamps), else nothing.
std::string dropped_text(const ipcring::Reader& reader) {
  const std::uint64_t n = reader.observer_dropped();
  if (n == 0) return std::string();
  char b[48];
  std::snprintf(b, sizeof b, "  dropped %llu", static_cast<unsigned long long>(n));
  return b;
}

int cmd_rate(const Commands& c, bool bandwidth) {
  Commands sequential = c;
  sequential.sequential = true;
  std::optional<ipcring::Reader> attached = attach(sequential);
  if (!attached) return kExitOk;
  ipcring::Reader& reader = *attached;
  std::deque<Sample> window;
  std::uint64_t frames = 0;
  std::uint64_t reports = 0;
  const auto interval_ns = static_cast<std::uint64_t>(c.interval_s * 1e9);
  std::uint64_t next_report = now_ns() + interval_ns;
  while (g_stop == 0 && (c.count == 0 || reports < c.count)) {
    auto f = reader.read(milliseconds(50));
    if (f) {
      window.push_back({f->sequence(), f->timestamp_ns(), f->size()});
      f->release();
      ++frames;
      while (window.size() > c.window + 1) window.pop_front();
    } else if (f.status() == ipcring::Status::producer_gone) {
      window.clear();  // a new producer's frames are another series
    } else if (f.status() != ipcring::Status::timeout && f.status() != ipcring::Status::no_frame) {
      std::fprintf(stderr, "ringdump: %s: read failed: %s\n", c.name.c_str(),
                   ipcring::to_string(f.status()));
      return kExitError;
    }
    if (now_ns() < next_report) continue;
    next_report += interval_ns;
    const WindowStats s = stats_of(window);
    ++reports;
    if (c.json) {
      Json j;
      j["name"] = c.name;
      j["frames"] = frames;
      j["overruns"] = reader.overruns();
      j["observer_dropped"] = reader.observer_dropped();
      j["window_frames"] = s.intervals;
      j["rate_hz"] = s.intervals != 0 ? Json(s.rate_hz) : Json(nullptr);
      j["min_interval_ns"] = s.intervals != 0 ? Json(s.min_ns) : Json(nullptr);
      j["max_interval_ns"] = s.intervals != 0 ? Json(s.max_ns) : Json(nullptr);
      j["std_dev_ns"] = s.intervals != 0 ? Json(s.std_dev_ns) : Json(nullptr);
      if (bandwidth) {
        j["bytes_per_s"] = s.intervals != 0 ? Json(s.bytes_per_s) : Json(nullptr);
        j["mean_bytes"] = s.intervals != 0 ? Json(s.mean_bytes) : Json(nullptr);
        j["min_bytes"] = s.intervals != 0 ? Json(s.min_bytes) : Json(nullptr);
        j["max_bytes"] = s.intervals != 0 ? Json(s.max_bytes) : Json(nullptr);
      }
      std::printf("%s\n", j.dump().c_str());
    } else if (s.intervals == 0) {
      std::printf("%s: no new frames%s\n", c.name.c_str(), dropped_text(reader).c_str());
    } else if (bandwidth) {
      std::printf("%s: %s from %llu frames  mean %.0f B  min %llu B  max %llu B%s\n",
                  c.name.c_str(), bytes_rate_text(s.bytes_per_s).c_str(),
                  static_cast<unsigned long long>(s.intervals), s.mean_bytes,
                  static_cast<unsigned long long>(s.min_bytes),
                  static_cast<unsigned long long>(s.max_bytes), dropped_text(reader).c_str());
    } else {
      std::printf("%s: average rate %.3f Hz  min %s  max %s  std dev %s  window %llu%s\n",
                  c.name.c_str(), s.rate_hz, duration_text(s.min_ns).c_str(),
                  duration_text(s.max_ns).c_str(), duration_text(s.std_dev_ns).c_str(),
                  static_cast<unsigned long long>(s.intervals), dropped_text(reader).c_str());
    }
    std::fflush(stdout);
  }
  return kExitOk;
}

}  // namespace

void add(CLI::App& app, Commands& c) {
  c.echo = app.add_subcommand(
      "echo", "Print each new frame: header, tensor, metadata, a summary of its values");
  c.echo->add_option("name", c.name, "Channel name")->required();
  c.echo->add_option("--count", c.count, "Stop after N frames (0: until Ctrl-C)")
      ->check(ipcring::tools::count());
  c.echo->add_flag("--sequential", c.sequential,
                   "Every frame in order (default: the newest frame each time)");
  c.echo->add_option("--elements", c.elements, "Elements summarised per frame")
      ->check(ipcring::tools::count())
      ->capture_default_str();
  ipcring::tools::add_wait_option(c.echo, c.wait_s);
  c.echo
      ->add_option("--save", c.save_dir,
                   "Write each frame printed into DIR: its tensor in C order as a .npy file "
                   "(epochE-frameN.npy), or its bytes as a .bin file (no tensor)")
      ->check(CLI::ExistingDirectory);
  c.echo->add_flag("--json", c.json, "One JSON object per frame, one per line");

  c.hz = app.add_subcommand("hz", "Publication rate with min/max/std-dev of the intervals");
  c.bw = app.add_subcommand("bw", "Bandwidth: bytes per second of published frames");
  for (CLI::App* sub : {c.hz, c.bw}) {
    sub->add_option("name", c.name, "Channel name")->required();
    sub->add_option("--window", c.window, "Intervals in the window")
        ->check(ipcring::tools::count(1, 1000000))
        ->capture_default_str();
    sub->add_option("--interval", c.interval_s, "Seconds between reports")
        ->check(ipcring::tools::positive(86400))
        ->capture_default_str();
    sub->add_option("--count", c.count, "Stop after N reports (0: until Ctrl-C)")
        ->check(ipcring::tools::count());
    ipcring::tools::add_wait_option(sub, c.wait_s);
    sub->add_flag("--json", c.json, "One JSON object per report, one per line");
  }
}

std::optional<int> run(const Commands& c) {
  if (c.echo == nullptr) return std::nullopt;
  const bool echo = c.echo->parsed();
  const bool hz = c.hz->parsed();
  const bool bw = c.bw->parsed();
  if (!echo && !hz && !bw) return std::nullopt;
  install_stop_handlers();
  if (echo) return cmd_echo(c);
  return cmd_rate(c, bw);
}

}  // namespace ringdump::stream
