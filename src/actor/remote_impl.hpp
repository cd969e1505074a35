#pragma once

// Internal: what the files of the remote layer share.
//   remote.cpp  envelopes: what arrives on a link and where it goes, status-tagged replies
//   router.cpp  the node's router: links by peer, where procs listen, which procs died,
//               dialling, and Proc's serve/connect
//
// Every envelope names its destination port: port 0 of an actor is its endpoint mailbox, the
// hello port announces the proc at the other end of a new link, and any other port is a port.
//   call:  head = endpoint id, optional reply PortId, then the arguments; parts = their parts
//   reply: head = status byte, then the value (status 0) or the error's fields
// A caller waiting on a reply over a link that closes fails with UndeliverableError(link_lost).

#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "actor/cell.hpp"
#include "actor/directory.hpp"
#include "actor/failures.hpp"
#include "actor/metrics.hpp"
#include "actor/node.hpp"
#include "actor/routing.hpp"

namespace baton::detail::remote {

constexpr std::uint64_t kHelloPort = std::numeric_limits<std::uint64_t>::max();
// A supervision event for the actor (or proc client) named by the destination.
constexpr std::uint64_t kSupervisionPort = kHelloPort - 2;
// A message returned to its sender, named by the destination.
constexpr std::uint64_t kUndeliverablePort = kHelloPort - 3;

enum class ReplyStatus : std::uint8_t {
  ok = 0,
  actor_error = 1,
  supervision = 2,
  undeliverable = 3,
  other = 4
};

struct Route {
  std::weak_ptr<ProcState> local;  // the proc that owns the link and its reply ports
  std::shared_ptr<net::Link> link;
  std::vector<std::uint64_t> pending;  // reply ports of calls still waiting over this link
  bool accepted = false;               // the peer dialled it
};

/// The node's router: everything this process knows of procs in other processes.
class RemoteRouter final : public Router {
 public:
  bool route_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                  std::shared_ptr<StateBase>& reply, const ActorId& sender) override;
  bool route_port(const PortId& port, const Body& body, const ActorId& sender) override;
  bool return_undeliverable(const ActorId& from, const Undeliverable& u) override;
  bool forward_failure(const ActorId& owner, const SupervisionEvent& event) override;
  void close_links(ProcState& proc) override;
  std::shared_ptr<ProcState> home() override;

  /// The link to `peer` and the local proc that owns it, dialling the peer first if a
  /// reference said where it listens; both null if it cannot be reached.
  std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer);
  bool send_to_proc(const ProcId& peer, Envelope env);
  /// A link to `peer` closed: fails the calls waiting on it, with its death if it died.
  void link_closed(const std::string& peer, const std::shared_ptr<net::Link>& link,
                   const std::string& reason);
  /// What link_closed leaves to the proc's background thread: the calls that waited on `peer`
  /// fail, with its death if it died (waiting a little, from `since`, when the link closed, for
  /// its exit report).
  void fail_pending(ProcState& local, const std::string& peer, const std::string& reason,
                    const std::vector<std::uint64_t>& pending, LostSince since);
  /// A reply arrived from `peer` on `port`: the call no longer waits on that link.
  void reply_arrived(const std::string& peer, std::uint64_t port);
  /// A new link to `peer`. A link the peer dialled first stays the route (one sending link per
  /// peer keeps FIFO), except that a link the peer dials again after the one it dialled before
  /// (a new session: it gave the old one up, as after a network cut) replaces that one, whose
  /// waiting calls fail as lost.
  void add_route(const std::string& peer, const std::shared_ptr<ProcState>& local,
                 const std::shared_ptr<net::Link>& link, bool accepted);
  std::optional<std::string> failure_of(const std::string& proc);
  void mark_failed(const std::string& proc, const std::string& report);
  /// Whether `link` is still the route to `peer` (its on_closed has not run yet).
  bool routes_to(const std::string& peer, const std::shared_ptr<net::Link>& link);
  std::optional<std::string> probe(const std::string& peer, LostSince since);

  // Links to procs in other processes, by peer name.
  std::mutex routes_mu;
  std::condition_variable linked;  // notified when a route is added or removed
  std::unordered_map<std::string, Route> routes;

  // Where procs in other processes listen, learned from spawns, serve() and received
  // references; `home` is the proc whose I/O thread dials them on first use.
  std::mutex addresses_mu;
  std::unordered_map<std::string, std::string> addresses;
  std::weak_ptr<ProcState> home_proc;
  std::mutex dialing;  // one lazy connect at a time, so a peer gets one outgoing link
  /// Why and when the last link to each of the kFailuresKept peers last lost closed, until it
  /// links again (under routes_mu): a call sent after the close fails with why.
  struct Closed {
    std::string why;
    LostSince at;
  };
  std::unordered_map<std::string, Closed> closed_why;
  std::deque<std::string> closed_order;
  /// The reason the link to `peer` closed, if it closed and did not link again.
  std::optional<std::string> closed_reason(const std::string& peer);
  /// When it closed, likewise.
  std::optional<LostSince> closed_at(const std::string& peer);
  /// For tests: runs on the dialling thread between a link's start and its route's, where a
  /// dial refused at once may already have closed the link (under routes_mu).
  std::function<void(const std::shared_ptr<net::Link>&)> dial_hook_for_test;

  // Procs of this process's children that died, with what happened (the last
  // kFailuresKept); and the probe that asks the host layer whether a peer whose link closed
  // was a child that exited.
  std::atomic<bool> any_failed{false};  // lets every remote call skip the lock until one dies
  std::mutex failures_mu;
  std::unordered_map<std::string, std::string> failures;
  std::deque<std::string> failure_order;
  ExitProbe exit_probe;

  std::atomic<CastHandler> cast_handler{nullptr};
};

/// The router of `node`, installed on first use.
RemoteRouter& router_of(Node& node);
/// The router of the calling thread's node, or null if there is no node or no link was made.
RemoteRouter* router_here();

/// Hands an envelope that arrived on `link` to its destination in `local`.
void deliver_envelope(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope&& env);
/// Returns the one-way calls a link never delivered to their senders.
void return_unsent(const std::string& peer, const std::string& reason,
                   const std::vector<Envelope>& envs);
/// The reply sink of a call sent over a link: completes `state` from the status-tagged reply,
/// and counts the round trip in `times` (if not null) while its `owner` (whose it is) lives.
PortSinkPtr remote_reply_port(std::shared_ptr<StateBase> state, std::string endpoint,
                              CallHistogram* times = nullptr, std::weak_ptr<ProcState> owner = {});

}  // namespace baton::detail::remote
