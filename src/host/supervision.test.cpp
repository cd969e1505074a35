// Supervision across real processes: throws, constructor failures, processes that exit, crash
// or are killed, nested meshes owned by actors, orderly stop, undeliverable messages and
// respawn. This binary is its own worker: main() creates the Runtime first, which in a worker
// never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "baton/baton.hpp"
#include "host/children.test.hpp"
#include "host/self_spawn.test.hpp"
#include "host/supervision.test.hpp"

namespace baton {
[[noreturn]] void run_unsupervised_controller();
[[noreturn]] void run_oom_controller();
namespace {

using namespace std::chrono_literals;
using test::children;
using test::expect_member_died;
using test::kBound;
using test::Releaser;
using test::running;
using test::seen;
using test::Worker;
using ::testing::HasSubstr;
using ::testing::Not;

/// Hands out a port whose handler runs on this actor and refuses negative values.
class Listener : public Actor {
 public:
  Port<int> port() {
    return open_port<int>([](int v) {
      if (v < 0) throw std::runtime_error("negative value " + std::to_string(v));
    });
  }
  int alive() { return 1; }
  static constexpr auto endpoints = baton::endpoints<&Listener::port, &Listener::alive>();
};

/// Sends one-way messages and says what came back.
class Sender : public Actor {
 public:
  Sender(bool handle, Port<std::string> report) : handle_(handle), report_(std::move(report)) {}
  void poke(const ActorRef<Worker>& target) { target.send(&Worker::incr, 1); }
  int alive() { return 1; }
  bool handle_undeliverable(const Undeliverable& u) override {
    if (!handle_) return false;
    report_.send(std::string(to_string(u.reason)) + " | " + u.dest.to_string() + " | " + u.message);
    return true;
  }
  static constexpr auto endpoints = baton::endpoints<&Sender::poke, &Sender::alive>();

 private:
  bool handle_;
  Port<std::string> report_;
};

class Leaf : public Actor {
 public:
  int pid() { return static_cast<int>(::getpid()); }
  static constexpr auto endpoints = baton::endpoints<&Leaf::pid>();
};

/// An actor that owns a proc mesh of its own (controller -> Mid -> its leaves).
class Mid : public Actor {
 public:
  Mid(bool handle, Port<std::string> report) : handle_(handle), report_(std::move(report)) {}
  Task<std::vector<int>> start(int n) {
    auto procs = this_host().spawn_procs_async({{"leaves", static_cast<std::size_t>(n)}});
    procs_.emplace(co_await std::move(procs));
    leaves_ = co_await procs_->spawn_async<Leaf>("leaf");
    pids_ = (co_await leaves_.call(&Leaf::pid)).values();
    co_return pids_;
  }
  int alive() { return 1; }
  int pid() { return static_cast<int>(::getpid()); }
  bool supervise(const MeshFailure& f) override {
    report_.send("supervise: " + f.to_string());
    return handle_;
  }
  void on_stop() override {
    int running = 0;
    for (int pid : pids_) running += ::kill(pid, 0) == 0 ? 1 : 0;
    report_.send("mid stopped; leaves still running: " + std::to_string(running));
  }
  static constexpr auto endpoints = baton::endpoints<&Mid::start, &Mid::alive, &Mid::pid>();

