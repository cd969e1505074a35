// Calls and port values between procs in different processes, over net::Link.
//
// Every envelope names its destination port: port 0 of an actor is its endpoint mailbox, the
// hello port announces the proc at the other end of a new link, and any other port is a port.
//   call:  head = endpoint id, optional reply PortId, then the arguments; parts = their parts
//   reply: head = status byte, then the value (status 0) or the error's fields
// A caller waiting on a reply over a link that closes fails with UndeliverableError(link_lost).

#include <cstdio>
#include <limits>

#include "actor/cell.hpp"

namespace baton::detail {
namespace {

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
};

// Remote procs by name, for the whole process.
struct Routes {
  std::mutex mu;
  std::condition_variable linked;  // notified when a route is added or removed
  std::unordered_map<std::string, Route> by_peer;
};
Routes& routes() {
  static auto* r = new Routes;  // never destroyed: links may close during exit
  return *r;
}

std::shared_ptr<net::Link> link_to(const ProcId& peer) {
  auto& r = routes();
  std::lock_guard lock(r.mu);
  auto it = r.by_peer.find(peer.name);
  return it == r.by_peer.end() ? nullptr : it->second.link;
}

// Where procs in other processes listen, learned from spawns, serve() and received references;
// `home` is the proc whose I/O thread dials them on first use.
struct Addresses {
  std::mutex mu;
  std::unordered_map<std::string, std::string> by_proc;
  std::weak_ptr<ProcState> home;
  std::mutex dialing;  // one lazy connect at a time, so a peer gets one outgoing link
};
Addresses& addresses() {
  static auto* a = new Addresses;  // never destroyed, like the routes
  return *a;
}

// Procs of this process's children that died, with what happened; and the probe that asks the
// host layer whether a peer whose link closed was a child that exited.
struct Failures {
  std::atomic<bool> any{false};  // lets every remote call skip the lock until a proc dies
  std::mutex mu;
  std::unordered_map<std::string, std::string> by_proc;
  std::function<std::optional<std::string>(const std::string&)> probe;
};
Failures& failures() {
  static auto* f = new Failures;  // never destroyed, like the routes
  return *f;
}

std::atomic<CastHandler>& cast_handler() {
  static std::atomic<CastHandler> h{nullptr};
  return h;
}

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
  RemoteReplyPort(std::shared_ptr<StateBase> state, std::string endpoint)
      : state_(std::move(state)), endpoint_(std::move(endpoint)) {}
  bool deliver(const Body& body) override {
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
            std::fprintf(stderr, "baton: reply to %s lost: link %s is closed\n",
                         to.to_string().c_str(), link->describe().c_str());
          }
        } catch (const std::exception& e) {
          std::fprintf(stderr, "baton: reply to %s lost: %s\n", to.to_string().c_str(), e.what());
        }
      });
}

void on_link_closed(const std::string& peer, const std::shared_ptr<net::Link>& link,
                    const std::string& reason) {
  std::vector<std::uint64_t> pending;
  std::shared_ptr<ProcState> local;
  {
    auto& r = routes();
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(peer);
    if (it == r.by_peer.end() || it->second.link != link) return;
    pending = std::move(it->second.pending);
    local = it->second.local.lock();
    r.by_peer.erase(it);
    r.linked.notify_all();
  }
  if (!local) return;
  // A child process that died is a supervision failure, with its report, not a lost link.
  std::optional<std::string> died;
  {
    std::function<std::optional<std::string>(const std::string&)> probe;
    {
      auto& f = failures();
      std::lock_guard lock(f.mu);
      probe = f.probe;
    }
    if (probe) died = probe(peer);
    if (died) mark_proc_failed(peer, *died);
  }
  for (std::uint64_t port : pending) {
    PortSinkPtr sink;
    {
      std::lock_guard lock(local->mu);
      auto it = local->ports.find(port);
      if (it == local->ports.end()) continue;
      sink = it->second;
      local->ports.erase(it);
    }
    if (died) {
      sink->peer_failed(std::make_exception_ptr(SupervisionError(*died)));
    } else {
      sink->link_lost("link to proc " + peer + " lost (" + reason + ") before the reply came");
    }
  }
}

