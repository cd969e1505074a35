// Envelopes between procs in different processes: what arrives on a link and where it goes,
// and the status-tagged replies of calls (see remote_impl.hpp for the format).

#include <algorithm>
#include <cstdlib>

#include "actor/failures.hpp"
#include "actor/node.hpp"
#include "actor/remote_impl.hpp"
#include "actor/replies.hpp"
#include "actor/routing.hpp"
#include "actor/trace.hpp"
#include "log/log.hpp"

namespace baton::detail {
namespace remote {
namespace {

/// A failure as a status-tagged reply body.
Body encode_failure(std::exception_ptr e) {
  try {
    std::rethrow_exception(std::move(e));
  } catch (const ActorError& err) {
    return encode(static_cast<std::uint8_t>(ReplyStatus::actor_error), err.actor(), err.endpoint(),
                  err.remote_message());
  } catch (const UndeliverableError& err) {
    return encode(static_cast<std::uint8_t>(ReplyStatus::undeliverable),
                  static_cast<std::uint8_t>(err.reason()), std::string(err.what()));
  } catch (const SupervisionError& err) {
    return encode(static_cast<std::uint8_t>(ReplyStatus::supervision), std::string(err.what()));
  } catch (const std::exception& err) {
    return encode(static_cast<std::uint8_t>(ReplyStatus::other), std::string(err.what()));
  } catch (...) {
    return encode(static_cast<std::uint8_t>(ReplyStatus::other), std::string("unknown exception"));
  }
}

/// The caller's side of a remote call: completes the future from the status-tagged reply.
class RemoteReplyPort final : public ReplySinkBase {
 public:
  RemoteReplyPort(std::shared_ptr<StateBase> state, std::string endpoint, CallHistogram* times,
                  std::weak_ptr<ProcState> owner)
      : state_(std::move(state)),
        endpoint_(std::move(endpoint)),
        times_(times),
        owner_(std::move(owner)) {}
  bool deliver(const Body& body) override {
    if (auto owner = owner_.lock(); owner && times_ != nullptr) {  // `times` is the owner's
      times_->observe(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now() - sent_)
                          .count());
    }
    complete_from_reply(*state_, body, endpoint_);
    return true;
  }
  void link_lost(const std::string& why) override {
    state_->set_exception(
        std::make_exception_ptr(UndeliverableError(UndeliverableError::Reason::link_lost, why)));
  }
  void peer_failed(const std::exception_ptr& error) override { state_->set_exception(error); }

 private:
  std::shared_ptr<StateBase> state_;
  std::string endpoint_;
  CallHistogram* times_;            // in the owner's metrics
  std::weak_ptr<ProcState> owner_;  // the proc whose call it is: it may end before the reply
  std::chrono::steady_clock::time_point sent_ = std::chrono::steady_clock::now();
};

/// The callee's side: what the handler produces, tagged with its status, goes to `out`.
class StatusReplySink final : public StateBase {
 public:
  explicit StatusReplySink(std::function<void(Body)> out) : out_(std::move(out)) {}

  void set_body(const Body& body) override {
    Body out;
    out.head.reserve(1 + body.head.size());
    out.head.push_back(static_cast<char>(ReplyStatus::ok));
    out.head += body.head;
    out.parts = body.parts;
    out_(std::move(out));
  }
  void set_exception(std::exception_ptr e) override { out_(encode_failure(std::move(e))); }

