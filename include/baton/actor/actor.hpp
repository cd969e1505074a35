#pragma once

// Actors are plain classes deriving from baton::Actor, with endpoints listed once:
//
//   class Counter : public baton::Actor {
//    public:
//     explicit Counter(int start) : n_(start) {}
//     int add(int k) { return n_ += k; }
//     static constexpr auto endpoints = baton::endpoints<&Counter::add>();
//    private:
//     int n_;
//   };
//
// Invariants (tests cite them):
//   A-1 an actor handles one message at a time, coroutine endpoints included;
//   A-2 messages from one sender to one actor are handled in the order they were sent;
//   A-3 an endpoint that throws with a reply port fails only that call (ActorError);
//       the actor keeps running;
//   A-4 a throw with no reply port, or in the constructor, fails the actor and sends a
//       SupervisionEvent to its parent; pending and later calls fail with SupervisionError;
//   A-5 a message that cannot be delivered returns to its sender with the reason.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/actor/endpoint.hpp"
#include "baton/actor/future.hpp"
#include "baton/actor/port.hpp"
#include "baton/slice/slice.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

class Proc;
template <class A>
class ActorRef;

/// A failure reported to the owner of what failed: an actor's parent, or the actor (or the
/// controller) that spawned the mesh it belongs to; it climbs while nobody handles it.
struct SupervisionEvent {
  /// The actor that failed; for a process that died, the member of the owner's actor mesh it
  /// hosted (one event per such mesh), or its proc's agent if it hosted none.
  ActorId actor;
  std::string message;     // what happened
  std::string mesh;        // the mesh the failed actor or proc belongs to, if any
  std::int64_t rank = -1;  // its rank in that mesh, if any
  /// The failures that led to this one and were not handled, nearest first, root cause last.
  std::vector<std::string> causes;

  /// One line: who failed, where, and what happened.
  std::string summary() const {
    std::string s = actor.to_string();
    if (!mesh.empty()) s += " (rank " + std::to_string(rank) + " of mesh '" + mesh + "')";
    return s + ": " + message;
  }
  /// The summary and, one per line, every cause below it.
  std::string to_string() const {
    std::string s = summary();
    for (const auto& c : causes) s += "\n  because " + c;
    return s;
  }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(actor, message, mesh, rank, causes);
  }
};
/// The failure a mesh's owner hears of in its `supervise` hook.
using MeshFailure = SupervisionEvent;

/// Where an actor sits, as it sees it from inside its constructor and endpoints
/// (Actor::context()).
struct ActorContext {
  ActorId id;                 // this actor
  std::string mesh;           // the actor mesh it is a member of; empty if spawned on its own
  std::size_t rank = 0;       // its rank in that mesh
  Point point;                // its coordinates in that mesh
  Shape shape;                // that mesh's shape
  std::size_t proc_rank = 0;  // the rank of its proc in the proc mesh that started it
  Point proc_point;           // that proc's coordinates there
  /// The device of the "gpus" dimension its proc was given, if the proc mesh has one; the
  /// process sees only that device, as device 0.
  std::optional<std::size_t> gpu;
};

/// A message that came back to its sender.
struct Undeliverable {
  PortId dest;
  UndeliverableError::Reason reason;
  std::string message;
};

namespace detail {

class Cell;
using CellPtr = std::shared_ptr<Cell>;
/// A reference to the actor `id`, with its cell if it lives in this process (for the runtime:
/// users get references from spawn).
template <class A>
ActorRef<A> make_ref(ActorId id, CellPtr cell);

using Factory = std::unique_ptr<Actor> (*)(const Body& args);

/// Who hears of a top-level actor's failure when it has no parent in its proc: the owner of its
/// mesh, which may live in another process, and where the actor sits in that mesh.
struct Supervisor {
  ActorId owner;  // an actor, or a proc's client (code outside actors, e.g. the controller)
  std::string mesh;
  std::int64_t rank = -1;
  Shape shape;       // the mesh's shape, for the member's ActorContext
  Point proc_point;  // its proc's place in the proc mesh that started it

