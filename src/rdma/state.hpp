#pragma once

// Internal: what the rdma layer keeps for one runtime, as an extension of its node (see
// actor/node.hpp): the settings and counters, the UCX worker with its progress thread, the
// worker threads and timers, the UCX staging memory and the UCX peers that once stalled. A new
// runtime starts with fresh ones, and their threads end with the last transfer of the runtime that
// made them.

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "baton/rdma/rdma.hpp"
#include "net/work_queue.hpp"
#include "rdma/ucx.hpp"

namespace baton::rdma_detail {

RdmaBackend backend_from_env();
std::chrono::milliseconds timeout_from_env();

/// The settings of this runtime's transfers, and what rdma_stats() counts.
struct Settings {
  std::atomic<RdmaBackend> backend{backend_from_env()};
  std::atomic<std::int64_t> timeout_ms{timeout_from_env().count()};
  /// How long a UCX read of one chunk may go unanswered before it moves through messages (see
  /// Pump::move_by_ucx); tests that stop an owner set it beyond their transfer timeout.
  std::atomic<std::int64_t> ucx_stall_ms{2000};
  std::atomic<std::uint64_t> local{0}, gpu_ipc{0}, ucx{0}, messages{0}, chunks{0}, cma{0};
  /// Bytes the transfers started here asked for, by backend (RdmaBackend's value) and
  /// direction: the admin API's baton_rdma_bytes_total.
  std::array<std::atomic<std::uint64_t>, 6> bytes_read{}, bytes_written{};
  void moved(RdmaBackend by, std::size_t size, bool reading) {
    (reading ? bytes_read : bytes_written)[static_cast<std::size_t>(by)] += size;
  }
  /// Set once the kernel refused cross-memory attach here (cma.cpp); tests set
  /// cma_refuse_for_test to have every attempt refused as such a kernel would.
  std::atomic<bool> cma_refused{false};
  std::atomic<bool> cma_refuse_for_test{false};
  void refuse_cma(std::string why) {
    std::lock_guard lock(hook_mu_);
    if (cma_refused.exchange(true)) return;
    cma_refused_why_ = std::move(why);
  }
  void forget_cma_refusal() {
    std::lock_guard lock(hook_mu_);
    cma_refused = false;
    cma_refused_why_.clear();
  }
  std::string cma_refused_why() {
    std::lock_guard lock(hook_mu_);
    return cma_refused_why_;
  }

  /// Counts a chunk that landed, then runs the chunk hook, if any, before the transfer issues
  /// its next chunk: a test acts at a known point of a transfer instead of polling the count.
  void chunk_landed() {
    ++chunks;
    std::lock_guard lock(hook_mu_);
    if (chunk_hook_) chunk_hook_();
  }
  /// Installs `hook` (empty: none) and returns the one it replaces. Once this returns, the old
  /// hook is not running and never runs again.
  std::function<void()> exchange_chunk_hook(std::function<void()> hook) {
    std::lock_guard lock(hook_mu_);
    std::swap(hook, chunk_hook_);
    return hook;
  }

 private:
  std::mutex hook_mu_;
  std::function<void()> chunk_hook_;
  std::string cma_refused_why_;  // under hook_mu_
};

/// UCX workers that once left a read unanswered (see Pump::move_by_ucx).
class StalledOwners {
 public:
  void add(const std::string& worker) {
    std::lock_guard lock(mu_);
    workers_.insert(worker);
  }
  bool contains(const std::string& worker) const {
    std::lock_guard lock(mu_);
    return workers_.count(worker) != 0;
  }

 private:
  mutable std::mutex mu_;
  std::set<std::string> workers_;
};

/// Staging memory for UCX chunks (kUcxChunk bytes each), a few kept for reuse: a fresh page
/// costs more to touch than to copy. A slot keeps the pool until it comes back.
class Staging : public std::enable_shared_from_this<Staging> {
 public:
  using Slot = std::shared_ptr<std::byte>;
  Slot take();
  Staging() = default;
  ~Staging();
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

 private:
  void give_back(std::byte* p);
  std::mutex mu_;
  std::vector<std::byte*> free_;
};

/// Two threads that run copies and UCX submissions, so no caller or I/O thread blocks on a large
/// transfer; and the timers of timeouts and watches, whose jobs run on those threads too.
class Workers {
 public:
  using TimerKey = net::TimerQueue::Key;
  void post(std::function<void()> job) { (void)jobs_.post(std::move(job)); }
  /// Runs `job` on a worker thread at `when`, unless cancelled before.
  TimerKey at(std::chrono::steady_clock::time_point when, std::function<void()> job) {
    return timers_.at(when, [this, job = std::move(job)]() mutable { post(std::move(job)); });
  }
  void cancel(const TimerKey& key) { timers_.cancel(key); }

 private:
  net::JobQueue jobs_{2};
  net::TimerQueue timers_;  // goes first: no timer posts into the stopped queue
};

class RdmaState {
 public:
  Settings settings;
  StalledOwners stalled;
  const std::shared_ptr<Staging> staging = std::make_shared<Staging>();

  /// The runtime's UCX worker, started on first use; null (and `why` set) if UCX cannot start.
  Ucx* ucx(std::string* why = nullptr) { return ucx_shared(why).get(); }
  /// The same, for what must keep it until it lets go of its memory (a registered region).
  std::shared_ptr<Ucx> ucx_shared(std::string* why = nullptr) {
    std::lock_guard lock(ucx_mu_);
    if (!ucx_tried_) {
      ucx_tried_ = true;
      ucx_ = Ucx::start(&ucx_error_);
    }
    if (ucx_ == nullptr && why != nullptr) *why = ucx_error_;
    return ucx_;
  }

 private:
  std::mutex ucx_mu_;
  bool ucx_tried_ = false;    // under ucx_mu_
  std::shared_ptr<Ucx> ucx_;  // under ucx_mu_
  std::string ucx_error_;     // under ucx_mu_

 public:
  Workers workers;  // goes first: its threads end before what their jobs use
};

/// This runtime's rdma state (throws UsageError without a runtime). A transfer holds it, so its
/// threads serve the transfer to its end even if the runtime goes first.
std::shared_ptr<RdmaState> rdma_state();

}  // namespace baton::rdma_detail
