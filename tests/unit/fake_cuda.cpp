// fake_cuda.cpp — see fake_cuda.hpp.
#include "unit/fake_cuda.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>

namespace ipcring::test {

namespace {

constexpr std::uint64_t kMemMagic = 0x4d454d454b414646ULL;  // "FFAKEMEM"
constexpr std::uint64_t kEvtMagic = 0x5456454b414646ULL;    // "FFAKEVT"

void encode(unsigned char* bytes, std::uint64_t magic, std::uint64_t process, std::uint64_t id) {
  std::memset(bytes, 0, detail::kIpcHandleBytes);
  std::memcpy(bytes, &magic, 8);
  std::memcpy(bytes + 8, &process, 8);
  std::memcpy(bytes + 16, &id, 8);
}

bool decode(const unsigned char* bytes, std::uint64_t magic, std::uint64_t& process,
            std::uint64_t& id) {
  std::uint64_t m = 0;
  std::memcpy(&m, bytes, 8);
  std::memcpy(&process, bytes + 8, 8);
  std::memcpy(&id, bytes + 16, 8);
  return m == magic;
}

CudaEvent to_event(std::uint64_t id) {
  return reinterpret_cast<CudaEvent>(static_cast<std::uintptr_t>(id * 16));
}
std::uint64_t from_event(CudaEvent e) {
  return reinterpret_cast<std::uintptr_t>(e) / 16;
}
CudaStream to_stream(std::uint64_t id) {
  return reinterpret_cast<CudaStream>(static_cast<std::uintptr_t>(id * 16));
}
std::uint64_t from_stream(CudaStream s) {
  return reinterpret_cast<std::uintptr_t>(s) / 16;
}

}  // namespace

// ---- world -----------------------------------------------------------------------------------

std::shared_ptr<FakeGpuWorld> FakeGpuWorld::make(std::vector<FakeDevice> devices, bool driver) {
  std::shared_ptr<FakeGpuWorld> w(new FakeGpuWorld());
  w->devices_ = std::move(devices);
  w->driver_ = driver;
  return w;
}

FakeDevice FakeGpuWorld::device(unsigned char tag) {
  FakeDevice d;
  d.uuid.fill(tag);
  return d;
}

std::shared_ptr<FakeCuda> FakeGpuWorld::process(std::vector<int> visible) {
  std::lock_guard lock(mutex_);
  if (visible.empty()) {
    for (int i = 0; i < static_cast<int>(devices_.size()); ++i) visible.push_back(i);
  }
  return std::shared_ptr<FakeCuda>(
      new FakeCuda(shared_from_this(), next_process_++, std::move(visible)));
}

void FakeGpuWorld::set_peer_access(int a, int b, bool can) {
  std::lock_guard lock(mutex_);
  if (can) {
    peers_.insert({a, b});
  } else {
    peers_.erase({a, b});
  }
}

int FakeGpuWorld::wrong_device_closes() const {
  std::lock_guard lock(mutex_);
  return wrong_device_closes_;
}
int FakeGpuWorld::hangs() const {
  std::lock_guard lock(mutex_);
  return hangs_;
}
int FakeGpuWorld::freed_while_mapped() const {
  std::lock_guard lock(mutex_);
  return freed_while_mapped_;
}
int FakeGpuWorld::use_after_destroy() const {
  std::lock_guard lock(mutex_);
  return use_after_destroy_;
}
int FakeGpuWorld::unregistered_writes() const {
  std::lock_guard lock(mutex_);
  return unregistered_writes_;
}
int FakeGpuWorld::implicit_inits() const {
  std::lock_guard lock(mutex_);
  return implicit_inits_;
}
bool FakeGpuWorld::registered(int process, const void* p, std::size_t bytes) const {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  for (const auto& [key, size] : registered_) {
    if (key.first == process && a >= key.second && a + bytes <= key.second + size) return true;
  }
  return false;
}
std::uint64_t FakeGpuWorld::bytes_allocated(void* ptr) const {
  std::lock_guard lock(mutex_);
  for (const auto& [id, a] : allocations_) {
    if (a.storage.get() == ptr && !a.freed) return a.bytes;
  }
  return 0;
}

bool FakeGpuWorld::runnable(const Op& op) const {
  for (std::uint64_t d : op.deps) {
    if (!ops_.at(d).done) return false;
  }
  switch (op.kind) {
    case Op::Kind::work:
      return !op.held;
    case Op::Kind::record:
    case Op::Kind::write_value:
    case Op::Kind::copy:
      return true;
    case Op::Kind::wait:
      return ops_.at(op.record).done;  // exactly the record it captured
    case Op::Kind::wait_value:
      return static_cast<std::int64_t>(
                 std::atomic_ref<std::uint64_t>(*op.addr).load(std::memory_order_acquire) -
                 op.value) >= 0;
  }
  return false;
}

void FakeGpuWorld::advance() {
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& [id, s] : streams_) {
      if (dead_.count(s.process) != 0) continue;  // a dead context runs nothing more
      while (!s.ops.empty()) {
        Op& op = ops_.at(s.ops.front());
        if (!runnable(op)) break;
        op.done = true;
        if (op.kind == Op::Kind::copy) std::memcpy(op.dst, op.src, op.bytes);
        if (op.kind == Op::Kind::write_value) {
          if (registered(op.process, op.addr, 8)) {
            std::atomic_ref<std::uint64_t>(*op.addr).store(op.value, std::memory_order_release);
          } else {
            ++unregistered_writes_;  // the GPU would fault on memory no longer registered
          }
        }
        s.ops.pop_front();
        changed = true;
      }
    }
  }
}

std::uint64_t FakeGpuWorld::legacy_stream(int process, int device) {
  auto it = legacy_.find({process, device});
  if (it != legacy_.end()) return it->second;
  const std::uint64_t id = next_id_++;
  Stream s;
  s.process = process;
  s.device = device;
  s.legacy = true;
  streams_[id] = std::move(s);
  legacy_[{process, device}] = id;
  return id;
}