 private:
  bool handle_;
  Port<std::string> report_;
  std::optional<ProcMesh> procs_;
  ActorMesh<Leaf> leaves_;
  std::vector<int> pids_;
};

TEST(Supervision, AnEndpointThrowFailsOnlyThatCallAndNamesTheActor) {
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto workers = procs.spawn<Worker>("thrower", -1);
  try {
    workers.call(&Worker::refuse, std::string("bad batch")).get();
    FAIL() << "expected ActorError";
  } catch (const ActorError& e) {
    EXPECT_EQ(e.remote_message(), "bad batch");
    EXPECT_THAT(e.endpoint(), HasSubstr("Worker::refuse"));
    EXPECT_THAT(e.actor(), ::testing::MatchesRegex("procs[0-9]+\\.0/thrower\\[0\\]"));
    EXPECT_EQ(e.where(), "rank 0 {gpus: 0}");
    EXPECT_THAT(e.what(), HasSubstr("(rank 0 {gpus: 0}) failed in "));
    EXPECT_THAT(e.what(), HasSubstr("Worker::refuse: bad batch"));
  }
  // The actors keep serving, and nothing reached the supervisor.
  EXPECT_EQ(workers.call(&Worker::value).get().values(), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(seen().count(), 0u);
  procs.stop().get();
}

TEST(Supervision, AOneWayThrowGoesToTheOwnerAndFailsThatRankOnly) {
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto workers = procs.spawn<Worker>("oneway", -1);
  workers.broadcast(&Worker::boom, 2);
  auto queued = workers.slice("gpus", 2).call_one(&Worker::value);  // behind the boom
  const MeshFailure f = seen().next();
  EXPECT_THAT(f.actor.to_string(), ::testing::MatchesRegex("procs[0-9]+\\.2/oneway\\[0\\]"));
  EXPECT_EQ(f.mesh, "oneway");
  EXPECT_EQ(f.rank, 2);
  EXPECT_THAT(f.message, HasSubstr("boom threw with no caller to tell: boom on rank 2"));
  try {
    queued.get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("boom on rank 2"));
  }
  EXPECT_THROW(workers.call(&Worker::value).get(), SupervisionError);
  EXPECT_EQ(workers.slice("gpus", 0, 2).call(&Worker::value).get().values(),
            (std::vector<int>{0, 0}));
  EXPECT_EQ(workers.slice("gpus", 3).call_one(&Worker::value).get(), 0);
  EXPECT_EQ(seen().count(), 0u);
  procs.stop().get();
}

TEST(Supervision, APortHandlerThrowGoesToTheOwner) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto listeners = procs.spawn<Listener>("listeners");
  const Port<int> port = listeners.slice("gpus", 1).call_one(&Listener::port).get();
  port.send(5);
  port.send(-3);
  const MeshFailure f = seen().next();
  EXPECT_EQ(f.mesh, "listeners");
  EXPECT_EQ(f.rank, 1);
  EXPECT_THAT(f.message, HasSubstr("port handler threw: negative value -3"));
  EXPECT_THROW(listeners.slice("gpus", 1).call_one(&Listener::alive).get(), SupervisionError);
  EXPECT_EQ(listeners.slice("gpus", 0).call_one(&Listener::alive).get(), 1);
  procs.stop().get();
}

TEST(Supervision, AConstructorThrowGoesToTheOwner) {
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  // The spawn completes: a constructor runs after its member is placed, and what it throws is
  // the owner's to hear, not the spawn's.
  auto workers = procs.spawn_async<Worker>("fragile", 1).get(kBound);
  const MeshFailure f = seen().next();
  EXPECT_EQ(f.mesh, "fragile");
  EXPECT_EQ(f.rank, 1);
  EXPECT_THAT(f.message, HasSubstr("constructor threw: cannot load shard 1"));
  try {
    workers.slice("gpus", 1).call_one(&Worker::value).get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cannot load shard 1"));
  }
  EXPECT_EQ(workers.slice("gpus", 2).call_one(&Worker::value).get(), 0);
  procs.stop().get();
}

TEST(Supervision, SpawningOnADeadProcFailsTheFutureWithItsDeath) {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto first = procs.spawn<Worker>("first", -1);
  ASSERT_EQ(::kill(first.slice("gpus", 1).call_one(&Worker::pid).get(), SIGKILL), 0);
  EXPECT_THAT(seen().next().message, HasSubstr("was killed by signal SIGKILL"));
  Future<ActorMesh<Worker>> second = procs.spawn_async<Worker>("second", -1);
  std::string async_error;
  try {
    (void)second.get(kBound);
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    async_error = e.what();
  }
  EXPECT_THAT(async_error, HasSubstr("was killed by signal SIGKILL"));
  try {
    (void)procs.spawn<Worker>("third", -1);
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_EQ(e.what(), async_error);
  }
  // The live proc still serves.
  EXPECT_EQ(first.slice("gpus", 0).call_one(&Worker::value).get(), 0);
  procs.stop().get();
}

struct Death {
  const char* name;
  int how;  // Worker::crash's argument, or -1: SIGKILL from outside while a call waits
  const char* report;
};

class ProcessDeath : public ::testing::TestWithParam<Death> {};

TEST_P(ProcessDeath, IsReportedToTheOwnerAndFailsPendingAndLaterCalls) {
  const Death d = GetParam();
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto workers = procs.spawn<Worker>("mortal", -1);
  auto rank1 = workers.slice("gpus", 1);
  const int pid = rank1.call_one(&Worker::pid).get();
  Future<int> pending =
      d.how < 0 ? rank1.call_one(&Worker::block) : rank1.call_one(&Worker::crash, d.how);
  const auto t0 = std::chrono::steady_clock::now();
  if (d.how < 0) {
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
  }
  try {
    pending.get();
    FAIL() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr(d.report));
    // Named only when the kernel says it acted, and here it did not.
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("out-of-memory")));
    EXPECT_THAT(e.what(), HasSubstr("rank 1"));
    EXPECT_THAT(e.what(), HasSubstr("pid " + std::to_string(pid)));
    if (d.how >= 0) {
      EXPECT_THAT(e.what(), HasSubstr("rank 1 going down"));  // its last words
    }
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s: death to failed future %.1f ms\n", d.name, ms);
  const MeshFailure f = seen().next();
  expect_member_died(f, "mortal", 1, "{gpus: 1}");
  EXPECT_THAT(f.message, HasSubstr(d.report));
  // Later calls touching it fail at once; slices without it keep working.
  EXPECT_THROW(rank1.call_one(&Worker::value).get(), SupervisionError);
  EXPECT_THROW(workers.call(&Worker::value).get(), SupervisionError);
  EXPECT_EQ(workers.slice("gpus", 0).call_one(&Worker::value).get(), 0);
  EXPECT_EQ(workers.slice("gpus", 2).call_one(&Worker::value).get(), 0);
  procs.stop().get();
  EXPECT_EQ(seen().count(), 0u);  // one event per death, none for the stop
}

