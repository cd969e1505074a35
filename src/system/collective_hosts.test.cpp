// Collectives across hosts: network namespaces joined by a bridge stand for hosts (needs root
// and iproute2), attached through their agents. A system test: the launch layer attaches the
// hosts and the collective layer runs on them.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <vector>

#include "baton/baton.hpp"
#include "baton/collective/collective.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

/// One rank of a group: joins it, and allreduces n ones.
class Rank : public Actor {
 public:
  Task<int> join(collective::Group g) {
    co_await comm_.join(g, *this);
    co_return comm_.rank();
  }
  Task<float> allreduce_sum(std::size_t n) {
    std::vector<float> v(n, 1.0F);
    co_await comm_.allreduce(std::span<float>(v), collective::ReduceOp::sum);
    co_return v.front();
  }
  static constexpr auto endpoints = baton::endpoints<&Rank::join, &Rank::allreduce_sum>();

 private:
  collective::Communicator comm_;
};

// A rank whose host goes off the network sends nothing and closes nothing: the others' collective
// fails within the group's timeout, naming it; never a hang.
TEST(CollectiveHosts, ARankOnAHostThatGoesSilentFailsTheOthersWithinTheTimeout) {
  std::unique_ptr<test::NetHosts> net;
  try {
    net = std::make_unique<test::NetHosts>(2);
  } catch (const std::exception& e) {
    FAIL() << "cannot make network namespaces (this test needs root and iproute2): " << e.what();
  }
  test::Agent a(7070, net->address(0), net->ns(0));
  test::Agent b(7070, net->address(1), net->ns(1));
  ProcMesh procs = job::attach({a.address(), b.address()}).spawn_procs({{"gpus", 1}});
  auto ranks = procs.spawn<Rank>("ranks");
  collective::GroupOptions options;
  options.timeout = std::chrono::seconds(5);
  EXPECT_EQ(ranks.call(&Rank::join, collective::make_group(ranks, options)).get().values(),
            (std::vector<int>{0, 1}));
  auto pending = ranks.slice("hosts", 0).call(&Rank::allreduce_sum, std::size_t{1000});
  net->set_link(1, false);  // host 1 is cut off; rank 1 never joins the allreduce either
  try {
    (void)pending.get(std::chrono::seconds(60));
    ADD_FAILURE() << "an allreduce with a silent rank completed";
  } catch (const TimeoutError&) {
    ADD_FAILURE() << "an allreduce with a silent rank hung past 60 s";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank 1"));
    EXPECT_THAT(e.what(), HasSubstr("is gone"));
  }
  net->set_link(1, true);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::test::run_hosts_test(argc, argv);
}
