// Actor meshes over real worker processes: every adverb, slicing, the cast tree's fan-out bound,
// FIFO across broadcast and direct sends, meshes and ports passed between processes, and stop.
// This binary is its own worker: main() creates the Runtime first, which in a worker never
// returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actor/directory.hpp"
#include "baton/baton.hpp"
#include "mesh/host_fanout.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Counter : public Actor {
 public:
  explicit Counter(int start) : value_(start) {}
  /// The rank of this member's proc in the proc mesh (not in this actor mesh, which may be a
  /// slice of it).
  int my_rank() const { return static_cast<int>(context().proc_rank); }
  void incr(int by) { value_ += by; }
  int value() { return value_; }
  int rank() { return my_rank(); }
  std::string name() { return std::to_string(my_rank()); }
  int fail_on(int rank) {
    if (my_rank() == rank) throw std::runtime_error("rank " + std::to_string(rank) + " refuses");
    return my_rank();
  }
  /// How many meshes' tree nodes this member's proc knows (CA-3).
  std::size_t nodes_known() { return detail::cast_nodes_known(proc()); }
  /// The sizes of the tables this member's process keeps (see detail::table_sizes).
  std::vector<std::size_t> tables() { return sizes(detail::table_sizes(detail::state_of(proc()))); }
  static std::vector<std::size_t> sizes(const detail::TableSizes& t) {
    return {t.procs, t.actors, t.ended, t.ports, t.routes, t.addresses, t.failures, t.closed};
  }
  /// Sends this member's rank to a port that another process opened.
  void report(const Port<int>& to) { to.send(my_rank() * 10 + value_); }
  static constexpr auto endpoints =
      baton::endpoints<&Counter::incr, &Counter::value, &Counter::rank, &Counter::name,
                       &Counter::fail_on, &Counter::report, &Counter::nodes_known,
                       &Counter::tables>();

 private:
  int value_;
};

/// Lives in one worker and drives a mesh (and a controller actor) it was handed.
class Relay : public Actor {
 public:
  Task<int> sum_values(ActorMesh<Counter> mesh) {
    ValueMesh<int> v = co_await mesh.call(&Counter::value);
    co_return std::accumulate(v.values().begin(), v.values().end(), 0);
  }
  Task<int> total(ActorMesh<Counter> mesh) { co_return co_await mesh.reduce(sum, &Counter::rank); }
  void bump(const ActorMesh<Counter>& mesh, int by) { mesh.broadcast(&Counter::incr, by); }
  Task<int> ask(ActorRef<Counter> other) { co_return co_await other.call(&Counter::value) + 1; }
  static constexpr auto endpoints =
      baton::endpoints<&Relay::sum_values, &Relay::total, &Relay::bump, &Relay::ask>();
};

/// Tells what it knows of where it is, from its context (never from the environment).
class Whereabouts : public Actor {
 public:
  Whereabouts() : seen_in_constructor_(context().rank) {}
  std::string where() {
    const ActorContext& c = context();
    return c.mesh + " " + std::to_string(c.rank) + " " + c.point.to_string() + " of " +
           c.shape.to_string() + " proc " + std::to_string(c.proc_rank) + " " +
           c.proc_point.to_string() + " gpu " + (c.gpu ? std::to_string(*c.gpu) : "-") +
           (c.id == id() && seen_in_constructor_ == c.rank ? "" : " (inconsistent)");
  }
  /// Blocks until this member's fifo (`fifo`.rank) has a byte: a test holds each reply.
  int hold(const std::string& fifo) {
    const std::string mine = fifo + "." + std::to_string(context().rank);
    std::FILE* f = std::fopen(mine.c_str(), "r");
    if (f == nullptr) throw std::runtime_error("cannot open " + mine);
    const int c = std::fgetc(f);
    std::fclose(f);
    return c;
  }
  std::size_t length(const std::string& s) { return s.size(); }
  static constexpr auto endpoints =
      baton::endpoints<&Whereabouts::where, &Whereabouts::hold, &Whereabouts::length>();

 private:
  std::size_t seen_in_constructor_;
};

/// A reducer with a member: every node of the tree must fold with the caller's `mod`.
struct SumMod {
  int mod = 1000;
  int operator()(int a, int b) const { return (a + b) % mod; }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(mod);
  }
};

