#pragma once

// Internal: a proc's state: its actors and ports, its links, its background thread.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "actor/extensions.hpp"
#include "actor/metrics.hpp"
#include "actor/node.hpp"
#include "baton/actor/proc.hpp"
#include "baton/net/link.hpp"
#include "net/counters.hpp"
#include "net/work_queue.hpp"

namespace baton::detail {

class ProcState : public std::enable_shared_from_this<ProcState> {
 public:
  ProcState(Proc::Options options, Executor* executor, std::unique_ptr<ThreadPool> pool);
  ProcState(const ProcState&) = delete;
  ProcState& operator=(const ProcState&) = delete;
  ~ProcState() { stop_background(); }

  /// How an actor ended, for a message that names it later. The last kEndedKept are kept,
  /// and a mesh's members are forgotten when the whole mesh is gone (forget_ended): a proc that
  /// runs many meshes does not grow with them.
  struct Ended {
    bool failed = false;
    std::string why;
  };
  static constexpr std::size_t kEndedKept = 1024;

  Proc::Options options;
  ProcId id;
  ActorId client;              // the sender of messages sent from outside actors
  std::shared_ptr<Node> node;  // what this process's procs share
  Executor* executor;
  std::unique_ptr<ThreadPool> pool;
  Proc* owner = nullptr;

  std::mutex mu;
  std::unordered_map<ActorId, CellPtr> actors;  // live actors: an ended one leaves (see ended)
  std::unordered_map<std::string, std::uint64_t> next_index;
  std::unordered_map<std::uint64_t, PortSinkPtr> ports;
  std::uint64_t next_port = 1;
  /// Ports closed before their last value came (a stream abandoned half way), newest last and
  /// at most kAbandonedPorts: what still arrives for them is dropped without a warning.
  static constexpr std::size_t kAbandonedPorts = 1024;
  std::deque<std::uint64_t> abandoned_ports;
  std::condition_variable idle_cv;
  std::size_t live = 0;  // cells not yet stopped or failed
  bool stopping = false;
  std::vector<std::function<void()>> stop_hooks;  // run once, before any actor is told to stop
  bool hooks_ran = false;
  std::atomic<bool> closed{false};

  // Links to procs in other processes (see remote.cpp); created on first serve() or connect().
  std::unique_ptr<net::IoThread> io;
  std::vector<std::unique_ptr<net::Listener>> listeners;  // one per serve()
  std::atomic<std::uint64_t> envelopes_sent{0};           // over links, by this proc
  /// Round trips of this proc's remote calls, by endpoint (metrics.hpp).
  CallTimes call_times;
  /// What links of this proc carried before they closed, by kind of link (metrics.hpp).
  void retire_traffic(const std::string& kind, const net::LinkCounters& c) {
    std::lock_guard lock(traffic_mu_);
    net::LinkCounters& k = retired_[kind];
    k.sent_messages += c.sent_messages;
    k.sent_bytes += c.sent_bytes;
    k.received_messages += c.received_messages;
    k.received_bytes += c.received_bytes;
  }
  std::map<std::string, net::LinkCounters> retired_traffic() const {
    std::lock_guard lock(traffic_mu_);
    return retired_;
  }

 private:
  mutable std::mutex traffic_mu_;
  std::map<std::string, net::LinkCounters> retired_;
  Extensions extensions_;
  net::JobQueue background_;
  std::unordered_map<ActorId, Ended> ended_;  // under mu
  std::deque<ActorId> ended_order_;           // oldest first
  // Members of meshes stopped whole and forgotten (forget_ended), the last kEndedKept: a message
  // that still comes for one was sent to an actor stopped on purpose.
  std::deque<ActorId> stopped_forgotten_;  // under mu

 public:
  /// Runs `f` on this proc's background thread (started on first use, joined when the proc
  /// goes): for work that may wait a little and must hold neither an I/O thread nor an actor's.
  void post_background(std::function<void()> f);
  /// Runs what is queued for the background thread, then joins it.
  void stop_background();

  /// State an upper layer keeps for this proc (the mesh layer's cast nodes), made on first use
  /// and gone with the proc.
  template <class T>
  std::shared_ptr<T> extension() {
    return extensions_.get<T>();
  }

  /// The cells of this proc's live actors, now (for whoever looks inside the job).
  std::vector<CellPtr> live_cells();
  /// The live actor `id` of this proc, or null.
  CellPtr find_actor(const ActorId& actor);

  /// Takes an ended actor out of the table of live ones, and remembers how it ended.
  void actor_ended(const ActorId& actor, bool failed, std::string why);
  /// How `id` ended, if it is one of the ended actors remembered.
  std::optional<Ended> ended(const ActorId& actor);
  /// Forgets that `actor` ended (its whole mesh is gone).
  void forget_ended(const ActorId& actor);
  /// Actors remembered as ended.
  std::size_t ended_count();

  /// Runs the stop hooks, the first time only.
  void run_stop_hooks();
  void cell_finished();
  void report_unhandled(const SupervisionEvent& ev);
  void report_undeliverable(const Undeliverable& u);
};

}  // namespace baton::detail
