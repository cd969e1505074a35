// The runtime's agent in every proc, and the proc's shutdown hook.

#include "mesh/agent.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <tuple>

#include <fmt/format.h>

#include "actor/cell.hpp"
#include "actor/node.hpp"
#include "actor/proc_state.hpp"
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

std::vector<ActorReport> actor_reports(Proc& proc) {
  ProcState& st = state_of(proc);
  const std::vector<CellPtr> cells = st.live_cells();
  std::vector<ActorReport> out;
  out.reserve(cells.size());
  for (const auto& cell : cells) {
    static constexpr const char* kStatus[] = {"starting", "running", "stopped", "failed"};
    const Cell::Activity a = cell->activity();
    out.push_back({cell->id(), std::string(a.type),
                   kStatus[static_cast<std::size_t>(cell->status())], a.handled, cell->queued(),
                   std::string(a.running), a.running_s, a.mean_ms, a.max_ms});
  }
  std::sort(out.begin(), out.end(), [](const ActorReport& a, const ActorReport& b) {
    return std::tie(a.id.name, a.id.index) < std::tie(b.id.name, b.id.index);
  });
  return out;
}

namespace {

/// The actors running an endpoint now, by the thread that runs each (an endpoint is told by the
/// moment it began).
struct Running {
  int thread = 0;
  std::int64_t since_ns = 0;
  std::string label;
};

std::vector<Running> running_now(ProcState& st) {
  std::vector<Running> out;
  for (const auto& cell : st.live_cells()) {
    const Cell::Activity a = cell->activity();
    if (a.thread == 0) continue;
    std::string label = cell->id().to_string();
    if (!a.running.empty())
      label += fmt::format(": endpoint {} for {:.1f} s", a.running, a.running_s);
    out.push_back({a.thread, a.since_ns, std::move(label)});
  }
  return out;
}

}  // namespace

std::vector<ThreadStack> proc_stacks(Proc& proc) {
  ProcState& st = state_of(proc);
  // A thread is labelled with an actor only if the same endpoint ran on it from before the first
  // stack was taken until after the last: one that began or ended meanwhile may not be what its
  // thread's stack shows.
  const std::vector<Running> before = running_now(st);
  std::vector<Running> after;
  std::vector<ThreadStack> stacks =
      thread_stacks(std::chrono::milliseconds(250), [&] { after = running_now(st); });
  for (auto& a : after) {
    const bool throughout = std::any_of(before.begin(), before.end(), [&](const Running& b) {
      return b.thread == a.thread && b.since_ns == a.since_ns;
    });
    if (!throughout) continue;
    for (auto& s : stacks) {
      if (s.tid == a.thread) s.actors.push_back(a.label);
    }
  }
  return stacks;
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
  debug_quit_all();  // an actor paused in breakpoint() would hold up the stop
  run_shutdown_hook();
  co_await stop_all_but(proc(), id());
  co_return 0;
}

void ProcAgent::die() {
  ::kill(::getpid(), SIGKILL);
}

ActorRef<ProcAgent> agent_of(const ProcId& proc) {
  ActorId id{proc, "agent", 0};
  auto cell = resolve_actor(id);
  return make_ref<ProcAgent>(std::move(id), std::move(cell));
}

}  // namespace baton::detail
