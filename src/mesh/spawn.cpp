// Spawning an actor mesh on a proc mesh without blocking: each proc's agent places its member,
// then every member's proc learns its node of the mesh's cast tree (CA-3). Each step goes on
// from the thread that completes the last reply of the step before; no thread waits.

#include <atomic>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "baton/mesh/proc_mesh.hpp"

namespace baton::detail {
namespace {

/// Runs `then(parts)` once every future of `parts` is ready, on the thread that completes the
/// last of them (at once if all already are).
template <class T, class F>
void when_all(std::vector<Future<T>> parts, F then) {
  struct Join {
    Join(std::vector<Future<T>> p, F f) : left(p.size()), parts(std::move(p)), then(std::move(f)) {}
    std::atomic<std::size_t> left;
    std::vector<Future<T>> parts;
    F then;
  };
  auto join = std::make_shared<Join>(std::move(parts), std::move(then));
  if (join->parts.empty()) {
    join->then(join->parts);
    return;
  }
  // Each callback holds the join, and the join the futures: a cycle that ends as each state
  // completes and lets go of its callback.
  for (const auto& part : join->parts) {
    part.state()->on_ready([join] {
      if (join->left.fetch_sub(1, std::memory_order_acq_rel) == 1) join->then(join->parts);
    });
  }
}

/// The first failure among `parts` (all ready), in rank order.
template <class T>
std::exception_ptr first_error(const std::vector<Future<T>>& parts) {
  for (const auto& part : parts) {
    if (auto e = part.state()->error()) return e;
  }
  return nullptr;
}

ActorRef<ProcAgent> agent_of(const ProcId& proc) {
  ActorId id{proc, "agent", 0};
  auto cell = resolve_actor(id);
  return make_ref<ProcAgent>(std::move(id), std::move(cell));
}

/// One spawn_members() call on its way.
struct Spawning {
  std::vector<ProcId> procs;
  std::string name;
  std::shared_ptr<const std::atomic<bool>> stopped;
  std::shared_ptr<State<SpawnedMembers>> result = std::make_shared<State<SpawnedMembers>>();

  /// A mesh stopped while its spawn was on its way refuses it, whatever became of the steps.
  bool refuse_if_stopped() const {
    if (!stopped->load(std::memory_order_acquire)) return false;
    result->set_exception(std::make_exception_ptr(UsageError(
        "spawn('" + name + "'): this proc mesh was stopped before the spawn completed")));
    return true;
  }
  void fail(std::exception_ptr e) const {
    if (!refuse_if_stopped()) result->set_exception(std::move(e));
  }
};

/// Every member is placed (or a placement failed): each proc learns its node of the tree.
void placed(const std::shared_ptr<const Spawning>& s, const std::vector<Future<ActorId>>& ids) {
  if (auto e = first_error(ids)) return s->fail(e);
  try {
    SpawnedMembers out;
    out.ids.reserve(ids.size());
    std::vector<CastMember> members;
    members.reserve(ids.size());
    for (const auto& f : ids) {
      out.ids.push_back(f.state()->value());
      members.push_back({out.ids.back(), address_text(out.ids.back().proc)});
    }
    out.key = new_mesh_key();
    const std::vector<CastNode> nodes = cast_tree(members);
    std::vector<Future<int>> learned;
    learned.reserve(s->procs.size());
    for (std::size_t r = 0; r < s->procs.size(); ++r) {
      learned.push_back(agent_of(s->procs[r]).call(&ProcAgent::learn, out.key, nodes[r]));
    }
    when_all(std::move(learned), [s, out = std::move(out)](std::vector<Future<int>>& all) mutable {
      if (auto e = first_error(all)) return s->fail(e);
      if (!s->refuse_if_stopped()) s->result->set_value(std::move(out));
    });
  } catch (...) {
    s->fail(std::current_exception());
  }
}

}  // namespace

Future<SpawnedMembers> spawn_members(std::vector<ProcId> procs, std::vector<Point> points,
                                     std::uint64_t factory, Body args, Supervisor place,
                                     std::shared_ptr<const std::atomic<bool>> stopped) {
  auto s = std::make_shared<Spawning>(Spawning{std::move(procs), place.mesh, std::move(stopped)});
  Future<SpawnedMembers> result(s->result);
  std::vector<Future<ActorId>> ids;
  ids.reserve(s->procs.size());
  for (std::size_t r = 0; r < s->procs.size(); ++r) {
    place.rank = static_cast<std::int64_t>(r);
    place.proc_point = std::move(points[r]);
    ids.push_back(
        agent_of(s->procs[r]).call(&ProcAgent::spawn, factory, args.head, args.parts, place));
  }
  when_all(std::move(ids), [s = std::shared_ptr<const Spawning>(std::move(s))](
                               std::vector<Future<ActorId>>& all) { placed(s, all); });
  return result;
}

}  // namespace baton::detail
