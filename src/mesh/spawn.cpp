// Spawning an actor mesh on a proc mesh without blocking, whatever its actors' type: each
// proc's agent places its member, then every member's proc learns its node of the mesh's cast
// tree (CA-3). Each step goes on
// from the thread that completes the last reply of the step before; no thread waits.

#include <atomic>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "baton/mesh/proc_mesh.hpp"
#include "mesh/agent.hpp"

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

/// One spawn on its way.
struct Spawning {
  std::vector<ProcId> procs;
  std::string name;
  std::shared_ptr<const std::atomic<bool>> stopped;
  Shape shape;                                  // the new mesh's
  ActorId owner;                                // the new mesh's (see ProcMesh::spawn)
  std::uint32_t host_fanout = kCastHostFanOut;  // its cast tree's
  std::shared_ptr<State<SpawnedMesh>> result = std::make_shared<State<SpawnedMesh>>();

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

/// Every member is placed (or a placement failed): each proc learns its node of the tree; then
/// the spawner notes the members, so that the owner hears of them if their proc dies.
void placed(const std::shared_ptr<const Spawning>& s, const std::vector<Future<ActorId>>& placed) {
  if (auto e = first_error(placed)) return s->fail(e);
  try {
    std::vector<ActorId> ids;
    ids.reserve(placed.size());
    for (const auto& f : placed) ids.push_back(f.state()->value());
    auto core =
        std::make_shared<const MeshCore>(ids, s->name, new_mesh_key(), s->host_fanout, s->stopped);
    const std::vector<CastNode> nodes = cast_tree(core->members(), core->host_fanout());
    std::vector<Future<int>> learned;
    learned.reserve(s->procs.size());
    for (std::size_t r = 0; r < s->procs.size(); ++r) {
      learned.push_back(agent_of(s->procs[r]).call(&ProcAgent::learn, core->key(), nodes[r]));
    }
    when_all(std::move(learned), [s, core = std::move(core)](std::vector<Future<int>>& all) {
      if (auto e = first_error(all)) return s->fail(e);
      if (s->refuse_if_stopped()) return;
      core->note_hosted(s->owner, s->shape);
      s->result->set_value(SpawnedMesh{s->shape, core});
    });
  } catch (...) {
    s->fail(std::current_exception());
  }
}

}  // namespace

}  // namespace baton::detail

namespace baton {

Future<detail::SpawnedMesh> ProcMesh::spawn_core(const std::string& name, std::uint64_t factory,
                                                 Body body) const {
  using namespace detail;  // NOLINT(google-build-using-namespace): this layer's own internals
  try {
    check();
    if (stopped_->load(std::memory_order_acquire)) {
      throw UsageError("spawn('" + name + "'): this proc mesh was stopped");
    }
    std::vector<std::pair<std::string, std::size_t>> dims;
    for (const auto& label : shape_.labels()) dims.emplace_back(label, shape_.size(label));
    Supervisor place{current_owner(), name, 0, Shape::of(dims), {}};
    auto s = std::make_shared<Spawning>(
        Spawning{{}, name, stopped_, place.shape, place.owner, cast_host_fanout_from_env()});
    s->procs.reserve(size());
    std::vector<Future<ActorId>> ids;
    ids.reserve(size());
    // The actor mesh is dense over this (possibly sliced) proc mesh's members, in rank order.
    for (std::size_t r = 0; r < size(); ++r) {
      s->procs.push_back(proc(r));
      place.rank = static_cast<std::int64_t>(r);
      place.proc_point = base_shape_.point(shape_.location(r));
      ids.push_back(
          agent_of(s->procs[r]).call(&ProcAgent::spawn, factory, body.head, body.parts, place));
    }
    Future<SpawnedMesh> result(s->result);
    when_all(std::move(ids), [s = std::shared_ptr<const Spawning>(std::move(s))](
                                 std::vector<Future<ActorId>>& all) { placed(s, all); });
    return result;
  } catch (...) {
    auto failed = std::make_shared<State<SpawnedMesh>>();
    failed->set_exception(std::current_exception());
    return Future<SpawnedMesh>(std::move(failed));
  }
}

}  // namespace baton
