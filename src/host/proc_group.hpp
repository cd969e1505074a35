#pragma once

// Internal: the worker processes of one spawn_procs call and their orderly stop, one group after
// another on the runtime's stop thread (procs.cpp).

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "baton/actor/future.hpp"
#include "baton/mesh/mesh.hpp"
#include "host/children.hpp"
#include "net/work_queue.hpp"

namespace baton::internal {

/// Runs the orderly stops of proc groups one after another, on a thread that lives as long as
/// the runtime, so that stop() returns its future at once; what is still queued runs before the
/// runtime goes. (on_this_thread(): a continuation of a stop's future runs there.)
using StopWorker = net::JobQueue;

/// Worker processes started by one spawn_procs call.
class LocalProcGroup final : public detail::ProcGroup,
                             public std::enable_shared_from_this<LocalProcGroup> {
 public:
  /// `gone` runs once every process has exited, to let go of what was theirs.
  LocalProcGroup(ChildWatcher& watcher, StopWorker& stops, std::chrono::milliseconds grace,
                 std::function<void(const std::vector<ProcId>&)> gone)
      : watcher_(watcher), stops_(stops), grace_(grace), gone_(std::move(gone)) {}
  ~LocalProcGroup() override { stop_here(grace_); }

  /// Set before the group's processes are told to stop, so their exits read as stops.
  std::shared_ptr<std::atomic<bool>> stopping = std::make_shared<std::atomic<bool>>(false);

  /// False, adding nothing, once the group began to stop: the caller must kill `pid` itself.
  bool add(pid_t pid, ProcId name) {
    std::lock_guard lock(mu_);
    if (phase_ != Phase::idle) return false;
    children_.push_back({pid, std::move(name)});
    return true;
  }

  std::chrono::milliseconds default_grace() const override { return grace_; }
  std::shared_ptr<std::atomic<bool>> stopped_flag() const override { return stopping; }

  /// Queues the stop on the runtime's stop thread (runs it at once when called there) and
  /// returns its future; every call returns the future of the first.
  Future<void> stop(std::chrono::milliseconds grace) override;
  /// Runs the stop on the calling thread, unless it already runs elsewhere, and returns once
  /// it is over: for the runtime's own paths that must wait (its end, a signal, a proc's
  /// shutdown, a failed spawn).
  void stop_here(std::chrono::milliseconds grace);

 private:
  enum class Phase { idle, queued, running, done };
  struct Child {
    pid_t pid;
    ProcId name;
  };
  /// The queued stop, unless another caller took it over.
  void run_queued(std::chrono::milliseconds grace);
  /// The orderly stop itself; completes `done_`.
  void run(std::chrono::milliseconds grace);

  ChildWatcher& watcher_;
  StopWorker& stops_;
  const std::chrono::milliseconds grace_;
  std::function<void(const std::vector<ProcId>&)> gone_;
  std::mutex mu_;
  Phase phase_ = Phase::idle;
  Promise<void> done_;
  std::vector<Child> children_;
};

}  // namespace baton::internal
