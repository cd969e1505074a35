// One process can start a runtime, stop it and start another: everything the runtime keeps
// (the directory of procs, routes, addresses, the mesh layer's state) belongs to the process's
// node, which goes with the last Proc or Runtime (rdma/lifecycle.test.cpp does the same for the
// rdma layer's state). Run under ASan and TSan too.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "actor/node.hpp"
#include "baton/actor/errors.hpp"
#include "baton/actor/proc.hpp"
#include "baton/host/runtime.hpp"
#include "baton/mesh/mesh.hpp"

using namespace baton;

namespace {

int g_argc = 0;
char** g_argv = nullptr;

class Holder : public Actor {
 public:
  explicit Holder(int base) : data_(64, base) {}
  int sum() { return std::accumulate(data_.begin(), data_.end(), 0); }

  static constexpr auto endpoints = baton::endpoints<&Holder::sum>();

 private:
  std::vector<int> data_;
};

TEST(Lifecycle, ARuntimeCanBeStartedStoppedAndStartedAgain) {
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    {
      Runtime rt(g_argc, g_argv);
      auto procs = this_host().spawn_procs({{"gpus", 2}});
      auto holders = procs.spawn<Holder>("holders", round);
      EXPECT_EQ(holders.call(&Holder::sum).get().values(),
                (std::vector<int>{64 * round, 64 * round}));
      EXPECT_EQ(holders.slice("gpus", 1).call_one(&Holder::sum).get(), 64 * round);
      procs.stop().get();
    }
    // Nothing of it is left: the node went with the runtime.
    EXPECT_EQ(detail::Node::current(), nullptr);
    EXPECT_THROW(Runtime::get(), UsageError);
  }
}

TEST(Lifecycle, APlainProcMakesANodeThatGoesWithIt) {
  {
    Proc a(ProcOptions{.name = "a"});
    auto node = detail::Node::current();
    ASSERT_NE(node, nullptr);
    Proc b(ProcOptions{.name = "b"});
    EXPECT_EQ(detail::Node::current(), node);  // one node per process, shared
    EXPECT_EQ(node->procs(), 2U);
    EXPECT_THROW(Proc(ProcOptions{.name = "a"}), UsageError);
  }
  EXPECT_EQ(detail::Node::current(), nullptr);
  Proc again(ProcOptions{.name = "a"});  // the name is free again, in a new node
  EXPECT_EQ(detail::Node::current()->procs(), 1U);
}

}  // namespace

int main(int argc, char** argv) {
  // A worker serves here and never returns; the controller starts (and stops) one runtime now.
  { Runtime rt(argc, argv); }
  g_argc = argc;
  g_argv = argv;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
