#pragma once

// Internal: one rank's end of a group (Communicator::Impl): its collectives, in order on a thread
// of its own or, when small and nothing is before them, started on the calling thread; what it
// does when one fails.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "actor/metrics.hpp"
#include "baton/collective/collective.hpp"
#include "collective/exchange.hpp"
#include "collective/nccl.hpp"
#include "collective/rendezvous.hpp"
#include "net/work_queue.hpp"

namespace gloo::rendezvous {
class Context;
}  // namespace gloo::rendezvous

namespace baton::collective {

struct Communicator::Impl {
  Group group;
  int rank = 0;
  Proc* proc = nullptr;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::unique_ptr<nccl::DeviceComm> device_comm;  // made by the first collective on a device
  std::unique_ptr<SmallExchange> small;           // host buffers up to its kMaxBytes
  std::uint32_t next_tag = 0;
  /// How long this proc's collectives took, by operation (baton_collective_duration_seconds).
  std::shared_ptr<detail::CallTimes> times;
  /// Collectives this rank has entered, as its Peer tells the others (Progress).
  std::shared_ptr<std::atomic<std::uint64_t>> entered =
      std::make_shared<std::atomic<std::uint64_t>>(0);

  std::string broken;                    // why the group can be used no more (the queue's thread's)
  std::atomic<bool> ready{false};        // joined: set on the queue's thread
  std::atomic<std::uint64_t> queued{0};  // ops posted to the queue and not yet done
  // This rank's operations, in order, on a thread of their own: it goes after the timers,
  // running what is queued while the rest is still there.
  net::JobQueue queue;
  /// A collective started on the calling thread that failed: the rank's thread breaks the group
  /// for it (break_for_failed) before it runs anything else.
  struct Failed {
    std::string what;
    std::exception_ptr error;
    Promise<void> done;
  };
  // Under watch_mu: when to look again whether a collective started on the calling thread is
  // still under way, and one that failed.
  std::mutex watch_mu;
  bool watch_armed = false;   // a look is due
  std::uint64_t watched = 0;  // the last collective handed to the queue's thread to watch
  std::optional<Failed> failed_here;
  net::TimerQueue timers;  // the first member to go: no look runs once the rest goes

  /// A collective started on the calling thread and still under way this long is watched by
  /// the rank's thread.
  static constexpr auto kWatchAfter = std::chrono::milliseconds(20);

  /// `self`'s rank `rank` of `group`: its Peer spawned, its queue's thread started.
  Impl(const Group& group, int rank, Actor& self);
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  std::chrono::milliseconds timeout() const { return std::chrono::milliseconds(group.timeout_ms); }

  /// A collective under way ends first (its done uses the rest), as a queued one runs first.
  ~Impl();

  /// The queue's first job: Gloo writes to its peers' sockets from the queue's thread and from
  /// the device thread it starts there (which inherits this mask): a write to a rank that died
  /// must fail with EPIPE, not kill this process with SIGPIPE.
  static void block_sigpipe();

  /// Runs `op` (named `what`) on this rank's thread, in order; a failure breaks the group. In a
  /// group of one, an op on host memory (`local`) with nothing queued before it runs here and
  /// now: there is no one to wait for, and the two wake-ups of a trip to the thread would be
  /// most of its time.
  Future<void> submit(const std::string& what, std::function<void()> op, bool local = false);

  /// Runs `op` (named `what`) and sets `done`; a failure breaks the group.
  void run(const std::string& what, const std::function<void()>& op, Promise<void>& done);

  /// What the stall watch logs of this rank's collective number `index` (`what`), waiting for
  /// `waited_s`: the ranks that have not entered it yet (each rank's Peer asked).
  std::string stall_report(const std::string& what, std::uint64_t index, double waited_s) const;

  /// The ranks that do not answer a ping (all asked at once), named; empty when all answer.
  std::string gone() const;

  /// How long the other ranks' peers are given to answer: the group's timeout, 5 s at most.
  std::chrono::milliseconds peer_wait() const;

  /// This rank's communicator on `device`, made (with rank 0's id, sent through the group's
  /// store) by the first collective on device memory.
  nccl::DeviceComm& device(int index);

  /// Joins the ranks' small exchange: this rank's port out through the group's store, every
  /// rank's in.
  void join_small(GlooStore& store);

  /// What a small collective's wait does when a missing rank's link closed.
  SmallExchange::CheckGone check_gone() const;

  /// Whether the host collective `shape` goes through the small exchange; if not, every rank
  /// has agreed on it there (the same collective, count, type and root) before Gloo's ring runs.
  bool small_or_agreed(const Shape& shape);

  /// Whether the host collective `shape` can start here and now (start_now): a small one, in a
  /// group of more than one, with nothing queued or under way before it.
  bool can_start_now(const Shape& shape) const;

  /// Starts the small collective `shape` (named `what`) from `in` here and now, its parts sent
  /// from the calling thread; the result goes to `out` (then `after` runs) on the thread that
  /// brings the last part, which completes the future: no trip to the rank's thread and back,
  /// two wake-ups fewer. The rank's thread watches it only if it outlasts kWatchAfter (a rank
  /// gone or silent). Only when can_start_now().
  Future<void> start_now(const std::string& what, const Shape& shape, const void* in, void* out,
                         std::function<void()> after, Keep keep);

  /// Looks again in kWatchAfter whether a collective started here and now is still under way,
  /// unless a look is due already.
  void arm_watch();

  /// The timer's look: a collective under way for kWatchAfter is handed to the rank's thread,
  /// which watches it (names a rank that is gone, or times it out); while one is under way, the
  /// next look is due in kWatchAfter.
  void look();

  /// `count` elements at `data` reduced over the ranks in place (for avg, summed: the caller
  /// divides): a small buffer through the small exchange, a larger one through Gloo's ring.
  void allreduce_host(void* data, std::size_t count, DType type, ReduceOp op,
                      Shape::Op what = Shape::allreduce);

  /// The group is broken: its connections close at once (so the ranks waiting on this one fail
  /// too, not at their timeout), and the ranks that do not answer are named (unless `named`:
  /// `why` names them already).
  void fail(const std::string& what, const std::string& why, bool named = false);

  /// On the rank's thread: breaks the group for a collective started on the calling thread
  /// that failed, if one did, and fails its future.
  void break_for_failed();

  /// Connects to the other ranks (Gloo's full mesh, the small exchange), on the rank's thread.
  Future<void> connect();
};

}  // namespace baton::collective
