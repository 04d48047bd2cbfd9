// ringpub — publishes frames whose payload is derived from their sequence number, or with
// --from, the arrays of .npy files and the bytes of raw files (one file, or a directory's files in
// name order, over and over), typed from the .npy header or --dtype/--shape. With --backend cuda,
// cuda_legacy or cuda_vmm it makes a CUDA channel and publishes its frames unwritten (described,
// sequenced, timed): the channel's path, mapping and flow for readers to try.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "ipcring/ipcring.hpp"
#include "npy.hpp"
#include "pattern.hpp"
#include "signals.hpp"

using namespace std::chrono;

namespace {

// One frame's worth of --from: the bytes, their tensor, the file's name (as the frame's metadata).
struct Source {
  std::string name;
  ipcring::TensorDesc tensor;
  std::vector<std::byte> data;
};

// "480,640,3" or "(480, 640, 3)"; throws naming the option and the text.
std::vector<std::int64_t> parse_shape(const std::string& text) {
  std::vector<std::int64_t> dims;
  std::string cleaned;
  for (const char c : text) {
    if (c != '(' && c != ')' && c != ' ') cleaned += c;
  }
  std::stringstream in(cleaned);
  std::string part;
  while (std::getline(in, part, ',')) {
    std::uint64_t v = 0;
    if (part.empty()) continue;
    if (!ipcring::tools::parse_whole(part, v) || v > (std::uint64_t{1} << 40)) {
      throw CLI::ValidationError("--shape", "'" + text + "' is not a shape such as 480,640,3");
    }
    dims.push_back(static_cast<std::int64_t>(v));
  }
  if (dims.empty() || dims.size() > ipcring::kMaxTensorDims) {
    throw CLI::ValidationError(
        "--shape", "'" + text + "' has " + std::to_string(dims.size()) + " dimensions (1 to 8)");
  }
  return dims;
}

// The files of --from: the file itself, or a directory's regular files (not hidden) by name.
std::vector<Source> load_sources(const std::string& from, const std::string& dtype,
                                 const std::string& shape) {
  namespace fs = std::filesystem;
  std::vector<std::string> paths;
  std::error_code ec;
  if (fs::is_directory(from, ec)) {
    for (const auto& entry : fs::directory_iterator(from, ec)) {
      const std::string leaf = entry.path().filename().string();
      if (entry.is_regular_file() && !leaf.empty() && leaf[0] != '.') {
        paths.push_back(entry.path().string());
      }
    }
    std::sort(paths.begin(), paths.end());
    if (paths.empty()) throw std::runtime_error("--from " + from + ": the directory has no files");
  } else if (fs::is_regular_file(from, ec)) {
    paths.push_back(from);
  } else {
    throw std::runtime_error("--from " + from + ": no such file or directory");
  }
  std::vector<Source> sources;
  for (const auto& path : paths) {
    Source s;
    s.name = fs::path(path).filename().string();
    std::vector<std::byte> bytes = ipcring::tools::npy::read_file(path);
    if (path.size() > 4 && path.compare(path.size() - 4, 4, ".npy") == 0) {
      auto array = ipcring::tools::npy::parse(bytes, path);
      s.tensor = array.tensor;
      s.data = std::move(array.data);
    } else {
      // Raw bytes: --dtype (default uint8) and --shape (default: as many elements as fit).
      const auto code = ipcring::tools::npy::dtype_of(dtype == "uint8"     ? "|u1"
                                                      : dtype == "int8"    ? "|i1"
                                                      : dtype == "bool"    ? "|b1"
                                                      : dtype == "uint16"  ? "<u2"
                                                      : dtype == "int16"   ? "<i2"
                                                      : dtype == "float16" ? "<f2"
                                                      : dtype == "uint32"  ? "<u4"
                                                      : dtype == "int32"   ? "<i4"
                                                      : dtype == "float32" ? "<f4"
                                                      : dtype == "uint64"  ? "<u8"
                                                      : dtype == "int64"   ? "<i8"
                                                      : dtype == "float64" ? "<f8"
                                                                           : "");
      if (!code) throw std::runtime_error("--dtype " + dtype + ": not a dtype ringpub knows");
      const std::size_t item = code->second / 8U;
      std::vector<std::int64_t> dims;
      if (shape.empty()) {
        if (bytes.size() % item != 0) {
          throw std::runtime_error(path + ": " + std::to_string(bytes.size()) +
                                   " bytes are not whole " + dtype + " elements");
        }
        dims.push_back(static_cast<std::int64_t>(bytes.size() / item));
      } else {
        dims = parse_shape(shape);
      }
      s.tensor.dtype_code = static_cast<std::uint8_t>(code->first);
      s.tensor.dtype_bits = code->second;
      s.tensor.ndim = static_cast<std::uint8_t>(dims.size());
      for (std::size_t k = 0; k < dims.size(); ++k) s.tensor.shape[k] = dims[k];
      const std::uint64_t want = s.tensor.elements() * item;
      if (want != bytes.size()) {
        throw std::runtime_error(path + ": " + std::to_string(bytes.size()) + " bytes, but " +
                                 dtype + " " + s.tensor.shape_text() + " is " +
                                 std::to_string(want) + " bytes");
      }
      s.data = std::move(bytes);
    }
    sources.push_back(std::move(s));
  }
  return sources;
}

int run(int argc, char** argv) {
  CLI::App app{"ringpub: publish sequence-derived frames into an ipcring channel"};
  ipcring::tools::apply_convention(app, "ringpub");
  std::string name;
  ipcring::ChannelConfig cfg;  // the library's defaults, which satisfy the sizing rule
  cfg.frame_bytes = std::size_t{64} * 1024;
  double rate = 1000.0;
  std::uint64_t count = 0;
  double duration_s = 0.0;
  unsigned mode = cfg.mode;
  std::string from;
  std::string dtype = "uint8";
  std::string shape;
  std::string image;
  std::string backend = "host";
  app.add_option("name", name, "Channel name (at most 200: parts of [A-Za-z0-9_.-] separated by /)")
      ->required();
  app.add_option("--slots", cfg.slots, "Frame buffers in the pool")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--readers", cfg.max_readers,
                 "Reader entries: readers attached at once (ringdump and observers take none)")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  app.add_option("--max-held", cfg.max_held, "Frames one reader may hold")
      ->check(ipcring::tools::count(0, UINT32_MAX))
      ->capture_default_str();
  auto* frame_bytes_opt =
      app.add_option("--frame-bytes", cfg.frame_bytes,
                     "Capacity (and payload) of each frame, in bytes or with a suffix k, M, G "
                     "(KiB, MiB, GiB: powers of 1024)")
          ->transform(ipcring::tools::size_bytes(1, std::uint64_t{1} << 40))
          ->capture_default_str();
  app.add_option("--rate", rate, "Frames per second (0: as fast as possible)")
      ->check(ipcring::tools::non_negative())
      ->capture_default_str();
  auto* count_opt = app.add_option("--count", count, "Stop after N frames (0: no limit)")
                        ->check(ipcring::tools::count());
  app.add_option("--duration", duration_s, "Stop after SEC seconds (0: no limit)")
      ->check(ipcring::tools::non_negative())
      ->excludes(count_opt);
  app.add_option("--from", from,
                 "Publish these instead of the pattern: a .npy file (typed from its header), a "
                 "raw file (typed by --dtype/--shape), or a directory of them (in name order); "
                 "over and over, one file a frame, the file name as metadata. --frame-bytes "
                 "defaults to the largest file");
  app.add_option("--dtype", dtype,
                 "--from, raw files: element type (uint8, int8, bool, [u]int16/32/64, "
                 "float16/32/64)")
      ->capture_default_str();
  app.add_option("--shape", shape,
                 "--from, raw files: shape, e.g. 480,640,3 (default: one dimension, the whole "
                 "file)");
  app.add_option("--mode", mode, "Permission bits of the segments (octal, e.g. 0660)")
      ->transform(ipcring::tools::octal_mode)
      ->default_str("0600");
  app.add_option("--allow-uid", cfg.allow_uids,
                 "Also hand the channel to readers of this user id (repeatable; by default only "
                 "this user and root)")
      ->check(CLI::Range(0U, 4294967294U));
  app.add_option("--allow-gid", cfg.allow_gids,
                 "Also hand the channel to readers whose primary or a supplementary group is this "
                 "group id (repeatable)")
      ->check(CLI::Range(0U, 4294967294U));
  app.add_option("--image", image,
                 "WxHxC: describe each frame as a uint8 (H, W, C) image (sets --frame-bytes); the "
                 "payload is the same pattern")
      ->check([](const std::string& v) {
        unsigned w = 0, h = 0, c = 0;
        char tail = 0;
        return std::sscanf(v.c_str(), "%ux%ux%u%c", &w, &h, &c, &tail) == 3 && w > 0 && h > 0 &&
                       c > 0 && w <= 65536 && h <= 65536 && c <= 4
                   ? std::string()
                   : "--image " + v + ": want WxHxC, e.g. 640x480x3 (C at most 4)";
      });
  app.add_option("--backend", backend,
                 "host (shared memory), or a CUDA channel: cuda (the producer chooses how the GPU "
                 "buffers reach readers: CUDA VMM where the device offers it, else legacy CUDA "
                 "IPC), cuda_legacy or cuda_vmm (that path, or refused with the reason). ringpub "
                 "runs no GPU work: a CUDA channel's frames are published unwritten, with their "
                 "tensor, sequence and capture time")
      ->check(ipcring::tools::one_of({"host", "cuda", "cuda_legacy", "cuda_vmm"}));
  app.add_option("--cuda-device", cfg.cuda_device, "CUDA channels: the device's ordinal here")
      ->check(ipcring::tools::count(0, INT32_MAX));
  if (const auto rc = ipcring::tools::parse(app, argc, argv)) return *rc;
  cfg.mode = mode;
  cfg.backend = backend == "cuda"          ? ipcring::Backend::cuda
                : backend == "cuda_legacy" ? ipcring::Backend::cuda_legacy
                : backend == "cuda_vmm"    ? ipcring::Backend::cuda_vmm
                                           : ipcring::Backend::host;
  const bool on_gpu = ipcring::is_cuda(cfg.backend);
  if (on_gpu && !from.empty()) {
    std::fprintf(stderr,
                 "ringpub: --from %s with --backend %s: ringpub writes no GPU memory (it runs no "
                 "GPU work); publish files into a host channel\n",
                 from.c_str(), backend.c_str());
    return ipcring::tools::kExitUsage;
  }
  ipcring::TensorDesc tensor = ipcring::pattern::tensor(cfg.frame_bytes);
  if (!image.empty()) {
    unsigned w = 0, h = 0, c = 0;
    std::sscanf(image.c_str(), "%ux%ux%u", &w, &h, &c);
    cfg.frame_bytes = std::size_t{w} * h * c;
    tensor = ipcring::TensorDesc::contiguous(ipcring::DType::uint, 8, {h, w, c});
  }
  std::vector<Source> sources;
  if (!from.empty()) {
    try {
      sources = load_sources(from, dtype, shape);
    } catch (const CLI::ValidationError& e) {
      std::fprintf(stderr, "ringpub: %s\n", e.what());
      return ipcring::tools::kExitUsage;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ringpub: %s\n", e.what());
      return ipcring::tools::kExitUsage;
    }
    std::size_t largest = 0;
    const Source* biggest = nullptr;
    for (const auto& s : sources) {
      if (s.data.size() >= largest) {
        largest = s.data.size();
        biggest = &s;
      }
    }
    if (frame_bytes_opt->count() == 0) {
      cfg.frame_bytes = std::max<std::size_t>(largest, 1);
    } else if (largest > cfg.frame_bytes) {
      std::fprintf(stderr, "ringpub: --from %s: %s has %zu bytes, more than --frame-bytes %zu\n",
                   from.c_str(), biggest->name.c_str(), largest, cfg.frame_bytes);
      return ipcring::tools::kExitUsage;
    }
    for (const auto& s : sources) {
      if (s.name.size() > cfg.metadata_bytes) cfg.metadata_bytes = 4096;
    }
  } else if (app.get_option("--dtype")->count() != 0 || !shape.empty()) {
    std::fprintf(stderr, "ringpub: --dtype and --shape describe the raw files of --from\n");
    return ipcring::tools::kExitUsage;
  }

