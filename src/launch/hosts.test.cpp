// Procs on other hosts, through their agents (baton-host). Each "host" here is an agent of its
// own on this machine, at its own port; the network-namespace test gives each its own address.
// This binary is the controller and its own worker.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "host/children.test.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using test::Agent;
using test::failure_named;
using test::Member;
using test::seen;
using test::Seen;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(Hosts, AnAgentSaysWhoItIsAndWhereItServes) {
  Agent a(17071);
  EXPECT_EQ(a.said(), "baton-host: host-127.0.0.1-17071 serving at tcp://127.0.0.1:17071\n");
}

TEST(Hosts, AttachingToAnAddressWhereNoAgentServesSaysSoNamingIt) {
  // Nothing listens at this port: refused at once. (An address that drops packets is bounded by
  // LinkOptions::dead_after: see the namespace tests.)
  try {
    (void)job::attach({"127.0.0.1:17099"});
    ADD_FAILURE() << "attached to nothing";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:17099"));
    EXPECT_THAT(e.what(), HasSubstr("cannot connect"));
  }
  EXPECT_THROW((void)job::attach({"unix:///tmp/nothing.sock"}), UsageError);
  try {
    (void)job::attach({"no-such-host.invalid:7070"});
    ADD_FAILURE() << "attached to a host name that does not resolve";
  } catch (const std::exception& e) {
    EXPECT_THAT(e.what(), HasSubstr("no-such-host.invalid:7070"));
  }
  EXPECT_THROW((void)job::attach({}), UsageError);
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

TEST(Hosts, AHostNamedByANameIsTheAgentAtTheAddressItResolvesTo) {
  Agent a(17087);
  ProcMesh procs = job::attach({"localhost:17087"}).spawn_procs({{"gpus", 1}});
  EXPECT_EQ(procs.spawn<Member>("named").call(&Member::twice, 9).get().values(),
            std::vector<int>{18});
  procs.stop().get();
}

TEST(Hosts, AJobsHostsSavedToAFileAreAttachedAgainByALaterRun) {
  Agent a(17084);
  Agent b(17085);
  test::TempDir dir;
  const std::string file = (dir.path / "job").string();
  job::save(job::attach({a.address(), b.address()}), file);
  EXPECT_THROW(job::save(this_host(), file + "2"), UsageError);
  EXPECT_THROW(job::attach_file(file + "2"), UsageError);
  // A later run: the same hosts, from the file.
  HostMesh again = job::attach_file(file);
  EXPECT_EQ(again.shape(), Shape::of({{"hosts", 2}}));
  ProcMesh procs = again.spawn_procs({{"gpus", 1}});
  EXPECT_EQ(procs.spawn<Member>("kept").call(&Member::twice, 7).get().values(),
            (std::vector<int>{14, 14}));
  procs.stop().get();
}

TEST(Hosts, AHostGetsTheProgramOnceAndNeverRunsACorruptedCopy) {
  Agent a(17081);
  HostMesh hosts = job::attach({a.address()});
  const auto size = std::filesystem::file_size("/proc/self/exe");
  const auto fetched = [&] { return a.ref().call(&internal::HostAgent::bytes_fetched).get(); };
  EXPECT_EQ(fetched(), 0u);
  // An empty cache: the program travels.
  ProcMesh first = hosts.spawn_procs({{"gpus", 1}});
  EXPECT_EQ(first.spawn<Member>("first").call(&Member::twice, 1).get().values(),
            std::vector<int>{2});
  EXPECT_EQ(fetched(), size);
  const auto hash = internal::sha256_file("/proc/self/exe");
  ASSERT_TRUE(hash);
  const auto cached = a.cache_dir() / *hash;
  EXPECT_EQ(internal::sha256_file(cached), hash);
  // The same bytes cached: nothing moves.
  ProcMesh second = hosts.spawn_procs({{"gpus", 1}});
  EXPECT_EQ(second.spawn<Member>("second").call(&Member::twice, 2).get().values(),
            std::vector<int>{4});
  EXPECT_EQ(fetched(), size);
  // A cached copy that changed fails its check: it is replaced, never run. (While a worker
  // runs it, the kernel lets nobody write it.)
  second.stop().get();
  first.stop().get();
  {
    std::FILE* f = std::fopen(cached.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    std::fseek(f, static_cast<long>(size / 2), SEEK_SET);
    std::fputs("corrupted", f);
    std::fclose(f);
  }
  ProcMesh third = hosts.spawn_procs({{"gpus", 1}});
  EXPECT_EQ(third.spawn<Member>("third").call(&Member::twice, 3).get().values(),
            std::vector<int>{6});
  EXPECT_EQ(fetched(), 2 * size);
  EXPECT_EQ(internal::sha256_file(cached), hash);
  third.stop().get();
}

TEST(Hosts, ACacheKeepsNoBytesThatDoNotMatchTheirHash) {
  test::TempDir dir;
  internal::FileCache cache(dir.path);
  const std::string bytes = "#!/bin/sh\necho not what it claims\n";
  const std::string claimed(64, 'a');
  try {
    cache.add(claimed, bytes);
    ADD_FAILURE() << "bytes that do not match their hash were kept";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not kept"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path / claimed));
  std::string why;
  EXPECT_FALSE(cache.find(claimed, why));
  EXPECT_EQ(why, "not in the cache");
  // The right hash: kept, and found.
  const auto real = [&] {
    std::ofstream(dir.path / "probe") << bytes;
    return *internal::sha256_file(dir.path / "probe");
  }();
  EXPECT_EQ(cache.add(real, bytes), dir.path / real);
  EXPECT_TRUE(cache.find(real, why));
}

TEST(Hosts, AnAgentRefusesBadSpawnsAndGarbageAndGoesOn) {
  Agent a(17082);
  HostMesh hosts = job::attach({a.address()});
  ProcMesh procs = hosts.spawn_procs({{"gpus", 1}});  // the controller's client is there
  internal::HostSpawn spec;
  spec.mesh = "bad";
  spec.dims = {{"gpus", 1}};
  spec.executable = "/bin/sh";
  spec.client = ActorId{Runtime::get().proc().id(), "hosts", 0};
  // Not a hash at all.
  spec.executable_hash = "../../bin/sh";
  try {
    a.ref().call(&internal::HostAgent::spawn_procs, spec).get();
    ADD_FAILURE() << "a spawn of a path, not a hash, was accepted";
  } catch (const ActorError& e) {
    EXPECT_THAT(e.remote_message(), HasSubstr("not a SHA-256"));
  }
  // A hash whose bytes nobody ships (this controller ships only its own program).
  spec.executable_hash = std::string(64, 'a');
  spec.executable_size = 100;
  try {
    a.ref().call(&internal::HostAgent::spawn_procs, spec).get();
    ADD_FAILURE() << "a spawn of a program nobody shipped was accepted";
  } catch (const ActorError& e) {
    EXPECT_THAT(e.remote_message(), HasSubstr("ships only its own program"));
  }
  // A client that is not there: the fetch fails, it does not wait.
  spec.client = ActorId{Runtime::get().proc().id(), "nobody", 0};
  try {
    a.ref().call(&internal::HostAgent::spawn_procs, spec).get(std::chrono::seconds(30));
    ADD_FAILURE() << "a spawn whose client is not there was accepted";
  } catch (const ActorError& e) {
    EXPECT_THAT(e.remote_message(), HasSubstr("nobody"));
  }
  // Garbage on its port, and a peer that does not hold the secret.
  for (const std::string& junk :
       {std::string("GET / HTTP/1.1\r\n\r\n"), std::string(4096, '\xff')}) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(17082);
    ::inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
    (void)::write(fd, junk.data(), junk.size());
    char buf[64];
    (void)::read(fd, buf, sizeof buf);  // until it hangs up on us
    ::close(fd);
  }
  // It goes on.
  EXPECT_THAT(a.ref().call(&internal::HostAgent::hello).get(), HasSubstr("host-127.0.0.1-17082"));
  ProcMesh more = hosts.spawn_procs({{"gpus", 1}});
  EXPECT_EQ(more.spawn<Member>("after").call(&Member::twice, 5).get().values(),
            std::vector<int>{10});
  more.stop().get();
  procs.stop().get();
}

TEST(Hosts, ASpawnThatFailsOnOneHostStopsWhatTheOthersStarted) {
  Agent a(17088);
  Agent b(17089);
  HostMesh hosts = job::attach({a.address(), b.address()});
  b.kill();  // the spawn cannot reach it
  EXPECT_ANY_THROW(hosts.spawn_procs({{"gpus", 2}}));
  // Host a started its part; it is stopped, not left to run until this controller ends.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int pid : test::children(a.pid())) {
    EXPECT_TRUE(test::ends_by(pid, deadline))
        << "worker " << pid << " of a failed spawn still runs on host a";
  }
}

TEST(Hosts, AWorkersLinesReachTheControllerNamingItsHost) {
  Agent a(17074);
  Agent b(17075);
  ProcMesh procs = job::attach({a.address(), b.address()}).spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("talkers");
  members.slice({{"hosts", 1}, {"gpus", 0}}).call_one(&Member::say, "hello from host 1").get();
  ASSERT_TRUE(seen().wait_for([](Seen& s) {
    for (const auto& l : s.lines) {
      if (l.text == "hello from host 1") return true;
    }
    return false;
  })) << "the line never reached the controller";
  {
    std::lock_guard lock(seen().mu);
    for (const auto& l : seen().lines) {
      if (l.text != "hello from host 1") continue;
      EXPECT_THAT(l.mesh, HasSubstr(" hosts=1"));  // the proc mesh, on host 1
      EXPECT_EQ(l.ranks, std::vector<std::size_t>{0});
    }
  }
  procs.stop().get();
}

TEST(Hosts, AWorkerKilledOnAnotherHostIsReportedAndItsCallsFail) {
  Agent a(17076);
  Agent b(17077);
  ProcMesh procs = job::attach({a.address(), b.address()}).spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("victims");
  const int pid = members.slice({{"hosts", 1}, {"gpus", 1}}).call_one(&Member::pid).get();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  ASSERT_TRUE(seen().wait_for([](Seen& s) { return failure_named(s, "victims"); }))
      << "no supervision event";
  {
    std::lock_guard lock(seen().mu);
    bool named = false;
    for (const auto& f : seen().failures) {
      if (f.mesh != "victims") continue;
      named = true;
      EXPECT_EQ(f.rank, 3);
      EXPECT_THAT(f.message, HasSubstr("SIGKILL"));
    }
    EXPECT_TRUE(named);
  }
  EXPECT_THROW(members.slice({{"hosts", 1}, {"gpus", 1}}).call_one(&Member::twice, 1).get(),
               SupervisionError);
  EXPECT_EQ(members.slice("hosts", 0).call(&Member::twice, 3).get().values(),
            (std::vector<int>{6, 6}));
  procs.stop().get();
}

TEST(Hosts, AHostWhoseAgentDiesIsReportedAndNoCallHangs) {
  Agent a(17078);
  Agent b(17079);
  ProcMesh procs = job::attach({a.address(), b.address()}).spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("stranded");
  b.kill();  // SIGKILL: its workers die with it
  ASSERT_TRUE(seen().wait_for([](Seen& s) { return failure_named(s, "stranded"); }))
      << "no supervision event";
  // Calls to the lost host's members fail; none hangs.
  for (std::size_t g = 0; g < 2; ++g) {
    EXPECT_ANY_THROW(members.slice({{"hosts", 1}, {"gpus", g}})
                         .call_one(&Member::twice, 1)
                         .get(std::chrono::seconds(30)));
  }
  EXPECT_EQ(members.slice("hosts", 0).call(&Member::twice, 4).get().values(),
            (std::vector<int>{8, 8}));
  procs.stop().get();
}

// Hosts lost with several procs each: the controller learns of each proc's loss from its link
// and of the host's from its agent's, in either order. Nothing of it may hold the controller's
// I/O thread (a wait there for a report that only that thread can deliver stalled it 2 s per
// proc, its heartbeats stopped, and the controller's own local procs took it for dead).
TEST(Hosts, LosingHostsOfManyProcsLeavesTheLocalProcsServed) {
  Agent a(17091);
  Agent b(17092);
  ProcMesh remote = job::attach({a.address(), b.address()}).spawn_procs({{"gpus", 3}});
  auto stranded = remote.spawn<Member>("many-stranded");
  ProcMesh local = this_host().spawn_procs({{"procs", 2}});
  auto near = local.spawn<Member>("near");
  ASSERT_EQ(near.call(&Member::twice, 1).get().values(), (std::vector<int>{2, 2}));
  a.kill();
  b.kill();
  auto lost = [](Seen& s) {
    std::size_t n = 0;
    for (const auto& f : s.failures) n += f.to_string().find("many-stranded") != std::string::npos;
    return n;
  };
  ASSERT_TRUE(seen().wait_for([&](Seen& s) { return lost(s) >= 6; }, std::chrono::seconds(120)))
      << "not every member of the lost hosts was reported";
  // Every loss was handled: had the controller stalled on them, its local procs' links would
  // have gone silent past their deadline (5 s) meanwhile, and those procs would have ended.
  EXPECT_EQ(near.call(&Member::twice, 2).get(std::chrono::seconds(30)).values(),
            (std::vector<int>{4, 4}));
  {
    std::lock_guard lock(seen().mu);
    EXPECT_FALSE(failure_named(seen(), "near")) << "a local proc was lost with the hosts";
  }
  local.stop().get();
}

class ControllerDeath : public ::testing::TestWithParam<bool> {};

// Without --once the agent stays for the next controller; with it, it exits too.
TEST_P(ControllerDeath, AnAgentStopsTheProcsOfAControllerThatDied) {
  const bool once = GetParam();
  Agent a(once ? 17086 : 17080, "127.0.0.1", "",
          once ? std::vector<std::string>{"--once"} : std::vector<std::string>{});
  // A controller of its own, in a child process: it spawns procs on the agent, prints their
  // pids, and is killed.
  auto env = test::environment({"BATON_TEST_HOSTS_CONTROLLER="});
  env.push_back("BATON_TEST_HOSTS_CONTROLLER=" + a.address());
  const test::SelfChild controller = test::start_self("doomed-controller", env, STDOUT_FILENO);
  FILE* from = ::fdopen(controller.from, "r");
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, from), nullptr) << "the controller said nothing";
  std::fclose(from);
  std::vector<int> pids;
  {
    std::istringstream in(line);
    std::string word;
    in >> word;
    ASSERT_EQ(word, "pids");
    int pid = 0;
    while (in >> pid) pids.push_back(pid);
  }
  ASSERT_EQ(pids.size(), 2u);
  ::kill(controller.pid, SIGKILL);
  ::waitpid(controller.pid, nullptr, 0);
  // The agent's link to it closes for good within LinkOptions::reconnect_for (5 s), and the
  // agent stops its procs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int pid : pids) {
    EXPECT_TRUE(test::ends_by(pid, deadline)) << "worker " << pid << " outlived its controller";
  }
  if (once) {
    EXPECT_TRUE(a.wait_exit(std::chrono::seconds(60))) << "a --once agent outlived its controller";
  } else {
    // It serves the next controller.
    ProcMesh next = job::attach({a.address()}).spawn_procs({{"gpus", 1}});
    EXPECT_EQ(next.spawn<Member>("next").call(&Member::twice, 2).get().values(),
              std::vector<int>{4});
    next.stop().get();
  }
}

