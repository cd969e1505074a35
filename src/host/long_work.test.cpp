// Long work and a silent worker, over real worker processes whose links call a peer dead after a
// short silence: a cast tree's forwarder keeps its links' heartbeats while it folds, and the
// controller keeps its own while it learns what became of a worker that went silent.
// This binary is its own worker: main() creates the Runtime first, which in a worker never
// returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "baton/baton.hpp"
#include "mesh/host_fanout.test.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;

// Every proc's links: a heartbeat every 100 ms, and a peer silent for 1.5 s is dead.
constexpr auto kHeartbeat = 100ms;
constexpr auto kDeadAfter = 1500ms;
// How long the controller waits for the exit report of a worker whose link closed: long enough
// that waits taken one after another would show, as a later call outliving kOneWaitAtMost.
constexpr auto kExitWait = 6s;
constexpr auto kOneWaitAtMost = 3s;

class Member : public Actor {
 public:
  int rank() const { return static_cast<int>(context().proc_rank); }
  int pid() const { return static_cast<int>(::getpid()); }
  static constexpr auto endpoints = baton::endpoints<&Member::rank, &Member::pid>();
};

/// A user's reducer that takes a while to fold: `ms` for each pair of values.
struct SlowSum {
  int ms = 0;
  int operator()(int a, int b) const {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // the user's long fold
    return a + b;
  }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(ms);
  }
};

/// What reached the controller's supervise hook (installed in main()).
struct Failures {
  std::mutex mu;
  std::vector<std::string> seen;
};
Failures& failures() {
  static Failures f;
  return f;
}
std::vector<std::string> failures_seen() {
  std::lock_guard lock(failures().mu);
  return failures().seen;
}

TEST(LongWork, AForwardersFoldLongerThanALinksDeadAfterLosesNoLink) {
  // Two members a node: the first chunk's head (location 0) forwards to locations 1 and 2.
  const test_support::HostFanOut fanout(2);
  auto procs = this_host().spawn_procs({{"gpus", 6}});
  auto members = procs.spawn<Member>("members");
  ASSERT_EQ(members.reduce(SlowSum{0}, &Member::rank).get(30s), 15);
  // The view leaves the forwarder's own member out: both results it folds come over its links,
  // and the last one's read handler would run the fold, were it not handed on.
  const int folded = members.slice("gpus", 1, 3)
                         .reduce(SlowSum{static_cast<int>(3 * kDeadAfter.count())}, &Member::rank)
                         .get(60s);
  EXPECT_EQ(folded, 1 + 2);
  // Every link is still up: each member answers, and no proc was reported failed.
  EXPECT_EQ(members.call(&Member::rank).get(30s).values(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_THAT(failures_seen(), ::testing::IsEmpty());
  procs.stop().get();
}

TEST(LongWork, TheRootsFoldLongerThanALinksDeadAfterLosesNoLink) {
  // Two members a node: the root folds the results of the chunks [0, 2) and [2, 4).
  const test_support::HostFanOut fanout(2);
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto members = procs.spawn<Member>("members");
  const int folded =
      members.reduce(SlowSum{static_cast<int>(3 * kDeadAfter.count())}, &Member::rank).get(60s);
  EXPECT_EQ(folded, 0 + 1 + 2 + 3);
  // The controller's loop kept its heartbeats: every worker is still there.
  EXPECT_EQ(members.call(&Member::rank).get(30s).values(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_THAT(failures_seen(), ::testing::IsEmpty());
  procs.stop().get();
}

TEST(LongWork, AWorkerThatGoesSilentTakesNoOtherWithIt) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto members = procs.spawn<Member>("members");
  const int pid = members.slice("gpus", 0).call_one(&Member::pid).get(30s);
  // Stopped, it keeps its sockets and answers nothing: the controller's link to it falls silent
  // and closes, and the controller waits a while (RuntimeOptions::exit_wait, longer than the
  // links' dead_after) for an exit report that does not come, since the process lives.
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOWAIT), 0);
  try {
    (void)members.slice("gpus", 0).call_one(&Member::rank).get(60s);
    ADD_FAILURE() << "a call to a stopped worker returned";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no frame from the peer"));
  }
  // The other workers heard from the controller all along: none of them took it for dead.
  EXPECT_EQ(members.slice("gpus", 1, 4).call(&Member::rank).get(30s).values(),
            (std::vector<int>{1, 2, 3}));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  procs.stop().get();
}

TEST(LongWork, WorkersThatGoSilentTogetherAreGivenUpOnTogether) {
  // Three workers stop at once (a host frozen, say): their links close together, and the
  // controller waits for their exit reports together, one exit_wait in all, rather than one
  // after another, so the last of their calls does not outlive the first by two waits.
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto members = procs.spawn<Member>("members");
  std::vector<int> pids;
  pids.reserve(3);
  for (int r = 0; r < 3; ++r) {
    pids.push_back(members.slice("gpus", r).call_one(&Member::pid).get(30s));
  }
  for (const int pid : pids) ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  for (const int pid : pids) {
    siginfo_t info{};
    ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WSTOPPED | WNOWAIT), 0);
  }
  std::vector<Future<int>> calls;
  calls.reserve(3);
  for (int r = 0; r < 3; ++r) calls.push_back(members.slice("gpus", r).call_one(&Member::rank));
  auto cast = members.slice("gpus", 0, 3).call(&Member::rank);
  // The first to fail waits out the exit_wait; the others fail with it, not a wait later each.
  for (std::size_t i = 0; i < calls.size(); ++i) {
    try {
      (void)std::move(calls[i]).get(i == 0 ? 60s : kOneWaitAtMost);
      ADD_FAILURE() << "a call to stopped worker " << i << " returned";
    } catch (const std::exception& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("no frame from the peer")) << "call " << i;
    }
  }
  // The cast's three lost members are attributed (is each proc known to have died?) in one
  // wait too, counted from when they came back lost.
  try {
    (void)std::move(cast).get(kOneWaitAtMost);
    ADD_FAILURE() << "a cast to three stopped workers returned";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("lost")) << e.what();
  }
  // The fourth worker heard from the controller all along.
  EXPECT_EQ(members.slice("gpus", 3).call_one(&Member::rank).get(30s), 3);
  for (const int pid : pids) ASSERT_EQ(::kill(pid, SIGKILL), 0);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::RuntimeOptions options;
  options.link.heartbeat = baton::kHeartbeat;
  options.link.dead_after = baton::kDeadAfter;
  options.exit_wait = baton::kExitWait;
  options.supervise = [](const baton::MeshFailure& f) {
    std::lock_guard lock(baton::failures().mu);
    baton::failures().seen.push_back(f.to_string());
    return true;
  };
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
