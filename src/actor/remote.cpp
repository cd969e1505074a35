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
  std::condition_variable linked;  // notified when a route is added
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

/// The caller's side of a remote call: decodes the status byte and completes the future.
class RemoteReplyPort final : public PortSink {
 public:
  RemoteReplyPort(std::shared_ptr<StateBase> state, std::string endpoint)
      : state_(std::move(state)), endpoint_(std::move(endpoint)) {}
  bool deliver(const Body& body) override {
    if (body.head.empty()) {
      state_->set_exception(std::make_exception_ptr(DecodeError("empty reply")));
      return true;
    }
    const auto status = static_cast<ReplyStatus>(body.head[0]);
    Body rest;
    rest.head = body.head.substr(1);
    rest.parts = body.parts;
    try {
      switch (status) {
        case ReplyStatus::ok:
          state_->set_body(rest);
          break;
        case ReplyStatus::actor_error: {
          auto [actor, endpoint, message] =
              decode<std::tuple<std::string, std::string, std::string>>(rest);
          state_->set_exception(std::make_exception_ptr(ActorError(actor, endpoint, message)));
          break;
        }
        case ReplyStatus::supervision:
          state_->set_exception(
              std::make_exception_ptr(SupervisionError(decode<std::string>(rest))));
          break;
        case ReplyStatus::undeliverable: {
          auto [reason, message] = decode<std::tuple<std::uint8_t, std::string>>(rest);
          if (reason > static_cast<std::uint8_t>(UndeliverableError::Reason::timeout)) {
            throw DecodeError("bad undeliverable reason");
          }
          state_->set_exception(std::make_exception_ptr(
              UndeliverableError(static_cast<UndeliverableError::Reason>(reason), message)));
          break;
        }
        default:
          state_->set_exception(std::make_exception_ptr(std::runtime_error(
              "remote failure in " + endpoint_ + ": " + decode<std::string>(rest))));
      }
    } catch (const DecodeError& e) {
      state_->set_exception(std::current_exception());
    }
    return true;
  }
  void fail(const std::string& why) {
    state_->set_exception(
        std::make_exception_ptr(UndeliverableError(UndeliverableError::Reason::link_lost, why)));
  }

 private:
  std::shared_ptr<StateBase> state_;
  std::string endpoint_;
};

/// The callee's side: what the actor's handler produces goes back over the link.
class RemoteReplySink final : public StateBase {
 public:
  RemoteReplySink(std::shared_ptr<net::Link> link, ActorId from, PortId to)
      : link_(std::move(link)), from_(std::move(from)), to_(std::move(to)) {}

  void set_body(const Body& body) override {
    Body out;
    out.head.reserve(1 + body.head.size());
    out.head.push_back(static_cast<char>(ReplyStatus::ok));
    out.head += body.head;
    out.parts = body.parts;
    send(std::move(out));
  }
  void set_exception(std::exception_ptr e) override {
    Body out;
    try {
      std::rethrow_exception(std::move(e));
    } catch (const ActorError& err) {
      out = encode(static_cast<std::uint8_t>(ReplyStatus::actor_error), err.actor(), err.endpoint(),
                   err.remote_message());
    } catch (const UndeliverableError& err) {
      out = encode(static_cast<std::uint8_t>(ReplyStatus::undeliverable),
                   static_cast<std::uint8_t>(err.reason()), std::string(err.what()));
    } catch (const SupervisionError& err) {
      out = encode(static_cast<std::uint8_t>(ReplyStatus::supervision), std::string(err.what()));
    } catch (const std::exception& err) {
      out = encode(static_cast<std::uint8_t>(ReplyStatus::other), std::string(err.what()));
    } catch (...) {
      out = encode(static_cast<std::uint8_t>(ReplyStatus::other), std::string("unknown exception"));
    }
    send(std::move(out));
  }

 private:
  void send(Body body) {
    Envelope env;
    env.sender = from_;
    env.dest = to_;
    env.body = std::move(body);
    if (!link_->send(std::move(env))) {
      std::fprintf(stderr, "baton: reply to %s lost: link %s is closed\n", to_.to_string().c_str(),
                   link_->describe().c_str());
    }
  }

  std::shared_ptr<net::Link> link_;
  ActorId from_;
  PortId to_;
};

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
  }
  if (!local) return;
  for (std::uint64_t port : pending) {
    PortSinkPtr sink;
    {
      std::lock_guard lock(local->mu);
      auto it = local->ports.find(port);
      if (it == local->ports.end()) continue;
      sink = it->second;
      local->ports.erase(it);
    }
    if (auto* reply = dynamic_cast<RemoteReplyPort*>(sink.get())) {
      reply->fail("link to proc " + peer + " lost (" + reason + ") before the reply came");
    }
  }
}