std::uint64_t FakeGpuWorld::push(std::uint64_t stream, Op op) {
  Stream& s = streams_.at(stream);
  // Legacy default stream semantics: it waits for the work queued before in the blocking streams
  // of its process and device, and they wait for the work queued before in it.
  for (auto& [id, other] : streams_) {
    if (id == stream || other.process != s.process || other.device != s.device) continue;
    const bool relevant =
        s.legacy ? (!other.legacy && !other.nonblocking) : (!s.nonblocking && other.legacy);
    if (!relevant) continue;
    for (std::uint64_t o : other.ops) op.deps.push_back(o);
  }
  const std::uint64_t id = next_id_++;
  ops_[id] = std::move(op);
  s.ops.push_back(id);
  advance();
  return id;
}

bool FakeGpuWorld::finish_local_work_before(std::uint64_t, std::uint64_t, int process) {
  // Synchronising waits for the process's own queued work: let all of it finish.
  bool any = false;
  for (auto& [id, s] : streams_) {
    if (s.process != process) continue;
    for (std::uint64_t o : s.ops) {
      Op& op = ops_.at(o);
      if (op.kind == Op::Kind::work && op.held) {
        op.held = false;
        any = true;
      }
    }
  }
  advance();
  return any;
}

// ---- process ---------------------------------------------------------------------------------

CudaErr FakeCuda::ret(CudaErr e) {
  if (e != CudaErr::success) last_error_ = e;
  return e;
}

CudaErr FakeCuda::enter(FakeOp op) {
  ++calls_[static_cast<std::size_t>(op)];
  if (!world_->driver_) return ret(CudaErr::insufficient_driver);
  if (world_->dead_.count(id_) != 0) return ret(CudaErr::initialization_error);
  if (auto s = skip_.find(op); s != skip_.end() && s->second > 0) {
    --s->second;  // fail_after: this one still succeeds
    return CudaErr::success;
  }
  auto it = inject_.find(op);
  if (it != inject_.end() && it->second.second != 0) {
    if (it->second.second > 0) --it->second.second;
    return ret(it->second.first);
  }
  return CudaErr::success;
}

#define FAKE_ENTER(op)                  \
  std::lock_guard lock(world_->mutex_); \
  if (const CudaErr e_ = enter(op); e_ != CudaErr::success) return e_

CudaErr FakeCuda::get_device_count(int& count) noexcept {
  FAKE_ENTER(FakeOp::get_device_count);
  count = static_cast<int>(visible_.size());
  return count == 0 ? ret(CudaErr::no_device) : CudaErr::success;
}

CudaErr FakeCuda::get_device(int& device) noexcept {
  FAKE_ENTER(FakeOp::get_device);
  // Like cudaGetDevice: the current context's device, or 0 when the thread has none (no context
  // is made current by asking).
  auto it = ctx_.find(std::this_thread::get_id());
  device = it == ctx_.end() ? 0 : it->second.ordinal;
  return CudaErr::success;
}

CudaErr FakeCuda::set_device(int device) noexcept {
  FAKE_ENTER(FakeOp::set_device);
  if (device < 0 || device >= static_cast<int>(visible_.size()))
    return ret(CudaErr::invalid_device);
  ctx_[std::this_thread::get_id()] = Ctx{static_cast<std::uint64_t>(device) + 1, device};
  return CudaErr::success;
}

CudaErr FakeCuda::device_uuid(int device, detail::CudaUuid& uuid) noexcept {
  FAKE_ENTER(FakeOp::device_uuid);
  if (device < 0 || device >= static_cast<int>(visible_.size()))
    return ret(CudaErr::invalid_device);
  std::memcpy(uuid.bytes,
              world_->devices_[static_cast<std::size_t>(world_device(device))].uuid.data(), 16);
  return CudaErr::success;
}

bool FakeCuda::mig_instance(const detail::CudaUuid& uuid) noexcept {
  // NVML sees every device of the machine, visible to this process or not.
  std::lock_guard lock(world_->mutex_);
  for (const FakeDevice& d : world_->devices_) {
    if (std::memcmp(d.uuid.data(), uuid.bytes, 16) == 0) return d.mig;
  }
  return false;
}

CudaErr FakeCuda::device_attribute(detail::CudaAttr attr, int device, int& value) noexcept {
  FAKE_ENTER(FakeOp::device_attribute);
  if (device < 0 || device >= static_cast<int>(visible_.size()))
    return ret(CudaErr::invalid_device);
  const FakeDevice& d = world_->devices_[static_cast<std::size_t>(world_device(device))];
  switch (attr) {
    case detail::CudaAttr::integrated:
      value = d.integrated ? 1 : 0;
      break;
    case detail::CudaAttr::unified_addressing:
      value = d.unified_addressing ? 1 : 0;
      break;
    case detail::CudaAttr::ipc_event_support:
      value = d.ipc_events ? 1 : 0;
      break;
    case detail::CudaAttr::host_register_supported:
      value = d.host_register ? 1 : 0;
      break;
    case detail::CudaAttr::stream_mem_ops_64:
      value = d.stream_mem_ops ? 1 : 0;
      break;
    case detail::CudaAttr::compute_mode:
      value = d.compute_mode;
      break;
    case detail::CudaAttr::vmm_posix_fd:
      value = d.vmm_posix_fd ? 1 : 0;
      break;
  }
  return CudaErr::success;
}

CudaErr FakeCuda::can_access_peer(int device, int peer, int& can) noexcept {
  FAKE_ENTER(FakeOp::can_access_peer);
  const int n = static_cast<int>(visible_.size());
  if (device < 0 || device >= n || peer < 0 || peer >= n) return ret(CudaErr::invalid_device);
  can = device != peer && world_->peers_.count({world_device(device), world_device(peer)}) != 0;
  return CudaErr::success;
}

