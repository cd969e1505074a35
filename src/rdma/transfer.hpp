#pragma once

// Internal: one transfer and its parts, shared by the backends. rdma.cpp picks a backend for each
// transfer and hands it to one of them, a file each:
//   local.cpp         the owner's own process: a copy
//   gpu_ipc.cpp       device memory of a proc on this host, through a GPU IPC mapping
//   cma.cpp           host memory of a proc on this host, copied by the kernel (cross-memory
//   attach) ucx_transfer.cpp  host memory through UCX, straight or in chunks through staging memory
//   messages.cpp      anything else, in chunks through the owner's rdma actor

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "baton/actor/future.hpp"
#include "baton/rdma/rdma.hpp"
#include "rdma/registry.hpp"
#include "rdma/state.hpp"

namespace baton::rdma_detail {

constexpr std::size_t kChunk = std::size_t{4} << 20;  // messages backend: bytes per message
constexpr std::size_t kWindow = 8;                    // and messages in flight per transfer
// UCX through staging memory: bytes per operation, and operations in flight per transfer.
constexpr std::size_t kUcxChunk = std::size_t{32} << 20;
constexpr std::size_t kUcxWindow = 2;

/// One transfer, made of parts (a check, chunks, a one-sided copy). It completes when every
/// part has, or, after a failure or timeout, once no part that writes on its own (a device copy,
/// a UCX copy straight into the caller's memory) is still running: guarded parts touch the
/// caller's memory under the lock, and are left behind.
class Transfer : public std::enable_shared_from_this<Transfer> {
 public:
  /// Of this runtime (throws UsageError without one): the transfer holds its rdma state.
  explicit Transfer(std::string what) : what_(std::move(what)), state_(rdma_state()) {}
  Future<void> future() const { return promise_.get_future(); }
  /// The settings, threads and UCX worker that serve this transfer.
  RdmaState& state() const { return *state_; }

  void add(bool guarded) {
    std::lock_guard lock(mu_);
    ++pending_;
    if (!guarded) ++unguarded_;
  }
  /// Counts in a part that writes on its own, unless the transfer already failed; false if so.
  bool start_unguarded() {
    std::lock_guard lock(mu_);
    if (failed_) return false;
    ++pending_;
    ++unguarded_;
    return true;
  }
  /// Runs `touch` (a copy into or out of the caller's memory) unless the transfer already
  /// failed; whether it ran.
  template <class F>
  bool guarded(F&& touch) {
    std::lock_guard lock(mu_);
    if (failed_) return false;
    touch();
    return true;
  }
  void done(bool guarded, const std::string& error = {}) {
    std::unique_lock lock(mu_);
    --pending_;
    if (!guarded) --unguarded_;
    if (!error.empty()) fail_locked(error);
    maybe_complete(lock);
  }
  void fail(const std::string& error) {
    std::unique_lock lock(mu_);
    fail_locked(error);
    maybe_complete(lock);
  }
  bool failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }
  bool completed() const {
    std::lock_guard lock(mu_);
    return completed_;
  }
  void arm_timeout() {
    auto ms = std::chrono::milliseconds(state_->settings.timeout_ms.load());
    std::weak_ptr<Transfer> weak = shared_from_this();
    std::lock_guard lock(mu_);
    if (completed_) return;
    timer_ = state_->workers.at(std::chrono::steady_clock::now() + ms, [weak, ms] {
      if (auto op = weak.lock()) {
        op->fail("timed out after " + std::to_string(ms.count()) +
                 " ms (set_rdma_timeout or BATON_RDMA_TIMEOUT_MS allows longer)");
      }
    });
  }

 private:
  void fail_locked(const std::string& error) {
    if (failed_) return;
    failed_ = true;
    error_ = error;
  }
  void maybe_complete(std::unique_lock<std::mutex>& lock) {
    if (completed_ || !(pending_ == 0 || (failed_ && unguarded_ == 0))) return;
    completed_ = true;
    bool failed = failed_;
    std::string message = what_ + ": " + error_;
    auto timer = timer_;
    lock.unlock();
    if (timer) state_->workers.cancel(*timer);
    if (failed) {
      promise_.set_exception(std::make_exception_ptr(RdmaError(message)));
    } else {
      promise_.set_value();
    }
  }

  std::string what_;
  const std::shared_ptr<RdmaState> state_;
  Promise<void> promise_;
  mutable std::mutex mu_;
  int pending_ = 0;
  int unguarded_ = 0;
  bool failed_ = false;
  bool completed_ = false;
  std::string error_;
  std::optional<Workers::TimerKey> timer_;
};
using TransferPtr = std::shared_ptr<Transfer>;