struct Concat {
  std::string operator()(const std::string& a, const std::string& b) const { return a + "," + b; }
};
/// A reducer that refuses one value.
struct NoSevens {
  int operator()(int a, int b) const {
    if (b == 7) throw std::invalid_argument("seven is not allowed");
    return a + b;
  }
};

std::uint64_t sent_by_controller() {
  return Runtime::get().proc().envelopes_sent();
}

TEST(Mesh, SpawnCallAndCoordinates) {
  auto procs = this_host().spawn_procs({{"hosts", 2}, {"gpus", 2}});
  ASSERT_EQ(procs.size(), 4u);
  auto counters = procs.spawn<Counter>("counters", 10);
  EXPECT_EQ(counters.shape().to_string(), "{hosts: 2, gpus: 2}");
  ValueMesh<int> ranks = counters.call(&Counter::rank).get();
  ASSERT_EQ(ranks.size(), 4u);
  for (const auto& [point, rank] : ranks.items()) {
    EXPECT_EQ(rank, static_cast<int>(point.rank));
    EXPECT_EQ(ranks.at(point), rank);
    EXPECT_EQ(point["hosts"] * 2 + point["gpus"], point.rank);
  }
  procs.stop().get();
}

TEST(Mesh, SlicesReachExactlyTheirRanks) {
  auto procs = this_host().spawn_procs({{"hosts", 2}, {"gpus", 3}});
  auto counters = procs.spawn<Counter>("counters", 0);
  counters.slice("hosts", 1).broadcast(&Counter::incr, 5);
  counters.slice("gpus", 1, 3).broadcast(&Counter::incr, 100);
  EXPECT_EQ(counters.call(&Counter::value).get().values(),
            (std::vector<int>{0, 100, 100, 5, 105, 105}));
  ValueMesh<int> sliced = counters.slice("gpus", 2).call(&Counter::rank).get();
  EXPECT_EQ(sliced.values(), (std::vector<int>{2, 5}));
  EXPECT_EQ(sliced.shape().to_string(), "{hosts: 2}");
  // A slice's replies carry the slice's coordinates.
  ValueMesh<int> corner =
      counters.slice("hosts", 1, 2).slice("gpus", 1, 3).call(&Counter::rank).get();
  EXPECT_EQ(corner.values(), (std::vector<int>{4, 5}));
  EXPECT_EQ(corner.items()[1].first.to_string(), "{hosts: 0, gpus: 1}");
  // Procs can be sliced before spawning: the actor mesh covers exactly that slice.
  auto right = procs.slice("gpus", 2, 3).spawn<Counter>("right", 7);
  EXPECT_EQ(right.call(&Counter::rank).get().values(), (std::vector<int>{2, 5}));
  procs.stop().get();
}

TEST(Mesh, CallOneChooseReduceAndErrors) {
  const test_support::HostFanOut fanout(8);  // members reached through forwarders too
  auto procs = this_host().spawn_procs({{"gpus", 16}});
  auto counters = procs.spawn<Counter>("counters", 1);
  try {
    (void)counters.call_one(&Counter::value);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has 16 (slice it"));
  }
  // Every rank, including the ones reached through a forwarder.
  for (std::size_t r = 0; r < 16; ++r) {
    EXPECT_EQ(counters.slice("gpus", r).call_one(&Counter::rank).get(), static_cast<int>(r));
  }
  std::set<int> chosen;
  for (int i = 0; i < 200; ++i) {
    const int r = counters.choose(&Counter::rank).get();
    ASSERT_GE(r, 0);
    ASSERT_LT(r, 16);
    chosen.insert(r);
  }
  EXPECT_GT(chosen.size(), 1u) << "choose() should spread over the mesh";

  EXPECT_EQ(counters.reduce(sum, &Counter::rank).get(), 120);
  EXPECT_EQ(counters.reduce(min, &Counter::rank).get(), 0);
  EXPECT_EQ(counters.reduce(max, &Counter::rank).get(), 15);
  EXPECT_EQ(counters.slice("gpus", 4, 8).reduce(sum, &Counter::rank).get(), 4 + 5 + 6 + 7);
  // A user reducer folds in rank order along the tree.
  EXPECT_EQ(counters.reduce(Concat{}, &Counter::name).get(),
            "0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15");
  // A reducer that throws fails the reduce as its caller's code: an ActorError with its message.
  try {
    counters.reduce(NoSevens{}, &Counter::rank).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "seven is not allowed");
    EXPECT_EQ(e.endpoint(), "fold");
  }

  try {
    counters.reduce(sum, &Counter::fail_on, 9).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "rank 9 refuses");
  }
  try {
    counters.call(&Counter::fail_on, 13).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "rank 13 refuses");
    EXPECT_THAT(e.actor(), HasSubstr("counters"));
  }
  procs.stop().get();
}

