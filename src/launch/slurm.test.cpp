// SlurmJob against a real Slurm: a one-node cluster on loopback that the test starts itself
// (munged, slurmctld and slurmd from Debian's munge and slurm-wlm, their files in a temporary
// directory, stopped by their pids). Needs root and those packages (make deps).

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

namespace baton {
namespace {

using test::Member;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

/// A TCP port nothing on this host listens on now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(a.sin_port);
}

/// A daemon of the test's cluster: its output goes to `log`; stopped by its pid (SIGTERM, then
/// SIGKILL if it lingers).
class Daemon {
 public:
  Daemon(const std::vector<std::string>& argv, const std::filesystem::path& log) : log_(log) {
    posix_spawn_file_actions_t actions;
    ::posix_spawn_file_actions_init(&actions);
    ::posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    ::posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(),
                                       O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
    std::vector<std::string> words = argv;
    std::vector<char*> args;
    args.reserve(words.size() + 1);
    for (auto& w : words) args.push_back(w.data());
    args.push_back(nullptr);
    const int rc = ::posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), environ);
    ::posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw std::runtime_error("cannot run " + argv[0] + ": " + std::strerror(rc) +
                               " (make deps installs slurm-wlm and munge)");
    }
  }
  ~Daemon() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    pollfd p{fd, POLLIN, 0};
    if (fd < 0 || ::poll(&p, 1, 10000) != 1) ::kill(pid_, SIGKILL);
    if (fd >= 0) ::close(fd);
    ::waitpid(pid_, nullptr, 0);
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;
  /// Whether it is still running.
  bool running() const { return ::waitpid(pid_, nullptr, WNOHANG) == 0; }
  std::string log() const { return internal::file_text(log_.string()); }

 private:
  pid_t pid_ = -1;
  std::filesystem::path log_;
};

/// Runs `argv` to its end: what it printed, or throws with its words.
std::string must(const std::vector<std::string>& argv) {
  const internal::Ran r = internal::run_command(argv, argv[0]);
  if (!internal::succeeded(r)) {
    throw std::runtime_error(argv[0] + " failed: " + r.err + r.out);
  }
  return r.out;
}

/// Retries `probe` until it holds, for at most `limit`: for daemons the test starts, which say
/// nothing when they are ready.
template <class P>
bool eventually(P probe, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!probe()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

/// A one-node Slurm cluster on loopback, this host its node, with a partition "debug".
/// SLURM_CONF points at it while it runs, for srun, squeue and scancel.
class Cluster {
 public:
  Cluster() {
    std::filesystem::permissions(
        dir_.path, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                       std::filesystem::perms::group_exec | std::filesystem::perms::others_read |
                       std::filesystem::perms::others_exec);
    // munged, as the munge user: its socket in a directory all may enter, its key in one
    // only it may.
    const auto munge = dir_.path / "munge";
    std::filesystem::create_directories(munge / "private");
    must({"mungekey", "--create", "--keyfile=" + (munge / "private" / "key").string()});
    must({"chown", "-R", "munge:munge", munge.string()});
    must({"chmod", "0755", munge.string()});
    must({"chmod", "0700", (munge / "private").string()});
    must({"chmod", "0400", (munge / "private" / "key").string()});
    socket_ = (munge / "socket").string();
    munged_ = std::make_unique<Daemon>(
        std::vector<std::string>{"setpriv", "--reuid=munge", "--regid=munge", "--clear-groups",
                                 "munged", "--foreground", "--socket=" + socket_,
                                 "--key-file=" + (munge / "private" / "key").string(),
                                 "--pid-file=" + (munge / "private" / "pid").string(),
                                 "--log-file=" + (munge / "private" / "log").string(),
                                 "--seed-file=" + (munge / "private" / "seed").string()},
        dir_.path / "munged.out");
    if (!eventually(
            [&] {
              return internal::succeeded(
                  internal::run_command({"munge", "--socket=" + socket_, "--no-input"}, "munge"));
            },
            std::chrono::seconds(20))) {
      throw std::runtime_error("munged did not start: " + munged_->log());
    }
    // slurmctld and slurmd, as root, with this host (by its short name) the one node.
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    node_ = std::string(name).substr(0, std::string(name).find('.'));
    for (const char* d : {"state", "spool"}) std::filesystem::create_directories(dir_.path / d);
    conf_ = dir_.path / "slurm.conf";
    std::ofstream(conf_) << "ClusterName=batontest\nSlurmctldHost=" << node_
                         << "(127.0.0.1)\nSlurmUser=root\nSlurmdUser=root\n"
                         << "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket=" << socket_
                         << "\nSlurmctldPort=" << free_port() << "\nSlurmdPort=" << free_port()
                         << "\nStateSaveLocation=" << (dir_.path / "state").string()
                         << "\nSlurmdSpoolDir=" << (dir_.path / "spool").string()
                         << "\nSlurmctldPidFile=" << (dir_.path / "slurmctld.pid").string()
                         << "\nSlurmdPidFile=" << (dir_.path / "slurmd.pid").string()
                         << "\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
                            "SelectType=select/cons_tres\nSchedulerType=sched/backfill\n"
                            "ReturnToService=2\nMpiDefault=none\nKillWait=2\n"
                            "NodeName="
                         << node_ << " NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n"
                         << "PartitionName=debug Nodes=" << node_
                         << " Default=YES MaxTime=INFINITE State=UP\n";
    ::setenv("SLURM_CONF", conf_.c_str(), 1);
    slurmctld_ = std::make_unique<Daemon>(
        std::vector<std::string>{"slurmctld", "-D", "-L", (dir_.path / "slurmctld.log").string()},
        dir_.path / "slurmctld.out");
    slurmd_ = std::make_unique<Daemon>(
        std::vector<std::string>{"slurmd", "-D", "-L", (dir_.path / "slurmd.log").string()},
        dir_.path / "slurmd.out");
    if (!eventually(
            [&] {
              const auto r = internal::run_command({"sinfo", "-h", "-o", "%t"}, "sinfo");
              return internal::succeeded(r) && r.out.starts_with("idle");
            },
            std::chrono::seconds(60))) {
      throw std::runtime_error("the Slurm node did not come up: " +
                               internal::file_text((dir_.path / "slurmctld.log").string()) +
                               internal::file_text((dir_.path / "slurmd.log").string()));
    }
  }
  ~Cluster() {
    slurmd_.reset();
    slurmctld_.reset();
    munged_.reset();
    ::unsetenv("SLURM_CONF");
  }

  /// squeue's lines for all jobs ("id state reason"), empty when none is queued or running.
  static std::string queue() { return must({"squeue", "-h", "-o", "%i %T %r"}); }
  /// Waits (up to `limit`) for the queue to empty; says whether it did.
  static bool drains(std::chrono::seconds limit) {
    return eventually([] { return queue().empty(); }, limit);
  }

 private:
  test::TempDir dir_;
  std::string socket_;
  std::string node_;
  std::filesystem::path conf_;
  std::unique_ptr<Daemon> munged_;
  std::unique_ptr<Daemon> slurmctld_;
  std::unique_ptr<Daemon> slurmd_;
};

/// The cluster, started once for the tests of this binary.
Cluster& cluster() {
  static Cluster c;
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
    job::SlurmJob job(options(17150));
    HostMesh hosts = job.hosts();
    EXPECT_EQ(hosts.shape(), Shape::of({{"hosts", 1}}));
    ASSERT_FALSE(job.id().empty());
    EXPECT_THAT(Cluster::queue(), HasSubstr(job.id() + " RUNNING"));
    ProcMesh procs = hosts.spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 1}, {"gpus", 2}}));
    auto members = procs.spawn<Member>("members");
    EXPECT_EQ(members.call(&Member::twice, 21).get().values(), (std::vector<int>{42, 42}));
    EXPECT_EQ(copies_left(), 0u) << "the agent's copy in /tmp was left behind";
    procs.stop().get();
  }  // the job is cancelled
  EXPECT_TRUE(Cluster::drains(std::chrono::seconds(30))) << Cluster::queue();
}