CudaErr FakeCuda::malloc(void** ptr, std::size_t bytes) noexcept {
  FAKE_ENTER(FakeOp::malloc);
  FakeGpuWorld::Allocation a;
  a.owner = id_;
  a.device = world_device(cur());
  a.storage.reset(new (std::nothrow) std::byte[bytes]());
  if (!a.storage) return ret(CudaErr::memory_allocation);
  a.bytes = bytes;
  *ptr = a.storage.get();
  world_->allocations_[world_->next_id_++] = std::move(a);
  return CudaErr::success;
}

CudaErr FakeCuda::free(void* ptr) noexcept {
  FAKE_ENTER(FakeOp::free);
  (void)cur();
  for (auto it = world_->allocations_.begin(); it != world_->allocations_.end(); ++it) {
    auto& a = it->second;
    if (a.storage.get() != ptr || a.owner != id_ || a.freed) continue;
    if (a.mappings > 0) {
      ++world_->freed_while_mapped_;
      a.freed = true;  // the pages stay while another process maps them
    } else {
      world_->allocations_.erase(it);
    }
    return CudaErr::success;
  }
  return ret(CudaErr::invalid_value);
}

CudaErr FakeCuda::ipc_get_mem_handle(detail::CudaIpcMemHandle& handle, void* ptr) noexcept {
  FAKE_ENTER(FakeOp::ipc_get_mem_handle);
  (void)cur();
  for (auto& [id, a] : world_->allocations_) {
    if (a.storage.get() == ptr && a.owner == id_ && !a.freed) {
      encode(handle.bytes, kMemMagic, static_cast<std::uint64_t>(id_), id);
      return CudaErr::success;
    }
  }
  return ret(CudaErr::invalid_value);
}

CudaErr FakeCuda::ipc_open_mem_handle(void** ptr, const detail::CudaIpcMemHandle& handle) noexcept {
  FAKE_ENTER(FakeOp::ipc_open_mem_handle);
  std::uint64_t process = 0;
  std::uint64_t id = 0;
  if (!decode(handle.bytes, kMemMagic, process, id)) return ret(CudaErr::invalid_value);
  auto it = world_->allocations_.find(id);
  if (it == world_->allocations_.end() || it->second.freed) {
    return ret(CudaErr::map_buffer_object_failed);
  }
  auto& a = it->second;
  if (a.owner == id_) return ret(CudaErr::device_uninitialized);  // own handle: invalid context
  // Mappings belong to the context that opened them (one per device here): a second open in the
  // same context is reference counted (CUDA 11+) or cudaErrorAlreadyMapped (older drivers).
  const int ordinal = cur();
  if (auto m = mappings_.find({a.storage.get(), ordinal}); m != mappings_.end()) {
    if (world_->already_mapped_mode) return ret(CudaErr::already_mapped);
    ++m->second.refs;
    *ptr = a.storage.get();
    return CudaErr::success;
  }
  const int here = world_device(ordinal);
  if (here != a.device && world_->peers_.count({here, a.device}) == 0) {
    return ret(CudaErr::peer_access_unsupported);
  }
  mappings_[{a.storage.get(), ordinal}] = Mapping{id, ordinal, 1};
  ++a.mappings;
  *ptr = a.storage.get();
  return CudaErr::success;
}

CudaErr FakeCuda::ipc_close_mem_handle(void* ptr) noexcept {
  FAKE_ENTER(FakeOp::ipc_close_mem_handle);
  auto it = mappings_.find({ptr, cur()});
  if (it == mappings_.end()) {
    for (const auto& [key, m] : mappings_) {
      if (key.first == ptr) {
        ++world_->wrong_device_closes_;  // mapped, but in another device's context
        break;
      }
    }
    return ret(CudaErr::invalid_value);
  }
  if (--it->second.refs > 0) return CudaErr::success;
  const std::uint64_t id = it->second.allocation;
  mappings_.erase(it);
  auto a = world_->allocations_.find(id);
  if (a != world_->allocations_.end() && --a->second.mappings == 0 && a->second.freed) {
    world_->allocations_.erase(a);
  }
  return CudaErr::success;
}

CudaErr FakeCuda::create_ipc_event(CudaEvent& event) noexcept {
  FAKE_ENTER(FakeOp::create_ipc_event);
  const std::uint64_t ev = world_->next_id_++;
  FakeGpuWorld::EventState st;
  st.owner = id_;
  st.device = world_device(cur());
  world_->events_[ev] = st;
  const std::uint64_t h = world_->next_id_++;
  world_->handles_[h] = FakeGpuWorld::Handle{id_, ev, st.device, false};
  event = to_event(h);
  return CudaErr::success;
}