TEST(Mesh, StreamYieldsEveryReplyWithItsPoint) {
  auto procs = this_host().spawn_procs({{"hosts", 3}, {"gpus", 4}});
  auto counters = procs.spawn<Counter>("counters", 0);
  auto s = counters.stream(&Counter::rank);
  std::set<std::size_t> seen;
  while (auto next = s.next()) {
    EXPECT_EQ(next->second, static_cast<int>(next->first.rank));
    seen.insert(next->first.rank);
  }
  EXPECT_EQ(seen.size(), 12u);

  auto failing = counters.stream(&Counter::fail_on, 5);
  int ok = 0;
  int errors = 0;
  for (;;) {
    try {
      if (!failing.next()) break;
      ++ok;
    } catch (const ActorError& e) {
      EXPECT_EQ(e.remote_message(), "rank 5 refuses");
      ++errors;
    }
  }
  EXPECT_EQ(ok, 11);
  EXPECT_EQ(errors, 1);
  procs.stop().get();
}

TEST(Mesh, BroadcastThenChooseSeesTheIncrementEveryTime) {
  const test_support::HostFanOut fanout(8);  // members reached through forwarders too
  auto procs = this_host().spawn_procs({{"gpus", 16}});
  auto counters = procs.spawn<Counter>("counters", 0);
  for (int i = 1; i <= 300; ++i) {
    counters.broadcast(&Counter::incr, 1);
    ASSERT_EQ(counters.choose(&Counter::value).get(), i) << "iteration " << i;
  }
  // Direct and routed single-member calls against slice broadcasts, on every rank.
  for (std::size_t r = 0; r < 16; ++r) {
    auto one = counters.slice("gpus", r);
    one.broadcast(&Counter::incr, 1000);
    ASSERT_EQ(one.call_one(&Counter::value).get(), 1300) << "rank " << r;
  }
  procs.stop().get();
}

TEST(Mesh, ControllerSendsAtMostTheFanOutPerBroadcast) {
  // To members of one host, the controller sends at most the mesh's host fan-out messages:
  // kCastHostFanOut, or BATON_CAST_HOST_FANOUT as it was when the mesh was spawned.
  for (std::size_t n : {4u, 16u, 40u}) {
    auto procs = this_host().spawn_procs({{"gpus", n}});
    for (int set : {0, 8, 3}) {
      std::optional<test_support::HostFanOut> fanout;
      if (set != 0) fanout.emplace(set);
      auto counters = procs.spawn<Counter>("counters" + std::to_string(set), 0);
      fanout.reset();  // the mesh keeps the fan-out it was spawned with
      const std::size_t bound = set != 0 ? static_cast<std::size_t>(set) : kCastHostFanOut;
      (void)counters.call(&Counter::value).get();
      const std::uint64_t before = sent_by_controller();
      counters.broadcast(&Counter::incr, 1);
      const std::uint64_t sent = sent_by_controller() - before;
      EXPECT_EQ(sent, std::min<std::uint64_t>(n, bound)) << "n = " << n << ", fan-out " << bound;
      // And everyone got it.
      EXPECT_EQ(counters.reduce(sum, &Counter::value).get(), static_cast<int>(n));
    }
    procs.stop().get();
  }
}

TEST(Mesh, AHostFanOutOutOfRangeFailsTheSpawnSayingWhatItTakes) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  for (const std::string bad : {"1", "65", "eight", "8x"}) {
    ::setenv("BATON_CAST_HOST_FANOUT", bad.c_str(), 1);
    try {
      (void)procs.spawn<Counter>("refused", 0);
      ADD_FAILURE() << "a spawn with BATON_CAST_HOST_FANOUT=" << bad << " went ahead";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("BATON_CAST_HOST_FANOUT=" + bad +
                                      " is not a fan-out: give a whole number from 2 to 64"));
    }
  }
  ::unsetenv("BATON_CAST_HOST_FANOUT");
  EXPECT_EQ(procs.spawn<Counter>("counters", 1).reduce(sum, &Counter::value).get(), 2);
  procs.stop().get();
}