TEST_F(Slurm, NoSuchPartitionIsAnErrorInSlurmsWordsWithWhatToDo) {
  auto o = options(17151);
  o.partition = "nosuch";
  job::SlurmJob job(o);
  try {
    (void)job.hosts();
    ADD_FAILURE() << "a partition Slurm does not have was accepted";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("Invalid partition name specified"));
    EXPECT_THAT(e.what(), HasSubstr("sinfo"));
  }
  EXPECT_TRUE(Cluster::drains(std::chrono::seconds(30))) << Cluster::queue();
}

TEST_F(Slurm, NodesThatNeverComeAreAnErrorWithSlurmsReasonAndTheJobIsCancelled) {
  auto o = options(17152);
  o.nodes = 2;  // the cluster has one: Slurm queues the job and waits
  o.wait = std::chrono::seconds(5);
  job::SlurmJob job(o);
  try {
    (void)job.hosts();
    ADD_FAILURE() << "a job for more nodes than there are started";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("PENDING"));
    EXPECT_THAT(e.what(), HasSubstr("PartitionNodeLimit"));
    EXPECT_THAT(e.what(), HasSubstr("cancelled"));
  }
  EXPECT_TRUE(Cluster::drains(std::chrono::seconds(30))) << Cluster::queue();
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
  EXPECT_THAT(Cluster::queue(), HasSubstr(id + " RUNNING"));
  ::kill(controller.pid, SIGKILL);
  ::waitpid(controller.pid, nullptr, 0);
  // The agent's link to it closes for good within its reconnect bound (5 s); it stops its
  // procs and exits, which ends the step, srun, and the allocation.
  EXPECT_TRUE(Cluster::drains(std::chrono::seconds(90))) << Cluster::queue();
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
      << "the batch job's agent said: " << said << Cluster::queue();
  const std::string address = said.substr(said.find("tcp://") + 6);
  std::ofstream((dir.path / "job.hosts").string()) << address.substr(0, address.find('\n')) << "\n";
  {
    ProcMesh procs = job::attach_file((dir.path / "job.hosts").string()).spawn_procs({{"gpus", 2}});
    EXPECT_EQ(procs.spawn<Member>("kept").call(&Member::twice, 3).get().values(),
              (std::vector<int>{6, 6}));
    procs.stop().get();
  }
  must({"scancel", id.substr(0, id.find('\n'))});
  EXPECT_TRUE(Cluster::drains(std::chrono::seconds(30))) << Cluster::queue();
}

void run_doomed_controller(int port) {
  job::SlurmJob job(options(port));
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
