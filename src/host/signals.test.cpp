// A controller's life and death by signal: SIGINT or SIGTERM stops its job in order, a second
// one kills it at once, and the job's directory goes with it; a directory left by a controller
// that died is removed by the next one. Each test runs a controller of its own in a child
// process (this binary, with BATON_TEST_CONTROLLER naming what it does), with a temporary
// directory of its own. This binary is also its own worker: main() creates the Runtime first,
// which in a worker never returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "baton/baton.hpp"
#include "host/self_spawn.test.hpp"

extern char** environ;

namespace baton {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

// A bound on every wait below, so a broken build fails instead of hanging; never reached when
// things work, and nothing is asserted about time.
constexpr int kBoundMs = 30000;

/// Says when it stops; with `hang`, its on_stop never returns.
class Stopper : public Actor {
 public:
  explicit Stopper(bool hang) : hang_(hang) {}
  int pid() { return static_cast<int>(::getpid()); }
  void on_stop() override {
    std::printf("on_stop %s on rank %s\n", hang_ ? "hangs" : "ran", std::getenv("BATON_RANK"));
    std::fflush(stdout);
    if (hang_) {
      for (;;) ::pause();  // only a kill ends this
    }
  }
  static constexpr auto endpoints = baton::endpoints<&Stopper::pid>();

 private:
  bool hang_;
};

/// A controller in a child process; its stdout comes back over a pipe.
struct Controller {
  pid_t pid = -1;
  int pidfd = -1;
  FILE* out = nullptr;

  explicit Controller(const std::string& mode, const std::filesystem::path& tmp) {
    auto env = test::environment({"TMPDIR="});
    env.push_back("BATON_TEST_CONTROLLER=" + mode);
    env.push_back("TMPDIR=" + tmp.string());
    const test::SelfChild child =
        test::start_self(mode + "-controller", std::move(env), STDOUT_FILENO);
    pid = child.pid;
    out = ::fdopen(child.from, "r");
    pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  }
  ~Controller() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (out != nullptr) std::fclose(out);
    if (pidfd >= 0) ::close(pidfd);
  }

  /// The next line it prints that starts with `prefix` ("" if it ends first).
  std::string line_starting(const std::string& prefix) const {
    char buf[1024];
    while (std::fgets(buf, sizeof buf, out) != nullptr) {
      std::string line(buf);
      if (!line.empty() && line.back() == '\n') line.pop_back();
      if (line.rfind(prefix, 0) == 0) return line;
    }
    return "";
  }

  /// Everything it prints from now until it exits.
  std::string rest() const {
    std::string text;
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, out)) > 0) text.append(buf, n);
    return text;
  }

  /// Its wait status once it exits; -1 if it is still running after the bound.
  int wait_exit() {
    pollfd p{pidfd, POLLIN, 0};
    if (::poll(&p, 1, kBoundMs) != 1) return -1;
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    pid = -1;
    return status;
  }
};

/// The pids a controller printed as "pids 12 13", each with a pidfd to watch it by.
std::vector<int> worker_pidfds(const std::string& line) {
  std::istringstream in(line);
  std::string word;
  in >> word;
  std::vector<int> fds;
  int pid = 0;
  while (in >> pid) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    EXPECT_GE(fd, 0) << "worker " << pid << " is not running";
    if (fd >= 0) fds.push_back(fd);
  }
  return fds;
}

/// Whether every process of `pidfds` has exited (waiting for each up to the bound).
bool all_gone(const std::vector<int>& pidfds) {
  bool gone = true;
  for (int fd : pidfds) {
    pollfd p{fd, POLLIN, 0};
    gone = gone && ::poll(&p, 1, kBoundMs) == 1;
    ::close(fd);
  }
  return gone;
}

/// A fresh directory for a controller's TMPDIR.
std::filesystem::path fresh_tmp() {
  std::string tmp = (std::filesystem::temp_directory_path() / "baton-signals-XXXXXX").string();
  EXPECT_NE(::mkdtemp(tmp.data()), nullptr);
  return tmp;
}