TEST(Mesh, MeshesRefsAndPortsPassBetweenProcesses) {
  auto procs = this_host().spawn_procs({{"gpus", 6}});
  auto counters = procs.slice("gpus", 1, 6).spawn<Counter>("counters", 3);
  auto relay = procs.slice("gpus", 0).spawn<Relay>("relay");
  // An actor in worker 0 calls a mesh spawned by the controller on workers 1..5.
  EXPECT_EQ(relay.call_one(&Relay::sum_values, counters).get(), 15);
  EXPECT_EQ(relay.call_one(&Relay::total, counters).get(), 1 + 2 + 3 + 4 + 5);
  relay.call_one(&Relay::bump, counters.slice("gpus", 0, 2), 10).get();
  EXPECT_EQ(counters.call(&Counter::value).get().values(), (std::vector<int>{13, 13, 3, 3, 3}));
  // It calls an actor that lives in the controller.
  auto local = Runtime::get().proc().spawn<Counter>("local", 41);
  EXPECT_EQ(relay.call_one(&Relay::ask, local).get(), 42);
  // Workers reply to a port the controller opened.
  auto [port, receiver] = Runtime::get().proc().open_port<int>();
  counters.broadcast(&Counter::report, port);
  std::multiset<int> got;
  for (int i = 0; i < 5; ++i) {
    got.insert(receiver.recv(30s));  // throws TimeoutError if a report never comes
  }
  EXPECT_EQ(got, (std::multiset<int>{23, 33, 33, 43, 53}));  // rank * 10 + value
  procs.stop().get();
}

TEST(Mesh, StoppedMeshesFailClearly) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto counters = procs.spawn<Counter>("counters", 0);
  auto relay = procs.slice("gpus", 0).spawn<Relay>("relay");
  counters.broadcast(&Counter::incr, 1);
  counters.slice("gpus", 2, 4).stop().get();
  // The rest keeps working; the stopped members fail at once with a clear error.
  EXPECT_EQ(counters.slice("gpus", 0, 2).call(&Counter::value).get().values(),
            (std::vector<int>{1, 1}));
  try {
    (void)counters.call(&Counter::value);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("actor mesh 'counters' was stopped"));
  }
  // A copy in another process reaches the stopped actors and hears that they are gone.
  try {
    relay.call_one(&Relay::sum_values, counters).get();
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("counters[0] has stopped"));
  }
  counters.stop().get();
  procs.stop().get();
  try {
    (void)relay.call_one(&Relay::ask, counters.at(0));
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("procs were stopped"));
  }
  EXPECT_THROW(procs.spawn<Counter>("again", 0), UsageError);
}

TEST(Mesh, AnActorKnowsItsMeshRankPointProcAndGpu) {
  auto procs = this_host().spawn_procs({{"hosts", 2}, {"gpus", 3}});
  // A slice of the procs: the actor mesh's ranks are the slice's; the procs' are the mesh's.
  auto w = procs.slice("gpus", 1, 3).spawn<Whereabouts>("w");
  const ValueMesh<std::string> where = w.call(&Whereabouts::where).get();
  EXPECT_EQ(where[0],
            "w 0 {hosts: 0, gpus: 0} of {hosts: 2, gpus: 2} proc 1 "
            "{hosts: 0, gpus: 1} gpu 1");
  EXPECT_EQ(where[3],
            "w 3 {hosts: 1, gpus: 1} of {hosts: 2, gpus: 2} proc 5 "
            "{hosts: 1, gpus: 2} gpu 2");
  procs.stop().get();
}