void deliver_envelope(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope env) {
  if (env.dest.port == kCastPort) {
    CastHandler handler = cast_handler().load(std::memory_order_acquire);
    if (handler == nullptr) {
      link->close("a cast arrived but this process has no mesh layer to forward it");
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
      link->close(std::string("malformed supervision event: ") + e.what());
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
      link->close(std::string("malformed undeliverable message: ") + e.what());
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
      link->close(std::string("malformed call: ") + e.what());
      return;
    }
    Body args;
    args.head = env.body.head.substr(consumed);
    args.parts = std::move(env.body.parts);
    deliver_local_call(*local, env.dest.actor, endpoint_id, env.sender, std::move(args),
                       reply_to ? reply_over(link, env.dest.actor, *reply_to) : nullptr, link);
    return;
  }
  // A value for a local port (replies included).
  PortSinkPtr sink;
  bool is_reply = false;
  {
    std::lock_guard lock(local->mu);
    auto it = local->ports.find(env.dest.port);
    if (it != local->ports.end()) {
      sink = it->second;
      is_reply = dynamic_cast<ReplySinkBase*>(sink.get()) != nullptr;
      if (is_reply) local->ports.erase(it);
    }
  }
  if (!sink) {
    std::fprintf(stderr, "baton: proc %s: value for unknown port %s from %s dropped\n",
                 local->id.name.c_str(), env.dest.to_string().c_str(),
                 env.sender.to_string().c_str());
    return;
  }
  try {
    sink->deliver(env.body);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: port %s rejected a value from %s: %s\n",
                 env.dest.to_string().c_str(), env.sender.to_string().c_str(), e.what());
  }
  if (is_reply) {
    auto& r = routes();
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(env.sender.proc.name);
    if (it != r.by_peer.end()) std::erase(it->second.pending, env.dest.port);
  }
}

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

/// The handler of one link: the first envelope must be the hello naming the peer proc.
net::LinkHandler link_handler(const std::weak_ptr<ProcState>& weak_local,
                              const std::shared_ptr<net::Link>& link,
                              const std::shared_ptr<std::string>& peer) {
  std::weak_ptr<net::Link> weak_link = link;
  auto unsent = std::make_shared<std::vector<Envelope>>();
  return net::LinkHandler{[weak_local, weak_link, peer](Envelope env) {
                            auto local = weak_local.lock();
                            auto l = weak_link.lock();
                            if (!local || !l) return;
                            if (peer->empty()) {
                              if (env.dest.port != kHelloPort) {
                                l->close("the first message on a link must be the hello");
                                return;
                              }
                              *peer = env.sender.proc.name;
                              auto& r = routes();
                              std::lock_guard lock(r.mu);
                              r.by_peer.try_emplace(*peer, Route{local, l, {}});
                              r.linked.notify_all();
                              return;
                            }
                            deliver_envelope(local, l, std::move(env));
                          },
                          [weak_link, peer, unsent](const std::string& reason) {
                            if (peer->empty()) return;
                            on_link_closed(*peer, weak_link.lock(), reason);
                            return_unsent(*peer, reason, *unsent);
                            unsent->clear();
                          },
                          [unsent](std::vector<Envelope> envs) { *unsent = std::move(envs); }};
}

net::IoThread& io_of(ProcState& proc) {
  std::lock_guard lock(proc.mu);
  if (!proc.io) proc.io = std::make_unique<net::IoThread>();
  return *proc.io;
}

}  // namespace

void complete_from_reply(StateBase& state, const Body& body, std::string_view endpoint,
                         std::string_view where) {
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
        state.set_exception(
            std::make_exception_ptr(ActorError(actor, ep, message, std::string(where))));
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

void route_remote_port_or_local(const PortId& port, const Body& body, const ActorId& from) {
  if (PortSinkPtr sink = resolve_port(port)) {
    try {
      sink->deliver(body);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "baton: port %s rejected a value from %s: %s\n",
                   port.to_string().c_str(), from.to_string().c_str(), e.what());
    }
    return;
  }
  try {
    if (route_remote_port(port, body, from)) return;
    std::fprintf(stderr, "baton: value from %s for port %s lost: its proc cannot be reached\n",
                 from.to_string().c_str(), port.to_string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: value from %s for port %s lost: %s\n", from.to_string().c_str(),
                 port.to_string().c_str(), e.what());
  }
}