INSTANTIATE_TEST_SUITE_P(Agents, ControllerDeath, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "Once" : "Staying"; });

// An agent a job started for its controller (--once) ends with that controller: it refuses
// another, whose procs it would take with it, and goes on serving the first.
TEST(Hosts, AnAgentForOneControllerRefusesAnother) {
  Agent a(17090, "127.0.0.1", "", {"--once"});
  ProcMesh mine = job::attach({a.address()}).spawn_procs({{"gpus", 1}});
  auto members = mine.spawn<Member>("mine");
  auto env = test::environment({"BATON_TEST_HOSTS_REFUSED="});
  env.push_back("BATON_TEST_HOSTS_REFUSED=" + a.address());
  const test::SelfRun other = test::run_self("refused-controller", env, STDOUT_FILENO);
  EXPECT_THAT(other.text, HasSubstr("refused: "));
  EXPECT_THAT(other.text, HasSubstr("alone (baton-host --once"));
  EXPECT_THAT(other.text, Not(HasSubstr("served")));
  EXPECT_EQ(members.call(&Member::twice, 4).get().values(), (std::vector<int>{8}));
  mine.stop().get();
}

TEST(Hosts, TwoControllersShareOneAgent) {
  Agent a(17083);
  ProcMesh mine = job::attach({a.address()}).spawn_procs({{"gpus", 2}});
  auto members = mine.spawn<Member>("mine");
  // Another controller, in a process of its own, uses the same agent meanwhile.
  auto env = test::environment({"BATON_TEST_HOSTS_SECOND="});
  env.push_back("BATON_TEST_HOSTS_SECOND=" + a.address());
  const test::SelfRun other = test::run_self("second-controller", env, STDOUT_FILENO);
  EXPECT_TRUE(WIFEXITED(other.status) && WEXITSTATUS(other.status) == 0) << other.text;
  EXPECT_THAT(other.text, HasSubstr("second controller: 42 42"));
  EXPECT_EQ(members.call(&Member::twice, 4).get().values(), (std::vector<int>{8, 8}));
  mine.stop().get();
}

