// The cast tree on its own, without processes: its shape, and the size of what it sends (CA-3).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "baton/mesh/cast.hpp"
#include "mesh/cast_impl.hpp"

namespace baton::detail {
namespace {

std::vector<CastMember> base_of(std::size_t n) {
  std::vector<CastMember> base;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string proc = "procs0." + std::to_string(i);
    base.push_back({ActorId{ProcId{proc}, "trainers", 0}, "unix:///tmp/job/" + proc + ".sock"});
  }
  return base;
}

CastRequest request_for(std::size_t n, const Slice& view) {
  CastRequest req;
  req.key = 0x1234567890abcdefULL;
  req.base = std::make_shared<const std::vector<CastMember>>(base_of(n));
  req.view = view;
  req.mode = CastMode::gather;
  req.endpoint = 42;
  return req;
}

/// Checks the tree over `n` members of one host with `fanout`: one node a member, each with at
/// most the fan-out children, every member reached once, depth logarithmic in n.
void expect_tree(std::size_t n, std::size_t fanout) {
  const auto base = base_of(n);
  const auto nodes = cast_tree(base, fanout);
  ASSERT_EQ(nodes.size(), n);
  std::set<std::size_t> reached;
  std::vector<std::size_t> depth(n, 1);
  for (std::size_t loc = 0; loc < n; ++loc) {
    const CastNode& node = nodes[loc];
    EXPECT_EQ(node.loc, loc);
    EXPECT_EQ(node.host_fanout, fanout);
    EXPECT_LE(children_of(node).size(), fanout);
    EXPECT_EQ(node.self.actor.proc.name, "procs0." + std::to_string(loc));
    for (const auto& c : children_of(node)) {
      EXPECT_TRUE(reached.insert(c.loc).second) << "location " << c.loc << " reached twice";
      EXPECT_GT(c.loc, loc);
      EXPECT_LE(c.end, node.end);
      depth[c.loc] = depth[loc] + 1;  // parents come before their children (c.loc > loc)
    }
  }
  const std::size_t roots = root_children(base, fanout)->size();
  EXPECT_EQ(reached.size() + roots, n);  // every member is a root's child or a node's child
  EXPECT_LE(roots, fanout);
  std::size_t deepest = 0;
  for (std::size_t d : depth) deepest = std::max(deepest, d);
  std::size_t bound = 1;
  for (std::size_t reach = fanout; reach < n; reach *= fanout) ++bound;
  EXPECT_LE(deepest, bound + 1);
}

TEST(CastTree, EveryMemberIsOneNodeWithAtMostTheFanOutChildrenAndLogDepth) {
  for (std::size_t fanout : {std::size_t{2}, std::size_t{8}, kCastHostFanOut}) {
    for (std::size_t n : {1U, 4U, 9U, 100U, 4096U}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", fan-out " + std::to_string(fanout));
      expect_tree(n, fanout);
    }
  }
}

// Where a parent takes a child's result: a port of the parent's proc.
const PortId kParent{ActorId{ProcId{"controller"}, "client", 0}, 7};

TEST(CastTree, ACastsBytesDoNotGrowWithTheMesh) {  // CA-3
  const Slice small(0, {4}, {1});
  const Slice large(0, {4096}, {1});
  const std::size_t at_root_small = cast_hop_bytes(request_for(4, small), 0, kParent);
  const std::size_t at_root_large = cast_hop_bytes(request_for(4096, large), 0, kParent);
  EXPECT_EQ(at_root_small, at_root_large);
  // Every node of the large tree forwards hops of the same size.
  const auto req = request_for(4096, large);
  for (std::size_t loc : {1U, 7U, 512U, 513U, 4000U, 4095U}) {
    EXPECT_EQ(cast_hop_bytes(req, loc, kParent), at_root_small) << "at location " << loc;
  }
  // A slice of the large mesh (half its members, strided) costs the same.
  EXPECT_EQ(cast_hop_bytes(request_for(4096, Slice(1, {2048}, {2})), 3, kParent), at_root_small);
  // And the hop is small: no member's id or address travels.
  EXPECT_LT(at_root_small, 200U);
}

