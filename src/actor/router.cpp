// The node's router: links to procs in other processes by peer, where those procs listen, which
// of them died; dialling on first use (the links themselves are made in dial.cpp).

#include <algorithm>
#include <string>
#include <vector>

#include "actor/directory.hpp"
#include "actor/failures.hpp"
#include "actor/node.hpp"
#include "actor/path.hpp"
#include "actor/remote_impl.hpp"
#include "actor/replies.hpp"
#include "actor/routing.hpp"
#include "actor/trace.hpp"
#include "log/log.hpp"

namespace baton::detail {
namespace remote {

RemoteRouter& router_of(Node& node) {
  Router* r = node.router();
  if (r == nullptr) {
    r = &node.install_router([](Node&) { return std::make_unique<RemoteRouter>(); });
  }
  return static_cast<RemoteRouter&>(*r);
}

RemoteRouter* router_here() {
  auto node = node_here();
  if (!node) return nullptr;
  return static_cast<RemoteRouter*>(node->router());
}

void RemoteRouter::add_route(const std::string& peer, const std::shared_ptr<ProcState>& local,
                             const std::shared_ptr<net::Link>& link, bool accepted) {
  Route old;
  {
    std::lock_guard lock(routes_mu);
    if (closed_why.erase(peer) != 0) std::erase(closed_order, peer);
    auto [it, fresh] = routes.try_emplace(peer, Route{local, link, {}, accepted});
    if (!fresh && accepted && it->second.accepted && it->second.link != link) {
      old = std::exchange(it->second, Route{local, link, {}, accepted});
    }
    linked.notify_all();
  }
  if (!old.link) return;
  old.link->close("proc " + peer + " connected again: this connection is replaced");
  if (auto owner = old.local.lock()) {
    for (std::uint64_t port : old.pending) {
      PortSinkPtr sink;
      {
        std::lock_guard lock(owner->mu);
        auto p = owner->ports.find(port);
        if (p == owner->ports.end()) continue;
        sink = p->second;
        owner->ports.erase(p);
      }
      sink->link_lost("link to proc " + peer +
                      " replaced by a new connection before the reply came");
    }
  }
}

void RemoteRouter::reply_arrived(const std::string& peer, std::uint64_t port) {
  std::lock_guard lock(routes_mu);
  auto it = routes.find(peer);
  if (it != routes.end()) std::erase(it->second.pending, port);
}

void RemoteRouter::link_closed(const std::string& peer, const std::shared_ptr<net::Link>& link,
                               const std::string& reason) {
  std::vector<std::uint64_t> pending;
  std::shared_ptr<ProcState> local;
  const LostSince since = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(routes_mu);
    auto it = routes.find(peer);
    if (it == routes.end() || it->second.link != link) return;
    pending = std::move(it->second.pending);
    local = it->second.local.lock();
    if (local) local->retire_traffic(link_kind(link->transport()), net::counters_of(*link));
    routes.erase(it);
    if (closed_why.insert_or_assign(peer, Closed{reason, since}).second) {
      closed_order.push_back(peer);
    }
    if (closed_order.size() > kFailuresKept) {
      closed_why.erase(closed_order.front());
      closed_order.pop_front();
    }
    linked.notify_all();
  }
  if (!local) return;
  // A child process that died is a supervision failure, with its report, not a lost link. Its
  // report may take a moment to come (up to RuntimeOptions::exit_wait, for a peer that went
  // silent but lives): it is waited for on the proc's background thread, not on the I/O thread
  // that closed the link, whose other links would go silent meanwhile.
  local->post_background([this, local, peer, reason, pending = std::move(pending), since] {
    fail_pending(*local, peer, reason, pending, since);
  });
}

void RemoteRouter::fail_pending(ProcState& local, const std::string& peer,
                                const std::string& reason,
                                const std::vector<std::uint64_t>& pending, LostSince since) {
  std::optional<std::string> died = probe(peer, since);
  if (died) mark_failed(peer, *died);
  for (std::uint64_t port : pending) {
    PortSinkPtr sink;
    {
      std::lock_guard lock(local.mu);
      auto it = local.ports.find(port);
      if (it == local.ports.end()) continue;
      sink = it->second;
      local.ports.erase(it);
    }
    if (died) {
      sink->peer_failed(std::make_exception_ptr(SupervisionError(*died)));
    } else {
      sink->link_lost("link to proc " + peer + " lost (" + reason + ") before the reply came");
    }
  }
}

namespace {
/// Why a call to `target` cannot go: its link closed, for `closed` when that is known.
std::string unreachable(const ActorId& target, const std::optional<std::string>& closed) {
  return "the link to proc " + target.proc.name +
         (closed ? " closed (" + *closed + "); " : " is closed; ") + target.to_string() +
         " cannot be reached";
}
}  // namespace

std::optional<std::string> RemoteRouter::closed_reason(const std::string& peer) {
  std::lock_guard lock(routes_mu);
  auto it = closed_why.find(peer);
  if (it == closed_why.end()) return std::nullopt;
  return it->second.why;
}

std::optional<LostSince> RemoteRouter::closed_at(const std::string& peer) {
  std::lock_guard lock(routes_mu);
  auto it = closed_why.find(peer);
  if (it == closed_why.end()) return std::nullopt;
  return it->second.at;
}

bool RemoteRouter::routes_to(const std::string& peer, const std::shared_ptr<net::Link>& link) {
  std::lock_guard lock(routes_mu);
  auto it = routes.find(peer);
  return it != routes.end() && it->second.link == link;
}

std::optional<std::string> RemoteRouter::probe(const std::string& peer, LostSince since) {
  ExitProbe p;
  {
    std::lock_guard lock(failures_mu);
    p = exit_probe;
  }
  if (!p) return std::nullopt;
  return p(peer, since);
}

namespace {

/// The procs that started `proc`, nearest first: a proc started by another is named after it
/// ("procs0.0-procs1.2" by procs0.0) and dies with it, a worker's own children by
/// PR_SET_PDEATHSIG, those on other hosts by their agent, which stops a client's procs when its
/// link goes.
std::vector<std::string> starters_of(const std::string& proc) {
  std::vector<std::string> out;
  for (auto dash = proc.rfind('-'); dash != std::string::npos && dash > 0;
       dash = proc.rfind('-', dash - 1)) {
    out.push_back(proc.substr(0, dash));
  }
  return out;
}

}  // namespace

std::optional<std::string> RemoteRouter::failure_of(const std::string& proc) {
  if (!any_failed.load(std::memory_order_acquire)) return std::nullopt;
  std::lock_guard lock(failures_mu);
  auto it = failures.find(proc);
  if (it != failures.end()) return it->second;
  // Else the nearest of the procs that started it known dead says what became of it.
  for (const auto& starter : starters_of(proc)) {
    it = failures.find(starter);
    if (it != failures.end()) {
      return "proc " + proc + " went with the proc that started it: " + it->second;
    }
  }
  return std::nullopt;
}

void RemoteRouter::mark_failed(const std::string& proc, const std::string& report) {
  std::lock_guard lock(failures_mu);
  if (!failures.try_emplace(proc, report).second) return;
  failure_order.push_back(proc);
  if (failure_order.size() > kFailuresKept) {
    failures.erase(failure_order.front());
    failure_order.pop_front();
  }
  any_failed.store(true, std::memory_order_release);
}

std::shared_ptr<ProcState> RemoteRouter::home() {
  std::lock_guard lock(addresses_mu);
  return home_proc.lock();
}

std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> RemoteRouter::route_to(
    const ProcId& peer) {
  {
    std::lock_guard lock(routes_mu);
    auto it = routes.find(peer.name);
    if (it != routes.end()) return {it->second.link, it->second.local.lock()};
  }
  // No link yet: dial the peer if a reference told us where it listens.
  std::string where;
  std::shared_ptr<ProcState> home;
  {
    std::lock_guard lock(addresses_mu);
    auto it = addresses.find(peer.name);
    if (it != addresses.end()) where = it->second;
    home = home_proc.lock();
  }
  if (where.empty() || !home || home->closed.load(std::memory_order_acquire)) return {};
  std::lock_guard dial(dialing);
  {
    std::lock_guard lock(routes_mu);
    auto it = routes.find(peer.name);
    if (it != routes.end()) return {it->second.link, it->second.local.lock()};
  }
  try {
    connect_state(home, peer, Address::parse(where), nullptr);
  } catch (const std::exception& e) {
    log_warn("proc {} cannot reach proc {}: {}", home->id.name, peer.name, e.what());
    return {};
  }
  std::lock_guard lock(routes_mu);
  auto it = routes.find(peer.name);
  if (it == routes.end()) return {};
  return {it->second.link, it->second.local.lock()};
}

bool RemoteRouter::send_to_proc(const ProcId& peer, Envelope env) {
  auto [link, local] = route_to(peer);
  if (!link || !local) return false;
  local->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  return link->send(std::move(env));
}

namespace {

/// Ends a call that is not sent: its reply fails with `error` (an UndeliverableError for
/// `reason` if none is given), or, one-way, it comes back to its sender as undeliverable.
void fail_call(const std::shared_ptr<StateBase>& reply, const ActorId& sender,
               const ActorId& target, UndeliverableError::Reason reason, const std::string& why,
               const std::exception_ptr& error = nullptr) {
  if (reply) {
    reply->set_exception(error ? error : std::make_exception_ptr(UndeliverableError(reason, why)));
  } else {
    deliver_undeliverable(sender, Undeliverable{PortId{target, 0}, reason, why});
  }
}

}  // namespace

bool RemoteRouter::route_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                              std::shared_ptr<StateBase>& reply, const ActorId& sender) {
  if (auto died = failure_of(target.proc.name)) {
    // Calls touching a failed proc fail at once, with what happened to it.
    const std::string why = target.to_string() + " (" + std::string(endpoint.name) + "): " + *died;
    fail_call(reply, sender, target, UndeliverableError::Reason::actor_failed, why,
              std::make_exception_ptr(SupervisionError(why)));
    return true;
  }
  auto [link, local] = route_to(target.proc);
  if (!link || !local) {
    auto closed = closed_reason(target.proc.name);
    if (!closed) return false;
    // Its link closed a moment ago (a refused dial, say): the call fails with why.
    fail_call(reply, sender, target, UndeliverableError::Reason::link_lost,
              unreachable(target, closed));
    return true;
  }
  std::optional<PortId> reply_to;
  if (reply) {
    reply->set_reply_route(local);  // a caller outside actors waits on this proc's event loop
    reply_to = open_reply_port(
        *local, target.proc,
        remote_reply_port(reply, std::string(endpoint.name),
                          observing() ? &local->call_times.of_static(endpoint.name) : nullptr,
                          local));
  }
  Envelope env = call_envelope(sender, target, endpoint.id, reply_to, std::move(args));
  local->envelopes_sent.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  auto reason = UndeliverableError::Reason::link_lost;
  const TracedSend traced(env, endpoint.name);
  try {
    if (!link->send(std::move(env))) {
      // The link closed a moment ago, and its handler is about to say why: a reply port still
      // pending on its route is failed there with that reason (a refused secret, say).
      if (reply_to && routes_to(target.proc.name, link)) return true;
      // Or it said so already: its route went with the reason, which the call fails with.
      why = unreachable(target, closed_reason(target.proc.name));
    }
  } catch (const net::LinkFullError& e) {
    why = std::string(e.what()) + "; the message to " + target.to_string() + " was not sent";
    reason = UndeliverableError::Reason::timeout;
  }
  if (why.empty()) return true;
  if (reply_to) {
    {
      std::lock_guard lock(local->mu);
      local->ports.erase(reply_to->port);
    }
    reply_arrived(target.proc.name, reply_to->port);
  }
  fail_call(reply, sender, target, reason, why);
  return true;
}

}  // namespace remote