INSTANTIATE_TEST_SUITE_P(Ways, ProcessDeath,
                         ::testing::Values(Death{"exit", 0, "exited with status 7"},
                                           Death{"segv", 1, "was killed by signal SIGSEGV"},
                                           Death{"abort", 2, "was killed by signal SIGABRT"},
                                           Death{"sigkill", -1,
                                                 "was killed by signal SIGKILL (Killed)"}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(Supervision, AProcsDeathIsReportedAsTheMemberOfEachUserMeshItHosted) {
  // Proc 3 hosts rank 1 of "trainer" (spawned on procs 2 and 3), rank 3 of "helpers", and
  // rank 3 of "gone", stopped before the death.
  auto procs = this_host().spawn_procs({{"gpus", 4}});
  auto trainer = procs.slice("gpus", 2, 4).spawn<Worker>("trainer", -1);
  auto helpers = procs.spawn<Worker>("helpers", -1);
  auto gone = procs.spawn<Worker>("gone", -1);
  gone.stop().get();
  const int pid = trainer.slice("gpus", 1).call_one(&Worker::pid).get();
  ASSERT_EQ(helpers.slice("gpus", 3).call_one(&Worker::pid).get(), pid);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // One event per live user mesh there, each naming that mesh's own member.
  const auto events = seen().next(2);
  expect_member_died(events[0], "helpers", 3, "{gpus: 3}");
  expect_member_died(events[1], "trainer", 1, "{gpus: 1}");
  for (const auto& f : events) {
    EXPECT_EQ(f.actor.proc, procs.proc(3));
    EXPECT_THAT(f.message, HasSubstr("its proc " + procs.proc(3).name + " (rank 3 of "));
    EXPECT_THAT(f.message, HasSubstr("pid " + std::to_string(pid) +
                                     ") was killed by signal "
                                     "SIGKILL"));
  }
  EXPECT_THROW(trainer.call(&Worker::value).get(kBound), SupervisionError);
  EXPECT_EQ(trainer.slice("gpus", 0).call_one(&Worker::value).get(kBound), 0);
  procs.stop().get();
  EXPECT_EQ(seen().count(), 0u);  // nothing for the stopped mesh, nor for the stop
}

TEST(Supervision, GetWithATimeoutOnAHungActorLeavesTheFutureUsable) {
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto workers = procs.spawn<Worker>("hung", -1);
  auto releasers = procs.spawn<Releaser>("releaser");
  Future<int> f = workers.call_one(&Worker::block);
  EXPECT_THROW(f.get(50ms), TimeoutError);
  EXPECT_FALSE(f.ready());
  releasers.call_one(&Releaser::release).get();
  EXPECT_EQ(f.get(), 0);
  procs.stop().get();
}

TEST(Supervision, TwentyKillsDuringABroadcastNeverHangAndLeaveNoProcess) {
  const std::size_t before = children().size();
  for (int run = 0; run < 20; ++run) {
    auto procs = this_host().spawn_procs({{"gpus", 4}});
    auto workers = procs.spawn<Worker>("victims", -1);
    auto releasers = procs.spawn<Releaser>("releasers");
    const std::size_t victim = static_cast<std::size_t>(run % 4);
    const int pid = workers.slice("gpus", victim).call_one(&Worker::pid).get();
    workers.broadcast(&Worker::incr, 1);
    Future<ValueMesh<int>> all = workers.call(&Worker::block);
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    for (std::size_t r = 0; r < 4; ++r) {
      if (r != victim) releasers.slice("gpus", r).broadcast(&Releaser::release);
    }
    try {
      all.get();
      FAIL() << "run " << run << ": expected SupervisionError";
    } catch (const SupervisionError& e) {
      EXPECT_THAT(e.what(), HasSubstr("rank " + std::to_string(victim) + " of"));
    }
    const std::string point = "{gpus: " + std::to_string(victim) + "}";
    const auto events = seen().next(2);  // one per actor mesh it hosted
    expect_member_died(events[0], "releasers", static_cast<std::int64_t>(victim), point);
    expect_member_died(events[1], "victims", static_cast<std::int64_t>(victim), point);
    procs.stop().get();
    EXPECT_EQ(children().size(), before) << "run " << run << " left a process behind";
  }
}

TEST(Supervision, ANestedFailureClimbsToTheControllerWithItsChain) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto mid = procs.spawn<Mid>("mid", false, port);
  const std::vector<int> leaves = mid.call_one(&Mid::start, 2).get();
  ASSERT_EQ(leaves.size(), 2u);
  ASSERT_EQ(::kill(leaves[1], SIGKILL), 0);
  EXPECT_THAT(reports.recv(kBound), HasSubstr("was killed by signal SIGKILL"));  // Mid saw it
  const MeshFailure f = seen().next();
  EXPECT_EQ(f.mesh, "mid");
  EXPECT_EQ(f.rank, 0);
  EXPECT_THAT(f.actor.to_string(), ::testing::MatchesRegex("procs[0-9]+\\.0/mid\\[0\\]"));
  EXPECT_THAT(f.message, HasSubstr("did not handle the failure of procs"));
  ASSERT_EQ(f.causes.size(), 1u);
  // Mid heard of its own mesh's member, not of the runtime's agent in the dead proc.
  EXPECT_THAT(
      f.causes[0],
      ::testing::MatchesRegex("procs[0-9]+\\.0-procs0\\.1/leaf\\[0\\] \\(rank 1 of mesh 'leaf'\\): "
                              "member \\{leaves: 1\\} lost: its proc procs[0-9]+\\.0-procs0\\.1 "
                              "\\(rank 1 of procs[0-9]+\\.0-procs0, pid [0-9]+\\) was killed by "
                              "signal SIGKILL(.|\n)*"));
  EXPECT_THAT(f.to_string(), HasSubstr("\n  because procs"));
  EXPECT_THROW(mid.call_one(&Mid::alive).get(), SupervisionError);
  procs.stop().get();
  // The failed owner's own procs went with it.
  EXPECT_FALSE(running(leaves[0]));
}

TEST(Supervision, AFailureHandledOneLevelDownNeverReachesTheController) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto mid = procs.spawn<Mid>("mid", true, port);
  const std::vector<int> leaves = mid.call_one(&Mid::start, 2).get();
  ASSERT_EQ(::kill(leaves[0], SIGKILL), 0);
  EXPECT_THAT(reports.recv(kBound), HasSubstr("rank 0 of mesh"));
  // Handled: the owner is alive and the controller heard nothing.
  EXPECT_EQ(mid.call_one(&Mid::alive).get(), 1);
  EXPECT_EQ(seen().count(), 0u);
  // Stop is orderly: the meshes Mid owns were stopped before Mid's own on_stop ran.
  procs.stop().get();
  EXPECT_EQ(reports.recv(kBound), "mid stopped; leaves still running: 0");
  EXPECT_FALSE(running(leaves[1]));
  EXPECT_EQ(seen().count(), 0u);
}

