#pragma once

// Internal: procs that died and failures on their way to their owners: supervision events
// handed up (locally or over a link), what is known of dead procs, and how the host layer tells
// of a child process that exited.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "baton/actor/actor_ref.hpp"

namespace baton::detail {

class ProcState;

/// When a peer was seen lost (its link closed, or a cast's item came back lost). The wait for
/// its exit report counts from here, so that procs lost together are waited for together: one
/// wait of RuntimeOptions::exit_wait in all, not one after another.
using LostSince = std::chrono::steady_clock::time_point;
/// What the host layer says of a peer seen lost at `since`: its exit report, if it was a child
/// process that exited (waiting until `since` + exit_wait for it to be seen exiting).
using ExitProbe =
    std::function<std::optional<std::string>(const std::string& peer, LostSince since)>;

/// Lets the host layer say, when the link to a peer closes, whether the peer was a child process
/// that exited (waiting a little for it), and how: calls waiting on it then fail with a
/// SupervisionError carrying that report, and later calls to it fail at once.
void set_exit_probe(ExitProbe probe);
/// The report of a proc known to have died, if it did.
std::optional<std::string> proc_failure(const ProcId& id);
/// When this process last saw its link to `id` close, if it did.
std::optional<LostSince> link_closed_at(const ProcId& id);
/// Like proc_failure, but if nothing is known yet and `id` is a child of this process, waits a
/// little for it to be seen exiting (see set_exit_probe), counting from `since`, when it was seen
/// lost. May block: not for I/O threads.
std::optional<std::string> await_proc_failure(const ProcId& id, LostSince since);

/// Hands `event` to `owner`: an actor here gets it in supervise(); a proc's client here means
/// that proc's unhandled-failure handler; an owner in another process gets it over the link.
/// If the owner cannot be reached, `from` (the proc reporting) handles it as unhandled.
void report_failure_to(const ActorId& owner, SupervisionEvent event, ProcState& from);
/// Sends `event` to `owner` in another process; false if it cannot be reached.
bool forward_failure(const ActorId& owner, const SupervisionEvent& event);
/// Records that the proc `name` died (`report` says how): calls to it fail at once. The last
/// kFailuresKept reports are kept.
void mark_proc_failed(const std::string& name, const std::string& report);
constexpr std::size_t kFailuresKept = 4096;
/// Forgets what this process knows of procs that are gone for good (their group stopped):
/// where they listened, and how they died.
void forget_procs(const std::vector<ProcId>& procs);

}  // namespace baton::detail
