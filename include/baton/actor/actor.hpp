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
//   A-5 a message that cannot be delivered returns to its sender with the reason; unhandled,
//       the sender fails, unless its receiver was stopped on purpose (then it is dropped).
//
// This header is what a translation unit that only names an actor needs: the base class, the
// endpoint list and what an actor knows of itself, with no serialization library. Calling,
// spawning and references (ActorRef) are in actor_ref.hpp; baton/baton.hpp has everything.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/actor/endpoint_list.hpp"
#include "baton/actor/errors.hpp"
#include "baton/slice/slice.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

class Proc;
template <class A>
class ActorRef;
template <class T>
class Port;

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
/// users get references from spawn). Defined in actor_ref.hpp.
template <class A>
ActorRef<A> make_ref(ActorId id, CellPtr cell);

const ActorId& cell_id(const Cell& c);
const ActorContext& cell_context(const Cell& c);
CellPtr cell_ptr(Cell& c);
Proc& cell_proc(Cell& c);

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
  /// this actor, which reports to its parent, unless its receiver was stopped on purpose
  /// (UndeliverableError::Reason::actor_stopped): then it is dropped, with a log line.
  virtual bool handle_undeliverable(const Undeliverable& u) {
    (void)u;
    return false;
  }
  /// Runs after the last message, when the actor stops.
  virtual void on_stop() {}
  /// Runs when the actor fails, saying why, in place of on_stop(); the failure is
  /// reported whatever this does.
  virtual void on_failure(const std::string& reason) { (void)reason; }

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

}  // namespace baton
