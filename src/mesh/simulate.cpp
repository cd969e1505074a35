// Links between procs of this process, simulated for `baton-bench scale` (see simulate.hpp).
//
// A simulated link is one queue with one thread: each frame is encoded as a link writes it,
// queued, and decoded on the queue's thread as a link reads it, then served as a link serves it
// (a hop by the cast port's handler, a result by its reply port, which it closes). The members'
// calls run on their procs' executors, as everywhere.

#include "mesh/simulate.hpp"

#include <atomic>
#include <memory>
#include <mutex>

#include "actor/directory.hpp"
#include "actor/node.hpp"
#include "actor/proc_state.hpp"
#include "actor/replies.hpp"
#include "baton/actor/errors.hpp"
#include "baton/wire/envelope.hpp"
#include "mesh/cast_impl.hpp"
#include "net/work_queue.hpp"

namespace baton::detail {
namespace {

struct Simulation {
  explicit Simulation(ProcId r) : root(std::move(r)) {}
  const ProcId root;
  net::JobQueue wire{1};
  std::atomic<std::uint64_t> frames_sent{0};
  std::atomic<std::uint64_t> bytes_sent{0};
  std::atomic<std::uint64_t> frames_received{0};
  std::atomic<std::uint64_t> bytes_received{0};
};

/// The node's slot for the simulation that runs.
struct SimulationSlot {
  std::mutex mu;
  std::shared_ptr<Simulation> running;
};

std::shared_ptr<SimulationSlot> slot_here() {
  auto node = node_here();
  if (!node) throw UsageError("simulated links need a proc in this process: create a Runtime");
  return node->extension<SimulationSlot>();
}

std::shared_ptr<Simulation> running() {
  auto node = node_here();
  if (!node) return nullptr;
  auto slot = node->extension<SimulationSlot>();
  std::lock_guard lock(slot->mu);
  return slot->running;
}

/// Runs `job` on the simulated link, or here if the simulation stopped.
void carry(const std::shared_ptr<Simulation>& sim, const std::function<void()>& job) {
  if (!sim || !sim->wire.post(job)) job();
}

/// A result framed by simulate_result, at its reply port: the port is closed by it, as a reply
/// port that a link delivers to is.
void deliver_result(const std::string& frame) {
  const Envelope env = decode_frame(Bytes::copy(frame));
  auto proc = find_proc(env.dest.actor.proc);
  if (!proc) return;  // its proc went: nobody waits for it
  PortSinkPtr sink;
  {
    std::lock_guard lock(proc->mu);
    auto it = proc->ports.find(env.dest.port);
    if (it == proc->ports.end()) return;
    sink = it->second;
    if (dynamic_cast<ReplySinkBase*>(sink.get()) != nullptr) proc->ports.erase(it);
  }
  sink->deliver(env.body);
}

}  // namespace

void simulate_links(Proc& root) {
  auto slot = slot_here();
  std::lock_guard lock(slot->mu);
  if (slot->running) throw UsageError("links are simulated already; stop that simulation first");
  slot->running = std::make_shared<Simulation>(root.id());
}

void stop_simulating_links() {
  std::shared_ptr<Simulation> sim;
  {
    auto slot = slot_here();
    std::lock_guard lock(slot->mu);
    sim = std::move(slot->running);
  }
  if (sim) sim->wire.stop();
}

SimulatedTraffic take_simulated_traffic() {
  auto sim = running();
  if (!sim) throw UsageError("no links are simulated: call simulate_links first");
  SimulatedTraffic t;
  t.frames_sent = sim->frames_sent.exchange(0);
  t.bytes_sent = sim->bytes_sent.exchange(0);
  t.frames_received = sim->frames_received.exchange(0);
  t.bytes_received = sim->bytes_received.exchange(0);
  return t;
}

namespace cast_impl {

bool simulating() {
  return running() != nullptr;
}

void simulate_hop(const ProcState& from, const std::shared_ptr<ProcState>& to,
                  const Envelope& env) {
  auto sim = running();
  auto frame = encode_frame(env);
  if (sim && from.id == sim->root) {
    sim->frames_sent.fetch_add(1, std::memory_order_relaxed);
    sim->bytes_sent.fetch_add(frame.size(), std::memory_order_relaxed);
  }
  carry(sim,
        [to, flat = frame.flatten()] { on_cast(to, nullptr, decode_frame(Bytes::copy(flat))); });
}

void simulate_result(const PortId& to, Body body, const ActorId& sender) {
  auto sim = running();
  Envelope env;
  env.sender = sender;
  env.dest = to;
  env.body = std::move(body);
  auto frame = encode_frame(env);
  if (sim && to.actor.proc == sim->root) {
    sim->frames_received.fetch_add(1, std::memory_order_relaxed);
    sim->bytes_received.fetch_add(frame.size(), std::memory_order_relaxed);
  }
  carry(sim, [flat = frame.flatten()] { deliver_result(flat); });
}

}  // namespace cast_impl
}  // namespace baton::detail