// A node answers which of its subtree's locations a cast addresses from the view's Slice alone;
// it must agree with the list of the whole view, for views of every kind.
TEST(CastTree, ANodeFindsTheAddressedLocationsAndRanksOfItsSubtreeFromTheSliceAlone) {
  const Shape mesh = Shape::of({{"hosts", 4}, {"gpus", 6}});
  std::vector<Slice> views = {
      mesh.slice(),                                                // the whole mesh: contiguous
      mesh.at("hosts", 2).slice(),                                 // one host: contiguous
      mesh.range("hosts", 1, 3).slice(),                           // two hosts: contiguous
      mesh.at("gpus", 5).slice(),                                  // one gpu of each host
      mesh.range("gpus", 1, 5, 2).slice(),                         // a step
      mesh.select({{"hosts", {1, 4}}, {"gpus", {2, 4}}}).slice(),  // a block
      Slice(3, {6, 4}, {1, 6}),                                    // transposed: ranks not in order
      Slice(7, {}, {}),                                            // one member
  };
  for (const auto& view : views) {
    std::map<std::size_t, std::size_t> rank_at;  // location -> rank
    for (std::size_t r = 0; r < view.len(); ++r) rank_at[view.location_of_rank(r)] = r;
    const cast_impl::ViewIndex index(view);
    for (std::size_t b = 0; b <= 30; ++b) {
      for (std::size_t e = b; e <= 30; ++e) {
        std::vector<std::pair<std::size_t, std::size_t>> want;
        for (auto it = rank_at.lower_bound(b); it != rank_at.end() && it->first < e; ++it) {
          want.emplace_back(*it);
        }
        std::vector<std::pair<std::size_t, std::size_t>> got;
        index.each_in(b, e,
                      [&](std::size_t loc, std::size_t rank) { got.emplace_back(loc, rank); });
        ASSERT_EQ(got, want) << view.to_string() << " [" << b << ", " << e << ")";
        ASSERT_EQ(index.any_in(b, e), !want.empty())
            << view.to_string() << " [" << b << ", " << e << ")";
        // A result's ranks are checked against the subtree it came from, ranks past the view's
        // end included.
        for (std::size_t r = 0; r < view.len() + 2; ++r) {
          const bool ours =
              std::any_of(want.begin(), want.end(), [&](const auto& at) { return at.second == r; });
          ASSERT_EQ(index.rank_in(r, b, e), ours)
              << view.to_string() << " rank " << r << " [" << b << ", " << e << ")";
        }
      }
    }
  }
}

// A mesh on several hosts, laid out host by host: the root sends once to each host, and each
// host's head forwards to the rest of its host, so a cast crosses each host boundary once.
TEST(CastTree, ACastCrossesToEachHostOnce) {
  const auto on_hosts = [](std::size_t hosts, std::size_t per_host) {
    std::vector<CastMember> base;
    for (std::size_t h = 0; h < hosts; ++h) {
      for (std::size_t g = 0; g < per_host; ++g) {
        const std::string proc = "procs0.h" + std::to_string(h) + "." + std::to_string(g);
        base.push_back({ActorId{ProcId{proc}, "m", 0}, "tcp://10.0.0." + std::to_string(10 + h) +
                                                           ":" + std::to_string(40000 + g)});
      }
    }
    return base;
  };
  const auto base = on_hosts(3, 4);
  const auto roots = cast_impl::root_split(base);
  ASSERT_EQ(roots.size(), 3u);
  const auto nodes = cast_tree(base);
  for (std::size_t h = 0; h < 3; ++h) {
    EXPECT_EQ(roots[h], std::make_pair(static_cast<std::uint32_t>(4 * h),
                                       static_cast<std::uint32_t>(4 * h + 4)));
    // Every member below a host's head is on that host.
    const auto& head = nodes[4 * h];
    for (const auto& m : head.below)
      EXPECT_EQ(m.address.substr(0, 15), head.self.address.substr(0, 15));
  }
  // Any number of hosts, more than the fan-out too: the root sends to at most the fan-out, and
  // each host is entered by one edge of the tree (from the controller or another host).
  for (auto [hosts, per_host] :
       {std::pair<std::size_t, std::size_t>{16, 2}, {9, 1}, {20, 3}, {100, 4}, {70, 8}}) {
    const auto many = on_hosts(hosts, per_host);
    const auto host = [](const CastMember& m) { return m.address.substr(0, m.address.rfind(':')); };
    std::map<std::string, int> entered;
    const auto root = cast_impl::root_split(many);
    EXPECT_LE(root.size(), kCastFanOut);
    for (auto [b, e] : root) ++entered[host(many[b])];
    for (const auto& node : cast_tree(many)) {
      const auto children = children_of(node);
      EXPECT_LE(children.size(), kCastFanOut);
      for (const auto& c : children) {
        if (host(c.head) != host(node.self)) ++entered[host(c.head)];
      }
    }
    ASSERT_EQ(entered.size(), hosts) << hosts << " hosts";
    for (const auto& [h, n] : entered) EXPECT_EQ(n, 1) << h << " of " << hosts << " hosts";
  }
  // One host: split evenly, into at most the host fan-out.
  EXPECT_EQ(cast_impl::root_split(base_of(12)), cast_impl::split(0, 12, kCastHostFanOut));
  EXPECT_EQ(cast_impl::root_split(base_of(12), 8), cast_impl::split(0, 12, 8));
}

}  // namespace
}  // namespace baton::detail
