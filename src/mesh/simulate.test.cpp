// Simulated links (baton-bench scale): casts to many procs of one process go through the codec,
// hop by hop, as over links, with right results and reply ports closed behind them.

#include "mesh/simulate.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "actor/proc_state.hpp"
#include "baton/actor/errors.hpp"
#include "baton/mesh/actor_mesh.hpp"
#include "mesh/cast_impl.hpp"

namespace baton::detail {
namespace {

class Shard : public Actor {
 public:
  explicit Shard(std::int64_t rank) : rank_(rank) {}
  std::int64_t value(std::int64_t x) { return rank_ * 10 + x; }
  static constexpr auto endpoints = baton::endpoints<&Shard::value>();

 private:
  std::int64_t rank_;
};

/// `n` procs of this process on one pool, one Shard each, and the mesh over them, its cast tree
/// with `host_fanout`.
struct Simulated {
  Simulated(std::size_t n, const std::string& prefix, std::size_t host_fanout = kCastHostFanOut) {
    std::vector<ActorRef<Shard>> refs;
    for (std::size_t i = 0; i < n; ++i) {
      ProcOptions o;
      o.name = prefix + std::to_string(i);
      procs.push_back(std::make_unique<Proc>(std::move(o), pool));
      refs.push_back(procs.back()->spawn<Shard>("shard", static_cast<std::int64_t>(i)));
      base.push_back({refs.back().id(), ""});
    }
    const std::uint64_t key = new_mesh_key();
    auto nodes = cast_tree(base, host_fanout);
    for (std::size_t i = 0; i < n; ++i) learn_cast_node(*procs[i], key, std::move(nodes[i]));
    mesh = ActorMesh<Shard>(Shape::of({{"shards", n}}), std::move(refs), "shards", key,
                            static_cast<std::uint32_t>(host_fanout));
  }
  ~Simulated() { stop_simulating_links(); }
  Simulated(const Simulated&) = delete;
  Simulated& operator=(const Simulated&) = delete;

  std::size_t reply_ports_left() {
    std::size_t left = 0;
    for (auto& p : procs) {
      auto& s = state_of(*p);
      std::lock_guard lock(s.mu);
      left += s.ports.size();
    }
    return left;
  }

  ThreadPool pool{2};
  std::vector<std::unique_ptr<Proc>> procs;
  std::vector<CastMember> base;
  ActorMesh<Shard> mesh;
};

TEST(SimulatedLinks, ACastAndAReduceOverManyProcsGoHopByHopThroughTheCodec) {
  constexpr std::size_t kN = 300;
  Simulated sim(kN, "sim_a");
  // No runtime serves here, so the cast starts from the first member's proc (root_proc): it
  // sends to the root's children, the first of them itself, and then, as that first child, to
  // its own children.
  simulate_links(*sim.procs[0]);
  const auto root_children =
      cast_impl::root_split(sim.base).size() + children_of(cast_tree(sim.base).front()).size();
  ASSERT_GT(root_children, 2U);

  ValueMesh<std::int64_t> all = sim.mesh.call(&Shard::value, 7).get();
  ASSERT_EQ(all.size(), kN);
  for (std::size_t r = 0; r < kN; ++r) EXPECT_EQ(all[r], static_cast<std::int64_t>(r) * 10 + 7);
  SimulatedTraffic t = take_simulated_traffic();
  // Every hop the root sent was framed and carried (none run inline), and each child's result
  // came back framed: the whole mesh's replies, so more bytes than went down.
  EXPECT_EQ(t.frames_sent, root_children);
  EXPECT_EQ(t.frames_received, root_children);
  EXPECT_GT(t.bytes_sent, 0U);
  EXPECT_GT(t.bytes_received, t.bytes_sent);
  // A reply port is closed by its result, as over a link: none is left behind.
  EXPECT_EQ(sim.reply_ports_left(), 0U);

  const std::int64_t total = sim.mesh.reduce(baton::sum, &Shard::value, 1).get();
  EXPECT_EQ(total, static_cast<std::int64_t>(kN * (kN - 1) / 2 * 10 + kN));
  t = take_simulated_traffic();
  EXPECT_EQ(t.frames_sent, root_children);
  EXPECT_EQ(t.frames_received, root_children);
  EXPECT_EQ(sim.reply_ports_left(), 0U);
}

TEST(SimulatedLinks, TheRootsBytesPerReduceDoNotGrowWithTheMesh) {  // CA-3
  auto bytes_of = [](std::size_t n, const std::string& prefix, std::size_t fanout) {
    Simulated sim(n, prefix, fanout);
    simulate_links(*sim.procs[0]);
    EXPECT_EQ(sim.mesh.reduce(baton::sum, &Shard::value, 0).get(),
              static_cast<std::int64_t>(n * (n - 1) / 2 * 10));
    return take_simulated_traffic();
  };
  // Sizes past the point where the root's own node (it is the first member too) has all its
  // children: fan-out squared.
  for (auto [fanout, n] : {std::pair<std::size_t, std::size_t>{8, 100}, {kCastHostFanOut, 4200}}) {
    SCOPED_TRACE("fan-out " + std::to_string(fanout));
    const std::string tag = std::to_string(fanout);
    const SimulatedTraffic small = bytes_of(n, "sim_b" + tag + "_", fanout);
    const SimulatedTraffic big = bytes_of(2 * n, "sim_c" + tag + "_", fanout);
    EXPECT_EQ(big.frames_sent, small.frames_sent);
    // The hop names its subtree's bounds, a few bytes more for larger locations; nothing else
    // grows with the mesh.
    EXPECT_LE(big.bytes_sent, small.bytes_sent + 8 * big.frames_sent);
    EXPECT_LE(big.bytes_received, small.bytes_received + 8 * big.frames_received);
  }
}

TEST(SimulatedLinks, OneSimulationAtATimeAndItsTrafficOnlyWhileItRuns) {
  Simulated sim(3, "sim_d");
  EXPECT_THROW(take_simulated_traffic(), UsageError);
  simulate_links(*sim.procs[0]);
  EXPECT_THROW(simulate_links(*sim.procs[1]), UsageError);
  stop_simulating_links();
  // Stopped: the procs of this process are reached inline again, and the results stay right.
  EXPECT_EQ(sim.mesh.reduce(baton::sum, &Shard::value, 0).get(), 30);
  EXPECT_THROW(take_simulated_traffic(), UsageError);
}

}  // namespace
}  // namespace baton::detail
