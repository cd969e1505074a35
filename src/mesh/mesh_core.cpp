// What an actor mesh is whatever its actors' type: its members, its cast requests, its stop,
// and what its spawner remembers of it (see baton/mesh/mesh_core.hpp).

#include "baton/mesh/mesh_core.hpp"

#include <utility>

#include "actor/failures.hpp"
#include "baton/actor/errors.hpp"
#include "baton/mesh/value_mesh.hpp"
#include "mesh/agent.hpp"
#include "mesh/hosted.hpp"

namespace baton::detail {

namespace {

/// A call to the agent of a proc that is being stopped: that agent gone before it came
/// (undeliverable) means the proc's actors are gone too, which is what was asked.
Future<int> gone_is_stopped(const Future<int>& call) {
  auto done = std::make_shared<Promise<int>>();
  Future<int> out = done->get_future();
  const auto& in = call.state();  // the callback keeps a copy
  in->on_ready([in, done] {
    try {
      if (const std::exception_ptr e = in->error()) std::rethrow_exception(e);
      done->set_value(0);
    } catch (const UndeliverableError&) {
      done->set_value(0);
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  });
  return out;
}

Future<void> when_all(std::vector<Future<int>> parts) {
  if (parts.empty()) return make_ready_future();
  const Shape shape = Shape::of({{"n", parts.size()}});
  auto all = gather<int>(shape, std::move(parts));
  return std::move(all).then([](const ValueMesh<int>&) {});
}

}  // namespace

MeshCore::MeshCore(const std::vector<ActorId>& by_location, std::string name, std::uint64_t key,
                   std::uint32_t host_fanout,
                   std::shared_ptr<const std::atomic<bool>> procs_stopped)
    : key_(key),
      host_fanout_(host_fanout),
      life_(std::make_shared<MeshLife>(std::move(name), by_location.size())),
      procs_stopped_(std::move(procs_stopped)) {
  auto members = std::make_shared<std::vector<CastMember>>();
  members->reserve(by_location.size());
  for (const auto& id : by_location) members->push_back({id, address_text(id.proc)});
  members_ = std::move(members);
  root_children_ = root_children(*members_, host_fanout_);
}

bool MeshCore::direct(std::size_t loc) const {
  for (const auto& c : *root_children_) {
    if (c.loc == loc) return true;
  }
  return false;
}

MeshCore::~MeshCore() = default;

const std::string& MeshCore::name() const {
  return life_->name();
}

void MeshCore::check_live(std::size_t loc) const {
  if (procs_stopped_ && procs_stopped_->load(std::memory_order_acquire)) {
    throw UsageError("actor mesh '" + name() +
                     "': its procs were stopped; spawn new procs and actors to go on");
  }
  if (life_->stopped(loc)) {
    throw UsageError("actor mesh '" + name() + "' was stopped (member " + id(loc).to_string() +
                     "); spawn a new one to go on");
  }
}

std::size_t MeshCore::choose(const Shape& view) const {
  thread_local std::uint64_t x = reinterpret_cast<std::uintptr_t>(&x) | 1;
  const auto next = [] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  const std::size_t n = view.len();
  const std::size_t first = static_cast<std::size_t>(next() % n);
  // From a random start, the first member not known dead: each live one is as likely as the
  // next while none died, and a dead one is never chosen while one lives.
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t rank = (first + i) % n;
    if (!proc_failure(id(view.location(rank)).proc)) return rank;
  }
  return first;
}

CastRequest MeshCore::request(const Shape& view, std::uint64_t endpoint, Body args,
                              CastMode mode) const {
  for (std::size_t r = 0; r < view.len(); ++r) check_live(view.location(r));
  CastRequest req;
  req.key = key_;
  req.base = members_;
  req.host_fanout = host_fanout_;
  req.children = root_children_;
  req.view = view.slice();
  req.endpoint = endpoint;
  req.args = std::move(args);
  req.mode = mode;
  return req;
}

CastRequest MeshCore::request_one(std::size_t loc, std::uint64_t endpoint, Body args) const {
  CastRequest req;
  req.key = key_;
  req.base = members_;
  req.host_fanout = host_fanout_;
  req.children = root_children_;
  req.view = Slice(loc, {1}, {1});
  req.endpoint = endpoint;
  req.args = std::move(args);
  req.mode = CastMode::gather;
  return req;
}

Future<void> MeshCore::stop(const Shape& view) const {
  const bool procs_going = procs_stopped_ && procs_stopped_->load(std::memory_order_acquire);
  auto to_agent = [procs_going](Future<int> call) {
    return procs_going ? gone_is_stopped(call) : std::move(call);
  };
  std::vector<Future<int>> parts;
  for (std::size_t r = 0; r < view.len(); ++r) {
    const std::size_t loc = view.location(r);
    if (life_->stopped(loc)) continue;
    life_->stop(loc);
    const ActorId& member = id(loc);
    parts.push_back(to_agent(agent_of(member.proc).call(&ProcAgent::stop_actor, member)));
  }
  if (!parts.empty() && life_->all_stopped()) {
    // The last members went: every proc of the mesh drops its node of the tree. (A node whose
    // own member stopped still forwards to live members behind it until then.)
    for (const auto& m : *members_) {
      parts.push_back(to_agent(agent_of(m.actor.proc).call(&ProcAgent::forget, key_)));
    }
  }
  return when_all(std::move(parts));
}

void MeshCore::note_hosted(const ActorId& owner, const Shape& shape) const {
  std::vector<HostedMember> hosted;
  hosted.reserve(size());
  for (std::size_t r = 0; r < size(); ++r) {
    hosted.push_back(
        {id(r), owner, name(), static_cast<std::int64_t>(r), shape.point(r), life_, r});
  }
  detail::note_hosted(std::move(hosted));
}

}  // namespace baton::detail
