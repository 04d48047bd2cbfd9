// core.hpp — the process-side state behind Producer, Reader, Loan and Frame.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/pool.hpp"
#include "follow.hpp"
#include "ipcring/config.hpp"
#include "ipcring/frame.hpp"
#include "ipcring/result.hpp"
#include "lease/lease.hpp"
#include "lease/name_token.hpp"
#include "segment/layout.hpp"
#include "segment/segment.hpp"

namespace ipcring::detail {

class ProducerCore {
 public:
  ProducerCore() = default;
  ~ProducerCore();
  ProducerCore(const ProducerCore&) = delete;
  ProducerCore& operator=(const ProducerCore&) = delete;

  Result<Loan> loan(const std::shared_ptr<ProducerCore>& self,
                    CudaStream stream = nullptr) noexcept;
  std::uint64_t publish(Loan& loan, std::size_t bytes, CudaStream stream);
  void drop(Loan& loan) noexcept;
  std::size_t reap() noexcept;
  bool forked() const noexcept;
  bool set_metadata(std::uint32_t slot, const void* bytes, std::size_t size) noexcept;
  bool set_tensor(std::uint32_t slot, const TensorDesc& tensor) noexcept;
  void set_capture_time_ns(std::uint32_t slot, std::uint64_t ns) noexcept;

  std::string name;
  ChannelConfig config;
  std::shared_ptr<Mapping> mapping;
  SegmentView view;
  std::unique_ptr<ProducerPool> pool;
  std::uint64_t epoch = 0;
  std::uint64_t instance_id = 0;
  std::uint64_t next_sequence = 1;
  std::uint64_t fork_gen = 0;
  std::uint64_t last_reap_ns = 0;
  std::uint64_t reap_period_ns = 0;
  std::uint64_t published = 0;
  std::uint64_t loan_failures = 0;
  std::uint64_t readers_reaped = 0;
  std::uint32_t cursor = 0;                // last slot claimed
  std::uint32_t newest_slot = UINT32_MAX;  // slot of the newest published frame
  bool loan_out = false;
  bool holds_lease = false;
  // Name defence (follow.hpp): the liveness token, the watcher's view of the name, and what
  // defend_name found.
  NameToken token;
  std::shared_ptr<NameWatch> watch;
  std::uint64_t next_defend_ns = 0;
  std::uint64_t name_restores = 0;
  std::uint32_t name_refusals = 0;  // consecutive restores refused by a live producer
  bool name_taken = false;
  std::string name_problem;

 private:
  std::uint32_t find_free(bool allow_newest, std::uint64_t* observed = nullptr) noexcept;
};

class ReaderCore {
 public:
  ReaderCore() = default;
  ~ReaderCore();
  ReaderCore(const ReaderCore&) = delete;
  ReaderCore& operator=(const ReaderCore&) = delete;

  Result<Frame> try_read(const std::shared_ptr<ReaderCore>& self) noexcept;
  Result<Frame> read(const std::shared_ptr<ReaderCore>& self, std::uint64_t timeout_ns) noexcept;
  void release(Frame& frame, CudaStream stream) noexcept;
  bool evicted() const noexcept;
  bool forked() const noexcept;
  // Producer liveness for a waiting reader: false when dead or closed.
  bool producer_alive() noexcept;

  std::string name;
  ReaderOptions options;
  std::shared_ptr<Mapping> mapping;
  SegmentView view;
  std::unique_ptr<ReaderPool> pool;
  std::uint32_t index = 0;
  std::uint64_t bit = 0;
  std::uint64_t entry_generation = 0;
  std::uint64_t instance_id = 0;
  std::uint64_t last_sequence = 0;  // newest sequence read (0: none yet)
  std::uint64_t epoch = 0;          // producer epoch last seen
  bool gone_reported = false;       // producer_gone already returned for this epoch's end
  std::uint64_t overruns = 0;
  std::uint64_t fork_gen = 0;
  std::atomic<std::uint32_t> held{0};
  bool holds_lease = false;
  std::uint64_t follow_next_ns = 0;  // follow.hpp: next look at the name
  std::string follow_error;          // why following the name failed (empty: it did not)

 private:
  static void read_frame_header(const SegmentView& view, std::uint32_t slot, std::uint64_t sequence,
                                Frame& frame) noexcept;
  Result<Frame> claim(const std::shared_ptr<ReaderCore>& self, std::uint64_t target,
                      std::uint64_t head_word, bool& lost) noexcept;
};

}  // namespace ipcring::detail
