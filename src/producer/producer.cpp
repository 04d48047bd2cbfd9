// producer.cpp — the public Producer and Loan over the producer's core (producer_core.cpp).
#include "ipcring/producer.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "common/clock.hpp"
#include "core.hpp"
#include "ipcring/error.hpp"

namespace ipcring {

// ---- public API ------------------------------------------------------------------------------

Producer::Producer(detail::ProducerCore* core) noexcept : core_(core) {}
Producer::Producer(Producer&& other) noexcept : core_(std::exchange(other.core_, nullptr)) {}
Producer& Producer::operator=(Producer&& other) noexcept {
  if (this != &other) {
    detail::ProducerCore::drop_handle(core_);
    core_ = std::exchange(other.core_, nullptr);
  }
  return *this;
}
Producer::~Producer() {
  detail::ProducerCore::drop_handle(core_);
}

Producer Producer::create(std::string_view name, const ChannelConfig& config) {
  return Producer(detail::create_producer_core(name, config).release());
}

Result<Loan> Producer::loan() noexcept {
  return core_->loan();
}
Result<Loan> Producer::loan(CudaStream stream) noexcept {
  return core_->loan(stream);
}

Result<Loan> Producer::loan(std::chrono::nanoseconds timeout) noexcept {
  return loan(timeout, nullptr);
}

Result<Loan> Producer::loan(std::chrono::nanoseconds timeout, CudaStream stream) noexcept {
  const std::uint64_t deadline =
      detail::monotonic_ns() +
      static_cast<std::uint64_t>(std::max<std::int64_t>(0, timeout.count()));
  for (;;) {
    Result<Loan> r = core_->loan(stream);
    if (r || r.status() != Status::no_free_slot) return r;
    if (detail::monotonic_ns() >= deadline) return Status::timeout;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
    core_->reap_on_next_loan();  // reap again on the next try
  }
}

std::uint64_t Producer::publish(Loan&& loan, std::size_t bytes) {
  return publish(std::move(loan), bytes, nullptr);
}

std::uint64_t Producer::publish(Loan&& loan, std::size_t bytes, CudaStream stream) {
  // Caller errors, checked before anything is touched: the one exception publish throws.
  if (loan.core_ != core_ || core_ == nullptr) {
    throw Error(Errc::invalid_argument,
                channel_prefix(core_ != nullptr ? core_->name() : std::string("?")) +
                    "publish() of a loan that " +
                    (loan.core_ != nullptr ? "belongs to another producer"
                                           : "is empty or already published"));
  }
  if (bytes > loan.capacity()) {
    throw Error(Errc::invalid_argument, channel_prefix(core_->name()) + "publish of " +
                                            std::to_string(bytes) +
                                            " bytes exceeds the frame capacity of " +
                                            std::to_string(loan.capacity()) + " bytes");
  }
  std::uint64_t sequence = 0;
  // Not published (a forked child, a backend failure): 0, and the loan stays with the caller.
  if (core_->publish(loan, bytes, stream, sequence) != Status::ok) return 0;
  return sequence;
}

Status Producer::try_publish(Loan& loan, std::size_t bytes, CudaStream stream,
                             std::uint64_t* sequence) noexcept {
  if (core_ == nullptr || loan.core_ != core_ || bytes > loan.capacity()) {
    return Status::invalid_loan;
  }
  std::uint64_t seq = 0;
  const Status st = core_->publish(loan, bytes, stream, seq);
  if (st == Status::ok && sequence != nullptr) *sequence = seq;
  return st;
}

std::size_t Producer::reap_dead_readers() noexcept {
  return core_->reap();
}
std::string_view Producer::name() const noexcept {
  return core_->name();
}
std::uint64_t Producer::epoch() const noexcept {
  return core_->epoch();
}
const ChannelConfig& Producer::config() const noexcept {
  return core_->config();
}
bool Producer::owns_name() const noexcept {
  return core_->owns_name();
}
std::uint64_t Producer::name_restores() const noexcept {
  return core_->name_restores();
}

// ---- Loan ----------------------------------------------------------------------------------

Loan::Loan(Loan&& other) noexcept
    : core_(std::exchange(other.core_, nullptr)), fields_(other.fields_) {
  other.fields_.data = nullptr;
}

Loan& Loan::operator=(Loan&& other) noexcept {
  if (this != &other) {
    if (core_ != nullptr) core_->drop(*this);
    core_ = std::exchange(other.core_, nullptr);
    fields_ = other.fields_;
    other.fields_.data = nullptr;
  }
  return *this;
}

Loan::~Loan() {
  if (core_ != nullptr) core_->drop(*this);
}

void Loan::reset() noexcept {
  core_ = nullptr;
  fields_.data = nullptr;
}

bool Loan::set_metadata(std::span<const std::byte> bytes) noexcept {
  if (core_ == nullptr || core_->forked()) return false;
  return core_->set_metadata(fields_.slot, bytes.data(), bytes.size());
}

bool Loan::set_tensor(const TensorDesc& tensor) noexcept {
  if (core_ == nullptr || core_->forked()) return false;
  return core_->set_tensor(fields_.slot, tensor);
}

void Loan::set_capture_time_ns(std::uint64_t ns) noexcept {
  if (core_ == nullptr || core_->forked()) return;
  core_->set_capture_time_ns(fields_.slot, ns);
}

std::size_t Loan::metadata_capacity() const noexcept {
  return core_ != nullptr ? core_->metadata_capacity() : 0;
}

}  // namespace ipcring
