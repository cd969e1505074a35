#pragma once

// Internal: Python actors paused in breakpoint(), as whoever debugs the job sees them (the admin
// API, `baton debug`). The Python extension module sets the hook; a process without Python has
// no paused actor.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace baton::detail {

/// An actor of this process paused in a debugger, waiting for a command.
struct DebugSession {
  std::uint64_t id = 0;  // unique in its process
  std::string actor;     // "proc/name[0]"
  std::string mesh;
  std::size_t rank = 0;
  std::string where;  // "file:line in function"
  double paused_s = 0;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, actor, mesh, rank, where, paused_s);
  }
};

/// What a session's debugger wrote since the last time, and where it is now: "paused" (it waits
/// for a command), "running" (a command runs: ask again), "ended" (it was continued, or its
/// endpoint returned) or "gone" (no such session).
struct DebugOutput {
  std::string output;
  std::string state;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(output, state);
  }
};

/// The hook: the paused sessions; and one exchange with a session (`send`: `line` is its next
/// command), waiting up to `wait_ms` for it to pause again or end.
struct Debugger {
  std::function<std::vector<DebugSession>()> sessions;
  std::function<DebugOutput(std::uint64_t id, const std::string& line, bool send, int wait_ms)> io;
  /// Quits every paused session (pdb's `q`: its endpoint raises BdbQuit to its caller).
  std::function<void()> quit_all;
};
void set_debugger(Debugger hook);

/// The paused sessions of this process (none without the hook).
std::vector<DebugSession> debug_sessions();
/// One exchange with session `id` of this process, waiting up to half a second.
DebugOutput debug_io(std::uint64_t id, const std::string& line, bool send);
/// Quits every paused session of this process: what a proc does as it stops, so that its
/// actors stop at once instead of waiting in a debugger nobody will continue.
void debug_quit_all();

}  // namespace baton::detail
