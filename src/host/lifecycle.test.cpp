// One process can start a runtime, stop it and start another: everything the runtime keeps
// (the directory of procs, routes, addresses, the mesh layer's and rdma layer's state) belongs
// to the process's node, which goes with the last Proc or Runtime. Run under ASan and TSan too.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

#include "actor/node.hpp"
#include "baton/baton.hpp"

using namespace baton;

namespace {

int g_argc = 0;
char** g_argv = nullptr;

class Holder : public Actor {
 public:
  explicit Holder(int base) : data_(64, base) {}
  int sum() { return std::accumulate(data_.begin(), data_.end(), 0); }
  RdmaBuffer buffer() {
    if (!buffer_.valid()) buffer_ = RdmaBuffer::register_memory(data_.data(), bytes());
    return buffer_;
  }
  std::size_t bytes() const { return data_.size() * sizeof(int); }

  static constexpr auto endpoints = baton::endpoints<&Holder::sum, &Holder::buffer>();

 private:
  std::vector<int> data_;
  RdmaBuffer buffer_;
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
      // The rdma layer's registry and agent are the new runtime's, not the last one's.
      RdmaBuffer remote = holders.slice("gpus", 1).call_one(&Holder::buffer).get();
      std::vector<int> got(64, -1);
      remote.read_into(got.data(), got.size() * sizeof(int)).get();
      EXPECT_EQ(got, std::vector<int>(64, round));
      std::vector<int> local(16, round + 7);
      auto mine = RdmaBuffer::register_memory(local.data(), local.size() * sizeof(int));
      EXPECT_EQ(mine.size(), local.size() * sizeof(int));
      mine.drop().get();
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