/// Handles that the controller of HandlesThatOutliveTheRuntimeAreInert keeps past its runtime,
/// as a program's globals are: destroyed at exit, after main's runtime closed. Its hosts are
/// used then, and must refuse saying why.
struct Outliving {
  std::optional<HostMesh> hosts;
  std::optional<ProcMesh> procs;
  std::optional<ActorMesh<Member>> members;
  Outliving() = default;
  Outliving(const Outliving&) = delete;
  Outliving& operator=(const Outliving&) = delete;
  ~Outliving() {
    if (!hosts) return;
    try {
      (void)hosts->spawn_procs_async({{"gpus", 1}}).get();
      std::printf("spawned past the runtime\n");
    } catch (const UsageError& e) {
      std::printf("after the runtime: %s\n", e.what());
    }
    std::fflush(stdout);
  }
};
Outliving& outliving() {
  static Outliving kept;
  return kept;
}

TEST(Hosts, HandlesThatOutliveTheRuntimeAreInertAndTheProgramEnds) {
  Agent a(17089);
  auto env = test::environment({"BATON_TEST_HOSTS_OUTLIVE="});
  env.push_back("BATON_TEST_HOSTS_OUTLIVE=" + a.address());
  const test::SelfRun run = test::run_self("outliving-controller", env, STDOUT_FILENO);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.text;
  EXPECT_THAT(run.text, HasSubstr("kept 6 6 past the runtime"));
  EXPECT_THAT(run.text, HasSubstr("after the runtime: HostMesh: its baton::Runtime is gone"));
}

