#pragma once

// A Proc hosts actors: it owns an executor (a thread pool by default) on which every actor runs
// as a serial strand, and a table of its actors and ports.

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "baton/actor/actor_ref.hpp"
#include "baton/actor/executor.hpp"
#include "baton/actor/port.hpp"
#include "baton/net/link.hpp"
#include "baton/wire/address.hpp"

namespace baton {

/// One delivery, as seen by a trace hook (for tests and debugging).
struct TraceEvent {
  enum class Kind { construct, call, port, stop, supervision, undeliverable, resume };
  Kind kind;
  ActorId sender;
  ActorId receiver;
  std::string_view endpoint;  // the endpoint name for calls, else empty
};

namespace detail {
class ProcState;
class ProcAgent;
}  // namespace detail
class Proc;
namespace detail {
/// The internal state of a proc (for the runtime's layers).
ProcState& state_of(Proc& proc);
}  // namespace detail

/// How a Proc runs; every field has a working default.
struct ProcOptions {
  /// The proc's name, unique in this process; actor ids start with it.
  std::string name = "local";
  /// Worker threads of the default pool (0: one per core the proc may run on, as its affinity
  /// mask says: taskset, a scheduler's CPU binding or a container's cpuset narrow it).
  std::size_t threads = 0;
  /// Messages an actor handles before yielding its thread to others.
  std::size_t max_batch = 64;
  /// Called for a failure that no actor handled. Default: print the report and exit(1).
  std::function<void(const SupervisionEvent&)> on_unhandled_failure;
  /// Called for a one-way message from outside actors that came back. Default: log it.
  std::function<void(const Undeliverable&)> on_undeliverable;
  /// Called on every delivery, on the thread that handles it.
  std::function<void(const TraceEvent&)> trace;
  /// How this proc's links to other processes watch and repair their connections, and how
  /// much they may hold for sending (see net::LinkOptions).
  net::LinkOptions link;
  /// Messages from other processes waiting in one actor's mailbox above which the link that
  /// brings them stops reading until the mailbox is down to half; the peer's senders then wait
  /// (LinkOptions::max_queued_bytes). Nothing is dropped. Messages sent by this process's own
  /// threads are not held back.
  std::size_t mailbox_limit = 10000;
};

class Proc {
 public:
  using Options = ProcOptions;

  /// A proc with its own thread pool.
  explicit Proc(Options options = {});
  /// A proc on an executor owned by the caller (e.g. a ManualExecutor in tests).
  Proc(Options options, Executor& executor);
  ~Proc();
  Proc(const Proc&) = delete;
  Proc& operator=(const Proc&) = delete;

  const ProcId& id() const;

  /// Spawns an actor; its constructor runs on the actor's strand with the serialized args.
  template <class A, class... Args>
  ActorRef<A> spawn(std::string name, Args&&... args) {
    return spawn_as_child<A>(nullptr, std::move(name), std::forward<Args>(args)...);
  }

  /// Opens a port whose values queue for a thread outside actors.
  template <class T>
  std::pair<Port<T>, PortReceiver<T>> open_port() {
    auto sink = std::make_shared<detail::QueueSink<T>>();
    PortId id = register_port(sink);
    return {detail::make_port<Port<T>>(std::move(id), sink), detail::make_receiver<T>(sink)};
  }
  /// Opens a port that accepts one value, delivered to the returned future.
  template <class T>
  std::pair<OncePort<T>, Future<T>> open_once_port() {
    auto state = std::make_shared<detail::State<T>>();
    auto sink = std::make_shared<detail::OnceSink>(state);
    PortId id = register_port(sink);
    return {detail::make_port<OncePort<T>>(std::move(id), sink), Future<T>(state)};
  }

  /// Accepts links from procs in other processes at `address` (unix:// or tcp://; tcp port 0
  /// picks one) and returns the bound address.
  Address serve(const Address& address);
  /// Links to the proc `peer` served at `address`: calls to its actors, and their replies,
  /// travel over the link. Throws if it cannot connect.
  /// `on_lost`, if given, runs (on the I/O thread) when the link closes, with how it ended
  /// (net::LinkEnd) and why.
  void connect(const ProcId& peer, const Address& address,
               std::function<void(net::LinkEnd end, const std::string& reason)> on_lost = nullptr);
  /// True while a link to the proc `peer` is up (after its hello arrived, when it dialled us).
  bool linked(const ProcId& peer) const;
  /// Waits up to `timeout` for a link to `peer`; true once it is up.
  bool wait_linked(const ProcId& peer, std::chrono::milliseconds timeout) const;
  /// Waits up to `timeout` until no link to `peer` is left (its socket closed); true then.
  bool wait_unlinked(const ProcId& peer, std::chrono::milliseconds timeout) const;

  /// Envelopes this proc has sent to other processes (calls, replies, casts).
  std::uint64_t envelopes_sent() const;

  /// Stops every actor after its queued messages and waits for them; idempotent.
  void stop();

 private:
  friend class Actor;
  friend class detail::ProcAgent;
  friend detail::ProcState& detail::state_of(Proc& proc);

  /// Spawns from a registered constructor id and serialized arguments (for remote spawns).
  /// With `supervisor`, a failure of the actor goes to that owner instead of this proc.
  ActorId spawn_from(const std::string& name, std::uint64_t factory, Body args,
                     std::optional<detail::Supervisor> supervisor = std::nullopt) {
    return spawn_erased(nullptr, name, factory, std::move(args), std::move(supervisor)).first;
  }
  template <class A, class... Args>
  ActorRef<A> spawn_as_child(detail::Cell* parent, const std::string& name, Args&&... args) {
    static_assert(std::is_base_of_v<Actor, A>, "actors must derive from baton::Actor");
    using Reg = detail::FactoryRegistration<A, std::decay_t<Args>...>;
    auto [id, cell] = spawn_erased(parent, name, Reg::id,
                                   encode(static_cast<const std::decay_t<Args>&>(args)...));
    return detail::make_ref<A>(std::move(id), std::move(cell));
  }
  std::pair<ActorId, detail::CellPtr> spawn_erased(
      detail::Cell* parent, const std::string& name, std::uint64_t factory, Body args,
      std::optional<detail::Supervisor> supervisor = std::nullopt);
  PortId register_port(detail::PortSinkPtr sink);

  std::shared_ptr<detail::ProcState> state_;
};

namespace detail {
/// Stops every top-level actor of `proc` but `keep`, each after the messages already queued for
/// it (their on_stop hooks run); the future completes when all have stopped.
Future<void> stop_all_but(Proc& proc, const ActorId& keep);
/// Runs `hook` when `proc` begins to stop, before any of its actors is told to (so before any
/// of them is destroyed): for layers that serve memory the actors own.
void add_stop_hook(Proc& proc, std::function<void()> hook);
/// A port whose values become messages in an actor's mailbox.
std::pair<PortId, PortSinkPtr> open_actor_port(Cell& cell,
                                               std::function<void(const Body&)> handler);
}  // namespace detail

template <class T, class F>
Port<T> Actor::open_port(F handler) {
  auto [id, sink] = detail::open_actor_port(
      *cell_, [h = std::move(handler)](const Body& body) mutable { h(decode<T>(body)); });
  return detail::make_port<Port<T>>(std::move(id), std::move(sink));
}

template <class A, class... Args>
ActorRef<A> Actor::spawn(std::string name, Args&&... args) {
  return proc().spawn_as_child<A>(cell_, name, std::forward<Args>(args)...);
}

}  // namespace baton
