// result.hpp — what the hot path returns: a value, or a Status that says why there is none.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

namespace ipcring {

// [[nodiscard]]: a Status names a failure the caller must handle; dropping one is a warning.
// (clang-format misreads an attribute between `enum class` and the name.)
// clang-format off
enum class [[nodiscard]] Status : std::uint8_t {
  ok = 0,
  no_free_slot,      // loan: every slot is held by a reader or is the newest frame
  timeout,           // a bounded wait ran out
  no_frame,          // try_read: no frame newer than the last one read
  producer_gone,     // the producer died or closed; a new producer may take over (new epoch)
  evicted,           // this reader's lease was taken away (reaped, or the table was repaired)
  max_held,          // this reader already holds max_held frames; release one first
  loan_outstanding,  // the producer already has a loan; publish or drop it first
  forked,            // the object was inherited through fork(); use it in the parent only
  backend_error,     // the frame pool failed (CUDA error); details in the log of the call
  invalid_loan,      // try_publish: a loan of another producer, empty or published, or too long
};
// clang-format on

[[nodiscard]] const char* to_string(Status s) noexcept;

// Like std::expected<T, Status> (C++23), kept minimal: either a T or a non-ok Status.
// [[nodiscard]]: a dropped Result<Loan> or Result<Frame> would silently give its slot back.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T&& value) noexcept : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status s) noexcept : status_(s) {}                 // NOLINT(google-explicit-constructor)

  explicit operator bool() const noexcept { return value_.has_value(); }
  bool has_value() const noexcept { return value_.has_value(); }
  Status status() const noexcept { return value_ ? Status::ok : status_; }

  T& operator*() & noexcept { return *value_; }
  T&& operator*() && noexcept { return std::move(*value_); }
  T* operator->() noexcept { return &*value_; }
  const T* operator->() const noexcept { return &*value_; }
  T& value() & noexcept { return *value_; }
  T&& value() && noexcept { return std::move(*value_); }

 private:
  std::optional<T> value_;
  Status status_ = Status::ok;
};

}  // namespace ipcring