/// The controller of HandlesThatOutliveTheRuntimeAreInert: its proc mesh on the agent's host
/// and its actors are still held when its runtime closes.
void run_outliving_controller(const char* agent) {
  Outliving& kept = outliving();
  kept.hosts = job::attach({agent});
  kept.procs = kept.hosts->spawn_procs({{"gpus", 2}});
  kept.members = kept.procs->spawn<Member>("kept");
  std::string line = "kept";
  for (int v : kept.members->call(&Member::twice, 3).get().values()) {
    line += " " + std::to_string(v);
  }
  std::printf("%s past the runtime\n", line.c_str());
  std::fflush(stdout);
}

/// The other controller of TwoControllersShareOneAgent.
void run_second_controller(const char* agent) {
  ProcMesh procs = job::attach({agent}).spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("theirs");
  std::string line = "second controller:";
  for (int v : members.call(&Member::twice, 21).get().values()) line += " " + std::to_string(v);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  procs.stop().get();
}

/// A second controller that a --once agent must refuse: prints what it was told.
void run_refused_controller(const char* agent) {
  try {
    ProcMesh procs = job::attach({agent}).spawn_procs({{"gpus", 1}});
    std::printf("served\n");
    procs.stop().get();
  } catch (const std::exception& e) {
    std::printf("refused: %s\n", e.what());
  }
  std::fflush(stdout);
}