  ipcring::tools::install_stop_handlers();
  std::optional<ipcring::Producer> producer;
  try {
    producer.emplace(ipcring::Producer::create(name, cfg));
  } catch (const ipcring::Error& e) {
    return ipcring::tools::report("ringpub", e);
  }
  if (on_gpu) {
    try {
      std::fprintf(stderr,
                   "ringpub: %s: a CUDA channel on device %d over %s; its frames are published "
                   "unwritten (ringpub runs no GPU work)\n",
                   name.c_str(), cfg.cuda_device,
                   ipcring::to_string(ipcring::inspect(name).cuda_path));
    } catch (const ipcring::Error& e) {
      return ipcring::tools::report("ringpub", e);
    }
  }
  if (!cfg.loan_never_fails()) {
    std::fprintf(stderr,
                 "ringpub: note: slots=%u < max_readers*max_held+2=%u; loans can fail when "
                 "readers hold frames\n",
                 cfg.slots, cfg.max_readers * cfg.max_held + 2);
  }
  const auto start = steady_clock::now();
  const auto end = duration_s > 0
                       ? start + duration_cast<steady_clock::duration>(duration<double>(duration_s))
                       : steady_clock::time_point::max();
  const auto period = rate > 0 ? duration_cast<steady_clock::duration>(duration<double>(1.0 / rate))
                               : steady_clock::duration::zero();
  std::uint64_t published = 0;
  std::uint64_t loan_failures = 0;
  std::size_t reaped_manually = 0;
  auto next = start;
  while (!ipcring::tools::stop_requested() && (count == 0 || published < count) &&
         steady_clock::now() < end) {
    auto loan = producer->loan();
    if (!loan) {
      ++loan_failures;
      std::this_thread::sleep_for(microseconds(100));
      continue;
    }
    std::size_t bytes = cfg.frame_bytes;
    if (on_gpu) {
      loan->set_tensor(tensor);  // device memory: described, not written
    } else if (sources.empty()) {
      ipcring::pattern::fill(loan->data(), cfg.frame_bytes, loan->sequence());
      // Describe the frame (uint8 bytes, or an image) and when it was made, so readers and
      // ringdump see both.
      loan->set_tensor(tensor);
    } else {
      const Source& s = sources[published % sources.size()];
      bytes = s.data.size();
      if (bytes != 0) std::memcpy(loan->data(), s.data.data(), bytes);
      loan->set_tensor(s.tensor);
      loan->set_metadata({reinterpret_cast<const std::byte*>(s.name.data()),
                          std::min<std::size_t>(s.name.size(), cfg.metadata_bytes)});
    }
    loan->set_capture_time_ns(static_cast<std::uint64_t>(
        duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count()));
    producer->publish(std::move(*loan), bytes);
    ++published;
    if (period.count() > 0) {
      next += period;
      const auto now = steady_clock::now();
      if (next > now) {
        std::this_thread::sleep_until(next);
      } else if (now - next > 100 * period) {
        next = now;  // fell far behind (stopped): do not burst to catch up
      }
    }
  }
  reaped_manually = producer->reap_dead_readers();
  const auto snap = ipcring::inspect(name);
  const double secs = duration_cast<duration<double>>(steady_clock::now() - start).count();
  std::printf(
      "ringpub %s: published=%llu loan_failures=%llu readers_reaped=%llu seconds=%.2f "
      "rate_hz=%.0f epoch=%llu\n",
      name.c_str(), static_cast<unsigned long long>(published),
      static_cast<unsigned long long>(loan_failures),
      static_cast<unsigned long long>(snap.producer.readers_reaped), secs,
      secs > 0 ? static_cast<double>(published) / secs : 0.0,
      static_cast<unsigned long long>(producer->epoch()));
  (void)reaped_manually;
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ringpub: %s\n", e.what());
    return ipcring::tools::kExitError;
  }
}