void deliver_envelope(const std::shared_ptr<ProcState>& local,
                      const std::shared_ptr<net::Link>& link, Envelope env) {
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
    CellPtr cell = resolve_actor(env.dest.actor);
    auto* m = new Message;
    m->kind = Message::Kind::call;
    m->x().endpoint_id = endpoint_id;
    m->x().remote_sender = env.sender;
    m->sender = &m->x().remote_sender;
    m->body.head = env.body.head.substr(consumed);
    m->body.parts = std::move(env.body.parts);
    if (reply_to) m->reply = std::make_shared<RemoteReplySink>(link, env.dest.actor, *reply_to);
    if (!cell) {
      std::unique_ptr<Message> owned(m);
      return_to_sender(*owned, UndeliverableError::Reason::unknown_actor,
                       "no actor " + env.dest.actor.to_string() + " in proc " + local->id.name);
      return;
    }
    cell->enqueue(m);
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
      is_reply = dynamic_cast<RemoteReplyPort*>(sink.get()) != nullptr;
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

/// The handler of one link: the first envelope must be the hello naming the peer proc.
net::LinkHandler link_handler(const std::weak_ptr<ProcState>& weak_local,
                              const std::shared_ptr<net::Link>& link,
                              const std::shared_ptr<std::string>& peer) {
  std::weak_ptr<net::Link> weak_link = link;
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
                              r.by_peer[*peer] = Route{local, l, {}};
                              r.linked.notify_all();
                              return;
                            }
                            deliver_envelope(local, l, std::move(env));
                          },
                          [weak_link, peer](const std::string& reason) {
                            if (peer->empty()) return;
                            on_link_closed(*peer, weak_link.lock(), reason);
                          }};
}

net::IoThread& io_of(ProcState& proc) {
  std::lock_guard lock(proc.mu);
  if (!proc.io) proc.io = std::make_unique<net::IoThread>();
  return *proc.io;
}

}  // namespace

bool route_remote_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                       std::shared_ptr<StateBase>& reply, const ActorId& sender) {
  std::shared_ptr<net::Link> link;
  std::shared_ptr<ProcState> local;
  {
    auto& r = routes();
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(target.proc.name);
    if (it == r.by_peer.end()) return false;
    link = it->second.link;
    local = it->second.local.lock();
  }
  if (!local) return false;
  std::optional<PortId> reply_to;
  if (reply) {
    auto port = std::make_shared<RemoteReplyPort>(reply, std::string(endpoint.name));
    std::lock_guard lock(local->mu);
    const std::uint64_t n = local->next_port++;
    local->ports.emplace(n, port);
    reply_to = PortId{local->client, n};
  }
  Envelope env;
  env.sender = sender;
  env.dest = PortId{target, 0};
  env.body = encode(endpoint.id, reply_to);
  env.body.head += args.head;
  env.body.parts = std::move(args.parts);
  if (reply_to) {
    auto& r = routes();
    std::lock_guard lock(r.mu);
    auto it = r.by_peer.find(target.proc.name);
    if (it != r.by_peer.end()) it->second.pending.push_back(reply_to->port);
  }
  if (!link->send(std::move(env))) {
    if (reply) {
      reply->set_exception(std::make_exception_ptr(UndeliverableError(
          UndeliverableError::Reason::link_lost, "the link to proc " + target.proc.name +
                                                     " is closed; " + target.to_string() +
                                                     " cannot be reached")));
    }
  }
  return true;
}

bool route_remote_port(const PortId& port, const Body& body, const ActorId& sender) {
  auto link = link_to(port.actor.proc);
  if (!link) return false;
  Envelope env;
  env.sender = sender;
  env.dest = port;
  env.body = body;
  return link->send(std::move(env));
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
  proc.listener.reset();
  proc.io.reset();  // joins the I/O thread; pending handlers are dropped
}

}  // namespace baton::detail

namespace baton {

Address Proc::serve(const Address& address) {
  auto& io = detail::io_of(*state_);
  std::weak_ptr<detail::ProcState> weak = state_;
  auto listener = net::Listener::listen(io, address, [weak](const std::shared_ptr<net::Link>& l) {
    return detail::link_handler(weak, l, std::make_shared<std::string>());
  });
  Address bound = listener->address();
  std::lock_guard lock(state_->mu);
  state_->listener = std::move(listener);
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

void Proc::connect(const ProcId& peer, const Address& address,
                   std::function<void(const std::string& reason)> on_lost) {
  auto& io = detail::io_of(*state_);
  auto name = std::make_shared<std::string>(peer.name);
  // The handler needs the link, and the link needs the handler: bind through a holder.
  auto holder = std::make_shared<std::shared_ptr<net::Link>>();
  std::weak_ptr<detail::ProcState> weak = state_;
  net::LinkHandler relay{[weak, holder, name](Envelope env) {
                           auto local = weak.lock();
                           if (local && *holder)
                             detail::deliver_envelope(local, *holder, std::move(env));
                         },
                         [holder, name, on_lost = std::move(on_lost)](const std::string& reason) {
                           detail::on_link_closed(*name, *holder, reason);
                           if (on_lost) on_lost(reason);
                         }};
  auto link = net::Link::connect(io, address, std::move(relay));
  *holder = link;
  {
    auto& r = detail::routes();
    std::lock_guard lock(r.mu);
    r.by_peer[peer.name] = detail::Route{state_, link, {}};
  }
  Envelope hello;
  hello.sender = state_->client;
  hello.dest = PortId{ActorId{peer, "proc", 0}, detail::kHelloPort};
  link->send(std::move(hello));
}

}  // namespace baton
