// `baton-bench scale`: a call (cast + gather) and a reduce over an actor mesh of 10^3 to 10^6
// members, one per proc, the procs simulated in this process: every hop of the cast tree and
// every result is framed, queued and decoded as a link carries it (src/mesh/simulate.hpp), and
// each member is a real actor answering on its proc's executor. Only the transport is
// in-process. For each size it prints the time of each, the controller's bytes sent and received
// per cast, and the tree's depth.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"
#include "mesh/cast_impl.hpp"
#include "mesh/simulate.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Shard : public Actor {
 public:
  explicit Shard(std::int64_t rank) : rank_(rank) {}
  std::int64_t value(std::int64_t x) { return rank_ + x; }
  static constexpr auto endpoints = baton::endpoints<&Shard::value>();

 private:
  std::int64_t rank_;
};

/// The depth of the cast tree over `base`: the most hops from the controller to a member.
std::size_t tree_depth(const std::vector<detail::CastMember>& base,
                       const std::vector<detail::CastNode>& nodes) {
  // The root's children (the heads it sends to) are at depth 1; a node's children lie after
  // it, so one pass in location order sees each parent before its children.
  std::vector<std::size_t> depth(nodes.size(), 0);
  for (auto [b, e] : detail::cast_impl::root_split(base)) depth[b] = 1;
  std::size_t deepest = 0;
  for (std::size_t loc = 0; loc < nodes.size(); ++loc) {
    for (const auto& c : detail::children_of(nodes[loc])) depth[c.loc] = depth[loc] + 1;
    deepest = std::max(deepest, depth[loc]);
  }
  return deepest;
}

struct Sized {
  std::string suffix;  // "_n1000"
  double setup_s = 0;
  std::vector<double> gather_ms;
  std::vector<double> reduce_ms;
  detail::SimulatedTraffic gather_bytes;
  detail::SimulatedTraffic reduce_bytes;
  std::size_t depth = 0;
};

Sized run_size(std::size_t n, int rounds) {
  Sized out;
  out.suffix = "_n" + std::to_string(n);
  auto t0 = Clock::now();
  ThreadPool pool(2);
  std::vector<std::unique_ptr<Proc>> procs;
  procs.reserve(n);
  std::vector<ActorRef<Shard>> refs;
  refs.reserve(n);
  const std::string prefix = "scale" + std::to_string(n) + "_";
  for (std::size_t i = 0; i < n; ++i) {
    ProcOptions o;
    o.name = prefix + std::to_string(i);
    procs.push_back(std::make_unique<Proc>(std::move(o), pool));
    refs.push_back(procs.back()->spawn<Shard>("shard", static_cast<std::int64_t>(i)));
  }
  // What spawn does for a real mesh: each proc learns its node of the tree.
  const std::uint64_t key = detail::new_mesh_key();
  std::vector<detail::CastMember> base;
  base.reserve(n);
  for (const auto& r : refs) base.push_back({r.id(), ""});
  {
    auto nodes = detail::cast_tree(base);
    out.depth = tree_depth(base, nodes);
    for (std::size_t i = 0; i < n; ++i)
      detail::learn_cast_node(*procs[i], key, std::move(nodes[i]));
  }
  base = {};
  ActorMesh<Shard> mesh(Shape::of({{"shards", n}}), std::move(refs), "shards", key);
  out.setup_s = ms_since(t0) / 1e3;

  const auto sum_of_ranks = static_cast<std::int64_t>(n) * static_cast<std::int64_t>(n - 1) / 2;
  for (int round = 0; round < rounds; ++round) {
    const std::int64_t x = round + 1;
    (void)detail::take_simulated_traffic();
    t0 = Clock::now();
    ValueMesh<std::int64_t> all = mesh.call(&Shard::value, x).get();
    out.gather_ms.push_back(ms_since(t0));
    out.gather_bytes = detail::take_simulated_traffic();
    if (out.gather_bytes.frames_sent == 0) throw std::runtime_error("scale: no simulated hops");
    if (all.size() != n || all[0] != x || all[n - 1] != static_cast<std::int64_t>(n) - 1 + x) {
      throw std::runtime_error("scale: a wrong gather");
    }
    t0 = Clock::now();
    const std::int64_t total = mesh.reduce(baton::sum, &Shard::value, x).get();
    out.reduce_ms.push_back(ms_since(t0));
    out.reduce_bytes = detail::take_simulated_traffic();
    if (total != sum_of_ranks + static_cast<std::int64_t>(n) * x) {
      throw std::runtime_error("scale: a wrong reduce");
    }
  }
  return out;
}

}  // namespace

int run_scale(Runtime& rt) {
  std::size_t largest = 1000000;
  if (const char* env = std::getenv("BATON_BENCH_SCALE_MAX")) {
    char* end = nullptr;
    largest = std::strtoul(env, &end, 10);
    if (*env == '\0' || *end != '\0' || largest < 1000) {
      throw std::invalid_argument(std::string("BATON_BENCH_SCALE_MAX=") + env +
                                  " is not a number of actors of at least 1000; leave it unset "
                                  "for sizes up to 10^6");
    }
  }
  std::vector<Sized> sizes;
  // The simulation's traffic is that of the proc the controller casts from.
  detail::simulate_links(rt.proc());
  for (std::size_t n = 1000; n <= largest; n *= 10) {
    sizes.push_back(run_size(n, n >= 1000000 ? 1 : n >= 100000 ? 3 : n >= 10000 ? 5 : 20));
    const auto& s = sizes.back();
    const double gather = median(s.gather_ms);
    const double reduce = median(s.reduce_ms);
    const double members = static_cast<double>(n);
    print_figure("scale_setup" + s.suffix, s.setup_s, "s");
    print_figure("scale_tree_depth" + s.suffix, static_cast<double>(s.depth), "hops");
    print_figure("scale_gather" + s.suffix, gather, "ms");
    print_figure("scale_reduce" + s.suffix, reduce, "ms");
    print_figure("scale_gather_per_member" + s.suffix, gather * 1e3 / members, "us");
    print_figure("scale_reduce_per_member" + s.suffix, reduce * 1e3 / members, "us");
    print_figure("scale_ctl_sent_per_cast" + s.suffix,
                 static_cast<double>(s.gather_bytes.bytes_sent), "bytes");
    print_figure("scale_ctl_received_gather" + s.suffix,
                 static_cast<double>(s.gather_bytes.bytes_received), "bytes");
    print_figure("scale_ctl_received_reduce" + s.suffix,
                 static_cast<double>(s.reduce_bytes.bytes_received), "bytes");
    if (sizes.size() > 1) {
      // Time per member against the smallest mesh's: at most 1 when the work grows no faster
      // than the members.
      const auto& first = sizes.front();
      const double first_members = 1000.0;
      print_figure("scale_reduce_per_member_ratio" + s.suffix,
                   (reduce / members) / (median(first.reduce_ms) / first_members), "x");
      print_figure("scale_ctl_sent_ratio" + s.suffix,
                   static_cast<double>(s.gather_bytes.bytes_sent) /
                       static_cast<double>(first.gather_bytes.bytes_sent),
                   "x");
    }
  }
  detail::stop_simulating_links();
  // One process holds every simulated proc, its actor and its node of the tree.
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  print_figure("scale_peak_rss", static_cast<double>(usage.ru_maxrss) / 1024.0, "MiB");
  return 0;
}

}  // namespace baton::bench
