// Stopping procs and actors: on_stop runs and is bounded, a stop does not block and completes
// once the processes are gone, a host's stop takes every proc mesh started on it, and an actor
// awaits the stop of the procs it owns; nothing leaks.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "host/children.test.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;
using test::children;
using test::running;
using ::testing::HasSubstr;

// A bound on every wait below, so a broken build fails instead of hanging; never reached when
// things work, and nothing is asserted about time.
constexpr auto kBound = 30s;

int my_rank() {
  const char* r = std::getenv("BATON_RANK");
  return r != nullptr ? std::atoi(r) : -1;
}

/// Counts what it was sent and says so when it stops.
class Stopper : public Actor {
 public:
  Stopper(Port<std::string> report, bool hang) : report_(std::move(report)), hang_(hang) {}
  void incr(int by) { n_ += by; }
  void ignore_sigterm() { ::signal(SIGTERM, SIG_IGN); }
  int pid() { return static_cast<int>(::getpid()); }
  void on_stop() override {
    report_.send("rank " + std::to_string(my_rank()) + " stopped after " + std::to_string(n_));
    if (hang_) {
      for (;;) ::pause();  // a cleanup hook that never ends: stop's bound must cut it off
    }
  }
  static constexpr auto endpoints =
      baton::endpoints<&Stopper::incr, &Stopper::ignore_sigterm, &Stopper::pid>();

 private:
  Port<std::string> report_;
  bool hang_;
  int n_ = 0;
};

/// Stops only when released: its on_stop waits for a byte on a fifo (one per member).
class HeldStop : public Actor {
 public:
  HeldStop(std::string fifo, Port<std::string> report)
      : fifo_(std::move(fifo)), report_(std::move(report)) {}
  int pid() { return static_cast<int>(::getpid()); }
  void on_stop() override {
    const int fd = ::open(fifo_.c_str(), O_RDONLY | O_CLOEXEC);
    char byte = 0;
    const bool released = fd >= 0 && ::read(fd, &byte, 1) == 1;
    if (fd >= 0) ::close(fd);
    report_.send(released ? std::string("released") : "on_stop could not read " + fifo_);
  }
  static constexpr auto endpoints = baton::endpoints<&HeldStop::pid>();

 private:
  std::string fifo_;
  Port<std::string> report_;
};

/// Owns a proc mesh whose members stop only when released, and stops it from an endpoint.
class StopOwner : public Actor {
 public:
  Task<std::vector<int>> start(int n, std::string fifo) {
    // The members report to this actor, over the links they already have to its process.
    auto report =
        open_port<std::string>([this](std::string s) { reports_.push_back(std::move(s)); });
    auto procs = this_host().spawn_procs_async({{"leaves", static_cast<std::size_t>(n)}});
    procs_ = co_await std::move(procs);
    leaves_ = co_await procs_.spawn_async<HeldStop>("held", std::move(fifo), report);
    pids_ = (co_await leaves_.call(&HeldStop::pid)).values();
    co_return pids_;
  }
  /// Stops its procs, releases their on_stop hooks, and replies once the procs are gone with
  /// what it saw on the way.
  Task<std::string> stop_leaves(std::string fifo) {
    const int fd = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);  // never blocks, keeps the bytes
    if (fd < 0) throw std::runtime_error("cannot open " + fifo);
    Future<void> stopped = procs_.stop(kBound);
    std::string seen = stopped.ready() ? "ready at once" : "pending";
    try {
      (void)leaves_.call(&HeldStop::pid);
      seen += "; call accepted";
    } catch (const UsageError&) {
      seen += "; call refused";
    }
    const std::string release(pids_.size(), 'x');
    const bool wrote =
        ::write(fd, release.data(), release.size()) == static_cast<ssize_t>(release.size());
    co_await std::move(stopped);
    ::close(fd);
    int running = 0;
    for (int pid : pids_) running += ::kill(pid, 0) == 0 ? 1 : 0;
    co_return seen + (wrote ? "" : "; write failed") + "; running " + std::to_string(running);
  }
  /// What the members' on_stop hooks said.
  std::vector<std::string> reports() { return reports_; }
  static constexpr auto endpoints =
      baton::endpoints<&StopOwner::start, &StopOwner::stop_leaves, &StopOwner::reports>();

 private:
  std::vector<std::string> reports_;
  ProcMesh procs_;
  ActorMesh<HeldStop> leaves_;
  std::vector<int> pids_;
};

std::size_t entries(const char* dir) {
  std::size_t n = 0;
  DIR* d = ::opendir(dir);
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
  ::closedir(d);
  return n - (std::string(dir) == "/proc/self/fd" ? 1 : 0);  // the directory's own fd
}

/// A fifo in a directory of its own, removed with it.
struct Fifo {
  std::filesystem::path dir;
  std::string path;
  Fifo() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fifo-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
    path = (dir / "release").string();
    if (::mkfifo(path.c_str(), 0600) != 0) throw std::runtime_error("mkfifo failed");
  }
  ~Fifo() {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
  Fifo(const Fifo&) = delete;
  Fifo& operator=(const Fifo&) = delete;
};

