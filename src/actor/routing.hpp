#pragma once

// Internal: how messages reach actors and ports of other processes: over links (routes, dialling
// peers, reply ports across a link), and the port where casts arrive. In this process they go
// through the node's directory (directory.hpp); replies in replies.hpp; failures in failures.hpp.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actor/message.hpp"
#include "actor/proc_state.hpp"
#include "baton/net/link.hpp"

namespace baton::detail {

/// Hears how a dialled link ended, and why.
using LostHook = std::function<void(net::LinkEnd end, const std::string& reason)>;
/// Links to `peer` at `address` from `state`'s I/O thread (see Proc::connect).
void connect_state(const std::shared_ptr<ProcState>& state, const ProcId& peer,
                   const Address& address, LostHook on_lost);
/// The link to `peer` and the local proc that owns it, dialling the peer first if a reference
/// said where it listens; both null if it cannot be reached.
std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer);
/// Closes `link`, whose peer sent what this process cannot take: said here at warn level, and
/// the peer hears `why` with the link's goodbye.
void refuse_link(net::Link& link, const std::string& why);
/// Sends an envelope to a proc in another process (see route_to); false if it cannot.
bool send_to_proc(const ProcId& peer, Envelope env);
/// Opens a port on `local` for one value expected from `peer`; if the link to `peer` closes
/// first, the sink's link_lost() runs.
PortId open_reply_port(ProcState& local, const ProcId& peer, PortSinkPtr sink);

/// The envelope of a call of `endpoint` on `target` from `sender`, its reply (if any) to
/// `reply_to`: what ActorRef::call sends, and a cast to a member that is a leaf of its tree.
Envelope call_envelope(const ActorId& sender, const ActorId& target, std::uint64_t endpoint,
                       const std::optional<PortId>& reply_to, Body args);
/// Queues a call to a local actor as if it came from `sender`; a null reply makes it one-way.
/// `from`, the link it arrived on, stops reading while the actor's mailbox is over the limit.
void deliver_local_call(ProcState& local, const ActorId& target, std::uint64_t endpoint_id,
                        const ActorId& sender, Body args, std::shared_ptr<StateBase> reply,
                        const std::shared_ptr<net::Link>& from = nullptr);
/// Sends a value to a port, local or in another process, as `from`; logs it if undeliverable
/// and returns why (nullopt once sent).
std::optional<std::string> route_remote_port_or_local(const PortId& port, const Body& body,
                                                      const ActorId& from);

/// Casts (the mesh layer's tree) arrive at this port of a proc and go to the cast handler,
/// which runs on the I/O thread that received them, in link order.
constexpr std::uint64_t kCastPort = ~std::uint64_t{0} - 1;
using CastHandler = void (*)(const std::shared_ptr<ProcState>& local,
                             const std::shared_ptr<net::Link>& link, Envelope env);
void set_cast_handler(CastHandler handler);  // in the node of this thread
void set_cast_handler(Node& node, CastHandler handler);

/// How a cast reaches `peer` from `local`, in one look at the node's router: whether the peer's
/// proc is known to have failed (and how), else the link to it and the local proc that owns
/// that link, dialling the peer at `address` (where its proc listens) if no link is up yet;
/// link and owner are null if it cannot be reached.
struct CastRoute {
  std::shared_ptr<net::Link> link;
  std::shared_ptr<ProcState> owner;
  std::optional<std::string> failed;
};
CastRoute route_for_cast(ProcState& local, const ProcId& peer, const std::string& address);

}  // namespace baton::detail