CudaErr FakeCuda::destroy_event(CudaEvent event) noexcept {
  FAKE_ENTER(FakeOp::destroy_event);
  (void)cur();
  auto it = world_->handles_.find(from_event(event));
  if (it == world_->handles_.end() || it->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  auto& ev = world_->events_.at(it->second.event);
  // cudaIpcOpenEventHandle: "Performing operations on the imported event after the exported event
  // has been freed with cudaEventDestroy will result in undefined behavior" (destroying included).
  if (it->second.imported && ev.destroyed) ++world_->use_after_destroy_;
  if (!it->second.imported) ev.destroyed = true;
  world_->handles_.erase(it);
  return CudaErr::success;
}

CudaErr FakeCuda::record_event(CudaEvent event, CudaStream stream) noexcept {
  FAKE_ENTER(FakeOp::record_event);
  if (stream != nullptr) (void)cur();  // the runtime needs a context even for a given stream
  auto h = world_->handles_.find(from_event(event));
  if (h == world_->handles_.end() || h->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  auto& ev = world_->events_.at(h->second.event);
  if (ev.destroyed) {
    ++world_->use_after_destroy_;
    return ret(CudaErr::invalid_resource_handle);
  }
  const std::uint64_t sid = legacy(stream);
  if (sid == 0) return ret(CudaErr::invalid_resource_handle);
  if (world_->streams_.at(sid).device != h->second.device) {
    return ret(CudaErr::invalid_resource_handle);  // event and stream of different devices
  }
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::record;
  op.event = h->second.event;
  op.process = id_;
  ev.latest_record = world_->push(sid, std::move(op));
  world_->advance();
  return CudaErr::success;
}

CudaErr FakeCuda::query_event(CudaEvent event) noexcept {
  FAKE_ENTER(FakeOp::query_event);
  (void)cur();
  auto h = world_->handles_.find(from_event(event));
  if (h == world_->handles_.end() || h->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  const auto& ev = world_->events_.at(h->second.event);
  if (ev.destroyed && h->second.imported) {
    ++world_->use_after_destroy_;
    return ret(CudaErr::invalid_resource_handle);
  }
  world_->advance();
  return ev.latest_record == 0 || world_->ops_.at(ev.latest_record).done ? CudaErr::success
                                                                         : CudaErr::not_ready;
}

CudaErr FakeCuda::synchronize_event(CudaEvent event) noexcept {
  FAKE_ENTER(FakeOp::synchronize_event);
  (void)cur();
  auto h = world_->handles_.find(from_event(event));
  if (h == world_->handles_.end() || h->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  const auto& ev = world_->events_.at(h->second.event);
  world_->advance();
  auto complete = [&] { return ev.latest_record == 0 || world_->ops_.at(ev.latest_record).done; };
  if (complete()) return CudaErr::success;
  world_->finish_local_work_before(0, 0, id_);
  if (complete()) return CudaErr::success;
  ++world_->hangs_;
  return ret(CudaErr::unknown);
}

CudaErr FakeCuda::ipc_get_event_handle(detail::CudaIpcEventHandle& handle,
                                       CudaEvent event) noexcept {
  FAKE_ENTER(FakeOp::ipc_get_event_handle);
  (void)cur();
  auto h = world_->handles_.find(from_event(event));
  if (h == world_->handles_.end() || h->second.process != id_ || h->second.imported) {
    return ret(CudaErr::invalid_resource_handle);
  }
  encode(handle.bytes, kEvtMagic, static_cast<std::uint64_t>(id_), h->second.event);
  return CudaErr::success;
}

CudaErr FakeCuda::ipc_open_event_handle(CudaEvent& event,
                                        const detail::CudaIpcEventHandle& handle) noexcept {
  FAKE_ENTER(FakeOp::ipc_open_event_handle);
  std::uint64_t process = 0;
  std::uint64_t ev = 0;
  if (!decode(handle.bytes, kEvtMagic, process, ev)) return ret(CudaErr::invalid_value);
  auto it = world_->events_.find(ev);
  if (it == world_->events_.end() || it->second.destroyed) {
    return ret(CudaErr::invalid_resource_handle);
  }
  if (it->second.owner == id_) return ret(CudaErr::device_uninitialized);
  const std::uint64_t h = world_->next_id_++;
  world_->handles_[h] = FakeGpuWorld::Handle{id_, ev, world_device(cur()), true};
  event = to_event(h);
  return CudaErr::success;
}

CudaErr FakeCuda::create_stream(CudaStream& stream) noexcept {
  FAKE_ENTER(FakeOp::create_stream);
  const std::uint64_t id = world_->next_id_++;
  FakeGpuWorld::Stream s;
  s.process = id_;
  s.device = world_device(cur());
  s.nonblocking = true;
  world_->streams_[id] = std::move(s);
  stream = to_stream(id);
  return CudaErr::success;
}

CudaErr FakeCuda::destroy_stream(CudaStream stream) noexcept {
  FAKE_ENTER(FakeOp::destroy_stream);
  (void)cur();
  auto s = world_->streams_.find(from_stream(stream));
  if (s == world_->streams_.end() || s->second.process != id_ || s->second.destroyed) {
    return ret(CudaErr::invalid_resource_handle);
  }
  s->second.destroyed = true;  // queued work still runs
  return CudaErr::success;
}

CudaErr FakeCuda::stream_wait_event(CudaStream stream, CudaEvent event) noexcept {
  FAKE_ENTER(FakeOp::stream_wait_event);
  if (stream != nullptr) (void)cur();
  auto h = world_->handles_.find(from_event(event));
  if (h == world_->handles_.end() || h->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  auto& ev = world_->events_.at(h->second.event);
  if (ev.destroyed && h->second.imported) {
    ++world_->use_after_destroy_;
    return ret(CudaErr::invalid_resource_handle);
  }
  const std::uint64_t sid = legacy(stream);
  if (sid == 0) return ret(CudaErr::invalid_resource_handle);
  if (ev.latest_record == 0) return CudaErr::success;  // never recorded: nothing to wait for
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::wait;
  op.event = h->second.event;
  op.record = ev.latest_record;  // captured now: later records do not change what it waits for
  op.process = id_;
  world_->push(sid, std::move(op));
  return CudaErr::success;
}

CudaErr FakeCuda::stream_synchronize(CudaStream stream) noexcept {
  FAKE_ENTER(FakeOp::stream_synchronize);
  if (stream != nullptr) (void)cur();
  const std::uint64_t sid =
      stream == nullptr || stream == kPerThreadStream ? legacy(stream) : from_stream(stream);
  auto s = world_->streams_.find(sid);
  if (s == world_->streams_.end() || s->second.process != id_) {
    return ret(CudaErr::invalid_resource_handle);
  }
  world_->advance();
  if (s->second.ops.empty()) return CudaErr::success;
  world_->finish_local_work_before(sid, 0, id_);
  if (s->second.ops.empty()) return CudaErr::success;
  ++world_->hangs_;
  return ret(CudaErr::unknown);
}

int FakeCuda::cur() {
  auto it = ctx_.find(std::this_thread::get_id());
  if (it != ctx_.end()) return it->second.ordinal;
  ++world_->implicit_inits_;  // the runtime would bind device 0's primary context here
  ctx_[std::this_thread::get_id()] = Ctx{1, 0};
  return 0;
}

std::uint64_t FakeCuda::legacy(CudaStream stream) {
  if (stream == nullptr) return world_->legacy_stream(id_, world_device(cur()));
  if (stream == kPerThreadStream) return per_thread_stream(cur());
  const std::uint64_t sid = from_stream(stream);
  auto s = world_->streams_.find(sid);
  if (s == world_->streams_.end() || s->second.process != id_) return 0;
  return sid;
}

CudaErr FakeCuda::get_context(detail::CudaContext& context) noexcept {
  FAKE_ENTER(FakeOp::get_context);
  auto it = ctx_.find(std::this_thread::get_id());
  context = it == ctx_.end()
                ? nullptr
                : reinterpret_cast<detail::CudaContext>(static_cast<std::uintptr_t>(it->second.id));
  return CudaErr::success;
}

CudaErr FakeCuda::set_context(detail::CudaContext context) noexcept {
  FAKE_ENTER(FakeOp::set_context);
  const auto id = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(context));
  if (id == 0) {
    ctx_.erase(std::this_thread::get_id());
    return CudaErr::success;
  }
  int ordinal = 0;
  if (auto u = user_contexts_.find(id); u != user_contexts_.end()) {
    ordinal = u->second;
  } else if (id >= 1 && id <= visible_.size()) {
    ordinal = static_cast<int>(id - 1);
  } else {
    return ret(CudaErr::invalid_value);
  }
  ctx_[std::this_thread::get_id()] = Ctx{id, ordinal};
  return CudaErr::success;
}

CudaErr FakeCuda::host_register(void* ptr, std::size_t bytes) noexcept {
  FAKE_ENTER(FakeOp::host_register);
  (void)cur();
  const auto a = reinterpret_cast<std::uintptr_t>(ptr);
  for (const auto& [key, size] : world_->registered_) {
    if (key.first == id_ && a < key.second + size && key.second < a + bytes) {
      return ret(CudaErr::host_memory_already_registered);
    }
  }
  world_->registered_[{id_, a}] = bytes;
  return CudaErr::success;
}

CudaErr FakeCuda::host_unregister(void* ptr) noexcept {
  FAKE_ENTER(FakeOp::host_unregister);
  (void)cur();
  auto it = world_->registered_.find({id_, reinterpret_cast<std::uintptr_t>(ptr)});
  if (it == world_->registered_.end()) return ret(CudaErr::host_memory_not_registered);
  world_->registered_.erase(it);
  return CudaErr::success;
}

CudaErr FakeCuda::host_device_pointer(void** device_ptr, void* host_ptr) noexcept {
  FAKE_ENTER(FakeOp::host_device_pointer);
  (void)cur();
  if (!world_->registered(id_, host_ptr, 1)) return ret(CudaErr::invalid_value);
  *device_ptr = host_ptr;  // unified addressing: the same address
  return CudaErr::success;
}

CudaErr FakeCuda::host_alloc(void** ptr, std::size_t bytes) noexcept {
  FAKE_ENTER(FakeOp::host_alloc);
  (void)cur();
  if (bytes == 0) return ret(CudaErr::invalid_value);
  auto storage = std::make_unique<unsigned char[]>(bytes);
  *ptr = storage.get();
  pinned_bytes_[*ptr] = bytes;
  pinned_[*ptr] = std::move(storage);
  return CudaErr::success;
}

CudaErr FakeCuda::free_host(void* ptr) noexcept {
  FAKE_ENTER(FakeOp::free_host);
  (void)cur();
  if (pinned_.erase(ptr) == 0) return ret(CudaErr::invalid_value);
  pinned_bytes_.erase(ptr);
  return CudaErr::success;
}

CudaErr FakeCuda::memcpy_to_host_async(void* dst, const void* src, std::size_t bytes,
                                       CudaStream stream) noexcept {
  FAKE_ENTER(FakeOp::memcpy_to_host);
  (void)cur();
  const std::uint64_t sid = legacy(stream);
  if (sid == 0) return ret(CudaErr::invalid_resource_handle);
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const bool pinned = std::any_of(pinned_bytes_.begin(), pinned_bytes_.end(), [&](const auto& b) {
    const auto base = reinterpret_cast<std::uintptr_t>(b.first);
    return d >= base && d + bytes <= base + b.second;
  });
  if (!pinned || src == nullptr) return ret(CudaErr::invalid_value);
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::copy;
  op.dst = dst;
  op.src = src;
  op.bytes = bytes;
  op.process = id_;
  world_->push(sid, std::move(op));
  return CudaErr::success;
}

int FakeCuda::pinned_allocations() const {
  std::lock_guard lock(world_->mutex_);
  return static_cast<int>(pinned_.size());
}

CudaErr FakeCuda::stream_write_value64(CudaStream stream, void* device_ptr,
                                       std::uint64_t value) noexcept {
  FAKE_ENTER(FakeOp::stream_write_value64);
  if (ctx_.count(std::this_thread::get_id()) == 0) return ret(CudaErr::device_uninitialized);
  const std::uint64_t sid = legacy(stream);
  if (sid == 0) return ret(CudaErr::invalid_resource_handle);
  if (!world_->registered(id_, device_ptr, 8)) return ret(CudaErr::invalid_value);
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::write_value;
  op.addr = static_cast<std::uint64_t*>(device_ptr);
  op.value = value;
  op.process = id_;
  world_->push(sid, std::move(op));
  return CudaErr::success;
}

CudaErr FakeCuda::stream_wait_value64(CudaStream stream, void* device_ptr,
                                      std::uint64_t value) noexcept {
  FAKE_ENTER(FakeOp::stream_wait_value64);
  if (ctx_.count(std::this_thread::get_id()) == 0) return ret(CudaErr::device_uninitialized);
  const std::uint64_t sid = legacy(stream);
  if (sid == 0) return ret(CudaErr::invalid_resource_handle);
  if (!world_->registered(id_, device_ptr, 8)) return ret(CudaErr::invalid_value);
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::wait_value;
  op.addr = static_cast<std::uint64_t*>(device_ptr);
  op.value = value;
  op.process = id_;
  world_->push(sid, std::move(op));
  return CudaErr::success;
}

CudaErr FakeCuda::get_last_error() noexcept {
  std::lock_guard lock(world_->mutex_);
  const CudaErr e = last_error_;
  last_error_ = CudaErr::success;
  return e;
}

const char* FakeCuda::error_name(CudaErr err) noexcept {
  switch (err) {
    case CudaErr::success:
      return "cudaSuccess";
    case CudaErr::invalid_value:
      return "cudaErrorInvalidValue";
    case CudaErr::memory_allocation:
      return "cudaErrorMemoryAllocation";
    case CudaErr::initialization_error:
      return "cudaErrorInitializationError";
    case CudaErr::insufficient_driver:
      return "cudaErrorInsufficientDriver";
    case CudaErr::no_device:
      return "cudaErrorNoDevice";
    case CudaErr::invalid_device:
      return "cudaErrorInvalidDevice";
    case CudaErr::device_uninitialized:
      return "cudaErrorDeviceUninitialized";
    case CudaErr::map_buffer_object_failed:
      return "cudaErrorMapBufferObjectFailed";
    case CudaErr::already_mapped:
      return "cudaErrorAlreadyMapped";
    case CudaErr::peer_access_unsupported:
      return "cudaErrorPeerAccessUnsupported";
    case CudaErr::invalid_resource_handle:
      return "cudaErrorInvalidResourceHandle";
    case CudaErr::not_ready:
      return "cudaErrorNotReady";
    case CudaErr::host_memory_already_registered:
      return "cudaErrorHostMemoryAlreadyRegistered";
    case CudaErr::host_memory_not_registered:
      return "cudaErrorHostMemoryNotRegistered";
    case CudaErr::not_supported:
      return "cudaErrorNotSupported";
    case CudaErr::unknown:
      return "cudaErrorUnknown";
  }
  return "cudaError(other)";
}

#undef FAKE_ENTER

// ---- test controls ---------------------------------------------------------------------------

std::uint64_t FakeCuda::per_thread_stream(int ordinal) {
  const auto key = std::make_pair(std::this_thread::get_id(), ordinal);
  auto it = per_thread_.find(key);
  if (it != per_thread_.end()) return it->second;
  const std::uint64_t id = world_->next_id_++;
  FakeGpuWorld::Stream s;  // a blocking stream: ordered with the legacy stream both ways
  s.process = id_;
  s.device = world_device(ordinal);
  world_->streams_[id] = std::move(s);
  per_thread_[key] = id;
  return id;
}

CudaStream FakeCuda::make_stream(bool nonblocking) {
  std::lock_guard lock(world_->mutex_);
  const std::uint64_t id = world_->next_id_++;
  FakeGpuWorld::Stream s;
  s.process = id_;
  auto c = ctx_.find(std::this_thread::get_id());
  s.device = world_device(c == ctx_.end() ? 0 : c->second.ordinal);
  s.nonblocking = nonblocking;
  world_->streams_[id] = std::move(s);
  return to_stream(id);
}

std::uint64_t FakeCuda::launch(CudaStream stream, bool held) {
  std::lock_guard lock(world_->mutex_);
  auto c = ctx_.find(std::this_thread::get_id());
  const int ordinal = c == ctx_.end() ? 0 : c->second.ordinal;
  const std::uint64_t sid = stream == nullptr ? world_->legacy_stream(id_, world_device(ordinal))
                            : stream == kPerThreadStream ? per_thread_stream(ordinal)
                                                         : from_stream(stream);
  FakeGpuWorld::Op op;
  op.kind = FakeGpuWorld::Op::Kind::work;
  op.held = held;
  return world_->push(sid, std::move(op));
}

void FakeCuda::finish(std::uint64_t work) {
  std::lock_guard lock(world_->mutex_);
  world_->ops_.at(work).held = false;
  world_->advance();
}

bool FakeCuda::done(std::uint64_t work) const {
  std::lock_guard lock(world_->mutex_);
  world_->advance();
  return world_->ops_.at(work).done;
}

void FakeCuda::kill_leaving_writes() {
  std::lock_guard lock(world_->mutex_);
  world_->dead_.insert(id_);
  world_->dying_.insert(id_);
}

int FakeCuda::land_late_writes() {
  int landed = 0;
  {
    std::lock_guard lock(world_->mutex_);
    if (world_->dying_.erase(id_) == 0) return 0;
    for (auto& [sid, s] : world_->streams_) {
      if (s.process != id_) continue;
      for (std::uint64_t o : s.ops) {
        FakeGpuWorld::Op& op = world_->ops_.at(o);
        if (op.kind != FakeGpuWorld::Op::Kind::write_value) continue;
        if (world_->registered(id_, op.addr, 8)) {
          std::atomic_ref<std::uint64_t>(*op.addr).store(op.value, std::memory_order_release);
          ++landed;
        } else {
          ++world_->unregistered_writes_;
        }
      }
      s.ops.clear();
    }
  }
  kill();  // now the context goes
  return landed;
}

void FakeCuda::kill() {
  std::lock_guard lock(world_->mutex_);
  world_->dead_.insert(id_);
  world_->dying_.erase(id_);
  for (auto it = world_->handles_.begin(); it != world_->handles_.end();) {
    if (it->second.process == id_) {
      if (!it->second.imported) world_->events_.at(it->second.event).destroyed = true;
      it = world_->handles_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [p, m] : mappings_) {
    auto a = world_->allocations_.find(m.allocation);
    if (a != world_->allocations_.end() && --a->second.mappings == 0 && a->second.freed) {
      world_->allocations_.erase(a);
    }
  }
  mappings_.clear();
  vmm_drop();
  for (auto it = world_->registered_.begin(); it != world_->registered_.end();) {
    it = it->first.first == id_ ? world_->registered_.erase(it) : std::next(it);
  }
  for (auto it = world_->allocations_.begin(); it != world_->allocations_.end();) {
    if (it->second.owner == id_ && it->second.mappings == 0) {
      it = world_->allocations_.erase(it);
    } else {
      if (it->second.owner == id_) it->second.freed = true;
      ++it;
    }
  }
  world_->advance();
}

void FakeCuda::fail(FakeOp op, CudaErr err, int times) {
  std::lock_guard lock(world_->mutex_);
  inject_[op] = {err, times};
  skip_.erase(op);
}

void FakeCuda::fail_after(FakeOp op, int skip, CudaErr err) {
  std::lock_guard lock(world_->mutex_);
  inject_[op] = {err, 1};
  skip_[op] = skip;
}

int FakeCuda::calls(FakeOp op) const {
  std::lock_guard lock(world_->mutex_);
  return calls_[static_cast<std::size_t>(op)];
}

int FakeCuda::open_mappings() const {
  std::lock_guard lock(world_->mutex_);
  return static_cast<int>(mappings_.size());
}

int FakeCuda::current_device() const {
  std::lock_guard lock(world_->mutex_);
  auto it = ctx_.find(std::this_thread::get_id());
  return it == ctx_.end() ? -1 : it->second.ordinal;
}

detail::CudaContext FakeCuda::make_context(int ordinal) {
  std::lock_guard lock(world_->mutex_);
  const std::uint64_t id = next_context_++;
  user_contexts_[id] = ordinal;
  return reinterpret_cast<detail::CudaContext>(static_cast<std::uintptr_t>(id));
}

int FakeCuda::registrations() const {
  std::lock_guard lock(world_->mutex_);
  int n = 0;
  for (const auto& [key, bytes] : world_->registered_) {
    if (key.first == id_) ++n;
  }
  return n;
}

// ---- CUDA VMM -----------------------------------------------------------------------------

#define FAKE_ENTER(op)                  \
  std::lock_guard lock(world_->mutex_); \
  if (const CudaErr e_ = enter(op); e_ != CudaErr::success) return e_

namespace {

constexpr const char* kVmmLabel = "ipcring-fake-vmm";

// True when `fd` is one of the memfds the fake makes for VMM allocations (in any real process).
bool is_fake_vmm_memfd(int fd) {
  char target[128] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
  const std::string want = std::string("/memfd:") + kVmmLabel;
  return n > 0 && std::string(target, static_cast<std::size_t>(n)).rfind(want, 0) == 0;
}

}  // namespace

int FakeGpuWorld::vmm_allocations() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(vmm_.size());
}

void FakeGpuWorld::vmm_forget_if_unused(std::uint64_t allocation) {
  auto it = vmm_.find(allocation);
  if (it == vmm_.end() || it->second.handles > 0 || it->second.mappings > 0) return;
  close(it->second.fd);
  vmm_.erase(it);
}

CudaErr FakeCuda::vmm_granularity(int device, std::size_t& bytes) noexcept {
  FAKE_ENTER(FakeOp::vmm_granularity);
  if (device < 0 || device >= static_cast<int>(visible_.size())) {
    return ret(CudaErr::invalid_device);
  }
  const FakeDevice& d = world_->devices_[static_cast<std::size_t>(world_device(device))];
  if (!d.vmm_posix_fd) return ret(CudaErr::not_supported);
  bytes = d.vmm_granularity;
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_create(detail::CudaMemHandle& handle, std::size_t bytes,
                             int device) noexcept {
  FAKE_ENTER(FakeOp::vmm_create);
  if (device < 0 || device >= static_cast<int>(visible_.size())) {
    return ret(CudaErr::invalid_device);
  }
  const FakeDevice& d = world_->devices_[static_cast<std::size_t>(world_device(device))];
  if (!d.vmm_posix_fd) return ret(CudaErr::not_supported);
  if (bytes == 0 || bytes % d.vmm_granularity != 0) return ret(CudaErr::invalid_value);
  const int fd = memfd_create(kVmmLabel, MFD_CLOEXEC);
  if (fd < 0) return ret(CudaErr::memory_allocation);
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    close(fd);
    return ret(CudaErr::memory_allocation);
  }
  const std::uint64_t id = world_->next_id_++;
  world_->vmm_[id] = FakeGpuWorld::VmmAllocation{fd, bytes, 1, 0};
  handle = next_vmm_handle_++;
  vmm_handles_[handle] = id;
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_release(detail::CudaMemHandle handle) noexcept {
  FAKE_ENTER(FakeOp::vmm_release);
  auto it = vmm_handles_.find(handle);
  if (it == vmm_handles_.end()) return ret(CudaErr::invalid_value);
  const std::uint64_t id = it->second;
  vmm_handles_.erase(it);
  --world_->vmm_.at(id).handles;
  world_->vmm_forget_if_unused(id);
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_reserve(void** ptr, std::size_t bytes, std::size_t alignment) noexcept {
  FAKE_ENTER(FakeOp::vmm_reserve);
  if (bytes == 0 || (alignment & (alignment - 1)) != 0) return ret(CudaErr::invalid_value);
  const std::size_t align = std::max<std::size_t>(alignment, 4096);
  // Over-reserve and trim, so the range starts at a multiple of the alignment.
  void* raw =
      mmap(nullptr, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return ret(CudaErr::memory_allocation);
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = (base + align - 1) / align * align;
  if (start > base) munmap(raw, start - base);
  const std::uintptr_t end = start + bytes;
  if (base + bytes + align > end) munmap(reinterpret_cast<void*>(end), base + bytes + align - end);
  vmm_ranges_[start] = VmmRange{bytes, 0};
  *ptr = reinterpret_cast<void*>(start);
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_free_address(void* ptr, std::size_t bytes) noexcept {
  FAKE_ENTER(FakeOp::vmm_free_address);
  auto it = vmm_ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
  // The whole range, unmapped first (cuMemAddressFree of a mapped range is an error).
  if (it == vmm_ranges_.end() || it->second.bytes != bytes || it->second.allocation != 0) {
    return ret(CudaErr::invalid_value);
  }
  munmap(ptr, bytes);
  vmm_ranges_.erase(it);
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_map(void* ptr, std::size_t bytes, detail::CudaMemHandle handle) noexcept {
  FAKE_ENTER(FakeOp::vmm_map);
  auto r = vmm_ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
  auto h = vmm_handles_.find(handle);
  if (r == vmm_ranges_.end() || h == vmm_handles_.end() || r->second.allocation != 0 ||
      r->second.bytes != bytes) {
    return ret(CudaErr::invalid_value);
  }
  FakeGpuWorld::VmmAllocation& a = world_->vmm_.at(h->second);
  if (bytes > a.bytes) return ret(CudaErr::invalid_value);
  // Mapped, but no access until vmm_set_access.
  if (mmap(ptr, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, a.fd, 0) == MAP_FAILED) {
    return ret(CudaErr::memory_allocation);
  }
  r->second.allocation = h->second;
  ++a.mappings;
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_unmap(void* ptr, std::size_t bytes) noexcept {
  FAKE_ENTER(FakeOp::vmm_unmap);
  auto r = vmm_ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (r == vmm_ranges_.end() || r->second.allocation == 0 || r->second.bytes != bytes) {
    return ret(CudaErr::invalid_value);
  }
  // The range stays reserved: inaccessible address space again.
  void* const again =
      mmap(ptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  (void)again;  // MAP_FIXED over our own range: nothing to do if it failed
  const std::uint64_t id = r->second.allocation;
  r->second.allocation = 0;
  --world_->vmm_.at(id).mappings;
  world_->vmm_forget_if_unused(id);
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_set_access(void* ptr, std::size_t bytes, int device,
                                 bool read_write) noexcept {
  FAKE_ENTER(FakeOp::vmm_set_access);
  if (device < 0 || device >= static_cast<int>(visible_.size())) {
    return ret(CudaErr::invalid_device);
  }
  auto r = vmm_ranges_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (r == vmm_ranges_.end() || r->second.allocation == 0 || r->second.bytes != bytes) {
    return ret(CudaErr::invalid_value);
  }
  if (mprotect(ptr, bytes, read_write ? PROT_READ | PROT_WRITE : PROT_READ) != 0) {
    return ret(CudaErr::invalid_value);
  }
  return CudaErr::success;
}

CudaErr FakeCuda::vmm_export_fd(int& fd, detail::CudaMemHandle handle) noexcept {
  FAKE_ENTER(FakeOp::vmm_export_fd);
  auto h = vmm_handles_.find(handle);
  if (h == vmm_handles_.end()) return ret(CudaErr::invalid_value);
  fd = fcntl(world_->vmm_.at(h->second).fd, F_DUPFD_CLOEXEC, 0);
  return fd >= 0 ? CudaErr::success : ret(CudaErr::memory_allocation);
}

CudaErr FakeCuda::vmm_import_fd(detail::CudaMemHandle& handle, int fd) noexcept {
  FAKE_ENTER(FakeOp::vmm_import_fd);
  struct stat st {};
  if (fd < 0 || !is_fake_vmm_memfd(fd) || fstat(fd, &st) != 0 || st.st_size <= 0) {
    return ret(CudaErr::invalid_value);
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return ret(CudaErr::memory_allocation);
  const std::uint64_t id = world_->next_id_++;
  world_->vmm_[id] = FakeGpuWorld::VmmAllocation{own, static_cast<std::uint64_t>(st.st_size), 1, 0};
  handle = next_vmm_handle_++;
  vmm_handles_[handle] = id;
  return CudaErr::success;
}

#undef FAKE_ENTER

void FakeCuda::vmm_drop() {
  for (auto& [start, r] : vmm_ranges_) {
    munmap(reinterpret_cast<void*>(start), r.bytes);
    if (r.allocation != 0) {
      --world_->vmm_.at(r.allocation).mappings;
      world_->vmm_forget_if_unused(r.allocation);
    }
  }
  vmm_ranges_.clear();
  for (auto& [handle, id] : vmm_handles_) {
    --world_->vmm_.at(id).handles;
    world_->vmm_forget_if_unused(id);
  }
  vmm_handles_.clear();
}

int FakeCuda::vmm_handles() const {
  std::lock_guard lock(world_->mutex_);
  return static_cast<int>(vmm_handles_.size());
}

int FakeCuda::vmm_ranges() const {
  std::lock_guard lock(world_->mutex_);
  return static_cast<int>(vmm_ranges_.size());
}

int FakeCuda::vmm_mappings() const {
  std::lock_guard lock(world_->mutex_);
  int n = 0;
  for (const auto& [start, r] : vmm_ranges_) n += r.allocation != 0 ? 1 : 0;
  return n;
}

}  // namespace ipcring::test
