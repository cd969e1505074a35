#pragma once

// Internal: the node, the one object per process that owns what its procs share: the directory
// of procs by name, and the router that reaches procs in other processes. It is made by the
// first Proc (or Runtime) and destroyed with the last, so a process can start a runtime, stop it
// and start another; nothing it holds outlives it.

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "actor/extensions.hpp"
#include "baton/actor/actor_ref.hpp"

namespace baton::detail {

class ProcState;

/// What a proc asks when its own directory does not know an actor or port: the remote layer
/// implements it, so the proc does not depend on links.
class Router {
 public:
  virtual ~Router() = default;
  /// Sends a call to an actor in another process; false if its proc cannot be reached.
  virtual bool route_call(const ActorId& target, const EndpointInfo& endpoint, Body& args,
                          std::shared_ptr<StateBase>& reply, const ActorId& sender) = 0;
  /// Sends a value to a port in another process; false if its proc cannot be reached.
  virtual bool route_port(const PortId& port, const Body& body, const ActorId& sender) = 0;
  /// Returns a message to its sender in another process; false if it cannot be reached.
  virtual bool return_undeliverable(const ActorId& from, const Undeliverable& u) = 0;
  /// Sends a supervision event to its owner in another process; false if it cannot.
  virtual bool forward_failure(const ActorId& owner, const SupervisionEvent& event) = 0;
  /// Drops `proc`'s links (the proc is going), failing what waits on them.
  virtual void close_links(ProcState& proc) = 0;
  /// The proc that dials other processes from this one (the last to serve), or null.
  virtual std::shared_ptr<ProcState> home() = 0;
};

class Node {
 public:
  /// The node of this process, made if there is none. Procs and runtimes hold it; it dies with
  /// the last of them.
  static std::shared_ptr<Node> acquire();
  /// The node of this process, or null if no proc or runtime holds one.
  static std::shared_ptr<Node> current();

  Node() = default;
  ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// The proc named `name` in this process, or null.
  std::shared_ptr<ProcState> find_proc(const std::string& name);
  /// Adds a proc to the directory; throws UsageError if a live proc has its name.
  void add_proc(const std::shared_ptr<ProcState>& proc);
  /// Removes a proc from the directory (it is going).
  void remove_proc(const ProcState& proc);
  /// Procs in the directory.
  std::size_t procs();

  /// The router, or null before the remote layer installed one (no link was ever made).
  Router* router() const { return router_.load(std::memory_order_acquire); }
  /// Installs the router `make` returns, once; returns the router installed.
  Router& install_router(const std::function<std::unique_ptr<Router>(Node&)>& make);

  /// State an upper layer keeps for this process (the mesh layer's key counter, the RDMA
  /// registry, the runtime), made on first use and destroyed with the node.
  template <class T>
  std::shared_ptr<T> extension() {
    return extensions_.get<T>();
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::weak_ptr<ProcState>> procs_;
  std::unique_ptr<Router> router_owned_;
  std::atomic<Router*> router_{nullptr};
  Extensions extensions_;
};

/// The node of the calling thread: its actor's proc's, else the process's (may be null).
std::shared_ptr<Node> node_here();

}  // namespace baton::detail