  template <class Ar>
  void serialize(Ar& ar) {
    ar(owner, mesh, rank, shape, proc_point);
  }
};

struct ActorTypeInfo {
  std::string_view name;
  const EndpointInfo* endpoints = nullptr;
  std::size_t endpoint_count = 0;
  const EndpointInfo* find(std::uint64_t id) const {
    for (std::size_t i = 0; i < endpoint_count; ++i) {
      if (endpoints[i].id == id) return &endpoints[i];
    }
    return nullptr;
  }
};

/// Registers a constructor of an actor type for one list of argument types; returns its id.
std::uint64_t register_factory(std::string_view key, Factory factory, const ActorTypeInfo* type);

template <class A>
const ActorTypeInfo* actor_type_info() {
  static const ActorTypeInfo info{type_name<A>(), endpoint_infos<A>().data(),
                                  endpoint_infos<A>().size()};
  return &info;
}

template <class A, class... Args>
struct FactoryRegistration {
  static std::unique_ptr<Actor> make(const Body& body) {
    if constexpr (sizeof...(Args) == 0) {
      if (!body.head.empty()) throw DecodeError("constructor arguments for a default constructor");
      return std::make_unique<A>();
    } else {
      auto args = decode<std::tuple<Args...>>(body);
      return std::apply([](auto&... a) { return std::make_unique<A>(std::move(a)...); }, args);
    }
  }
  static std::string_view key() { return __PRETTY_FUNCTION__; }
  // Registered at start-up in every process that contains this instantiation, so a worker
  // running the same binary can construct the actor from its name and bytes.
  static inline const std::uint64_t id = register_factory(key(), &make, actor_type_info<A>());
};

/// Sends a call (or a one-way message when `reply` is null) to an actor.
void send_call(const ActorId& target, const CellPtr& cached, const EndpointInfo& endpoint,
               Body args, std::shared_ptr<StateBase> reply);
/// The cell of a local actor by id, or null.
CellPtr resolve_actor(const ActorId& id);
/// The cell of the actor running on this thread, or null.
Cell* current_cell();
const ActorId& cell_id(const Cell& c);
const ActorContext& cell_context(const Cell& c);
CellPtr cell_ptr(Cell& c);
Proc& cell_proc(Cell& c);
/// Who owns what is spawned now: the running actor, else the client of this process's main
/// proc (code outside actors, such as the controller's main thread).
ActorId current_owner();
/// Stops an actor after the messages already queued for it; the future completes when stopped.
Future<void> stop_actor(const ActorId& target, const CellPtr& cached);

}  // namespace detail

class Actor {
 public:
  Actor();
  virtual ~Actor() = default;
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  /// This actor's id.
  const ActorId& id() const { return detail::cell_id(*cell_); }
  /// Who and where this actor is: its mesh, rank and point, its proc's place, its GPU.
  const ActorContext& context() const { return detail::cell_context(*cell_); }
  /// The proc this actor runs in.
  Proc& proc() const { return detail::cell_proc(*cell_); }

  /// A child, or a member of a mesh this actor spawned, failed. Return true if handled;
  /// false fails this actor too, and the failure climbs to this actor's own owner.
  virtual bool supervise(const MeshFailure& event) {
    (void)event;
    return false;
  }
  /// A one-way message this actor sent came back. Return true if handled; false fails
  /// this actor, which reports to its parent.
  virtual bool handle_undeliverable(const Undeliverable& u) {
    (void)u;
    return false;
  }
  /// Runs after the last message, when the actor stops.
  virtual void on_stop() {}

 protected:
  /// A reference to this actor, to hand to others.
  template <class A>
  ActorRef<A> self() const {
    return detail::make_ref<A>(id(), detail::cell_ptr(*cell_));
  }
  /// Spawns a child actor in this proc; its failures are reported to this actor's supervise().
  template <class A, class... Args>
  ActorRef<A> spawn(std::string name, Args&&... args);

  /// Opens a port whose values are handled by `handler` on this actor, one message at a time
  /// like endpoints; a throw in the handler fails the actor.
  template <class T, class F>
  Port<T> open_port(F handler);

 private:
  friend class detail::Cell;
  detail::Cell* cell_ = nullptr;
};

/// A typed reference to an actor, local or (later) remote. Cheap to copy; serializable.
template <class A>
class ActorRef {
 public:
  ActorRef() = default;
  /// A reference to the actor `id`, wherever it lives (its proc is found when it is called).
  explicit ActorRef(ActorId id) : id_(std::move(id)) {}

  const ActorId& id() const { return id_; }

  /// Calls endpoint `f` and returns a future for its result (A-3: a throw fails the future).
  template <class F, class... Args>
  Future<detail::reply_t<F>> call(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    auto state = std::make_shared<detail::State<detail::reply_t<F>>>();
    detail::send_call(id_, cell_, ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                      state);
    return Future<detail::reply_t<F>>(std::move(state));
  }
  /// Sends to endpoint `f` without waiting for a reply; a throw there fails the actor.
  template <class F, class... Args>
  void send(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    detail::send_call(id_, cell_, ep, detail::encode_call_args<F>(std::forward<Args>(args)...),
                      nullptr);
  }
  /// Stops the actor once the messages queued before this are handled.
  Future<void> stop() const { return detail::stop_actor(id_, cell_); }

  friend bool operator==(const ActorRef& a, const ActorRef& b) { return a.id_ == b.id_; }

  // A reference carries its proc's address, so a receiver in any process can call it.
  template <class Ar>
  void save(Ar& ar) const {
    ar(id_, detail::address_text(id_.proc));
  }
  template <class Ar>
  void load(Ar& ar) {
    std::string address;
    ar(id_, address);
    detail::remember_address(id_.proc, address);
    cell_ = detail::resolve_actor(id_);
  }

 private:
  ActorId id_;
  detail::CellPtr cell_;

  ActorRef(ActorId id, detail::CellPtr cell) : id_(std::move(id)), cell_(std::move(cell)) {}
  template <class B>
  friend ActorRef<B> detail::make_ref(ActorId id, detail::CellPtr cell);
};

template <class A>
ActorRef<A> detail::make_ref(ActorId id, CellPtr cell) {
  return ActorRef<A>(std::move(id), std::move(cell));
}

}  // namespace baton
