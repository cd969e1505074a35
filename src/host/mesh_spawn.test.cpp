// Spawning meshes without blocking: spawn_async's future comes before the members are made,
// an actor awaits both spawns in an endpoint (the blocking forms refuse to block it), and a
// failed or stopped spawn fails the future as the blocking form throws. This binary is its own
// worker: main() creates the Runtime first, which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "baton/baton.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Counter : public Actor {
 public:
  explicit Counter(int start) : value_(start) {}
  int value() { return value_; }
  static constexpr auto endpoints = baton::endpoints<&Counter::value>();

 private:
  int value_;
};

/// Its constructor waits for a byte on a fifo, which the test writes when it chooses. (It holds
/// one thread of its proc's pool meanwhile; the proc's agent runs on another.)
class Gated : public Actor {
 public:
  explicit Gated(const std::string& fifo) {
    const int fd = ::open(fifo.c_str(), O_RDONLY | O_CLOEXEC);
    char byte = 0;
    got_ = fd >= 0 && ::read(fd, &byte, 1) == 1 ? byte : -1;
    if (fd >= 0) ::close(fd);
  }
  int got() { return got_; }
  static constexpr auto endpoints = baton::endpoints<&Gated::got>();

 private:
  int got_ = 0;
};

/// Starts procs and a mesh on them from an endpoint, awaiting both spawns.
class Builder : public Actor {
 public:
  Task<int> build(int n) {
    auto procs = this_host().spawn_procs_async({{"gpus", static_cast<std::size_t>(n)}});
    procs_ = co_await std::move(procs);
    counters_ = co_await procs_.spawn_async<Counter>("built", 5);
    co_return co_await counters_.reduce(sum, &Counter::value);
  }
  /// What the blocking forms say inside an actor.
  std::vector<std::string> block() {
    std::vector<std::string> said;
    try {
      (void)this_host().spawn_procs({{"gpus", 1}});
      said.emplace_back("spawn_procs returned");
    } catch (const UsageError& e) {
      said.emplace_back(e.what());
    }
    try {
      (void)procs_.spawn<Counter>("blocked", 0);
      said.emplace_back("spawn returned");
    } catch (const UsageError& e) {
      said.emplace_back(e.what());
    }
    return said;
  }
  Task<int> stop() {
    co_await procs_.stop();
    co_return 0;
  }
  static constexpr auto endpoints =
      baton::endpoints<&Builder::build, &Builder::block, &Builder::stop>();

 private:
  ProcMesh procs_;
  ActorMesh<Counter> counters_;
};

TEST(Mesh, SpawnAsyncReturnsBeforeTheMembersAreConstructedAndCallsQueueBehindThem) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  const std::string fifo = "/tmp/baton-gate-" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Each member's constructor waits for a byte that is written only below.
  Future<ActorMesh<Gated>> spawning = procs.spawn_async<Gated>("gated", fifo);
  // The future does not wait for the constructors: the members are placed and their procs know
  // the mesh's tree, so it can be called, and the calls queue behind the constructors.
  ActorMesh<Gated> gated = std::move(spawning).get(30s);
  Future<ValueMesh<int>> got = gated.call(&Gated::got);
  EXPECT_FALSE(got.ready());
  const int fd = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // never blocks, keeps the bytes
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "gg", 2), 2);
  EXPECT_EQ(got.get(30s).values(), (std::vector<int>{'g', 'g'}));
  ::close(fd);
  ::unlink(fifo.c_str());
  procs.stop().get();
}

TEST(Mesh, AnActorAwaitsBothSpawnsInAnEndpointAndTheBlockingFormsRefuseToBlockIt) {
  auto builder = Runtime::get().proc().spawn<Builder>("builder");
  EXPECT_EQ(builder.call(&Builder::build, 3).get(30s), 15);
  const std::vector<std::string> said = builder.call(&Builder::block).get(30s);
  ASSERT_EQ(said.size(), 2u);
  // The actor's id, ctl/builder[i], counts the builders this process made.
  EXPECT_THAT(said[0], ::testing::MatchesRegex("HostMesh::spawn_procs\\(\\) \\(co_await "
                                               "spawn_procs_async\\(\\) instead\\) inside "
                                               "actor ctl/builder\\[[0-9]+\\] would block.*"));
  EXPECT_THAT(said[1], ::testing::MatchesRegex("ProcMesh::spawn\\(\\) \\(co_await "
                                               "spawn_async\\(\\) instead\\) inside actor "
                                               "ctl/builder\\[[0-9]+\\] would block.*"));
  builder.call(&Builder::stop).get(30s);
}

TEST(Mesh, SpawnAsyncFailsItsFutureWithWhatTheBlockingFormThrows) {
  ProcMesh empty;
  Future<ActorMesh<Counter>> none = empty.spawn_async<Counter>("c", 0);  // does not throw
  EXPECT_THROW((void)none.get(30s), UsageError);
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  // The procs refuse the name: the lowest-ranked refusal fails the future.
  Future<ActorMesh<Counter>> refused = procs.spawn_async<Counter>("no spaces", 0);
  std::string async_error;
  try {
    (void)refused.get(30s);
  } catch (const std::exception& e) {
    async_error = e.what();
  }
  EXPECT_THAT(async_error, HasSubstr("invalid actor name 'no spaces'"));
  std::string blocking_error;
  try {
    (void)procs.spawn<Counter>("no spaces", 0);
  } catch (const std::exception& e) {
    blocking_error = e.what();
  }
  EXPECT_EQ(blocking_error, async_error);
  // Stopped while the spawn is on its way: either the future says so, or (if the spawn was
  // quicker) the mesh it gave refuses calls.
  Future<ActorMesh<Counter>> late = procs.spawn_async<Counter>("late", 0);
  procs.stop().get();
  try {
    ActorMesh<Counter> m = std::move(late).get(30s);
    (void)m.call(&Counter::value);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), ::testing::AnyOf(HasSubstr("stopped before the spawn completed"),
                                           HasSubstr("procs were stopped")));
  }
  // Stopped before: the future fails at once.
  Future<ActorMesh<Counter>> after = procs.spawn_async<Counter>("after", 0);
  EXPECT_TRUE(after.ready());
  EXPECT_THROW((void)after.get(), UsageError);
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