/// The reason a call to the owner's rdma actor failed, for a user.
std::string reason(const std::exception_ptr& e, const RdmaBuffer& buffer);

/// Runs `then(error)` when `f` completes; `error` is empty on success.
template <class T, class F>
void when_done(Future<T> f, const RdmaBuffer& buffer, F then) {
  const auto& state = f.state();
  state->on_ready([state, buffer, then = std::move(then)]() mutable {
    try {
      state->value();  // ready: no wait (and none is allowed on an actor thread)
    } catch (...) {
      then(reason(std::current_exception(), buffer));
      return;
    }
    then(std::string());
  });
}

bool dropped(const std::string& error);

/// Forgets what this process cached for a buffer that turned out dropped.
void forget_cached(RdmaState& state, const RdmaBuffer::Descriptor& d);

/// Reports the end of a part of `op`; a failure is explained by the owner if it is gone (a UCX
/// or IPC error says little about why), else the part's own error stands.
void part_done(const TransferPtr& op, const RdmaBuffer& b, bool guarded, const std::string& error);

/// Asks the owner whether [offset, offset + size) is still registered, then, unless the
/// transfer failed meanwhile, runs `then` on a worker thread; what it throws fails the transfer
/// (explained by the owner if it is gone).
template <class F>
void check_then(const TransferPtr& op, const RdmaBuffer& b, std::size_t offset, std::size_t size,
                F then) {
  op->add(true);
  const auto& d = b.descriptor();
  when_done(detail::owner_of(b).call(&RdmaAgent::check, d.id, offset, size), b,
            [op, b, d, then = std::move(then)](const std::string& error) mutable {
              if (!error.empty()) {
                if (dropped(error)) forget_cached(op->state(), d);
              } else if (!op->failed()) {
                op->add(true);  // held while `then` runs
                op->state().workers.post([op, b, then = std::move(then)]() mutable {
                  try {
                    then();
                  } catch (const std::exception& e) {
                    return part_done(op, b, true, e.what());
                  }
                  op->done(true);
                });
              }
              op->done(true, error);
            });
}

/// GPU IPC mappings of other processes' device memory, opened once per allocation (gpu_ipc.cpp).
class IpcCache {
 public:
  static IpcCache& get();
  std::byte* open(const RdmaBuffer::Descriptor& d);
  void forget(const RdmaBuffer::Descriptor& d);

 private:
  std::mutex mu_;
  std::map<std::string, std::byte*> open_;
};

/// Moves a transfer in chunks: through the owner's rdma actor (the messages backend: kChunk bytes,
/// kWindow in flight), or through UCX into and out of staging memory of this process, for memory
/// UCX cannot map here (kUcxChunk, kUcxWindow: larger, as each asks the owner's worker anew).
/// Either way only guarded copies touch the caller's memory, so a transfer that fails or times out
/// completes at once.
struct Pump : std::enable_shared_from_this<Pump> {
  TransferPtr op;
  RdmaBuffer buffer;
  std::byte* dst = nullptr;        // a read's destination
  const std::byte* src = nullptr;  // a write's source
  std::size_t size = 0, offset = 0, next = 0;
  bool device = false;  // the local memory is device memory
  bool ucx = false;
  std::mutex mu;

  // messages.cpp
  void start();
  void issue();

 private:
  void finished(const std::string& error);
  void move_by_message(std::size_t at, std::size_t len);
  // ucx_transfer.cpp
  void move_by_ucx(std::size_t at, std::size_t len);
};

std::shared_ptr<Pump> make_pump(const TransferPtr& op, const RdmaBuffer& b, void* dst,
                                const void* src, std::size_t size, std::size_t offset);

/// The backends: each sets up the parts of `op` that move `size` bytes at `offset` of `b` into
/// `dst` (a read) or out of `src` (a write); `local_device`: the caller's memory is device memory.
void transfer_local(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                    std::size_t size, std::size_t offset, bool local_device);
void transfer_gpu_ipc(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                      std::size_t size, std::size_t offset, bool local_device);
void transfer_cma(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                  std::size_t size, std::size_t offset, bool local_device);
void transfer_ucx(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                  std::size_t size, std::size_t offset, bool local_device);
void transfer_messages(const TransferPtr& op, const RdmaBuffer& b, void* dst, const void* src,
                       std::size_t size, std::size_t offset, bool local_device);

}  // namespace baton::rdma_detail