TEST(Mesh, MeshesSliceOnSeveralDimensionsFlattenAndRename) {
  auto procs = this_host().spawn_procs({{"hosts", 2}, {"gpus", 4}});
  auto counters = procs.spawn<Counter>("counters", 0);
  auto corner = counters.slice({{"hosts", 1}, {"gpus", {1, 3}}});
  EXPECT_EQ(corner.shape().to_string(), "{gpus: 2}");
  EXPECT_EQ(corner.call(&Counter::rank).get().values(), (std::vector<int>{5, 6}));
  auto flat = counters.slice({{"gpus", {2, 4}}}).rename("hosts", "nodes");
  EXPECT_EQ(flat.shape().to_string(), "{nodes: 2, gpus: 2}");
  EXPECT_EQ(counters.flatten("all").slice("all", 6, 8).call(&Counter::rank).get().values(),
            (std::vector<int>{6, 7}));
  // A ValueMesh slices the same way, and keeps each value with its member.
  const ValueMesh<int> ranks = counters.call(&Counter::rank).get();
  const ValueMesh<int> part = ranks.slice({{"hosts", 1}, {"gpus", {1, 3}}});
  EXPECT_EQ(part.values(), (std::vector<int>{5, 6}));
  EXPECT_EQ(part.shape().to_string(), "{gpus: 2}");
  EXPECT_EQ(ranks.slice("gpus", 3).values(), (std::vector<int>{3, 7}));
  EXPECT_EQ(ranks.flatten("all").slice("all", 2, 4).values(), (std::vector<int>{2, 3}));
  // Procs slice the same way before spawning.
  auto some = procs.slice({{"hosts", 0}, {"gpus", {0, 2}}}).spawn<Counter>("some", 0);
  EXPECT_EQ(some.call(&Counter::rank).get().values(), (std::vector<int>{0, 1}));
  EXPECT_THROW(counters.slice({{"gpus", 0}, {"gpus", 1}}), SliceError);
  EXPECT_THROW(counters.slice({{"racks", 0}}), SliceError);
  procs.stop().get();
}

TEST(Mesh, ReducersFoldWithTheirMembersInEveryProc) {  // CA-2
  // 20 members: the controller reaches 8 heads, which fold their subtrees before it does.
  const test_support::HostFanOut fanout(8);
  auto procs = this_host().spawn_procs({{"gpus", 20}});
  auto counters = procs.spawn<Counter>("counters", 0);
  EXPECT_EQ(counters.reduce(sum, &Counter::rank).get(), 190);
  EXPECT_EQ(counters.reduce(SumMod{7}, &Counter::rank).get(), 190 % 7);
  const int cap = 50;
  EXPECT_EQ(
      counters.reduce([cap](int a, int b) { return std::min(cap, a + b); }, &Counter::rank).get(),
      50);
  EXPECT_EQ(counters.slice("gpus", 10, 20).reduce(SumMod{11}, &Counter::rank).get(), 145 % 11);
  procs.stop().get();
}

TEST(Mesh, ProcsForgetStoppedMeshes) {  // CA-3, and the node's tables
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto keeper = procs.spawn<Counter>("keeper", 0);
  const auto round = [&](int i) {
    auto m = procs.spawn<Counter>("m" + std::to_string(i), i);
    EXPECT_EQ(m.reduce(sum, &Counter::value).get(), 2 * i);
    m.slice("gpus", 0).stop().get();  // one member: the other's node stays
    m.slice("gpus", 1).stop().get();  // the last: every proc drops the mesh's node
  };
  // After one mesh came and went (links between the procs are up by then), nothing grows.
  round(0);
  const ValueMesh<std::size_t> before = keeper.call(&Counter::nodes_known).get();
  const auto workers = keeper.call(&Counter::tables).get().values();
  auto& ctl = detail::state_of(Runtime::get().proc());
  const detail::TableSizes controller = detail::table_sizes(ctl);
  for (int i = 1; i < 200; ++i) round(i);
  EXPECT_EQ(keeper.call(&Counter::nodes_known).get().values(), before.values());
  EXPECT_EQ(before.values(), (std::vector<std::size_t>{1, 1}));  // the keeper's own
  EXPECT_EQ(keeper.call(&Counter::tables).get().values(), workers);
  EXPECT_EQ(Counter::sizes(detail::table_sizes(ctl)), Counter::sizes(controller));
  EXPECT_EQ(workers.at(0).at(1), 2U);  // live actors: the proc's agent and the keeper
  EXPECT_EQ(workers.at(0).at(2), 0U);  // no stopped member is remembered once its mesh is gone
  procs.stop().get();
}