/// The controller that AnAgentStopsTheProcsOfAControllerThatDied kills.
void run_doomed_controller(const char* agent) {
  ProcMesh procs = job::attach({agent}).spawn_procs({{"gpus", 2}});
  auto members = procs.spawn<Member>("orphans");
  std::string line = "pids";
  for (int pid : members.call(&Member::pid).get().values()) line += " " + std::to_string(pid);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  for (;;) ::pause();
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  if (const char* agent = std::getenv("BATON_TEST_HOSTS_CONTROLLER")) {
    return baton::test::run_hosts_test(argc, argv,
                                       [agent] { baton::run_doomed_controller(agent); });
  }
  if (const char* agent = std::getenv("BATON_TEST_HOSTS_OUTLIVE")) {
    return baton::test::run_hosts_test(argc, argv,
                                       [agent] { baton::run_outliving_controller(agent); });
  }
  if (const char* agent = std::getenv("BATON_TEST_HOSTS_REFUSED")) {
    return baton::test::run_hosts_test(argc, argv,
                                       [agent] { baton::run_refused_controller(agent); });
  }
  if (const char* agent = std::getenv("BATON_TEST_HOSTS_SECOND")) {
    return baton::test::run_hosts_test(argc, argv,
                                       [agent] { baton::run_second_controller(agent); });
  }
  return baton::test::run_hosts_test(argc, argv);
}
