// SlurmJob against a real Slurm: a one-node cluster on loopback that the test starts itself
// (slurm_cluster.test.hpp). Needs root, slurm-wlm and munge (make deps).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "host/children.test.hpp"
#include "host/hosts.test.hpp"
#include "launch/command.hpp"
#include "launch/slurm_cluster.test.hpp"

namespace baton {
namespace {

using test::eventually;
using test::Member;
using test::must;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

/// The cluster, started once for the tests of this binary.
test::SlurmCluster& cluster() {
  static test::SlurmCluster c;
  return c;
}

job::SlurmOptions options(int port) {
  job::SlurmOptions o;
  o.agent = BATON_HOST_BIN;
  o.agent_port = static_cast<std::uint16_t>(port);
  o.partition = "debug";
  o.time = "10:00";
  return o;
}

/// The files srun --bcast left in /tmp for jobs of this controller (none: each agent removes
/// its copy once it runs).
std::size_t copies_left() {
  std::size_t n = 0;
  const std::string mine = "baton-host-baton-" + std::to_string(::getpid()) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/tmp")) {
    if (e.path().filename().string().starts_with(mine)) ++n;
  }
  return n;
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    try {
      (void)cluster();
    } catch (const std::exception& e) {
      FAIL() << "cannot start a one-node Slurm cluster (this test needs root, slurm-wlm and "
                "munge): "
             << e.what();
    }
  }
};

TEST_F(Slurm, AJobAllocatesANodeSpawnsThereAnswersAndLeavesNothingQueued) {
  {
    job::SlurmJob job(Runtime::get(), options(17150));
    HostMesh hosts = job.hosts();
    EXPECT_EQ(hosts.shape(), Shape::of({{"hosts", 1}}));
    ASSERT_FALSE(job.id().empty());
    EXPECT_THAT(test::SlurmCluster::queue(), HasSubstr(job.id() + " RUNNING"));
    ProcMesh procs = hosts.spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 1}, {"gpus", 2}}));
    auto members = procs.spawn<Member>("members");
    EXPECT_EQ(members.call(&Member::twice, 21).get().values(), (std::vector<int>{42, 42}));
    EXPECT_EQ(copies_left(), 0u) << "the agent's copy in /tmp was left behind";
    procs.stop().get();
  }  // the job is cancelled
  EXPECT_TRUE(test::SlurmCluster::drains(std::chrono::seconds(30))) << test::SlurmCluster::queue();
}

TEST_F(Slurm, NoSuchPartitionIsAnErrorInSlurmsWordsWithWhatToDo) {
  auto o = options(17151);
  o.partition = "nosuch";
  job::SlurmJob job(Runtime::get(), o);
  try {
    (void)job.hosts();
    ADD_FAILURE() << "a partition Slurm does not have was accepted";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("Invalid partition name specified"));
    EXPECT_THAT(e.what(), HasSubstr("sinfo"));
  }
  EXPECT_TRUE(test::SlurmCluster::drains(std::chrono::seconds(30))) << test::SlurmCluster::queue();
}

TEST_F(Slurm, NodesThatNeverComeAreAnErrorWithSlurmsReasonAndTheJobIsCancelled) {
  auto o = options(17152);
  o.nodes = 2;  // the cluster has one: Slurm queues the job and waits
  o.wait = std::chrono::seconds(5);
  job::SlurmJob job(Runtime::get(), o);
  try {
    (void)job.hosts();
    ADD_FAILURE() << "a job for more nodes than there are started";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("PENDING"));
    EXPECT_THAT(e.what(), HasSubstr("PartitionNodeLimit"));
    EXPECT_THAT(e.what(), HasSubstr("cancelled"));
  }
  EXPECT_TRUE(test::SlurmCluster::drains(std::chrono::seconds(30))) << test::SlurmCluster::queue();
}

TEST_F(Slurm, AControllerThatDiesLeavesNoJobNoAgentAndNoProc) {
  // A controller of its own, in a child process: it allocates, spawns, prints the job id and
  // its workers' pids, and is killed.
  auto env = test::environment({"BATON_TEST_SLURM_CONTROLLER="});
  env.push_back("BATON_TEST_SLURM_CONTROLLER=17153");
  const test::SelfChild controller = test::start_self("doomed-controller", env, STDOUT_FILENO);
  FILE* from = ::fdopen(controller.from, "r");
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, from), nullptr) << "the controller said nothing";
  std::fclose(from);
  std::istringstream in(line);
  std::string word;
  std::string id;
  in >> word >> id;
  ASSERT_EQ(word, "job");
  std::vector<int> pids;
  in >> word;
  for (int pid = 0; in >> pid;) pids.push_back(pid);
  ASSERT_EQ(pids.size(), 2u);
  EXPECT_THAT(test::SlurmCluster::queue(), HasSubstr(id + " RUNNING"));
  ::kill(controller.pid, SIGKILL);
  ::waitpid(controller.pid, nullptr, 0);
  // The agent's link to it closes for good within its reconnect bound (5 s); it stops its
  // procs and exits, which ends the step, srun, and the allocation.
  EXPECT_TRUE(test::SlurmCluster::drains(std::chrono::seconds(90))) << test::SlurmCluster::queue();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (int pid : pids) {
    EXPECT_TRUE(test::ends_by(pid, deadline)) << "worker " << pid << " outlived its controller";
  }
}

// The README's way to keep an allocation across runs of the controller: agents started by a
// batch job of the user's own, attached from the file made from what they print.
TEST_F(Slurm, AnAllocationOfTheUsersOwnIsAttachedFromTheFileItsAgentsLeave) {
  test::TempDir dir;
  const std::string out = (dir.path / "job.out").string();
  const std::string id =
      must({"sbatch", "--parsable", "-N1", "-t", "10:00", "-o", out, "--wrap",
            std::string("srun --ntasks-per-node=1 ") + BATON_HOST_BIN + " --credentials " +
                test::credentials().string() + " --port 17154"});
  std::string said;
  ASSERT_TRUE(eventually(
      [&] {
        said = internal::file_text(out);
        return said.find("tcp://") != std::string::npos;
      },
      std::chrono::seconds(60)))
      << "the batch job's agent said: " << said << test::SlurmCluster::queue();
  const std::string address = said.substr(said.find("tcp://") + 6);
  std::ofstream((dir.path / "job.hosts").string()) << address.substr(0, address.find('\n')) << "\n";
  {
    ProcMesh procs = job::attach_file((dir.path / "job.hosts").string()).spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.spawn<Member>("kept").call(&Member::twice, 3).get().values(),
              (std::vector<int>{6, 6}));
    procs.stop().get();
  }
  must({"scancel", id.substr(0, id.find('\n'))});
  EXPECT_TRUE(test::SlurmCluster::drains(std::chrono::seconds(30))) << test::SlurmCluster::queue();
}

void run_doomed_controller(int port) {
  job::SlurmJob job(Runtime::get(), options(port));
  ProcMesh procs = job.hosts().spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("doomed");
  std::string said = "job " + job.id() + " pids";
  for (int pid : members.call(&Member::pid).get().values()) said += " " + std::to_string(pid);
  std::printf("%s\n", said.c_str());
  std::fflush(stdout);
  for (;;) ::pause();  // until killed
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (const char* port = std::getenv("BATON_TEST_SLURM_CONTROLLER")) {
    return baton::test::run_hosts_test(argc, argv,
                                       [port] { baton::run_doomed_controller(std::atoi(port)); });
  }
  return baton::test::run_hosts_test(argc, argv);
}
