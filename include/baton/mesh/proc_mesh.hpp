#pragma once

// ProcMesh: procs laid out on a shape, each a worker process; spawns one actor per proc.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "baton/actor/errors.hpp"
#include "baton/actor/future.hpp"
#include "baton/mesh/actor_mesh.hpp"
#include "baton/slice/slice.hpp"
#include "baton/slice/sliceable.hpp"

namespace baton {

namespace detail {
/// Whoever started a mesh's procs, and can stop them.
class ProcGroup {
 public:
  virtual ~ProcGroup() = default;
  /// Orderly stop: each proc's actors stop (on_stop runs), then SIGTERM; whatever is still
  /// running after `grace` gets SIGKILL. Returns at once; the future completes once every
  /// process is gone (every call gets the first call's).
  virtual Future<void> stop(std::chrono::milliseconds grace) = 0;
  /// The default grace of stop().
  virtual std::chrono::milliseconds default_grace() const = 0;
  /// Set once the group is told to stop, by whomever.
  virtual std::shared_ptr<std::atomic<bool>> stopped_flag() const = 0;
};

/// What a spawn placed: the new mesh's shape and its members (see ProcMesh::spawn).
struct SpawnedMesh {
  Shape shape;
  std::shared_ptr<const MeshCore> core;
};
/// It stays in the process that spawned (never a reply).
template <>
struct local_only<SpawnedMesh> : std::true_type {};
}  // namespace detail

/// Procs laid out on a shape; spawns one actor per proc.
class ProcMesh : public Sliceable<ProcMesh> {
 public:
  /// An empty handle, to be assigned the mesh spawn_procs() returns (so a class can hold one).
  ProcMesh() = default;
  ProcMesh(Shape shape, std::vector<ProcId> by_location, std::shared_ptr<detail::ProcGroup> group)
      : base_shape_(shape),
        shape_(std::move(shape)),
        procs_(std::make_shared<std::vector<ProcId>>(std::move(by_location))),
        group_(std::move(group)),
        stopped_(group_ ? group_->stopped_flag() : std::make_shared<std::atomic<bool>>(false)) {}

  /// Stops every proc of the mesh, in order: the proc meshes its actors own stop first, then
  /// its actors after the messages already queued for them (on_stop runs), then the processes
  /// get SIGTERM; whatever still runs after `grace` (RuntimeOptions::stop_grace by default) gets
  /// SIGKILL. Does not block: calls to its actors fail from now on, and the future completes
  /// once every process is gone (or fails naming one that could not be stopped).
  Future<void> stop() const { return stop(group_ ? group_->default_grace() : kNoGrace); }
  Future<void> stop(std::chrono::milliseconds grace) const {
    check();
    stopped_->store(true, std::memory_order_release);
    if (!group_) return make_ready_future();
    return group_->stop(grace);
  }

  const Shape& shape() const { return shape_; }
  std::size_t size() const { return shape_.len(); }
  const ProcId& proc(std::size_t rank) const {
    check();
    return (*procs_)[shape_.location(rank)];
  }

  /// Spawns an A named `name` in every proc; constructor arguments are serialized. Never
  /// blocks: the future completes once every member is placed in its proc and every proc knows
  /// the mesh's cast tree, so the mesh can be called at once; each constructor runs on its
  /// member's strand and calls queue behind it (a constructor that throws fails that member, as
  /// A-4 says, and calls to it fail with SupervisionError). The future fails with UsageError on
  /// an empty or stopped proc mesh (also one stopped before the spawn completed), and otherwise
  /// with the lowest-ranked proc's failure (an invalid name, a proc that died). Inside an actor,
  /// `co_await` it. The caller (the running actor, or the controller) owns the new mesh: its
  /// members' failures go to the caller's supervise() hook, or to the controller's
  /// (RuntimeOptions::supervise). If a proc dies, the owner of each actor mesh with a live
  /// member there hears of that member (its actor, the mesh's name, its rank, and its point in
  /// the message); the proc mesh's owner hears of the proc itself only if it hosted no such
  /// member.
  template <class A, class... Args>
  Future<ActorMesh<A>> spawn_async(const std::string& name, Args&&... args) const {
    using Reg = detail::FactoryRegistration<A, std::decay_t<Args>...>;
    Body body;
    try {
      body = encode(static_cast<const std::decay_t<Args>&>(args)...);
    } catch (...) {
      auto failed = std::make_shared<detail::State<ActorMesh<A>>>();
      failed->set_exception(std::current_exception());
      return Future<ActorMesh<A>>(std::move(failed));
    }
    return spawn_factory_async<A>(name, Reg::id, std::move(body));
  }

  /// spawn_async() by a factory's id, with its constructor's arguments encoded: for actors a
  /// caller knows by name only (exposed to Python, baton/python/expose.hpp); A names the
  /// endpoints the caller will use.
  template <class A>
  Future<ActorMesh<A>> spawn_factory_async(const std::string& name, std::uint64_t factory,
                                           Body body) const {
    auto result = std::make_shared<detail::State<ActorMesh<A>>>();
    const auto placed = spawn_core(name, factory, std::move(body));
    const auto& src = placed.state();
    src->on_ready([src, result] {
      try {
        detail::SpawnedMesh m = std::move(src->value());  // nobody else reads this state
        result->set_value(ActorMesh<A>(std::move(m.shape), std::move(m.core)));
      } catch (...) {
        result->set_exception(std::current_exception());
      }
    });
    return Future<ActorMesh<A>>(std::move(result));
  }

  /// spawn_async(...).get(): blocks until the mesh is there, and rethrows its failures. Inside
  /// an actor it throws UsageError, as Future::get() does there (F-2): co_await spawn_async.
  template <class A, class... Args>
  ActorMesh<A> spawn(const std::string& name, Args&&... args) const {
    detail::check_may_block("ProcMesh::spawn() (co_await spawn_async() instead)");
    return spawn_async<A>(name, std::forward<Args>(args)...).get();
  }

 private:
  static constexpr std::chrono::milliseconds kNoGrace{0};

  /// What spawn_factory_async() does whatever A is (src/mesh/spawn.cpp).
  Future<detail::SpawnedMesh> spawn_core(const std::string& name, std::uint64_t factory,
                                         Body body) const;

  friend class Sliceable<ProcMesh>;  // view()
  ProcMesh view(const Shape& shape) const {
    ProcMesh m = *this;
    m.shape_ = shape;
    return m;
  }
  void check() const {
    if (!procs_) {
      throw UsageError(
          "this ProcMesh is empty (default-constructed): assign it the mesh that spawn_procs() "
          "returns before using it");
    }
  }

  Shape base_shape_;  // the shape the procs were started with (row-major: rank = location)
  Shape shape_;
  std::shared_ptr<std::vector<ProcId>> procs_;
  std::shared_ptr<detail::ProcGroup> group_;
  std::shared_ptr<std::atomic<bool>> stopped_;  // shared with the group: a host stop sets it
};

namespace detail {
/// A proc mesh stays with the process that started it (Future<ProcMesh> is never a reply).
template <>
struct local_only<ProcMesh> : std::true_type {};
}  // namespace detail

}  // namespace baton
