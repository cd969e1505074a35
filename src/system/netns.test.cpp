// Hosts with addresses of their own: network namespaces on this machine joined by a bridge,
// each running a baton-host, as separate hosts on one network would. Needs root (CI runs as
// root); a machine where the namespaces cannot be made fails this test, saying why.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/admin.test.hpp"
#include "host/hosts.test.hpp"
#include "host/netns.test.hpp"

namespace baton {
namespace {

using test::Agent;
using test::failure_named;
using test::NetHosts;
using test::seen;
using test::Seen;
using ::testing::HasSubstr;

/// A member that also serves and fetches memory.
class Node : public Actor {
 public:
  std::string address() { return detail::address_text(id().proc); }
  int twice(int x) { return 2 * x; }
  int add(int x) { return total_ += x; }
  int pid() { return static_cast<int>(::getpid()); }
  /// Registers `n` bytes of a pattern made from `seed` for others to read.
  RdmaBuffer publish(std::size_t n, int seed) {
    data_.resize(n);
    for (std::size_t i = 0; i < n; ++i) data_[i] = static_cast<char>((i * 131 + seed) & 0xff);
    buffer_ = RdmaBuffer::register_memory(data_.data(), data_.size());
    return buffer_;
  }
  /// Reads `buf` and checks every byte against the pattern; returns the backend it used.
  Task<std::string> fetch(RdmaBuffer buf, std::size_t n, int seed) {
    std::vector<char> got(n);
    auto read = buf.read_into(got.data(), n);
    co_await read;
    for (std::size_t i = 0; i < n; ++i) {
      if (got[i] != static_cast<char>((i * 131 + seed) & 0xff)) {
        throw std::runtime_error("byte " + std::to_string(i) + " differs");
      }
    }
    co_return std::string(to_string(rdma_backend(buf, got.data())));
  }
  /// The sum of the bytes, to check a large message arrived whole.
  std::uint64_t sum(const Bytes& bytes) {
    return std::accumulate(
        bytes.data(), bytes.data() + bytes.size(), std::uint64_t{0},
        [](std::uint64_t a, std::byte b) { return a + std::to_integer<unsigned>(b); });
  }
  /// Works inside a function of its own until the file `flag` exists (the namespaces share
  /// this machine's files), as a long step of training does.
  [[gnu::noinline]] int crunch_until(const std::string& flag) {
    int rounds = 0;
    while (!std::filesystem::exists(flag)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the work it does
      ++rounds;
    }
    return rounds;
  }
  static constexpr auto endpoints =
      baton::endpoints<&Node::address, &Node::twice, &Node::add, &Node::pid, &Node::publish,
                       &Node::fetch, &Node::sum, &Node::crunch_until>();

