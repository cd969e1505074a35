// A worker whose link to its controller ends in any other way than the controller closing it
// says why before it exits, so the report of its exit carries the reason. The test stops a
// controller (a child process of its own) with SIGSTOP until its worker, hearing nothing from
// it, gives up on the link; then lets it go on and reads the report it got.
//
// This binary is its own worker: main() creates the Runtime first, which in a worker never
// returns.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "host/self_spawn.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

constexpr const char* kModeVar = "BATON_TEST_STALLED_CONTROLLER";

class Pid : public Actor {
 public:
  int pid() { return static_cast<int>(::getpid()); }
  static constexpr auto endpoints = baton::endpoints<&Pid::pid>();
};

/// The failures the controller heard of (its supervise hook).
struct Heard {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> failures;
};
Heard& heard() {
  static Heard h;
  return h;
}

/// The controller: spawns one worker, prints its pid, and prints the failures it hears of until
/// one says the worker exited (or a minute passes).
int run_stalled_controller() {
  auto procs = this_host().spawn_procs({{"gpus", 1}});
  auto pids = procs.spawn<Pid>("pids");
  const int worker = pids.at(0).call(&Pid::pid).get();
  std::printf("pid %d\n", worker);
  std::fflush(stdout);
  Heard& h = heard();
  std::unique_lock lock(h.mu);
  const auto exited = [&] {
    for (const auto& f : h.failures) {
      if (f.find("exited with status") != std::string::npos) return true;
    }
    return false;
  };
  h.cv.wait_for(lock, std::chrono::seconds(60), exited);
  for (const auto& f : h.failures) std::printf("failure: %s\n", f.c_str());
  std::fflush(stdout);
  return 0;
}

TEST(LostController, AWorkerThatHearsNothingFromItsControllerSaysWhyItExits) {
  auto env = test::environment();
  env.push_back(std::string(kModeVar) + "=1");
  const test::SelfChild child = test::start_self("stalled-controller", env, STDOUT_FILENO);
  FILE* from = ::fdopen(child.from, "r");
  ASSERT_NE(from, nullptr);
  char line[256] = {};
  ASSERT_NE(std::fgets(line, sizeof line, from), nullptr) << "the controller said nothing";
  int worker = 0;
  ASSERT_EQ(std::sscanf(line, "pid %d", &worker), 1) << line;
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, worker, 0));
  ASSERT_GE(pidfd, 0) << "worker " << worker << " is not running";

  // A controller that stops answering: its worker's link hears nothing for dead_after (5 s).
  ASSERT_EQ(::kill(child.pid, SIGSTOP), 0);
  pollfd p{pidfd, POLLIN, 0};
  const int gone = ::poll(&p, 1, 60000);
  ::close(pidfd);
  ASSERT_EQ(::kill(child.pid, SIGCONT), 0);
  std::string out;
  for (char buf[4096]; std::fgets(buf, sizeof buf, from) != nullptr;) out += buf;
  std::fclose(from);
  int status = -1;
  ASSERT_EQ(::waitpid(child.pid, &status, 0), child.pid);
  ASSERT_EQ(gone, 1) << "the worker outlived a silent controller by a minute";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;

  // The report of its exit says why, in the worker's own words.
  EXPECT_THAT(out, HasSubstr("exited with status 0; its last stderr lines:")) << out;
  EXPECT_THAT(out, HasSubstr("the link to controller")) << out;
  EXPECT_THAT(out, HasSubstr("no frame from the peer for")) << out;
  EXPECT_THAT(out, HasSubstr("this proc exits")) << out;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::RuntimeOptions options;
  options.supervise = [](const baton::MeshFailure& f) {
    auto& h = baton::heard();
    {
      std::lock_guard lock(h.mu);
      h.failures.push_back(f.to_string());
    }
    h.cv.notify_all();
    return true;
  };
  baton::Runtime rt(argc, argv, options);  // a worker serves here and never returns
  if (std::getenv(baton::kModeVar) != nullptr) return baton::run_stalled_controller();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