TEST(Mesh, AnActorErrorNamesTheMembersRankAndPointWhicheverVerbCalledIt) {
  // 12 members: the controller reaches rank 1 directly and rank 2 through the tree.
  const test_support::HostFanOut fanout(8);
  auto procs = this_host().spawn_procs({{"hosts", 3}, {"gpus", 4}});
  auto counters = procs.spawn<Counter>("counters", 0);
  const auto where = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const ActorError& e) {
      // The place is data too (what Python's ActorError.point is made of), saying the same.
      if (!e.point()) return "no point in: " + e.where();
      EXPECT_EQ("rank " + std::to_string(e.point()->rank) + " " + e.point()->to_string(),
                e.where());
      return e.where();
    }
    return "no ActorError";
  };
  EXPECT_EQ(where([&] { counters.call(&Counter::fail_on, 2).get(); }),
            "rank 2 {hosts: 0, gpus: 2}");
  try {
    counters.call(&Counter::fail_on, 6).get();
    ADD_FAILURE() << "rank 6 did not fail";
  } catch (const ActorError& e) {
    ASSERT_TRUE(e.point());
    EXPECT_EQ(e.point()->labels, (std::vector<std::string>{"hosts", "gpus"}));
    EXPECT_EQ(e.point()->coords, (std::vector<std::size_t>{1, 2}));
    EXPECT_EQ(e.point()->rank, 6U);
  }
  EXPECT_EQ(where([&] { counters.reduce(sum, &Counter::fail_on, 6).get(); }),
            "rank 6 {hosts: 1, gpus: 2}");
  for (int r : {1, 2}) {  // the direct path and the tree's path say the same
    auto one = counters.slice({{"hosts", 0}, {"gpus", {static_cast<std::size_t>(r), 4}}});
    EXPECT_EQ(where([&] { one.slice("gpus", 0).call_one(&Counter::fail_on, r).get(); }),
              "rank 0 {}");
    EXPECT_EQ(where([&] { one.slice("gpus", 0, 1).choose(&Counter::fail_on, r).get(); }),
              "rank 0 {gpus: 0}");
  }
  procs.stop().get();
}

TEST(Mesh, TemporariesAreSafeAndHandlesCanBeMembers) {
  struct Job {
    ProcMesh procs;  // empty until assigned: no std::optional needed
    ActorMesh<Counter> counters;
  } job;
  EXPECT_THROW(job.counters.call(&Counter::value), UsageError);
  try {
    (void)job.procs.spawn<Counter>("c", 0);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("assign it the mesh that spawn_procs() returns"));
  }
  job.procs = this_host().spawn_procs({{"gpus", 3}});
  job.counters = job.procs.spawn<Counter>("counters", 0);
  int total = 0;
  for (int v : job.counters.call(&Counter::rank).get().values()) total += v;  // no dangling
  EXPECT_EQ(total, 0 + 1 + 2);
  EXPECT_EQ(job.counters.call(&Counter::rank).get(30s).size(), 3U);
  job.procs.stop().get(30s);
}

TEST(Mesh, StreamNextTakesATimeoutAndGoesOnAfterIt) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto w = procs.spawn<Whereabouts>("w");
  const std::string fifo = "/tmp/baton-stream-" + std::to_string(::getpid());
  const auto release = [&](int rank, char c) {
    std::FILE* f = std::fopen((fifo + "." + std::to_string(rank)).c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputc(c, f);
    std::fclose(f);
  };
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(::mkfifo((fifo + "." + std::to_string(r)).c_str(), 0600), 0);
  }
  auto s = w.stream(&Whereabouts::hold, fifo);  // each member waits for a byte of its own
  EXPECT_THROW(s.next(50ms), TimeoutError);
  release(1, 'b');
  auto first = s.next(30s);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->first.rank, 1U);
  EXPECT_EQ(first->second, 'b');
  EXPECT_THROW(s.next(50ms), TimeoutError);  // rank 0 still waits
  release(0, 'a');
  auto second = s.next(30s);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->first.rank, 0U);
  EXPECT_EQ(second->second, 'a');
  EXPECT_FALSE(s.next(30s).has_value());
  for (int r = 0; r < 2; ++r) ::unlink((fifo + "." + std::to_string(r)).c_str());
  procs.stop().get();
}

TEST(Mesh, AnArgumentTooLargeToTravelInlineIsABatonError) {
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto w = procs.spawn<Whereabouts>("w");
  const std::string big((std::size_t{16} << 20) + 1, 'x');
  try {
    (void)w.call_one(&Whereabouts::length, big).get(30s);
    FAIL() << "expected MessageTooLargeError";
  } catch (const MessageTooLargeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("baton::Bytes"));
  }
  EXPECT_EQ(w.call_one(&Whereabouts::length, std::string(10, 'y')).get(30s), 10U);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