 private:
  int total_ = 0;
  std::vector<char> data_;
  RdmaBuffer buffer_;
};

/// The namespaces and an agent in each; fails the test, saying why, if they cannot be made.
struct Cluster {
  std::unique_ptr<NetHosts> net;
  std::vector<std::unique_ptr<Agent>> agents;
  std::vector<std::string> addresses;
};

std::unique_ptr<Cluster> make_cluster(std::size_t n) {
  auto c = std::make_unique<Cluster>();
  try {
    c->net = std::make_unique<NetHosts>(n);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "cannot make network namespaces (this test needs root and iproute2): "
                  << e.what();
    return nullptr;
  }
  for (std::size_t i = 0; i < n; ++i) {
    c->agents.push_back(std::make_unique<Agent>(7070, c->net->address(i), c->net->ns(i)));
    c->addresses.push_back(c->agents.back()->address());
  }
  return c;
}

// Over a slow link a large message takes longer than dead_after (3 s here) to arrive: the bytes
// arriving count as hearing from the peer, so the link is not taken for dead and repaired (which
// would send the message again from its start, for ever).
TEST(NetHosts, AMessageSlowerThanTheSilenceBoundStillArrivesWhole) {
  auto cluster = make_cluster(1);
  ASSERT_TRUE(cluster);
  ProcMesh procs = job::attach(cluster->addresses).spawn_procs({{"gpus", 1}});
  auto node = procs.spawn<Node>("slow");
  ASSERT_EQ(node.call_one(&Node::twice, 2).get(), 4);
  cluster->net->throttle_to(0, "16mbit");  // 16 MiB: about 8 s
  std::vector<std::byte> big(std::size_t{16} << 20);
  std::uint64_t want = 0;
  for (std::size_t i = 0; i < big.size(); ++i) {
    big[i] = static_cast<std::byte>((i * 7 + 3) & 0xff);
    want += (i * 7 + 3) & 0xff;
  }
  // Out of band, as large data travels: one part of the frame.
  EXPECT_EQ(node.call_one(&Node::sum, Bytes::adopt(std::move(big))).get(std::chrono::seconds(120)),
            want);
  EXPECT_FALSE(
      seen().wait_for([](Seen& s) { return !s.failures.empty(); }, std::chrono::seconds(0)))
      << "a failure was reported: " << seen().failures.front().to_string();
  procs.stop().get();
}

TEST(NetHosts, ThreeHostsRunOneMeshThatAnswersEveryVerbAndMovesMemoryBetweenThem) {
  auto cluster = make_cluster(3);
  ASSERT_TRUE(cluster);
  HostMesh hosts = job::attach(cluster->addresses);
  ProcMesh procs = hosts.spawn_procs({{"gpus", 2}});
  ASSERT_EQ(procs.shape(), Shape::of({{"hosts", 3}, {"gpus", 2}}));
  auto nodes = procs.spawn<Node>("nodes");
  // Each member serves on its own host's address.
  const auto where = nodes.call(&Node::address).get();
  for (std::size_t r = 0; r < where.size(); ++r) {
    EXPECT_THAT(where[r], HasSubstr("tcp://" + cluster->net->address(r / 2) + ":")) << r;
  }
  // call, call_one, choose, broadcast, reduce, stream, slices.
  EXPECT_EQ(nodes.call(&Node::twice, 4).get().values(), std::vector<int>(6, 8));
  EXPECT_EQ(nodes.slice({{"hosts", 2}, {"gpus", 1}}).call_one(&Node::twice, 5).get(), 10);
  EXPECT_EQ(nodes.choose(&Node::twice, 6).get(), 12);
  nodes.slice("hosts", 1).broadcast(&Node::add, 7);
  EXPECT_EQ(nodes.call(&Node::add, 0).get().values(), (std::vector<int>{0, 0, 7, 7, 0, 0}));
  EXPECT_EQ(nodes.reduce(baton::sum, &Node::twice, 1).get(), 12);
  auto stream = nodes.slice("gpus", 0).stream(&Node::twice, 2);
  int replies = 0;
  while (auto item = stream.next()) {
    EXPECT_EQ(item->second, 4);
    ++replies;
  }
  EXPECT_EQ(replies, 3);
  // An RdmaBuffer on host 0 read byte for byte by a member on host 2.
  constexpr std::size_t kBytes = std::size_t{4} << 20;
  RdmaBuffer buf =
      nodes.slice({{"hosts", 0}, {"gpus", 0}}).call_one(&Node::publish, kBytes, 9).get();
  const std::string backend =
      nodes.slice({{"hosts", 2}, {"gpus", 1}}).call_one(&Node::fetch, buf, kBytes, 9).get();
  std::printf("cross-host RdmaBuffer read of %zu bytes over %s\n", kBytes, backend.c_str());
  EXPECT_NE(backend, "local");
  procs.stop().get();
}

TEST(NetHosts, TheAdminApiShowsThreeProcsOnTwoHostsAndTheStackOfALongEndpointOnEither) {
  auto cluster = make_cluster(2);
  ASSERT_TRUE(cluster);
  const auto job = this_job();
  HostMesh hosts = job::attach(cluster->addresses);
  ProcMesh procs = hosts.spawn_procs({{"gpus", 1}});  // one on each host
  ProcMesh more = job::attach({cluster->addresses[1]}).spawn_procs({{"gpus", 1}});  // and one
  auto nodes = procs.spawn<Node>("nodes");
  auto extra = more.spawn<Node>("extra");
  ASSERT_EQ(extra.call_one(&Node::twice, 1).get(), 2);
  // The members on the second host: their procs name its agent.
  const std::string flag = ::testing::TempDir() + "netns-crunch-" + std::to_string(::getpid());
  std::filesystem::remove(flag);
  auto busy = nodes.slice("hosts", 1).call_one(&Node::crunch_until, flag);
  const std::string busy_proc = nodes.at(1).id().proc.name;
  const Reply procs_reply = get(job, "/api/procs");
  ASSERT_EQ(procs_reply.status, 200) << procs_reply.body;
  const auto listed = nlohmann::json::parse(procs_reply.body);
  std::map<std::string, std::vector<std::string>> by_host;
  for (const auto& p : listed) {
    if (p.at("controller").get<bool>()) continue;
    EXPECT_EQ(p.at("state"), "running") << p.dump();
    by_host[p.at("host").get<std::string>()].push_back(p.at("name").get<std::string>());
  }
  ASSERT_EQ(by_host.size(), 2U) << procs_reply.body;
  for (const auto& [host, names] : by_host) {
    const bool second = host.find(cluster->net->address(1)) != std::string::npos;
    EXPECT_TRUE(second || host.find(cluster->net->address(0)) != std::string::npos) << host;
    EXPECT_EQ(names.size(), second ? 2U : 1U) << host;
    if (second) {
      EXPECT_NE(std::find(names.begin(), names.end(), busy_proc), names.end()) << busy_proc;
    }
  }
  // The stack of the member in its long endpoint, read from its own host.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  Reply stacks;
  do {
    stacks = get(job, "/api/stacks?proc=" + busy_proc);
  } while (stacks.body.find("crunch_until") == std::string::npos &&
           std::chrono::steady_clock::now() < until);
  EXPECT_THAT(stacks.body, HasSubstr(busy_proc + "/nodes[0]: endpoint "));
  EXPECT_THAT(stacks.body, HasSubstr("Node::crunch_until(std::"));
  EXPECT_THAT(stacks.body, HasSubstr("(netns.test.cpp:"));
  std::ofstream(flag) << "done";
  EXPECT_GT(std::move(busy).get(std::chrono::seconds(60)), 0);
  std::filesystem::remove(flag);
  more.stop().get();
  procs.stop().get();
}

TEST(NetHosts, AHostCutOffIsReportedWithinTheHeartbeatBoundAndCanBeUsedOnceBack) {
  auto cluster = make_cluster(2);
  ASSERT_TRUE(cluster);
  HostMesh hosts = job::attach(cluster->addresses);
  ProcMesh procs = hosts.spawn_procs({{"gpus", 1}});
  auto nodes = procs.spawn<Node>("cut");
  EXPECT_EQ(nodes.call(&Node::twice, 1).get().values(), (std::vector<int>{2, 2}));
  cluster->net->set_link(1, false);
  const auto t0 = std::chrono::steady_clock::now();
  // Detected by heartbeats (dead_after + reconnect_for: 3 s + 3 s here), reported naming the
  // host; a call to its member fails rather than hang.
  ASSERT_TRUE(seen().wait_for([&](Seen& s) { return failure_named(s, cluster->net->address(1)); },
                              std::chrono::seconds(60)))
      << "the cut host was never reported";
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("a host cut off was reported after %.1f s\n", secs);
  EXPECT_ANY_THROW(nodes.slice("hosts", 1).call_one(&Node::twice, 1).get(std::chrono::seconds(60)));
  EXPECT_EQ(nodes.slice("hosts", 0).call_one(&Node::twice, 2).get(), 4);
  // Back on the network, the host takes a new mesh.
  cluster->net->set_link(1, true);
  ProcMesh again = hosts.spawn_procs({{"gpus", 1}});
  auto fresh = again.spawn<Node>("fresh");
  EXPECT_EQ(fresh.call(&Node::twice, 3).get().values(), (std::vector<int>{6, 6}));
  again.stop().get();
  procs.stop().get();
}

TEST(NetHosts, AStopAskedOfAHostThatIsCutOffBeforeItAnswersCompletes) {
  auto cluster = make_cluster(2);
  ASSERT_TRUE(cluster);
  ProcMesh procs = job::attach(cluster->addresses).spawn_procs({{"gpus", 1}});
  auto nodes = procs.spawn<Node>("cut-while-stopping");
  EXPECT_EQ(nodes.call(&Node::twice, 1).get().values(), (std::vector<int>{2, 2}));
  cluster->net->set_link(1, false);
  // Asked while the link to host 1 is still being repaired, its agent never answers, and the
  // link is given up (3 s + 3 s here): that host is lost with its procs, whose agent stops them
  // once it sees this controller gone. The stop completes; before, it failed with "link ...
  // lost before the reply came", and so did a program's clean-up after a cut.
  EXPECT_NO_THROW(procs.stop().get(std::chrono::seconds(60)));
  EXPECT_ANY_THROW(nodes.slice("hosts", 0).call_one(&Node::twice, 1).get(std::chrono::seconds(60)));
  cluster->net->set_link(1, true);
}

TEST(NetHosts, AHostWhoseAgentAndProcsAreKilledIsReportedByName) {
  auto cluster = make_cluster(3);
  ASSERT_TRUE(cluster);
  // An address on the network where no host answers: a clear error naming it, within the
  // links' dead_after (3 s here), not the kernel's minutes of SYN retries.
  const std::string nobody = cluster->net->address(40) + ":7070";
  const auto t0 = std::chrono::steady_clock::now();
  try {
    (void)job::attach({nobody});
    ADD_FAILURE() << "attached to an address where nothing answers";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr(nobody));
  }
  std::printf("attach to a silent address failed after %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ProcMesh procs = job::attach(cluster->addresses).spawn_procs({{"gpus", 1}});
  auto nodes = procs.spawn<Node>("doomed");
  cluster->agents[2]->kill();  // its workers die with it
  ASSERT_TRUE(seen().wait_for([&](Seen& s) { return failure_named(s, "doomed"); }));
  EXPECT_ANY_THROW(nodes.slice("hosts", 2).call_one(&Node::twice, 1).get(std::chrono::seconds(60)));
  EXPECT_EQ(nodes.slice("hosts", 0, 2).call(&Node::twice, 1).get().values(),
            (std::vector<int>{2, 2}));
  procs.stop().get();
}

TEST(NetHosts, ATensorStoreKeepsAVolumeOnEachHostAndReshardsAcrossThem) {
  auto cluster = make_cluster(2);
  ASSERT_TRUE(cluster);
  ProcMesh procs = job::attach(cluster->addresses).spawn_procs({{"gpus", 2}});  // 2 on each
  const store::Store s = store::Store::create(procs, store::Spread::per_host);
  ASSERT_EQ(s.volumes(), 2u);
  // A 6 x 8 float32 tensor put by the controller as two row shards, read back as column blocks
  // and a tile that crosses them, over the links to the hosts' procs.
  const std::int64_t rows = 6;
  const std::int64_t cols = 8;
  auto values = [&](const store::Box& b) {
    std::vector<float> v;
    for (std::int64_t r = 0; r < b.sizes[0]; ++r) {
      for (std::int64_t c = 0; c < b.sizes[1]; ++c) {
        v.push_back(static_cast<float>((b.offsets[0] + r) * cols + b.offsets[1] + c));
      }
    }
    return v;
  };
  const store::TensorInfo info{"float32", 4, {rows, cols}};
  for (std::size_t i = 0; i < 2; ++i) {
    const store::Box shard = store::chunk(store::Box::whole({rows, cols}), 0, i, 2);
    const auto v = values(shard);
    s.put("w", Bytes::copy(v.data(), v.size() * 4), info, {.shard = shard}).get();
  }
  for (const store::Box& b :
       {store::chunk(store::Box::whole({rows, cols}), 1, 1, 2), store::Box{{2, 3}, {3, 4}}}) {
    const store::Got got = s.get("w", {.box = b}).get();
    std::vector<float> back(got.data.size() / 4);
    std::memcpy(back.data(), got.data.data(), got.data.size());
    EXPECT_EQ(back, values(b)) << b.to_string();
  }
  // Keys spread over both hosts' volumes.
  for (int i = 0; i < 32; ++i) s.put("k" + std::to_string(i), Bytes::copy("v")).get();
  auto stats = s.stats().get();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_GT(stats[0].keys, 0u);
  EXPECT_GT(stats[1].keys, 0u);
  EXPECT_NE(stats[0].proc, stats[1].proc);
  for (const auto& v : stats) {
    // Every transfer went over the network to the hosts' procs (TCP, under TLS).
    for (const auto& [path, n] : v.transfers_by_path) {
      EXPECT_TRUE(path == "tls" || path == "tcp") << path << ": " << n;
    }
  }
  // A 4 MiB tensor put by the controller and read back into its memory, one-sided both ways:
  // the volume reads the put's bytes from the controller's memory, and the get reads the
  // volume's; as the rdma layer chooses (these hosts share one kernel, so cross-memory attach),
  // then through UCX, as from a host on another machine.
  auto one_sided = [&] {
    std::map<std::string, std::uint64_t> paths;
    for (const auto& v : s.stats().get()) {
      for (const auto& [path, n] : v.transfers_by_path) {
        if (path.rfind("rdma ", 0) == 0) paths[path] += n;
      }
    }
    return paths;
  };
  auto count = [](const std::map<std::string, std::uint64_t>& paths) {
    std::uint64_t n = 0;
    for (const auto& [path, k] : paths) n += k;
    return n;
  };
  const std::int64_t big = 1024;
  std::vector<float> whole(static_cast<std::size_t>(big * big));
  std::iota(whole.begin(), whole.end(), 0.0F);
  s.put("big", Bytes::copy(whole.data(), whole.size() * 4), {"float32", 4, {big, big}}).get();
  ASSERT_EQ(count(one_sided()), 1u);
  std::printf("a 4 MiB put into another host's volume: %s\n", one_sided().begin()->first.c_str());
  auto read_back = [&] {
    std::vector<float> into(whole.size());
    s.get_into("big", std::as_writable_bytes(std::span(into))).get();
    EXPECT_TRUE(into == whole);
  };
  read_back();
  EXPECT_EQ(count(one_sided()), 2u);
  set_rdma_backend(RdmaBackend::ucx);
  read_back();
  set_rdma_backend(RdmaBackend::automatic);
  EXPECT_EQ(one_sided()["rdma ucx"], 1u);
  EXPECT_EQ(count(one_sided()), 3u);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::test::run_hosts_test(argc, argv);
}
