#pragma once

// Internal: how messages find actors and ports: in this process through the node's directory,
// in others through the router the remote layer installs (remote.cpp, router.cpp).

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actor/message.hpp"
#include "actor/proc_state.hpp"

namespace baton::detail {

/// The proc `id` in this process (see Node), or null.
std::shared_ptr<ProcState> find_proc(const ProcId& id);

struct Factories {
  Factory make = nullptr;
  const ActorTypeInfo* type = nullptr;
};
const Factories* find_factory(std::uint64_t id);

/// A port that takes one value (a reply) and is closed by it; see open_reply_port().
class ReplySinkBase : public PortSink {};

/// Links to `peer` at `address` from `state`'s I/O thread (see Proc::connect).
void connect_state(const std::shared_ptr<ProcState>& state, const ProcId& peer,
                   const Address& address, std::function<void(const std::string&)> on_lost);
/// The link to `peer` and the local proc that owns it, dialling the peer first if a reference
/// said where it listens; both null if it cannot be reached.
std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer);
/// Sends an envelope to a proc in another process (see route_to); false if it cannot.
bool send_to_proc(const ProcId& peer, Envelope env);
/// Opens a port on `local` for one value expected from `peer`; if the link to `peer` closes
/// first, the sink's link_lost() runs.
PortId open_reply_port(ProcState& local, const ProcId& peer, PortSinkPtr sink);

/// Queues a call to a local actor as if it came from `sender`; a null reply makes it one-way.
/// `from`, the link it arrived on, stops reading while the actor's mailbox is over the limit.
void deliver_local_call(ProcState& local, const ActorId& target, std::uint64_t endpoint_id,
                        const ActorId& sender, Body args, std::shared_ptr<StateBase> reply,
                        const std::shared_ptr<net::Link>& from = nullptr);
/// A reply state that hands its outcome to `out` as a status-tagged body.
std::shared_ptr<StateBase> make_status_reply(std::function<void(Body)> out);
/// Sends a value to a port, local or in another process, as `from`; logs it if undeliverable
/// and returns why (nullopt once sent).
std::optional<std::string> route_remote_port_or_local(const PortId& port, const Body& body,
                                                      const ActorId& from);
/// The proc that dials other processes from this one (the last to serve), or null.
std::shared_ptr<ProcState> home_proc();
/// The sender of a message sent now: the running actor, else `fallback`'s client.
const ActorId& current_sender(const ProcState* fallback);
/// Lets the host layer say, when the link to a peer closes, whether the peer was a child process
/// that exited (waiting a little for it), and how: calls waiting on it then fail with a
/// SupervisionError carrying that report, and later calls to it fail at once.
void set_exit_probe(std::function<std::optional<std::string>(const std::string& peer)> probe);
/// The report of a proc known to have died, if it did.
std::optional<std::string> proc_failure(const ProcId& id);
/// Like proc_failure, but if nothing is known yet and `id` is a child of this process, waits a
/// little for it to be seen exiting (see set_exit_probe). May block: not for I/O threads.
std::optional<std::string> await_proc_failure(const ProcId& id);
/// True if a status-tagged reply says its member failed or could not be reached (its proc died,
/// its link was lost), as opposed to a value or an endpoint's own throw.
bool reply_is_member_lost(const Body& reply);
/// True if a status-tagged reply says its message was lost with a link.
bool reply_is_link_lost(const Body& reply);
/// A failure as a status-tagged body.
Body failure_reply(std::exception_ptr e);
/// Completes `state` from a status-tagged body: the value, or the remote failure.
/// `point`, if given, is the replying actor's place in a mesh, for an ActorError.
void complete_from_reply(StateBase& state, const Body& body, std::string_view endpoint,
                         const Point* point = nullptr);

/// Casts (the mesh layer's tree) arrive at this port of a proc and go to the cast handler,
/// which runs on the I/O thread that received them, in link order.
constexpr std::uint64_t kCastPort = ~std::uint64_t{0} - 1;
using CastHandler = void (*)(const std::shared_ptr<ProcState>& local,
                             const std::shared_ptr<net::Link>& link, Envelope env);
void set_cast_handler(CastHandler handler);

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

/// The sizes of the tables this process keeps (for tests that check they do not grow).
struct TableSizes {
  std::size_t procs = 0;      // in the node's directory
  std::size_t actors = 0;     // live actors of the proc asked about
  std::size_t ended = 0;      // ended actors it remembers
  std::size_t ports = 0;      // its open ports
  std::size_t routes = 0;     // links to other processes
  std::size_t addresses = 0;  // procs whose address is known
  std::size_t failures = 0;   // procs known to have died
  bool operator==(const TableSizes&) const = default;
};
TableSizes table_sizes(ProcState& proc);

/// Returns a message for an actor that is not there: a failed one (remembered by `proc`, if
/// given) fails it as actor_failed, any other as unknown_actor; `where` says where it looked.
void return_missing(Message& m, const ActorId& target, ProcState* proc, const std::string& where);
/// Returns a message for `target` to its sender as undeliverable, or fails its reply
/// (with a SupervisionError if the actor failed).
void return_to_sender(Message& m, const PortId& target, UndeliverableError::Reason reason,
                      const std::string& why);
/// Hands a returned message to its sender `from`: the actor's handle_undeliverable(), its
/// proc's handler when it was sent from outside actors, or the sender's process over a link.
void deliver_undeliverable(const ActorId& from, Undeliverable u);

}  // namespace baton::detail