std::shared_ptr<ProcState> home_proc() {
  auto& a = addresses();
  std::lock_guard lock(a.mu);
  return a.home.lock();
}

void set_exit_probe(std::function<std::optional<std::string>(const std::string&)> probe) {
  auto& f = failures();
  std::lock_guard lock(f.mu);
  f.probe = std::move(probe);
}

std::optional<std::string> proc_failure(const ProcId& id) {
  auto& f = failures();
  if (!f.any.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(f.mu);
  auto it = f.by_proc.find(id.name);
  if (it == f.by_proc.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> await_proc_failure(const ProcId& id) {
  if (auto known = proc_failure(id)) return known;
  std::function<std::optional<std::string>(const std::string&)> probe;
  {
    auto& f = failures();
    std::lock_guard lock(f.mu);
    probe = f.probe;
  }
  if (!probe) return std::nullopt;
  auto died = probe(id.name);
  if (died) mark_proc_failed(id.name, *died);
  return died;
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

void set_cast_handler(CastHandler handler) {
  cast_handler().store(handler, std::memory_order_release);
}

void deliver_local_call(ProcState& local, const ActorId& target, std::uint64_t endpoint_id,
                        const ActorId& sender, Body args, std::shared_ptr<StateBase> reply,
                        const std::shared_ptr<net::Link>& from) {
  CellPtr cell = resolve_actor(target);
  auto* m = new Message;
  m->kind = Message::Kind::call;
  m->x().endpoint_id = endpoint_id;
  m->x().remote_sender = sender;
  m->sender = &m->x().remote_sender;
  m->body = std::move(args);
  m->reply = std::move(reply);
  if (!cell) {
    std::unique_ptr<Message> owned(m);
    return_to_sender(*owned, PortId{target, 0}, UndeliverableError::Reason::unknown_actor,
                     "no actor " + target.to_string() + " in proc " + local.id.name +
                         " (stopped, or never spawned)");
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

std::string address_text(const ProcId& id) {
  auto& a = addresses();
  std::lock_guard lock(a.mu);
  auto it = a.by_proc.find(id.name);
  return it == a.by_proc.end() ? std::string() : it->second;
}

void remember_address(const ProcId& id, const std::string& address) {
  if (address.empty()) return;
  auto& a = addresses();
  {
    std::lock_guard lock(a.mu);
    if (a.by_proc.count(id.name) != 0) return;  // the first word on a proc stands
  }
  Address::parse(address);  // garbage throws before it is kept
  std::lock_guard lock(a.mu);
  a.by_proc.try_emplace(id.name, address);
}

std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer) {
  auto& r = routes();
  {
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(peer.name);
    if (it != r.by_peer.end()) return {it->second.link, it->second.local.lock()};
  }
  // No link yet: dial the peer if a reference told us where it listens.
  auto& a = addresses();
  std::string where;
  std::shared_ptr<ProcState> home;
  {
    std::lock_guard lock(a.mu);
    auto it = a.by_proc.find(peer.name);
    if (it != a.by_proc.end()) where = it->second;
    home = a.home.lock();
  }
  if (where.empty() || !home || home->closed.load(std::memory_order_acquire)) return {};
  std::lock_guard dialing(a.dialing);
  {
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(peer.name);
    if (it != r.by_peer.end()) return {it->second.link, it->second.local.lock()};
  }
  try {
    connect_state(home, peer, Address::parse(where), nullptr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: proc %s cannot reach proc %s: %s\n", home->id.name.c_str(),
                 peer.name.c_str(), e.what());
    return {};
  }
  std::lock_guard lock(r.mu);
  auto it = r.by_peer.find(peer.name);
  if (it == r.by_peer.end()) return {};
  return {it->second.link, it->second.local.lock()};
}

bool send_to_proc(const ProcId& peer, Envelope env) {
  auto [link, local] = route_to(peer);
  if (!link || !local) return false;
  local->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  return link->send(std::move(env));
}

PortId open_reply_port(ProcState& local, const ProcId& peer, PortSinkPtr sink) {
  std::uint64_t n = 0;
  {
    std::lock_guard lock(local.mu);
    n = local.next_port++;
    local.ports.emplace(n, std::move(sink));
  }
  auto& r = routes();
  std::lock_guard lock(r.mu);
  auto it = r.by_peer.find(peer.name);
  if (it != r.by_peer.end()) it->second.pending.push_back(n);
  return PortId{local.client, n};
}

bool route_remote_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                       std::shared_ptr<StateBase>& reply, const ActorId& sender) {
  if (auto died = proc_failure(target.proc)) {
    // Calls touching a failed proc fail at once, with what happened to it.
    const std::string why = target.to_string() + " (" + std::string(endpoint.name) + "): " + *died;
    if (reply) {
      reply->set_exception(std::make_exception_ptr(SupervisionError(why)));
    } else {
      deliver_undeliverable(
          sender, Undeliverable{PortId{target, 0}, UndeliverableError::Reason::actor_failed, why});
    }
    return true;
  }
  auto [link, local] = route_to(target.proc);
  if (!link || !local) return false;
  std::optional<PortId> reply_to;
  if (reply) {
    reply_to = open_reply_port(
        *local, target.proc, std::make_shared<RemoteReplyPort>(reply, std::string(endpoint.name)));
  }
  Envelope env;
  env.sender = sender;
  env.dest = PortId{target, 0};
  env.body = encode(endpoint.id, reply_to);
  env.body.head += args.head;
  env.body.parts = std::move(args.parts);
  local->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  auto reason = UndeliverableError::Reason::link_lost;
  try {
    if (!link->send(std::move(env))) {
      why = "the link to proc " + target.proc.name + " is closed; " + target.to_string() +
            " cannot be reached";
    }
  } catch (const net::LinkFullError& e) {
    why = std::string(e.what()) + "; the message to " + target.to_string() + " was not sent";
    reason = UndeliverableError::Reason::timeout;
  }
  if (why.empty()) return true;
  if (reply) {
    if (reply_to) {
      {
        std::lock_guard lock(local->mu);
        local->ports.erase(reply_to->port);
      }
      auto& r = routes();
      std::lock_guard lock(r.mu);
      auto it = r.by_peer.find(target.proc.name);
      if (it != r.by_peer.end()) std::erase(it->second.pending, reply_to->port);
    }
    reply->set_exception(std::make_exception_ptr(UndeliverableError(reason, why)));
  } else {
    deliver_undeliverable(sender, Undeliverable{PortId{target, 0}, reason, why});
  }
  return true;
}

bool return_remote(const ActorId& from, const Undeliverable& u) {
  Envelope env;
  env.sender = u.dest.actor;
  env.dest = PortId{from, kUndeliverablePort};
  env.body = encode(static_cast<std::uint8_t>(u.reason), u.message, u.dest);
  try {
    return send_to_proc(from.proc, std::move(env));
  } catch (const std::exception&) {
    return false;  // the caller reports it here instead
  }
}

bool forward_failure(const ActorId& owner, const SupervisionEvent& event) {
  Envelope env;
  env.sender = event.actor;
  env.dest = PortId{owner, kSupervisionPort};
  env.body = encode(event);
  try {
    return send_to_proc(owner.proc, std::move(env));
  } catch (const std::exception&) {
    return false;  // the caller reports it here instead
  }
}

void mark_proc_failed(const std::string& name, const std::string& report) {
  auto& f = failures();
  std::lock_guard lock(f.mu);
  f.by_proc.try_emplace(name, report);
  f.any.store(true, std::memory_order_release);
}

void report_failure_to(const ActorId& owner, SupervisionEvent event, ProcState& from) {
  if (CellPtr cell = resolve_actor(owner)) {
    auto* m = new Message;
    m->kind = Message::Kind::child_failed;
    m->sender = &intern_id(event.actor);
    m->x().event = std::make_unique<SupervisionEvent>(std::move(event));
    cell->enqueue(m);  // a failed or stopped owner passes it to its proc (see Cell::bounce)
    return;
  }
  if (auto proc = find_proc(owner.proc)) {
    proc->report_unhandled(event);
    return;
  }
  if (forward_failure(owner, event)) return;
  event.message += " (its owner " + owner.to_string() + " could not be reached)";
  from.report_unhandled(event);
}

bool route_remote_port(const PortId& port, const Body& body, const ActorId& sender) {
  Envelope env;
  env.sender = sender;
  env.dest = port;
  env.body = body;
  return send_to_proc(port.actor.proc, std::move(env));
}

void close_links(ProcState& proc) {
  std::vector<std::shared_ptr<net::Link>> mine;
  {
    auto& r = routes();
    std::lock_guard lock(r.mu);
    for (auto& [name, route] : r.by_peer) {
      auto local = route.local.lock();
      if (!local || local.get() == &proc) mine.push_back(route.link);
    }
  }
  // Synchronously, so each link's handler (and what it holds) is released before the I/O
  // thread stops.
  for (auto& l : mine) l->close_and_wait("proc " + proc.id.name + " stopped");
  mine.clear();  // no link may outlive the I/O thread's context, destroyed below
  proc.listeners.clear();
  proc.io.reset();  // joins the I/O thread; pending handlers are dropped
}

void connect_state(const std::shared_ptr<ProcState>& state, const ProcId& peer,
                   const Address& address, std::function<void(const std::string&)> on_lost) {
  auto& io = io_of(*state);
  auto name = std::make_shared<std::string>(peer.name);
  // The handler needs the link, and the link needs the handler: bind through a holder.
  auto holder = std::make_shared<std::shared_ptr<net::Link>>();
  std::weak_ptr<ProcState> weak = state;
  auto unsent = std::make_shared<std::vector<Envelope>>();
  net::LinkHandler relay{
      [weak, holder, name](Envelope env) {
        auto local = weak.lock();
        if (local && *holder) deliver_envelope(local, *holder, std::move(env));
      },
      [holder, name, unsent, on_lost = std::move(on_lost)](const std::string& reason) {
        on_link_closed(*name, *holder, reason);
        return_unsent(*name, reason, *unsent);
        unsent->clear();
        if (on_lost) on_lost(reason);
      },
      [unsent](std::vector<Envelope> envs) { *unsent = std::move(envs); }};
  auto link = net::Link::connect(io, address, std::move(relay), state->options.link);
  *holder = link;
  {
    // A link the peer dialled first stays the route: one sending link per peer keeps FIFO.
    auto& r = routes();
    std::lock_guard lock(r.mu);
    r.by_peer.try_emplace(peer.name, Route{state, link, {}});
    r.linked.notify_all();
  }
  {
    auto& a = addresses();
    std::lock_guard lock(a.mu);
    if (a.home.expired()) a.home = state;
  }
  Envelope hello;
  hello.sender = state->client;
  hello.dest = PortId{ActorId{peer, "proc", 0}, kHelloPort};
  link->send(std::move(hello));
}

}  // namespace baton::detail

namespace baton {

Address Proc::serve(const Address& address) {
  auto& io = detail::io_of(*state_);
  std::weak_ptr<detail::ProcState> weak = state_;
  auto listener = net::Listener::listen(
      io, address,
      [weak](const std::shared_ptr<net::Link>& l) {
        return detail::link_handler(weak, l, std::make_shared<std::string>());
      },
      state_->options.link);
  Address bound = listener->address();
  {
    std::lock_guard lock(state_->mu);
    state_->listeners.push_back(std::move(listener));
  }
  auto& a = detail::addresses();
  std::lock_guard lock(a.mu);
  a.by_proc[state_->id.name] = bound.to_string();
  a.home = state_;
  return bound;
}

bool Proc::linked(const ProcId& peer) const {
  return detail::link_to(peer) != nullptr;
}

bool Proc::wait_linked(const ProcId& peer, std::chrono::milliseconds timeout) const {
  auto& r = detail::routes();
  std::unique_lock lock(r.mu);
  return r.linked.wait_for(lock, timeout, [&] { return r.by_peer.count(peer.name) != 0; });
}

bool Proc::wait_unlinked(const ProcId& peer, std::chrono::milliseconds timeout) const {
  auto& r = detail::routes();
  std::unique_lock lock(r.mu);
  return r.linked.wait_for(lock, timeout, [&] { return r.by_peer.count(peer.name) == 0; });
}

void Proc::connect(const ProcId& peer, const Address& address,
                   std::function<void(const std::string& reason)> on_lost) {
  detail::connect_state(state_, peer, address, std::move(on_lost));
}

std::uint64_t Proc::envelopes_sent() const {
  return state_->envelopes_sent.load(std::memory_order_relaxed);
}

}  // namespace baton
