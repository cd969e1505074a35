#pragma once

// References to actors and what calling and spawning them needs: the endpoint tables, the
// registered constructors, and the encoding of arguments and results.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "baton/actor/actor.hpp"
#include "baton/actor/endpoint.hpp"
#include "baton/actor/future.hpp"
#include "baton/actor/port.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

namespace detail {

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
/// Who owns what is spawned now: the running actor, else the client of this process's main
/// proc (code outside actors, such as the controller's main thread).
ActorId current_owner();
/// Stops an actor after the messages already queued for it; the future completes when stopped.
Future<void> stop_actor(const ActorId& target, const CellPtr& cached);

}  // namespace detail

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