TEST(Supervision, WhenAnOwnersProcessDiesTheProcsItStartedGoWithIt) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto mid = procs.spawn<Mid>("mid", true, port);
  const std::vector<int> leaves = mid.call_one(&Mid::start, 2).get();
  std::vector<int> pidfds;
  for (int pid : leaves) {
    pidfds.push_back(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
    ASSERT_GE(pidfds.back(), 0);
  }
  ASSERT_EQ(::kill(mid.call_one(&Mid::pid).get(), SIGKILL), 0);
  for (int fd : pidfds) {
    pollfd p{fd, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kBound).count())), 1)
        << "a leaf outlived the worker that started it";
    ::close(fd);
  }
  const MeshFailure f = seen().next();  // the controller owns the dead worker's mesh
  expect_member_died(f, "mid", 0, "{gpus: 0}");
  EXPECT_THAT(f.message, HasSubstr("was killed by signal SIGKILL"));
  procs.stop().get();
}

TEST(Supervision, AnUndeliverableMessageComesBackToItsSender) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto senders = procs.slice("gpus", 0).spawn<Sender>("handler", true, port);
  auto workers = procs.slice("gpus", 1).spawn<Worker>("target", -1);
  // An actor that does not exist in the other worker.
  const ActorRef<Worker> ghost(ActorId{procs.proc(1), "ghost", 0});
  senders.call_one(&Sender::poke, ghost).get();
  const std::string back = reports.recv(kBound);
  EXPECT_THAT(back, HasSubstr("unknown actor"));
  EXPECT_THAT(back, HasSubstr("ghost[0]"));
  // A stopped actor.
  workers.stop().get();
  senders.call_one(&Sender::poke, workers.at(0)).get();
  EXPECT_THAT(reports.recv(kBound), HasSubstr("target[0]"));
  EXPECT_EQ(senders.call_one(&Sender::alive).get(), 1);
  EXPECT_EQ(seen().count(), 0u);

  // By default the sender fails, and its owner hears of it; but not for a message to an actor
  // stopped on purpose, which is dropped (both come back over one link, in order).
  auto strict = procs.slice("gpus", 0).spawn<Sender>("strict", false, port);
  strict.call_one(&Sender::poke, workers.at(0)).get();
  strict.call_one(&Sender::poke, ghost).get();
  const MeshFailure f = seen().next();
  EXPECT_EQ(f.mesh, "strict");
  EXPECT_THAT(f.message, HasSubstr("was undeliverable"));
  EXPECT_THAT(f.message, HasSubstr("ghost[0]"));
  EXPECT_THAT(f.message, Not(HasSubstr("target[0]")));
  EXPECT_THROW(strict.call_one(&Sender::alive).get(), SupervisionError);
  procs.stop().get();
}

