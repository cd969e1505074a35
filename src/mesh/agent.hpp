#pragma once

// Internal: the runtime's agent in every proc (ProcAgent), which spawns and stops actors there
// for whoever started the proc, and the hook a proc runs before its actors stop.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "actor/debug.hpp"
#include "actor/metrics.hpp"
#include "actor/stacks.hpp"
#include "actor/trace.hpp"
#include "baton/actor/actor.hpp"
#include "baton/actor/actor_ref.hpp"
#include "baton/actor/task.hpp"
#include "baton/mesh/cast.hpp"
#include "baton/wire/bytes.hpp"
#include "baton/wire/ids.hpp"

namespace baton::detail {

/// What a proc does, before its actors stop, to stop what it owns (its own proc meshes); set
/// by the host layer.
void set_shutdown_hook(std::function<void()> hook);
void run_shutdown_hook();

/// One actor of a proc, as whoever looks inside the job sees it (the admin API).
struct ActorReport {
  ActorId id;
  std::string type;
  std::string status;         // "starting", "running", "stopped" or "failed"
  std::uint64_t handled = 0;  // messages its endpoints handled
  std::uint64_t queued = 0;   // messages in its mailbox
  std::string running;        // the endpoint running now, "" if none
  double running_s = 0;       // for how long
  double mean_ms = 0;         // an endpoint's mean time, and its longest
  double max_ms = 0;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, type, status, handled, queued, running, running_s, mean_ms, max_ms);
  }
};

/// The live actors of `proc`, by id.
std::vector<ActorReport> actor_reports(Proc& proc);

/// Every thread of the process of `proc` and where it is, each marked with the actors of `proc`
/// it runs now.
std::vector<ThreadStack> proc_stacks(Proc& proc);

/// The runtime's agent in every proc ("agent"): spawns and stops actors there for the
/// controller.
class ProcAgent : public Actor {
 public:
  /// Spawns the member of the mesh `place.mesh` at `place.rank`; its failures go to
  /// `place.owner` (see Actor::supervise), wherever that owner lives.
  ActorId spawn(std::uint64_t factory, const std::string& head, const std::vector<Bytes>& parts,
                const Supervisor& place);
  /// Learns this proc's node of the tree of the mesh `key` (CA-3).
  int learn(std::uint64_t key, const CastNode& node);
  int ping() { return 1; }
  Task<int> stop_actor(ActorId id);
  /// Drops this proc's node of the tree of the mesh `key`: every member of it stopped.
  int forget(std::uint64_t key);
  /// Orderly stop of the whole proc: the proc meshes it owns stop first, then every actor
  /// after the messages already queued for it, running its on_stop hook.
  Task<int> shutdown();
  /// This proc's actors and what each does (see actor_reports).
  std::vector<ActorReport> actors() { return actor_reports(proc()); }
  /// Every thread of this proc and its stack (see proc_stacks).
  std::vector<ThreadStack> stacks() { return proc_stacks(proc()); }
  /// This proc's metrics (see actor/metrics.hpp).
  ProcMetrics metrics() { return proc_metrics(proc()); }
  /// Turns observing on or off in this proc's process (see actor/metrics.hpp).
  int observe(bool on) {
    set_observing(on);
    return 0;
  }
  /// Starts or stops recording a trace in this proc's process (see actor/trace.hpp).
  int trace_on(bool on) {
    set_tracing(on);
    return 0;
  }
  /// What this proc's process recorded since the last time.
  std::vector<TraceRecord> trace_take() { return take_trace(); }
  /// The Python actors of this proc's process paused in breakpoint() (see actor/debug.hpp).
  std::vector<DebugSession> debug_sessions() { return detail::debug_sessions(); }
  /// One exchange with a paused actor's debugger: `line` its next command if `send`.
  DebugOutput debug_io(std::uint64_t session, const std::string& line, bool send) {
    return detail::debug_io(session, line, send);
  }
  /// Ends this proc's process at once with SIGKILL, as a crash would (`baton kill`).
  void die();
  static constexpr auto endpoints =
      baton::endpoints<&ProcAgent::spawn, &ProcAgent::learn, &ProcAgent::ping,
                       &ProcAgent::stop_actor, &ProcAgent::forget, &ProcAgent::shutdown,
                       &ProcAgent::actors, &ProcAgent::stacks, &ProcAgent::die, &ProcAgent::metrics,
                       &ProcAgent::observe, &ProcAgent::trace_on, &ProcAgent::trace_take,
                       &ProcAgent::debug_sessions, &ProcAgent::debug_io>();
};

/// A reference to the agent of `proc`.
ActorRef<ProcAgent> agent_of(const ProcId& proc);

}  // namespace baton::detail
