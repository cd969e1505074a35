// Links between procs of different processes: the handler of an accepted link (its first
// envelope names the peer), a dial (connect_state: the link becomes its peer's route), and
// Proc's serve(), connect() and link queries.

#include <mutex>
#include <optional>

#include "actor/remote_impl.hpp"
#include "actor/routing.hpp"

namespace baton::detail {
namespace remote {
namespace {

/// The handler of one link: the first envelope must be the hello naming the peer proc.
net::LinkHandler link_handler(RemoteRouter* router, const std::weak_ptr<ProcState>& weak_local,
                              const std::shared_ptr<net::Link>& link,
                              const std::shared_ptr<std::string>& peer) {
  std::weak_ptr<net::Link> weak_link = link;
  auto unsent = std::make_shared<std::vector<Envelope>>();
  return net::LinkHandler{
      [router, weak_local, weak_link, peer](Envelope&& env) {
        auto local = weak_local.lock();
        auto l = weak_link.lock();
        if (!local || !l) return;
        if (peer->empty()) {
          if (env.dest.port != kHelloPort) {
            refuse_link(*l, "the first message on a link must be the hello");
            return;
          }
          *peer = env.sender.proc.name;
          router->add_route(*peer, local, l, true);
          return;
        }
        deliver_envelope(local, l, std::move(env));
      },
      [router, weak_link, peer, unsent](net::LinkEnd, const std::string& reason) {
        if (peer->empty()) return;
        router->link_closed(*peer, weak_link.lock(), reason);
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
}  // namespace remote

using namespace remote;

void connect_state(const std::shared_ptr<ProcState>& state, const ProcId& peer,
                   const Address& address, LostHook on_lost) {
  auto& io = io_of(*state);
  RemoteRouter* router = &router_of(*state->node);
  auto name = std::make_shared<std::string>(peer.name);
  // The handler needs the link, and the link needs the handler: bind through a holder.
  auto holder = std::make_shared<std::shared_ptr<net::Link>>();
  std::weak_ptr<ProcState> weak = state;
  auto unsent = std::make_shared<std::vector<Envelope>>();
  auto closed =
      std::make_shared<LostHook>([router, holder, name, unsent, on_lost = std::move(on_lost)](
                                     net::LinkEnd end, const std::string& reason) {
        router->link_closed(*name, *holder, reason);
        return_unsent(*name, reason, *unsent);
        unsent->clear();
        if (on_lost) on_lost(end, reason);
      });
  // A dial refused at once may close the link before its route is added below: the close then
  // waits for the route, so that what is sent on the route meanwhile hears why.
  struct Early {
    std::mutex mu;
    bool routed = false;
    std::optional<std::pair<net::LinkEnd, std::string>> closed;  // if before it was routed
  };
  auto early = std::make_shared<Early>();
  net::LinkHandler relay{[weak, holder](Envelope&& env) {
                           auto local = weak.lock();
                           if (local && *holder) deliver_envelope(local, *holder, std::move(env));
                         },
                         [early, closed](net::LinkEnd end, const std::string& reason) {
                           {
                             std::lock_guard lock(early->mu);
                             if (!early->routed) {
                               early->closed.emplace(end, reason);
                               return;
                             }
                           }
                           (*closed)(end, reason);
                         },
                         [unsent](std::vector<Envelope> envs) { *unsent = std::move(envs); }};
  auto link = net::Link::connect(io, address, std::move(relay), state->options.link);
  *holder = link;
  std::function<void(const std::shared_ptr<net::Link>&)> hook;
  {
    std::lock_guard lock(router->routes_mu);
    hook = router->dial_hook_for_test;
  }
  if (hook) hook(link);
  // A link the peer dialled first stays the route: one sending link per peer keeps FIFO.
  router->add_route(peer.name, state, link, false);
  std::optional<std::pair<net::LinkEnd, std::string>> closed_early;
  {
    std::lock_guard lock(early->mu);
    early->routed = true;
    closed_early = std::move(early->closed);
  }
  if (closed_early) (*closed)(closed_early->first, closed_early->second);
  {
    std::lock_guard lock(router->addresses_mu);
    if (router->home_proc.expired()) router->home_proc = state;
  }
  Envelope hello;
  hello.sender = state->client;
  hello.dest = PortId{ActorId{peer, "proc", 0}, kHelloPort};
  link->send(std::move(hello));
}

}  // namespace baton::detail

namespace baton {

Address Proc::serve(const Address& address) {
  auto& io = detail::remote::io_of(*state_);
  auto* router = &detail::remote::router_of(*state_->node);
  std::weak_ptr<detail::ProcState> weak = state_;
  auto listener = net::Listener::listen(
      io, address,
      [router, weak](const std::shared_ptr<net::Link>& l) {
        return detail::remote::link_handler(router, weak, l, std::make_shared<std::string>());
      },
      state_->options.link);
  Address bound = listener->address();
  {
    std::lock_guard lock(state_->mu);
    state_->listeners.push_back(std::move(listener));
  }
  std::lock_guard lock(router->addresses_mu);
  router->addresses[state_->id.name] = bound.to_string();
  router->home_proc = state_;
  return bound;
}

bool Proc::linked(const ProcId& peer) const {
  auto* r = static_cast<detail::remote::RemoteRouter*>(state_->node->router());
  if (r == nullptr) return false;
  std::lock_guard lock(r->routes_mu);
  return r->routes.count(peer.name) != 0;
}

bool Proc::wait_linked(const ProcId& peer, std::chrono::milliseconds timeout) const {
  auto& r = detail::remote::router_of(*state_->node);
  std::unique_lock lock(r.routes_mu);
  return r.linked.wait_for(lock, timeout, [&] { return r.routes.count(peer.name) != 0; });
}

bool Proc::wait_unlinked(const ProcId& peer, std::chrono::milliseconds timeout) const {
  auto& r = detail::remote::router_of(*state_->node);
  std::unique_lock lock(r.routes_mu);
  return r.linked.wait_for(lock, timeout, [&] { return r.routes.count(peer.name) == 0; });
}

void Proc::connect(const ProcId& peer, const Address& address,
                   std::function<void(net::LinkEnd end, const std::string& reason)> on_lost) {
  detail::connect_state(state_, peer, address, std::move(on_lost));
}

}  // namespace baton