TEST(Stop, StopDrainsRunsOnStopAndLeaksNothing) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto cycle = [&port = port, &reports = reports] {
    auto procs = this_host().spawn_procs({{"gpus", 2}});
    auto stoppers = procs.spawn<Stopper>("stoppers", port, false);
    for (int i = 0; i < 100; ++i) stoppers.broadcast(&Stopper::incr, 1);
    procs.stop().get();
    std::vector<std::string> got{reports.recv(kBound), reports.recv(kBound)};
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got,
              (std::vector<std::string>{"rank 0 stopped after 100", "rank 1 stopped after 100"}));
    try {
      stoppers.broadcast(&Stopper::incr, 1);
      FAIL() << "expected UsageError";
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr("its procs were stopped"));
    }
    stoppers.stop().get(kBound);  // stopped with its procs: nothing left to do
    EXPECT_THROW((void)procs.spawn<Stopper>("again", port, false), UsageError);
  };
  cycle();  // warm-up: the first spawn starts threads that live as long as the runtime
  const std::size_t fds = entries("/proc/self/fd");
  const std::size_t threads = entries("/proc/self/task");
  const std::size_t procs_before = children().size();
  for (int i = 0; i < 3; ++i) cycle();
  EXPECT_EQ(entries("/proc/self/fd"), fds) << "file descriptors leaked";
  EXPECT_EQ(entries("/proc/self/task"), threads) << "threads leaked";
  EXPECT_EQ(children().size(), procs_before) << "processes leaked";
}

TEST(Stop, AHostStopStopsEveryProcMeshStartedOnIt) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  const std::size_t before = children().size();
  auto a = this_host().spawn_procs({{"gpus", 2}});
  auto b = this_host().spawn_procs({{"gpus", 1}});
  auto sa = a.spawn<Stopper>("a", port, false);
  auto sb = b.spawn<Stopper>("b", port, false);
  sa.broadcast(&Stopper::incr, 2);
  sb.broadcast(&Stopper::incr, 3);
  this_host().stop().get();
  std::vector<std::string> got{reports.recv(kBound), reports.recv(kBound), reports.recv(kBound)};
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"rank 0 stopped after 2", "rank 0 stopped after 3",
                                           "rank 1 stopped after 2"}));
  EXPECT_EQ(children().size(), before);
  EXPECT_THROW(sa.broadcast(&Stopper::incr, 1), UsageError);
  EXPECT_THROW(sb.broadcast(&Stopper::incr, 1), UsageError);
  EXPECT_THROW((void)b.spawn<Stopper>("again", port, false), UsageError);
  // The host itself goes on: new procs start.
  auto c = this_host().spawn_procs({{"gpus", 1}});
  EXPECT_GT(c.spawn<Stopper>("fresh", port, false).call_one(&Stopper::pid).get(), 0);
  c.stop().get();
}

TEST(Stop, StopDoesNotBlockAndItsFutureCompletesOnceTheProcessesAreGone) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  const Fifo fifo;
  // Open for reading and writing: never blocks, and keeps what is written until on_stop reads.
  const int fd = ::open(fifo.path.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto held = procs.spawn<HeldStop>("held", fifo.path, port);
  const ValueMesh<int> pids = held.call(&HeldStop::pid).get();
  // The on_stop hooks wait for the fifo, and the grace outlasts the test's bound: a stop that
  // blocked its caller would return only after killing them, with its future ready.
  Future<void> stopped = procs.stop(kBound);
  Future<void> host_stopped = this_host().stop();
  EXPECT_FALSE(stopped.ready());
  EXPECT_FALSE(host_stopped.ready());
  try {
    (void)held.call(&HeldStop::pid);
    FAIL() << "expected UsageError";
  } catch (const UsageError& e) {
    EXPECT_THAT(e.what(), HasSubstr("its procs were stopped"));
  }
  EXPECT_THROW((void)procs.spawn<HeldStop>("again", fifo.path, port), UsageError);
  for (int pid : pids.values()) EXPECT_TRUE(running(pid)) << pid;
  ASSERT_EQ(::write(fd, "xx", 2), 2);  // one byte for each on_stop
  stopped.get(kBound);
  host_stopped.get(kBound);
  EXPECT_EQ(reports.recv(kBound), "released");
  EXPECT_EQ(reports.recv(kBound), "released");
  for (int pid : pids.values()) EXPECT_FALSE(running(pid)) << pid;
  ::close(fd);
}

TEST(Stop, AnActorAwaitsTheStopOfTheProcsItOwns) {
  const Fifo fifo;
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto owner = procs.spawn<StopOwner>("owner");
  const std::vector<int> leaves = owner.call_one(&StopOwner::start, 2, fifo.path).get();
  ASSERT_EQ(leaves.size(), 2u);
  // Inside the actor: stop() returned before the leaves were released, calls to them failed
  // at once, and the awaited future completed once both were gone.
  EXPECT_EQ(owner.call_one(&StopOwner::stop_leaves, fifo.path).get(kBound),
            "pending; call refused; running 0");
  // Both hooks were released, not cut off (their reports came before the stop's end).
  EXPECT_EQ(owner.call_one(&StopOwner::reports).get(),
            (std::vector<std::string>{"released", "released"}));
  for (int pid : leaves) EXPECT_FALSE(running(pid)) << pid;
  procs.stop().get();
}

TEST(Stop, StopBoundsAHangingOnStopAndAProcessThatIgnoresSigterm) {
  auto [port, reports] = Runtime::get().proc().open_port<std::string>();
  auto procs = this_host().spawn_procs({{"gpus", 2}});
  auto stoppers = procs.spawn<Stopper>("stuck", port, true);
  stoppers.slice("gpus", 1).call_one(&Stopper::ignore_sigterm).get();
  const ValueMesh<int> pids = stoppers.call(&Stopper::pid).get();
  procs.stop(200ms).get();
  // Both on_stop hooks ran (and hang); the processes are gone all the same.
  EXPECT_THAT(reports.recv(kBound), HasSubstr("stopped after 0"));
  EXPECT_THAT(reports.recv(kBound), HasSubstr("stopped after 0"));
  for (int pid : pids.values()) EXPECT_FALSE(running(pid)) << pid;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
