#pragma once

// Meshes: many actors (or procs) addressed at once through a named Shape.
//
//   auto trainers = procs.spawn<Trainer>("trainers", 42);      // one actor per proc
//   ValueMesh<double> loss = trainers.call(&Trainer::train, 0).get();
//   trainers.slice("gpus", 0, 4).broadcast(&Trainer::train, 1);
//
// A slice is a view: it shares the actors and narrows the shape. Replies carry their Point.
// This first version sends one message per rank from the caller; the cast tree comes later.

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "baton/actor/proc.hpp"
#include "baton/slice/slice.hpp"

namespace baton {

/// One value per member of a shape, by rank or by Point.
template <class T>
class ValueMesh {
 public:
  ValueMesh() = default;
  ValueMesh(Shape shape, std::vector<T> values)
      : shape_(std::move(shape)), values_(std::move(values)) {}

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return values_.size(); }
  const T& operator[](std::size_t rank) const { return values_.at(rank); }
  const T& at(const Point& p) const { return values_.at(shape_.rank_of(p.coords)); }
  const std::vector<T>& values() const { return values_; }
  /// (Point, value) pairs in rank order.
  std::vector<std::pair<Point, T>> items() const {
    std::vector<std::pair<Point, T>> out;
    for (std::size_t r = 0; r < values_.size(); ++r) out.emplace_back(shape_.point(r), values_[r]);
    return out;
  }

  template <class Ar>
  void serialize(Ar& ar) {
    ar(shape_, values_);
  }

 private:
  Shape shape_;
  std::vector<T> values_;
};

/// What a call on a mesh gathers: the endpoint's result, or std::monostate for void.
template <class R>
using mesh_value_t = std::conditional_t<std::is_void_v<R>, std::monostate, R>;

namespace detail {

/// Completes one future when all of `parts` have; the first failure fails it.
template <class R>
Future<ValueMesh<mesh_value_t<R>>> gather(const Shape& shape, std::vector<Future<R>> parts) {
  using V = mesh_value_t<R>;
  struct Gather {
    std::mutex mu;
    std::size_t left;
    std::vector<std::optional<V>> values;
    bool done = false;
    Promise<ValueMesh<V>> promise;
    Shape shape;
  };
  auto g = std::make_shared<Gather>();
  g->left = parts.size();
  g->values.resize(parts.size());
  g->shape = shape;
  auto result = g->promise.get_future();
  if (parts.empty()) g->promise.set_value(ValueMesh<V>(g->shape, {}));
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto state = parts[i].state();
    state->on_ready([g, i, state] {
      std::exception_ptr error;
      std::optional<V> v;
      try {
        if constexpr (std::is_void_v<R>) {
          state->value();
          v.emplace();
        } else {
          v.emplace(state->value());
        }
      } catch (...) {
        error = std::current_exception();
      }
      std::unique_lock lock(g->mu);
      if (g->done) return;
      if (error) {
        g->done = true;
        lock.unlock();
        g->promise.set_exception(error);
        return;
      }
      g->values[i] = std::move(v);
      if (--g->left == 0) {
        g->done = true;
        std::vector<V> out;
        out.reserve(g->values.size());
        for (auto& x : g->values) out.push_back(std::move(*x));
        lock.unlock();
        g->promise.set_value(ValueMesh<V>(g->shape, std::move(out)));
      }
    });
  }
  return result;
}

}  // namespace detail

/// The runtime's agent in every proc: spawns actors there on the controller's behalf.
class ProcAgent : public Actor {
 public:
  ActorId spawn(const std::string& name, std::uint64_t factory, const std::string& head,
                const std::vector<Bytes>& parts) {
    Body args;
    args.head = head;
    args.parts = parts;
    return proc().spawn_from(name, factory, std::move(args));
  }
  int ping() { return 1; }
  static constexpr auto endpoints = baton::endpoints<&ProcAgent::spawn, &ProcAgent::ping>();
};