 private:
  std::function<void(Body)> out_;
};

/// Sends a status-tagged reply over `link` to the caller's port.
std::shared_ptr<StateBase> reply_over(std::shared_ptr<net::Link> link, ActorId from, PortId to) {
  return std::make_shared<StatusReplySink>(
      [link = std::move(link), from = std::move(from), to = std::move(to)](Body body) {
        Envelope env;
        env.sender = from;
        env.dest = to;
        env.body = std::move(body);
        try {
          if (!link->send(std::move(env))) {
            log_warn("reply to {} lost: link {} is closed", to.to_string(), link->describe());
          }
        } catch (const std::exception& e) {
          // Too big for one message, say: the caller fails saying why, never waits for ever.
          log_warn("reply to {} lost: {}", to.to_string(), e.what());
          Envelope failed;
          failed.sender = from;
          failed.dest = to;
          failed.body = encode_failure(std::make_exception_ptr(
              std::runtime_error(std::string("the reply could not be sent: ") + e.what())));
          try {
            (void)link->send(std::move(failed));
          } catch (const std::exception&) {
          }
        }
      });
}

}  // namespace

PortSinkPtr remote_reply_port(std::shared_ptr<StateBase> state, std::string endpoint,
                              CallHistogram* times, std::weak_ptr<ProcState> owner) {
  return std::make_shared<RemoteReplyPort>(std::move(state), std::move(endpoint), times,
                                           std::move(owner));
}

namespace {
void deliver_untraced(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope&& env);
}  // namespace

void deliver_envelope(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope&& env) {
  if (!tracing()) return deliver_untraced(local, link, std::move(env));
  // A span for the delivery, where the flow from the sender ends and the one to the endpoint
  // it runs (deliver_local_call) starts.
  const std::int64_t began = trace_now_ns();
  std::uint64_t flow = 0;
  if (const std::string* f = env.header(kFlowHeader)) flow = std::strtoull(f->c_str(), nullptr, 10);
  const std::string_view what = env.dest.port == 0           ? "deliver call"
                                : env.dest.port == kCastPort ? "deliver cast"
                                                             : "deliver value";
  {
    const InSpan in_span;
    deliver_untraced(local, link, std::move(env));
  }
  trace_span("", what, "deliver", nullptr, began, trace_now_ns());
  if (flow != 0) trace_flow('f', flow, began);
}

namespace {
void deliver_untraced(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope&& env) {
  if (env.dest.port == kCastPort) {
    CastHandler handler = router_of(*local->node).cast_handler.load(std::memory_order_acquire);
    if (handler == nullptr) {
      refuse_link(*link, "a cast arrived but this process has no mesh layer to forward it");
      return;
    }
    handler(local, link, std::move(env));
    return;
  }
  if (env.dest.port == kSupervisionPort) {
    SupervisionEvent ev;
    try {
      ev = decode<SupervisionEvent>(env.body);
    } catch (const std::exception& e) {
      refuse_link(*link, std::string("malformed supervision event: ") + e.what());
      return;
    }
    if (env.dest.actor.proc != local->id) {
      local->report_unhandled(ev);  // not ours to forward: handle it here
      return;
    }
    report_failure_to(env.dest.actor, std::move(ev), *local);
    return;
  }
  if (env.dest.port == kUndeliverablePort) {
    Undeliverable u;
    try {
      auto [reason, message, target] =
          decode<std::tuple<std::uint8_t, std::string, PortId>>(env.body);
      if (reason > static_cast<std::uint8_t>(UndeliverableError::Reason::timeout)) {
        throw DecodeError("bad undeliverable reason");
      }
      u = Undeliverable{target, static_cast<UndeliverableError::Reason>(reason), message};
    } catch (const std::exception& e) {
      refuse_link(*link, std::string("malformed undeliverable message: ") + e.what());
      return;
    }
    if (env.dest.actor.proc != local->id) {
      local->report_undeliverable(u);
      return;
    }
    deliver_undeliverable(env.dest.actor, std::move(u));
    return;
  }
  if (env.dest.port == 0) {
    // A call to a local actor.
    std::uint64_t endpoint_id = 0;
    std::optional<PortId> reply_to;
    std::size_t consumed = 0;
    try {
      InputArchive ar(env.body);
      ar(endpoint_id, reply_to);
      consumed = ar.position();
    } catch (const std::exception& e) {
      refuse_link(*link, std::string("malformed call: ") + e.what());
      return;
    }
    Body args;
    env.body.head.erase(0, consumed);  // in place: the arguments are what follows
    args.head = std::move(env.body.head);
    args.parts = std::move(env.body.parts);
    deliver_local_call(*local, env.dest.actor, endpoint_id, env.sender, std::move(args),
                       reply_to ? reply_over(link, env.dest.actor, *reply_to) : nullptr, link);
    return;
  }
  // A value for a local port (replies included).
  PortSinkPtr sink;
  bool is_reply = false;
  bool abandoned = false;
  {
    std::lock_guard lock(local->mu);
    auto it = local->ports.find(env.dest.port);
    if (it != local->ports.end()) {
      sink = it->second;
      is_reply = dynamic_cast<ReplySinkBase*>(sink.get()) != nullptr;
      if (is_reply) local->ports.erase(it);
    } else {
      const auto& gone = local->abandoned_ports;
      abandoned = std::find(gone.rbegin(), gone.rend(), env.dest.port) != gone.rend();
    }
  }
  if (abandoned) return;  // a stream its reader let go of: the rest of it is not wanted
  if (!sink) {
    log_warn("value for unknown port {} from {} dropped", env.dest.to_string(),
             env.sender.to_string());
    return;
  }
  try {
    sink->deliver(env.body);
  } catch (const std::exception& e) {
    log_warn("port {} rejected a value from {}: {}", env.dest.to_string(), env.sender.to_string(),
             e.what());
  }
  if (is_reply) router_of(*local->node).reply_arrived(env.sender.proc.name, env.dest.port);
}
}  // namespace

/// Returns the one-way calls a link never delivered to their senders. (A call with a reply port
/// fails through that port; casts are tracked by their tree; port values, replies included,
/// are not returned.)
void return_unsent(const std::string& peer, const std::string& reason,
                   const std::vector<Envelope>& envs) {
  for (const auto& env : envs) {
    if (env.dest.port != 0) continue;
    std::optional<PortId> reply_to;
    try {
      InputArchive ar(env.body);
      std::uint64_t endpoint_id = 0;
      ar(endpoint_id, reply_to);
    } catch (const std::exception&) {
      continue;
    }
    if (reply_to) continue;
    deliver_undeliverable(env.sender,
                          Undeliverable{env.dest, UndeliverableError::Reason::link_lost,
                                        "the link to proc " + peer + " closed for good (" + reason +
                                            ") before the peer acknowledged it"});
  }
}

}  // namespace remote