TEST(Supervision, TheControllerRespawnsABrokenMesh) {
  const std::size_t before = children().size();
  auto procs = this_host().spawn_procs({{"gpus", 3}});
  auto workers = procs.spawn<Worker>("gen1", -1);
  workers.broadcast(&Worker::incr, 5);
  const int pid = workers.slice("gpus", 2).call_one(&Worker::pid).get();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  EXPECT_EQ(seen().next().rank, 2);
  procs.stop().get();
  EXPECT_EQ(children().size(), before);

  auto fresh = this_host().spawn_procs({{"gpus", 3}});
  auto again = fresh.spawn<Worker>("gen2", -1);
  again.broadcast(&Worker::incr, 1);
  EXPECT_EQ(again.call(&Worker::value).get().values(), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(children().size(), before + 3);
  fresh.stop().get();
}

/// Runs this binary as the controller `name`, with `env` ahead of this process's environment
/// (the first of a name wins), and waits for it; returns its stderr.
test::SelfRun run_controller(const std::string& name, std::vector<std::string> env) {
  const auto mine = test::environment();
  env.insert(env.end(), mine.begin(), mine.end());
  return test::run_self(name, std::move(env));
}

TEST(Supervision, AnUnhandledFailureStopsTheControllerWithAReportAndStatus1) {
  std::string tmp = (std::filesystem::temp_directory_path() / "baton-unsupervised-XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmp.data()), nullptr);
  const test::SelfRun run =
      run_controller("unsupervised-controller", {"TMPDIR=" + tmp, "BATON_TEST_UNSUPERVISED=1"});
  const std::string& text = run.text;
  ASSERT_TRUE(WIFEXITED(run.status)) << text;
  EXPECT_EQ(WEXITSTATUS(run.status), 1) << text;
  EXPECT_THAT(text, HasSubstr("a failure that nothing handled stops this program"));
  EXPECT_THAT(text, HasSubstr("/doomed[0] (rank 1 of mesh 'doomed'): "));
  EXPECT_THAT(text, HasSubstr("Worker::boom threw with no caller to tell"));
  EXPECT_THAT(text, HasSubstr("boom on rank 1"));
  EXPECT_THAT(text, HasSubstr("RuntimeOptions::supervise"));
  // Its job directory (the job's key among its files) went with it.
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the job directory is still there";
  std::filesystem::remove_all(tmp);
}

/// A memory cgroup of its own for a test: created under this process's, removed afterwards.
class MemoryCgroup {
 public:
  /// Empty path() if this machine does not let the test make one (the reason in why()).
  explicit MemoryCgroup(std::size_t limit) {
    std::ifstream self("/proc/self/cgroup");
    std::string line;
    std::string v1;
    std::string v2;
    while (std::getline(self, line)) {
      if (line.rfind("0::", 0) == 0) v2 = line.substr(3);
      const auto at = line.find(":memory:");
      if (at != std::string::npos) v1 = line.substr(at + 8);
    }
    std::filesystem::path dir;
    std::string limit_file;
    if (std::filesystem::exists("/sys/fs/cgroup/memory" + v1 + "/memory.limit_in_bytes")) {
      dir = "/sys/fs/cgroup/memory" + v1 + "/baton-oom-test-" + std::to_string(::getpid());
      limit_file = "memory.limit_in_bytes";
    } else if (std::filesystem::exists("/sys/fs/cgroup" + v2 + "/memory.max")) {
      dir = "/sys/fs/cgroup" + v2 + "/baton-oom-test-" + std::to_string(::getpid());
      limit_file = "memory.max";
    } else {
      why_ = "no memory cgroup controller is mounted where this process's cgroup is";
      return;
    }
    std::error_code ec;
    if (!std::filesystem::create_directory(dir, ec)) {
      why_ = "cannot create " + dir.string() + ": " + ec.message();
      return;
    }
    path_ = dir;
    std::ofstream(dir / limit_file) << limit;
    std::ofstream(dir / "memory.swap.max") << 0;  // v2; v1 has no swap account unless asked
    std::ifstream check(dir / limit_file);
    std::size_t set = 0;
    if (!(check >> set) || set > limit) {
      why_ = "cannot set " + (dir / limit_file).string();
      path_.clear();
      std::filesystem::remove(dir, ec);
    }
  }
  ~MemoryCgroup() {
    if (path_.empty()) return;
    // Its processes are gone or going: wait (bounded) until it is empty, then remove it.
    for (int i = 0; i < 3000; ++i) {
      std::ifstream procs(path_ / "cgroup.procs");
      std::string any;
      if (!(procs >> any)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (::rmdir(path_.c_str()) != 0) {
      std::fprintf(stderr, "cannot remove cgroup %s: %s\n", path_.c_str(), std::strerror(errno));
    }
  }
  const std::filesystem::path& path() const { return path_; }
  const std::string& why() const { return why_; }

 private:
  std::filesystem::path path_;
  std::string why_;
};

TEST(Supervision, AWorkerTheOutOfMemoryKillerEndsIsReportedAsSuch) {
  // A controller in a cgroup of its own with a memory limit; its worker takes memory until the
  // kernel kills it.
  MemoryCgroup cgroup(512u << 20);
  if (cgroup.path().empty()) GTEST_SKIP() << "no memory cgroup for this test: " << cgroup.why();
  const test::SelfRun run =
      run_controller("oom-controller", {"BATON_TEST_OOM_CGROUP=" + cgroup.path().string()});
  const std::string& text = run.text;
  ASSERT_TRUE(WIFEXITED(run.status)) << text;
  EXPECT_EQ(WEXITSTATUS(run.status), 1) << text;  // it reported the failure, nobody handled it
  EXPECT_THAT(text, HasSubstr("was killed by signal SIGKILL (Killed): the kernel's "
                              "out-of-memory killer acted in its cgroup"));
}

}  // namespace

/// The controller of AWorkerTheOutOfMemoryKiller...: its worker runs out of memory; no hook.
[[noreturn]] void run_oom_controller() {
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto workers = procs.spawn<Worker>("hogs", -1);
  workers.broadcast(&Worker::hog);
  for (;;) ::pause();  // the runtime ends this process
}

/// The controller of AnUnhandledFailure...: no supervise hook; one of its actors fails.
[[noreturn]] void run_unsupervised_controller() {
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto workers = procs.spawn<Worker>("doomed", -1);
  workers.broadcast(&Worker::boom, 1);
  for (;;) ::pause();  // the runtime ends this process
}

}  // namespace baton

int main(int argc, char** argv) {
  const char* oom_cgroup = std::getenv("BATON_TEST_OOM_CGROUP");
  if (oom_cgroup != nullptr && std::getenv("BATON_PROC") == nullptr) {
    // Into the test's cgroup, before the runtime starts (its workers start there too).
    std::ofstream(std::string(oom_cgroup) + "/cgroup.procs") << ::getpid() << std::endl;
  }
  baton::RuntimeOptions options;
  if (std::getenv("BATON_TEST_UNSUPERVISED") == nullptr && oom_cgroup == nullptr) {
    options = baton::test::record_failures();
  }
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  if (std::getenv("BATON_TEST_UNSUPERVISED") != nullptr) baton::run_unsupervised_controller();
  if (oom_cgroup != nullptr) baton::run_oom_controller();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
