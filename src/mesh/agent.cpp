// The runtime's agent in every proc, and the proc's shutdown hook.

#include "mesh/agent.hpp"

#include <memory>
#include <mutex>

#include "actor/node.hpp"
#include "baton/actor/errors.hpp"
#include "baton/actor/proc.hpp"

namespace baton::detail {

namespace {
struct ShutdownHook {
  std::mutex mu;
  std::function<void()> hook;
};
// The node's: set by the runtime of this process.
std::shared_ptr<ShutdownHook> shutdown_hook() {
  auto node = node_here();
  return node ? node->extension<ShutdownHook>() : std::make_shared<ShutdownHook>();
}
}  // namespace

void set_shutdown_hook(std::function<void()> hook) {
  auto h = shutdown_hook();
  std::lock_guard lock(h->mu);
  h->hook = std::move(hook);
}

void run_shutdown_hook() {
  std::function<void()> hook;
  {
    auto h = shutdown_hook();
    std::lock_guard lock(h->mu);
    hook = h->hook;
  }
  if (hook) hook();
}

ActorId ProcAgent::spawn(std::uint64_t factory, const std::string& head,
                         const std::vector<Bytes>& parts, const Supervisor& place) {
  Body args;
  args.head = head;
  args.parts = parts;
  return proc().spawn_from(place.mesh, factory, std::move(args), place);
}

int ProcAgent::learn(std::uint64_t key, const CastNode& node) {
  learn_cast_node(proc(), key, node);
  return 0;
}

Task<int> ProcAgent::stop_actor(ActorId id) {
  if (id.proc != proc().id()) throw UsageError("stop_actor: " + id.to_string() + " is not here");
  co_await detail::stop_actor(id, nullptr);
  co_return 0;
}

int ProcAgent::forget(std::uint64_t key) {
  forget_cast_node(proc(), key);
  return 0;
}

Task<int> ProcAgent::shutdown() {
  run_shutdown_hook();
  co_await stop_all_but(proc(), id());
  co_return 0;
}

ActorRef<ProcAgent> agent_of(const ProcId& proc) {
  ActorId id{proc, "agent", 0};
  auto cell = resolve_actor(id);
  return make_ref<ProcAgent>(std::move(id), std::move(cell));
}

}  // namespace baton::detail
