// Procs on other hosts, through their agents (baton-host). Each "host" here is an agent of its
// own on this machine, at its own port; the network-namespace test gives each its own address.
// This binary is the controller and its own worker.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "baton/launch/job.hpp"
#include "host/runtime_impl.hpp"
#include "host/self_spawn.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

/// A temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "baton-hosts-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

/// The job's credentials, shared by this controller and its agents (set in main()).
std::filesystem::path& credentials() {
  static std::filesystem::path p;
  return p;
}

/// One baton-host process, stopped with SIGKILL when the test is done with it.
class Agent {
 public:
  explicit Agent(int port) {
    auto env = test::environment({"BATON_"});
    env.push_back("BATON_CREDENTIALS=" + credentials().string());
    child_ = test::start_self_as(BATON_HOST_BIN, "baton-host",
                                 {"--advertise", "127.0.0.1", "--port", std::to_string(port)},
                                 std::move(env), STDOUT_FILENO);
    out_ = ::fdopen(child_.from, "r");
    char line[256] = {};
    if (std::fgets(line, sizeof line, out_) == nullptr) {
      throw std::runtime_error("baton-host on port " + std::to_string(port) + " said nothing");
    }
    said_ = line;
    address_ = "127.0.0.1:" + std::to_string(port);
  }
  ~Agent() { kill(); }
  const std::string& address() const { return address_; }
  const std::string& said() const { return said_; }
  pid_t pid() const { return child_.pid; }
  void kill() {
    if (child_.pid > 0) {
      ::kill(child_.pid, SIGKILL);
      ::waitpid(child_.pid, nullptr, 0);
      child_.pid = -1;
    }
    if (out_ != nullptr) std::fclose(out_);
    out_ = nullptr;
  }

 private:
  test::SelfChild child_;
  FILE* out_ = nullptr;
  std::string said_;
  std::string address_;
};

class Member : public Actor {
 public:
  std::string where() { return id().proc.name + " " + context().point.to_string(); }
  int pid() { return static_cast<int>(::getpid()); }
  int twice(int x) { return 2 * x; }
  /// Calls another member, on whichever host it is.
  Task<int> ask(ActorRef<Member> other, int x) { co_return co_await other.call(&Member::twice, x); }
  int say(std::string text) {
    std::printf("%s\n", text.c_str());
    std::fflush(stdout);
    return 0;
  }
  static constexpr auto endpoints =
      baton::endpoints<&Member::where, &Member::pid, &Member::twice, &Member::ask, &Member::say>();
};

TEST(Hosts, AnAgentSaysWhoItIsAndWhereItServes) {
  Agent a(17071);
  EXPECT_EQ(a.said(), "baton-host: host-127.0.0.1-17071 serving at tcp://127.0.0.1:17071\n");
}

TEST(Hosts, ProcsOnTwoHostsAreOneMeshThatAnswersEveryVerb) {
  Agent a(17072);
  Agent b(17073);
  HostMesh hosts = job::attach({a.address(), b.address()});
  EXPECT_EQ(hosts.shape(), Shape::of({{"hosts", 2}}));
  ProcMesh procs = hosts.spawn_procs({{"gpus", 2}});
  EXPECT_EQ(procs.shape(), Shape::of({{"hosts", 2}, {"gpus", 2}}));
  auto members = procs.spawn<Member>("members");
  const auto where = members.call(&Member::where).get();
  ASSERT_EQ(where.size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    EXPECT_THAT(where[r], HasSubstr(".h" + std::to_string(r / 2) + "."));
    EXPECT_THAT(where[r], HasSubstr(members.shape().point(r).to_string()));
  }
  EXPECT_EQ(members.call(&Member::twice, 21).get().values(), std::vector<int>(4, 42));
  EXPECT_EQ(members.slice("hosts", 1).call(&Member::twice, 5).get().values(),
            (std::vector<int>{10, 10}));
  // A member on one host calls a member on the other, directly.
  EXPECT_EQ(
      members.slice({{"hosts", 0}, {"gpus", 1}}).call_one(&Member::ask, members.at(2), 8).get(),
      16);
  procs.stop().get();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  // The controller and its agents share the job's credentials (in a directory of the test's).
  if (std::getenv("BATON_PROC") == nullptr) {
    static baton::TempDir dir;
    baton::credentials() = dir.path / "credentials";
    baton::internal::make_credentials(baton::credentials());
    ::setenv("BATON_CREDENTIALS", baton::credentials().c_str(), 1);
  }
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
