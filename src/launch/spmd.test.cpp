// SPMD programs run as they are on every proc of a mesh: a shell program that reports the
// torchrun environment it was given and fails on one rank, and a real torch.distributed
// all-reduce over Gloo (Debian's python3-torch; make deps installs it).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/launch/spmd.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using test::failure_named;
using test::seen;
using test::Seen;
using ::testing::HasSubstr;

/// Whether a worker line containing `text` was seen.
bool printed(Seen& s, const std::string& text) {
  for (const auto& l : s.lines) {
    if (l.text.find(text) != std::string::npos) return true;
  }
  return false;
}

/// Everything the workers printed, a line each.
std::string said() {
  std::lock_guard lock(seen().mu);
  std::string out;
  for (const auto& l : seen().lines) out += l.text + "\n";
  return out;
}

TEST(Spmd, EveryRankRunsTheProgramWithTorchrunsEnvironmentAndAFailingRankIsReported) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  SpmdOptions o;
  o.argv = {"sh", "-c",
            "echo spmd rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE "
            "master=$MASTER_ADDR:$MASTER_PORT extra=$EXTRA; [ $RANK != 2 ] || exit 3"};
  o.env = {"EXTRA=yes"};
  o.master_port = 29511;
  EXPECT_EQ(run_spmd(procs, o).get(std::chrono::seconds(60)), (std::vector<int>{0, 0, 3}));
  for (int r = 0; r < 3; ++r) {
    const std::string line = "spmd rank=" + std::to_string(r) +
                             " world=3 local=" + std::to_string(r) +
                             "/3 master=127.0.0.1:29511 extra=yes";
    EXPECT_TRUE(seen().wait_for([&](Seen& s) { return printed(s, line); })) << line;
  }
  // Rank 2's failure reached the controller's supervision, naming the program and its status.
  EXPECT_TRUE(seen().wait_for([](Seen& s) {
    return failure_named(s, "the SPMD program sh exited with status 3 on rank 2");
  }));
  procs.stop().get();
}

TEST(Spmd, AProgramThatIsNotThereIsAnErrorSayingSo) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 1}});
  SpmdOptions o;
  o.argv = {"no-such-program-baton"};
  try {
    (void)run_spmd(procs, o).get(std::chrono::seconds(60));
    ADD_FAILURE() << "a program that is not there ran";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot run no-such-program-baton"));
  }
  procs.stop().get();
}

TEST(Spmd, ATorchDistributedScriptAllReducesOverGloo) {
  ProcMesh procs = this_host().spawn_procs({{"procs", 3}});
  SpmdOptions o;
  o.argv = {"/usr/bin/python3", "-c",  // Debian's, whose python3-torch this is
            "import torch, torch.distributed as dist\n"
            "dist.init_process_group('gloo')\n"
            "t = torch.tensor([float(dist.get_rank() + 1)])\n"
            "dist.all_reduce(t)\n"
            "print(f'torch rank {dist.get_rank()} of {dist.get_world_size()} sum {t.item()}', "
            "flush=True)\n"
            "dist.destroy_process_group()\n"};
  EXPECT_EQ(run_spmd(procs, o).get(std::chrono::seconds(240)), (std::vector<int>{0, 0, 0}))
      << "is python3-torch installed? (make deps installs it) The ranks said:\n"
      << said();
  for (int r = 0; r < 3; ++r) {
    const std::string line = "torch rank " + std::to_string(r) + " of 3 sum 6.0";
    EXPECT_TRUE(seen().wait_for([&](Seen& s) { return printed(s, line); })) << line;
  }
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::test::run_hosts_test(argc, argv);
}