using namespace remote;

void refuse_link(net::Link& link, const std::string& why) {
  log_warn("link {} closed: {}", link.describe(), why);
  link.close(why);
}

void complete_from_reply(StateBase& state, const Body& body, std::string_view endpoint,
                         const Point* point) {
  if (body.head.empty()) {
    state.set_exception(std::make_exception_ptr(DecodeError("empty reply")));
    return;
  }
  const auto status = static_cast<ReplyStatus>(body.head[0]);
  Body rest;
  rest.head = body.head.substr(1);
  rest.parts = body.parts;
  try {
    switch (status) {
      case ReplyStatus::ok:
        state.set_body(rest);
        break;
      case ReplyStatus::actor_error: {
        auto [actor, ep, message] = decode<std::tuple<std::string, std::string, std::string>>(rest);
        state.set_exception(std::make_exception_ptr(point != nullptr
                                                        ? ActorError(actor, ep, message, *point)
                                                        : ActorError(actor, ep, message)));
        break;
      }
      case ReplyStatus::supervision:
        state.set_exception(std::make_exception_ptr(SupervisionError(decode<std::string>(rest))));
        break;
      case ReplyStatus::undeliverable: {
        auto [reason, message] = decode<std::tuple<std::uint8_t, std::string>>(rest);
        if (reason > static_cast<std::uint8_t>(UndeliverableError::Reason::timeout)) {
          throw DecodeError("bad undeliverable reason");
        }
        state.set_exception(std::make_exception_ptr(
            UndeliverableError(static_cast<UndeliverableError::Reason>(reason), message)));
        break;
      }
      default:
        state.set_exception(std::make_exception_ptr(std::runtime_error(
            "remote failure in " + std::string(endpoint) + ": " + decode<std::string>(rest))));
    }
  } catch (const DecodeError& e) {
    state.set_exception(std::current_exception());
  }
}

std::shared_ptr<StateBase> make_status_reply(std::function<void(Body)> out) {
  return std::make_shared<StatusReplySink>(std::move(out));
}

Body failure_reply(std::exception_ptr e) {
  return encode_failure(std::move(e));
}

std::optional<std::string> route_remote_port_or_local(const PortId& port, const Body& body,
                                                      const ActorId& from) {
  if (PortSinkPtr sink = resolve_port(port)) {
    try {
      sink->deliver(body);
    } catch (const std::exception& e) {
      log_warn("port {} rejected a value from {}: {}", port.to_string(), from.to_string(),
               e.what());
      return std::string(e.what());
    }
    return std::nullopt;
  }
  std::string why = "its proc cannot be reached";
  try {
    Router* router = nullptr;
    if (auto node = node_here()) router = node->router();
    if (router != nullptr && router->route_port(port, body, from)) return std::nullopt;
  } catch (const std::exception& e) {
    why = e.what();
  }
  log_warn("value from {} for port {} lost: {}", from.to_string(), port.to_string(), why);
  return why;
}

bool reply_is_member_lost(const Body& reply) {
  if (reply.head.empty()) return false;
  const auto status = static_cast<ReplyStatus>(reply.head[0]);
  return status == ReplyStatus::supervision || status == ReplyStatus::undeliverable;
}

bool reply_is_link_lost(const Body& reply) {
  return reply.head.size() >= 2 &&
         static_cast<ReplyStatus>(reply.head[0]) == ReplyStatus::undeliverable &&
         static_cast<UndeliverableError::Reason>(reply.head[1]) ==
             UndeliverableError::Reason::link_lost;
}

void deliver_local_call(ProcState& local, const ActorId& target, std::uint64_t endpoint_id,
                        const ActorId& sender, Body args, std::shared_ptr<StateBase> reply,
                        const std::shared_ptr<net::Link>& from) {
  CellPtr cell = target.proc == local.id ? local.find_actor(target) : resolve_actor(target);
  auto* m = new Message;
  m->kind = Message::Kind::call;
  m->x().endpoint_id = endpoint_id;
  m->sent_by(sender);
  m->body = std::move(args);
  m->reply = std::move(reply);
  if (tracing() && InSpan::here()) {
    m->x().flow = new_flow();  // from the delivery's span to the endpoint's
    trace_flow('s', m->x().flow);
  }
  if (!cell) {
    std::unique_ptr<Message> owned(m);
    return_missing(*owned, target, &local, "in proc " + local.id.name);
    return;
  }
  cell->enqueue(m);
  if (from && cell->queued() > local.options.mailbox_limit) {
    // Backpressure: read nothing more from this link until the actor catches up.
    from->pause_reading();
    cell->on_drained([weak = std::weak_ptr<net::Link>(from)] {
      if (auto l = weak.lock()) l->resume_reading();
    });
  }
}

}  // namespace baton::detail