Envelope call_envelope(const ActorId& sender, const ActorId& target, std::uint64_t endpoint,
                       const std::optional<PortId>& reply_to, Body args) {
  Envelope env;
  env.sender = sender;
  env.dest = PortId{target, 0};
  env.body = encode(endpoint, reply_to);
  env.body.head += args.head;
  env.body.parts = std::move(args.parts);
  return env;
}

namespace remote {

bool RemoteRouter::route_port(const PortId& port, const Body& body, const ActorId& sender) {
  Envelope env;
  env.sender = sender;
  env.dest = port;
  env.body = body;
  return send_to_proc(port.actor.proc, std::move(env));
}

bool RemoteRouter::return_undeliverable(const ActorId& from, const Undeliverable& u) {
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

bool RemoteRouter::forward_failure(const ActorId& owner, const SupervisionEvent& event) {
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

void RemoteRouter::close_links(ProcState& proc) {
  std::vector<std::shared_ptr<net::Link>> mine;
  {
    std::lock_guard lock(routes_mu);
    for (auto& [name, route] : routes) {
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
  std::lock_guard lock(addresses_mu);
  if (home_proc.lock().get() == &proc || home_proc.expired()) home_proc.reset();
}

}  // namespace remote

using namespace remote;

std::shared_ptr<ProcState> home_proc() {
  RemoteRouter* r = router_here();
  return r != nullptr ? r->home() : nullptr;
}

Proc& serving_proc(std::string_view who) {
  auto home = home_proc();
  if (!home || home->owner == nullptr || home->closed.load(std::memory_order_acquire)) {
    throw UsageError(std::string(who) +
                     " needs a runtime: create `baton::Runtime rt(argc, argv);` at the top of "
                     "main (a worker has its own)");
  }
  return *home->owner;
}

void set_exit_probe(ExitProbe probe) {
  auto node = node_here();
  if (!node) return;
  auto& r = router_of(*node);
  std::lock_guard lock(r.failures_mu);
  r.exit_probe = std::move(probe);
}

std::optional<std::string> proc_failure(const ProcId& id) {
  RemoteRouter* r = router_here();
  return r != nullptr ? r->failure_of(id.name) : std::nullopt;
}

std::optional<LostSince> link_closed_at(const ProcId& id) {
  RemoteRouter* r = router_here();
  return r != nullptr ? r->closed_at(id.name) : std::nullopt;
}

std::optional<std::string> await_proc_failure(const ProcId& id, LostSince since) {
  RemoteRouter* r = router_here();
  if (r == nullptr) return std::nullopt;
  if (auto known = r->failure_of(id.name)) return known;
  // Its link's closing was when it was first seen lost: a wait for its exit report already
  // taken since then (the calls that waited on the link) is not taken again.
  if (const auto closed = r->closed_at(id.name)) since = std::min(since, *closed);
  auto died = r->probe(id.name, since);
  if (died) {
    r->mark_failed(id.name, *died);
    return died;
  }
  // It may have gone with the proc that started it (see failure_of), whose death this process
  // may not have taken in yet: that proc's link closed too if so.
  for (const auto& starter : starters_of(id.name)) {
    const auto closed = r->closed_at(starter);
    if (!closed) continue;
    if (auto starter_died = r->probe(starter, std::min(since, *closed))) {
      r->mark_failed(starter, *starter_died);
      return r->failure_of(id.name);
    }
  }
  return std::nullopt;
}

bool forward_failure(const ActorId& owner, const SupervisionEvent& event) {
  RemoteRouter* r = router_here();
  return r != nullptr && r->forward_failure(owner, event);
}

void mark_proc_failed(const std::string& name, const std::string& report) {
  if (auto node = node_here()) router_of(*node).mark_failed(name, report);
}

void forget_procs(const std::vector<ProcId>& procs) {
  RemoteRouter* r = router_here();
  if (r == nullptr) return;
  {
    std::lock_guard lock(r->addresses_mu);
    for (const auto& p : procs) r->addresses.erase(p.name);
  }
  {
    std::lock_guard lock(r->routes_mu);
    for (const auto& p : procs) {
      if (r->closed_why.erase(p.name) != 0) std::erase(r->closed_order, p.name);
    }
  }
  std::lock_guard lock(r->failures_mu);
  for (const auto& p : procs) {
    if (r->failures.erase(p.name) != 0) std::erase(r->failure_order, p.name);
  }
}

void set_cast_handler(CastHandler handler) {
  if (auto node = node_here()) set_cast_handler(*node, handler);
}

void set_cast_handler(Node& node, CastHandler handler) {
  auto& slot = router_of(node).cast_handler;
  if (slot.load(std::memory_order_acquire) != handler) {
    slot.store(handler, std::memory_order_release);
  }
}

CastRoute route_for_cast(ProcState& local, const ProcId& peer, const std::string& address) {
  auto& r = router_of(*local.node);
  CastRoute out;
  out.failed = r.failure_of(peer.name);
  if (out.failed) return out;
  {
    std::lock_guard lock(r.routes_mu);
    auto it = r.routes.find(peer.name);
    if (it != r.routes.end()) {
      out.link = it->second.link;
      out.owner = it->second.local.lock();
      return out;
    }
  }
  remember_address(peer, address);  // where it listens, to dial it
  std::tie(out.link, out.owner) = r.route_to(peer);
  return out;
}

std::string address_text(const ProcId& id) {
  RemoteRouter* r = router_here();
  if (r == nullptr) return {};
  std::lock_guard lock(r->addresses_mu);
  auto it = r->addresses.find(id.name);
  return it == r->addresses.end() ? std::string() : it->second;
}

std::string path_to(const ProcId& id) {
  if (find_proc(id)) return "in-process";
  RemoteRouter* r = router_here();
  if (r == nullptr) return "in-process";
  {
    std::lock_guard lock(r->routes_mu);
    auto it = r->routes.find(id.name);
    if (it != r->routes.end() && it->second.link) return it->second.link->transport();
  }
  const std::string address = address_text(id);
  if (address.rfind("tcp://", 0) == 0) return "tcp";
  if (address.rfind("unix://", 0) == 0) return "unix";
  return "unknown";
}

void remember_address(const ProcId& id, const std::string& address) {
  if (address.empty()) return;
  auto node = node_here();
  if (!node) return;
  auto& r = router_of(*node);
  {
    std::lock_guard lock(r.addresses_mu);
    if (r.addresses.count(id.name) != 0) return;  // the first word on a proc stands
  }
  Address::parse(address);  // garbage throws before it is kept
  std::lock_guard lock(r.addresses_mu);
  r.addresses.try_emplace(id.name, address);
}

std::pair<std::shared_ptr<net::Link>, std::shared_ptr<ProcState>> route_to(const ProcId& peer) {
  RemoteRouter* r = router_here();
  if (r == nullptr) return {};
  return r->route_to(peer);
}

bool send_to_proc(const ProcId& peer, Envelope env) {
  RemoteRouter* r = router_here();
  return r != nullptr && r->send_to_proc(peer, std::move(env));
}

PortId open_reply_port(ProcState& local, const ProcId& peer, PortSinkPtr sink) {
  std::uint64_t n = 0;
  {
    std::lock_guard lock(local.mu);
    n = local.next_port++;
    local.ports.emplace(n, std::move(sink));
  }
  auto& r = router_of(*local.node);
  std::lock_guard lock(r.routes_mu);
  auto it = r.routes.find(peer.name);
  if (it != r.routes.end()) it->second.pending.push_back(n);
  return PortId{local.client, n};
}

TableSizes table_sizes(ProcState& proc) {
  TableSizes t;
  t.procs = proc.node->procs();
  {
    std::lock_guard lock(proc.mu);
    t.actors = proc.actors.size();
    t.ports = proc.ports.size();
  }
  t.ended = proc.ended_count();
  if (auto* r = static_cast<RemoteRouter*>(proc.node->router())) {
    {
      std::lock_guard lock(r->routes_mu);
      t.routes = r->routes.size();
      t.closed = r->closed_why.size();
    }
    {
      std::lock_guard lock(r->addresses_mu);
      t.addresses = r->addresses.size();
    }
    std::lock_guard lock(r->failures_mu);
    t.failures = r->failures.size();
  }
  return t;
}

}  // namespace baton::detail

namespace baton {

std::uint64_t Proc::envelopes_sent() const {
  return state_->envelopes_sent.load(std::memory_order_relaxed);
}

}  // namespace baton
