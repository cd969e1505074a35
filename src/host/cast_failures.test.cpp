// A cast (call, reduce, stream) to a mesh whose members die while it runs, with the cast tree
// of one host deepened (a fan-out of 8) so that members are reached through forwarders: a gather
// reports a dead member without waiting for the live ones (CA-1), a dead forwarder never cuts off
// the members behind it (CA-4), and each lost member is named with how its proc died.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <signal.h>

#include <set>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "host/supervision.test.hpp"
#include "mesh/host_fanout.test.hpp"

namespace baton {
namespace {

using test::expect_member_died;
using test::kBound;
using test::Releaser;
using test::seen;
using test::Worker;
using ::testing::HasSubstr;

TEST(CastFailures, AGatherReportsADeadMemberWithoutWaitingForTheSlowestLiveOne) {  // CA-1
  const test_support::HostFanOut fanout(8);  // a tree on one host
  // 12 members: rank 2 is reached through rank 1, rank 0 directly; every live member stays
  // blocked (a long training step) until after the gather and the reduce have failed.
  auto procs = this_host().spawn_procs({{"gpus", 12}});
  auto workers = procs.spawn<Worker>("slow", -1);
  auto releasers = procs.spawn<Releaser>("releasers");
  const int pid = workers.slice("gpus", 2).call_one(&Worker::pid).get();
  Future<ValueMesh<int>> all = workers.call(&Worker::block);
  Future<int> total = workers.reduce(sum, &Worker::block);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  for (Future<void> f :
       {std::move(all).then([](const ValueMesh<int>&) {}), std::move(total).then([](int) {})}) {
    try {
      f.get(kBound);  // before CA-1 this waited for the blocked members: a TimeoutError
      ADD_FAILURE() << "expected SupervisionError";
    } catch (const SupervisionError& e) {
      EXPECT_THAT(e.what(), HasSubstr("SIGKILL"));
    }
  }
  for (const auto& f : seen().next(2)) EXPECT_EQ(f.rank, 2);  // releasers and slow
  // Sticky: frees both waits. Calls, not broadcasts: a forwarded release could arrive after
  // the stop, which would then wait for its grace.
  releasers.slice("gpus", 0, 2).call(&Releaser::release).get(kBound);
  releasers.slice("gpus", 3, 12).call(&Releaser::release).get(kBound);
  procs.stop().get();
}

TEST(CastFailures, ADeadForwarderNeverCutsOffTheMembersBehindIt) {  // CA-4
  const test_support::HostFanOut fanout(8);                         // a tree on one host
  // 20 members: the controller sends to 8 heads; rank 2 forwards to ranks 3 and 4.
  auto procs = this_host().spawn_procs({{"gpus", 20}});
  auto workers = procs.spawn<Worker>("behind", -1);
  workers.broadcast(&Worker::incr, 1);
  // Every member has it (a broadcast in flight through rank 2 would die with it).
  ASSERT_EQ(workers.call(&Worker::value).get(kBound).values(), std::vector<int>(20, 1));
  const int pid = workers.slice("gpus", 2).call_one(&Worker::pid).get();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  expect_member_died(seen().next(), "behind", 2, "{gpus: 2}");
  // Everything that excludes rank 2 keeps working, through the tree or to one member.
  EXPECT_EQ(workers.slice("gpus", 3).call_one(&Worker::value).get(kBound), 1);
  EXPECT_EQ(workers.slice("gpus", 4).call_one(&Worker::value).get(kBound), 1);
  EXPECT_EQ(workers.slice("gpus", 3, 20).call(&Worker::value).get(kBound).values(),
            std::vector<int>(17, 1));
  workers.slice("gpus", 3, 5).broadcast(&Worker::incr, 10);
  EXPECT_EQ(workers.slice("gpus", 3, 5).reduce(sum, &Worker::value).get(kBound), 22);
  // What includes rank 2 fails at once, naming it.
  try {
    workers.call(&Worker::value).get(kBound);
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 of"));
  }
  procs.stop().get();
}

TEST(CastFailures, AMemberLostBehindAForwarderIsReportedWithHowItsProcDied) {
  const test_support::HostFanOut fanout(8);  // a tree on one host
  // 12 members: the controller sends to 8 heads; rank 2 is reached through rank 1.
  auto procs = this_host().spawn_procs({{"gpus", 12}});
  auto workers = procs.spawn<Worker>("deep", -1);
  auto releasers = procs.spawn<Releaser>("releasers");
  const int pid = workers.slice("gpus", 2).call_one(&Worker::pid).get();
  Future<ValueMesh<int>> all = workers.call(&Worker::block);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  releasers.slice("gpus", 0, 2).broadcast(&Releaser::release);
  releasers.slice("gpus", 3, 12).broadcast(&Releaser::release);
  try {
    all.get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 2 of"));
    EXPECT_THAT(e.what(), HasSubstr("was killed by signal SIGKILL"));
  }
  for (const auto& f : seen().next(2)) EXPECT_EQ(f.rank, 2);  // deep and releasers
  procs.stop().get();
}

TEST(CastFailures, AStreamYieldsALostMemberAtOnceAndThenEveryOtherMemberOnce) {  // CA-1
  const test_support::HostFanOut fanout(8);  // a tree on one host
  // 12 members: the controller sends to rank 3 directly; rank 2 is reached through rank 1.
  // Every live member stays blocked until both lost members came out of the stream.
  auto procs = this_host().spawn_procs({{"gpus", 12}});
  auto workers = procs.spawn<Worker>("streamed", -1);
  auto releasers = procs.spawn<Releaser>("releasers");
  const int pid2 = workers.slice("gpus", 2).call_one(&Worker::pid).get();
  const int pid3 = workers.slice("gpus", 3).call_one(&Worker::pid).get();
  auto s = workers.stream(&Worker::block);
  ASSERT_EQ(::kill(pid2, SIGKILL), 0);
  ASSERT_EQ(::kill(pid3, SIGKILL), 0);
  std::set<std::string> lost;
  for (int i = 0; i < 2; ++i) {
    try {
      auto item = s.next(kBound);
      ADD_FAILURE() << "a blocked member answered first: "
                    << (item ? item->first.to_string() : std::string("the end"));
    } catch (const SupervisionError& e) {
      lost.insert(e.where());
      EXPECT_THAT(e.what(), HasSubstr(e.where() + ": proc "));
      EXPECT_THAT(e.what(), HasSubstr("was killed by signal SIGKILL"));
    } catch (const TimeoutError&) {
      ADD_FAILURE() << "the lost member waited for the blocked ones";  // before the fix
    }
  }
  EXPECT_EQ(lost, (std::set<std::string>{"rank 2 {gpus: 2}", "rank 3 {gpus: 3}"}));
  for (const auto& f : seen().next(4)) {  // each dead proc hosted a streamed and a releaser
    EXPECT_TRUE(f.rank == 2 || f.rank == 3) << f.to_string();
  }
  // Calls, not broadcasts: a forwarded release could arrive after the stop.
  releasers.slice("gpus", 0, 2).call(&Releaser::release).get(kBound);
  releasers.slice("gpus", 4, 12).call(&Releaser::release).get(kBound);
  std::set<std::size_t> answered;
  for (int i = 0; i < 10; ++i) {
    auto item = s.next(kBound);
    ASSERT_TRUE(item.has_value());
    EXPECT_EQ(item->second, 0);
    answered.insert(item->first.rank);
  }
  EXPECT_EQ(answered, (std::set<std::size_t>{0, 1, 4, 5, 6, 7, 8, 9, 10, 11}));
  EXPECT_FALSE(s.next(kBound).has_value());  // one item per member, no more
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv,
                    baton::test::record_failures());  // a worker serves here, never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
