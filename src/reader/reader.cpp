// reader.cpp — the public Reader and Frame over the reader's core (reader_core.cpp); reads that
// find the producer ended follow the channel's name (follow.hpp).
#include "ipcring/reader.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <utility>

#include "core.hpp"
#include "reader/follow.hpp"

namespace ipcring {

// ---- public API ------------------------------------------------------------------------------

Reader::Reader(detail::ReaderCore* core) noexcept : core_(core) {}
Reader::Reader(Reader&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
Reader& Reader::operator=(Reader&& other) noexcept {
  if (this != &other) {
    detail::ReaderCore::drop_handle(core_);
    core_ = std::exchange(other.core_, nullptr);
  }
  return *this;
}
Reader::~Reader() {
  detail::ReaderCore::drop_handle(core_);
}

Reader Reader::attach(std::string_view name, ReaderOptions options) {
  return Reader(detail::attach_reader_core(name, options));
}

Result<Frame> Reader::try_read() noexcept {
  Result<Frame> r = core_->try_read();
  if (r || (r.status() != Status::no_frame && r.status() != Status::producer_gone)) return r;
  return detail::follow_after(core_, std::move(r));  // follow.hpp: rate-limited, loads only
}
Result<Frame> Reader::read(std::chrono::nanoseconds timeout) noexcept {
  return detail::read_following(
      core_, static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count())));
}
std::string_view Reader::follow_error() const noexcept {
  return core_->follow_error();
}
std::uint32_t Reader::index() const noexcept {
  return core_->index();
}
std::uint32_t Reader::held() const noexcept {
  return core_->held();
}
bool Reader::observer() const noexcept {
  return core_->observer();
}
std::uint64_t Reader::observer_dropped() const noexcept {
  return core_->observer_dropped();
}
std::uint64_t Reader::overruns() const noexcept {
  return core_->overruns();
}
std::uint64_t Reader::epoch() const noexcept {
  return core_->epoch();
}
std::string_view Reader::name() const noexcept {
  return core_->name();
}
std::size_t Reader::frame_bytes() const noexcept {
  return core_->geometry().frame_bytes;
}
std::uint32_t Reader::max_held() const noexcept {
  return core_->geometry().max_held;
}
Backend Reader::backend() const noexcept {
  return core_->geometry().backend == detail::kBackendCuda ? Backend::cuda : Backend::host;
}

CudaPath Reader::cuda_path() const noexcept {
  const detail::Geometry& g = core_->geometry();
  if (g.backend != detail::kBackendCuda) return CudaPath::none;
  return g.cuda_path == detail::kCudaPathVmm ? CudaPath::vmm : CudaPath::legacy_ipc;
}

// ---- Frame ---------------------------------------------------------------------------------

namespace {
// A Frame is moved two or three times between the claim and the caller (into the Result, out of
// it): the tensor descriptor, most of FrameFields' bytes, is copied only when there is one, as
// tensor() reads it only then.
void move_fields(detail::FrameFields& to, const detail::FrameFields& from) noexcept {
  static_assert(std::is_trivially_copyable_v<detail::FrameFields> &&
                std::is_standard_layout_v<detail::FrameFields>);
  static_assert(
      offsetof(detail::FrameFields, tensor) + sizeof(TensorDesc) == sizeof(detail::FrameFields),
      "the tensor descriptor is FrameFields' last member");
  std::memcpy(static_cast<void*>(&to), &from, offsetof(detail::FrameFields, tensor));
  if (from.has_tensor) to.tensor = from.tensor;
}
}  // namespace

Frame::Frame(Frame&& other) noexcept {
  *this = std::move(other);
}

Frame& Frame::operator=(Frame&& other) noexcept {
  if (this != &other) {
    release();
    core_ = std::exchange(other.core_, nullptr);
    move_fields(fields_, other.fields_);
    other.fields_.data = nullptr;
    other.fields_.metadata = nullptr;
  }
  return *this;
}

Frame::~Frame() {
  release();
}

bool Frame::held() const noexcept {
  // A fork child inherits the parent's Frame objects, not its bits: it holds nothing.
  return core_ != nullptr && !core_->forked();
}

const std::byte* Frame::data() const noexcept {
  return held() ? fields_.data : nullptr;
}

void Frame::release() noexcept {
  release(nullptr);
}

void Frame::release(CudaStream stream) noexcept {
  if (core_ == nullptr) return;
  detail::ReaderCore* core = std::exchange(core_, nullptr);
  fields_.data = nullptr;
  core->release(*this, stream);  // may end the core (never here: see ReaderCore::release)
}

Status Frame::wait_on(CudaStream stream) noexcept {
  if (core_ == nullptr) return Status::no_frame;
  if (core_->forked()) return Status::forked;
  return core_->wait_on(fields_.slot, stream);
}

}  // namespace ipcring
