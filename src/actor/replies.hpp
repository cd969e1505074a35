#pragma once

// Internal: replies as status-tagged bodies (a value, an endpoint's throw, a member lost), and
// messages returned to their senders as undeliverable.

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "actor/message.hpp"
#include "baton/actor/port.hpp"

namespace baton::detail {

/// A port that takes one value (a reply) and is closed by it; see open_reply_port().
class ReplySinkBase : public PortSink {};

/// A reply state that hands its outcome to `out` as a status-tagged body.
std::shared_ptr<StateBase> make_status_reply(std::function<void(Body)> out);

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