std::vector<std::string> entries(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

TEST(Signals, SigintStopsTheJobInOrderAndExitsNonZeroLeavingNothing) {
  const auto tmp = fresh_tmp();
  Controller ctl("interrupted", tmp);
  const std::string pids = ctl.line_starting("pids");
  ASSERT_FALSE(pids.empty()) << "the controller said nothing";
  const std::vector<int> workers = worker_pidfds(pids);
  ASSERT_EQ(workers.size(), 2u);
  EXPECT_EQ(entries(tmp).size(), 1u);  // its job directory, while it runs

  ASSERT_EQ(::kill(ctl.pid, SIGINT), 0);
  const std::string text = ctl.rest();
  const int status = ctl.wait_exit();
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status << "\n" << text;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << text;
  // In order: each worker's actors stopped (their on_stop ran) before the processes went.
  EXPECT_THAT(text, HasSubstr("on_stop ran on rank 0"));
  EXPECT_THAT(text, HasSubstr("on_stop ran on rank 1"));
  EXPECT_TRUE(all_gone(workers)) << "a worker outlived its interrupted controller";
  EXPECT_TRUE(entries(tmp).empty()) << "the job directory is still there";
  std::filesystem::remove_all(tmp);
}

TEST(Signals, ASecondSignalDuringASlowStopKillsAtOnce) {
  const auto tmp = fresh_tmp();
  Controller ctl("slow-stop", tmp);  // its stop waits 10 minutes for each step
  const std::vector<int> workers = worker_pidfds(ctl.line_starting("pids"));
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(::kill(ctl.pid, SIGTERM), 0);
  // The stop is under way once the worker's on_stop runs (and hangs).
  ASSERT_EQ(ctl.line_starting("[procs0 0] on_stop"), "[procs0 0] on_stop hangs on rank 0");
  ASSERT_EQ(::kill(ctl.pid, SIGTERM), 0);
  const int status = ctl.wait_exit();
  ASSERT_NE(status, -1) << "a second SIGTERM did not end the controller";
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
  EXPECT_TRUE(all_gone(workers)) << "a worker outlived its killed controller";
  EXPECT_TRUE(entries(tmp).empty()) << "the job directory is still there";
  std::filesystem::remove_all(tmp);
}

/// /proc/<pid>/stat's start time (field 22).
std::string start_time_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  std::istringstream rest(text.substr(text.rfind(')') + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  return field;
}

void make_job_dir(const std::filesystem::path& dir, const std::string& controller_file) {
  std::filesystem::create_directory(dir);
  std::ofstream(dir / "ctl.sock") << "";
  if (!controller_file.empty()) std::ofstream(dir / "controller") << controller_file << "\n";
}

TEST(Signals, AControllerRemovesJobDirectoriesLeftByDeadControllers) {
  const auto tmp = fresh_tmp();
  // A pid that no process has now: one that was reaped.
  pid_t dead = -1;
  char true_argv0[] = "true";
  char* true_argv[] = {true_argv0, nullptr};
  ASSERT_EQ(::posix_spawn(&dead, "/bin/true", nullptr, nullptr, true_argv, environ), 0);
  ASSERT_EQ(::waitpid(dead, nullptr, 0), dead);
  const std::string me = std::to_string(::getpid());
  const std::string dead_s = std::to_string(dead);
  make_job_dir(tmp / ("baton-" + dead_s + "-aaaaaa"), dead_s + " 12345");
  make_job_dir(tmp / ("baton-" + dead_s + "-bbbbbb"), "");     // died before writing it
  make_job_dir(tmp / ("baton-" + me + "-cccccc"), me + " 1");  // its pid was reused
  make_job_dir(tmp / ("baton-" + me + "-dddddd"), me + " " + start_time_of(::getpid()));  // live
  make_job_dir(tmp / ("baton-" + me + "-eeeeee"), "");  // a live controller making it right now
  make_job_dir(tmp / "baton-other-ffffff", "");         // not a job directory
  Controller ctl("quick", tmp);
  const int status = ctl.wait_exit();
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << "0: it ran, and its SIGINT handler was put back after";
  EXPECT_EQ(entries(tmp),
            (std::vector<std::string>{"baton-" + me + "-dddddd", "baton-" + me + "-eeeeee",
                                      "baton-other-ffffff"}));
  std::filesystem::remove_all(tmp);
}

}  // namespace

/// The controllers of the tests above, by BATON_TEST_CONTROLLER.
int run_test_controller(const std::string& mode, int argc, char** argv) {
  if (mode == "quick") {
    // Starts a job and ends it; the handler it found for SIGINT must be back afterwards.
    struct sigaction mine {};
    mine.sa_handler = SIG_IGN;
    ::sigaction(SIGINT, &mine, nullptr);
    { Runtime rt(argc, argv); }
    struct sigaction now {};
    ::sigaction(SIGINT, nullptr, &now);
    return now.sa_handler == SIG_IGN ? 0 : 4;
  }
  RuntimeOptions options;
  if (mode == "slow-stop") options.stop_grace = 600s;
  Runtime rt(argc, argv, options);
  const std::size_t n = mode == "slow-stop" ? 1 : 2;
  auto procs = this_host().spawn_procs({{"gpus", n}});
  auto stoppers = procs.spawn<Stopper>("stoppers", mode == "slow-stop");
  std::string line = "pids";
  const ValueMesh<int> pids = stoppers.call(&Stopper::pid).get();
  for (int pid : pids.values()) line += " " + std::to_string(pid);
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  for (;;) ::pause();  // a signal ends this process
}

}  // namespace baton

int main(int argc, char** argv) {
  if (const char* mode = std::getenv("BATON_TEST_CONTROLLER")) {
    if (std::getenv("BATON_PROC") == nullptr) return baton::run_test_controller(mode, argc, argv);
  }
  baton::Runtime rt(argc, argv);  // a worker serves here and never returns
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