/// One actor of type A per member of a shape.
template <class A>
class ActorMesh {
 public:
  ActorMesh() = default;
  ActorMesh(Shape shape, std::shared_ptr<const std::vector<ActorRef<A>>> by_location)
      : shape_(std::move(shape)), refs_(std::move(by_location)) {}

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return shape_.len(); }
  /// The actor at `rank` of this (possibly sliced) mesh.
  const ActorRef<A>& at(std::size_t rank) const { return (*refs_)[shape_.location(rank)]; }

  /// Calls every member; the future holds each reply at its rank (its Point via shape()).
  template <class F, class... Args>
  Future<ValueMesh<mesh_value_t<detail::reply_t<F>>>> call(F f, Args&&... args) const {
    using R = detail::reply_t<F>;
    const auto& ep = detail::endpoint_for<A>(f);
    const Body body = detail::encode_call_args<F>(std::forward<Args>(args)...);
    std::vector<Future<R>> parts;
    parts.reserve(size());
    for (std::size_t r = 0; r < size(); ++r) {
      auto state = std::make_shared<detail::State<R>>();
      detail::send_call(at(r).id(), nullptr, ep, body, state);
      parts.emplace_back(std::move(state));
    }
    return detail::gather<R>(shape_, std::move(parts));
  }
  /// Calls the single member of a mesh of size 1.
  template <class F, class... Args>
  Future<detail::reply_t<F>> call_one(F f, Args&&... args) const {
    if (size() != 1) {
      throw UsageError("call_one() needs a mesh of exactly one actor; this mesh " +
                       shape_.to_string() + " has " + std::to_string(size()) + " (slice it)");
    }
    return at(0).call(f, std::forward<Args>(args)...);
  }
  /// Sends to every member without waiting for replies.
  template <class F, class... Args>
  void broadcast(F f, Args&&... args) const {
    const auto& ep = detail::endpoint_for<A>(f);
    const Body body = detail::encode_call_args<F>(std::forward<Args>(args)...);
    for (std::size_t r = 0; r < size(); ++r)
      detail::send_call(at(r).id(), nullptr, ep, body, nullptr);
  }

  /// The members with `dim` in [begin, end): a view, no actor is copied.
  ActorMesh slice(std::string_view dim, std::size_t begin, std::size_t end) const {
    return ActorMesh(shape_.range(dim, begin, end), refs_);
  }
  /// The members with `dim` == index; the dimension is dropped.
  ActorMesh slice(std::string_view dim, std::size_t index) const {
    return ActorMesh(shape_.at(dim, index), refs_);
  }

 private:
  Shape shape_;
  std::shared_ptr<const std::vector<ActorRef<A>>> refs_;
};

namespace detail {
/// Whoever started a mesh's procs, and can stop them.
class ProcGroup {
 public:
  virtual ~ProcGroup() = default;
  virtual void stop() = 0;
};
}  // namespace detail

/// Procs laid out on a shape; spawns one actor per proc.
class ProcMesh {
 public:
  ProcMesh(Shape shape, std::vector<ProcId> by_location, std::shared_ptr<detail::ProcGroup> group)
      : shape_(std::move(shape)),
        procs_(std::make_shared<std::vector<ProcId>>(std::move(by_location))),
        group_(std::move(group)) {}

  /// Stops every proc of the mesh (SIGTERM, then SIGKILL after a bound); calls to its actors
  /// fail afterwards.
  Future<void> stop() const {
    if (group_) group_->stop();
    return make_ready_future();
  }

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return shape_.len(); }
  const ProcId& proc(std::size_t rank) const { return (*procs_)[shape_.location(rank)]; }

  /// Spawns an A named `name` in every proc; constructor arguments are serialized.
  template <class A, class... Args>
  ActorMesh<A> spawn(const std::string& name, Args&&... args) const {
    using Reg = detail::FactoryRegistration<A, std::decay_t<Args>...>;
    const Body body = encode(static_cast<const std::decay_t<Args>&>(args)...);
    std::vector<Future<ActorId>> ids;
    ids.reserve(size());
    for (std::size_t r = 0; r < size(); ++r) {
      ActorRef<ProcAgent> agent(ActorId{proc(r), "agent", 0},
                                detail::resolve_actor(ActorId{proc(r), "agent", 0}));
      ids.push_back(agent.call(&ProcAgent::spawn, name, Reg::id, body.head, body.parts));
    }
    // Refs are kept by location in the base mesh, so slices of the result index the same way.
    std::vector<ActorRef<A>> refs(procs_->size());
    for (std::size_t r = 0; r < size(); ++r) {
      ActorId id = std::move(ids[r]).get();
      refs[shape_.location(r)] = ActorRef<A>(id, detail::resolve_actor(id));
    }
    return ActorMesh<A>(shape_, std::make_shared<const std::vector<ActorRef<A>>>(std::move(refs)));
  }

  ProcMesh slice(std::string_view dim, std::size_t begin, std::size_t end) const {
    ProcMesh m = *this;
    m.shape_ = shape_.range(dim, begin, end);
    return m;
  }

 private:
  Shape shape_;
  std::shared_ptr<std::vector<ProcId>> procs_;
  std::shared_ptr<detail::ProcGroup> group_;
};

}  // namespace baton
