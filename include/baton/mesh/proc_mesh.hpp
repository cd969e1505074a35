#pragma once

// ProcMesh: procs laid out on a shape, each a worker process; spawns one actor per proc.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
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

/// A member of an actor mesh as the process that spawned it remembers it, so that if its proc
/// dies the owner of its mesh hears of that member: its actor, its mesh's name, its rank and
/// point (not of the proc's agent).
struct HostedMember {
  ActorId actor;
  ActorId owner;  // the mesh's (see ProcMesh::spawn)
  std::string mesh;
  std::int64_t rank = 0;
  Point point;
  std::shared_ptr<const MeshLife> life;  // whether it was stopped since
  std::size_t loc = 0;                   // its location in the mesh
};
/// Remembers the members a spawn placed, each under its actor's proc; forgets, by the way,
/// those stopped since they were noted.
void note_hosted(std::vector<HostedMember> members);
/// The members noted under the proc `proc` and not stopped since, forgotten as they are
/// returned (its process is gone). A member stopped through a handle that came from another
/// process is not seen as stopped here.
std::vector<HostedMember> take_hosted(const std::string& proc);
/// The members spawn_members() placed, by rank, and the key of their mesh's cast tree.
struct SpawnedMembers {
  std::vector<ActorId> ids;
  std::uint64_t key = 0;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(ids, key);
  }
};

/// Asks the agent of `procs[r]` to spawn the member of rank r (at `points[r]` of its proc
/// mesh) from `factory` and `args`, then teaches every member's proc its node of the mesh's
/// cast tree (CA-3). Never blocks: each step goes on from the thread that completes the last
/// reply of the one before. Fails with the lowest-ranked failure of a step, or with UsageError
/// once `stopped` is set.
Future<SpawnedMembers> spawn_members(std::vector<ProcId> procs, std::vector<Point> points,
                                     std::uint64_t factory, Body args, Supervisor place,
                                     std::shared_ptr<const std::atomic<bool>> stopped);
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
    try {
      check();
      if (stopped_->load(std::memory_order_acquire)) {
        throw UsageError("spawn('" + name + "'): this proc mesh was stopped");
      }
      std::vector<std::pair<std::string, std::size_t>> dims;
      for (const auto& label : shape_.labels()) dims.emplace_back(label, shape_.size(label));
      Shape mesh_shape = Shape::of(dims);
      std::vector<ProcId> procs;
      std::vector<Point> points;
      procs.reserve(size());
      points.reserve(size());
      for (std::size_t r = 0; r < size(); ++r) {
        procs.push_back(proc(r));
        points.push_back(base_shape_.point(shape_.location(r)));
      }
      detail::Supervisor place{detail::current_owner(), name, 0, mesh_shape, {}};
      ActorId owner = place.owner;
      auto members = detail::spawn_members(std::move(procs), std::move(points), factory,
                                           std::move(body), std::move(place), stopped_);
      // The actor mesh is dense over this (possibly sliced) proc mesh's members, in rank order.
      const auto& src = members.state();
      src->on_ready([src, result, mesh_shape = std::move(mesh_shape), name, stopped = stopped_,
                     owner = std::move(owner)]() mutable {
        try {
          detail::SpawnedMembers m = std::move(src->value());  // nobody else reads this state
          std::vector<ActorRef<A>> refs;
          refs.reserve(m.ids.size());
          for (auto& id : m.ids) {
            auto cell = detail::resolve_actor(id);
            refs.push_back(detail::make_ref<A>(std::move(id), std::move(cell)));
          }
          ActorMesh<A> mesh(mesh_shape, std::move(refs), name, m.key, stopped);
          // If a proc dies, the owner hears of its members here (see note_hosted).
          std::vector<detail::HostedMember> hosted;
          hosted.reserve(mesh.size());
          for (std::size_t r = 0; r < mesh.size(); ++r) {
            hosted.push_back({mesh.at(r).id(), owner, name, static_cast<std::int64_t>(r),
                              mesh_shape.point(r), mesh.base().life, r});
          }
          detail::note_hosted(std::move(hosted));
          result->set_value(std::move(mesh));
        } catch (...) {
          result->set_exception(std::current_exception());
        }
      });
    } catch (...) {
      result->set_exception(std::current_exception());
    }
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
