// `baton-bench failure`: how fast a dead worker turns into a failed future, and how long an
// orderly stop of 16 procs takes, each against the kernel's own floor measured in the same run
// (SIGKILL to waitpid of a bare process; SIGTERM to waitpid of 16 bare processes).

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

extern char** environ;

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Sleeper : public Actor {
 public:
  int pid() { return static_cast<int>(::getpid()); }
  int hang() {
    for (;;) ::pause();  // until the benchmark kills this process
  }
  static constexpr auto endpoints = baton::endpoints<&Sleeper::pid, &Sleeper::hang>();
};

/// Starts `n` copies of this executable that wait in pause() (see main.cpp).
std::vector<pid_t> start_bare(std::size_t n) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) env_s.emplace_back(*e);
  env_s.emplace_back("BATON_BENCH_PAUSE=1");
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string self = "baton-bench";
  char* argv[] = {self.data(), nullptr};
  std::vector<pid_t> pids;
  for (std::size_t i = 0; i < n; ++i) {
    pid_t pid = -1;
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      throw std::runtime_error("posix_spawn failed");
    }
    pids.push_back(pid);
  }
  return pids;
}

}  // namespace

int run_failure() {
  constexpr int kRounds = 9;
  std::vector<double> detect;
  std::vector<double> reap;
  for (int i = 0; i < kRounds; ++i) {
    auto procs = this_host().spawn_procs({{"procs", 4}});
    auto mesh = procs.spawn<Sleeper>("sleepers");
    auto victim = mesh.slice("procs", 1);
    const int pid = victim.call_one(&Sleeper::pid).get();
    auto pending = victim.call_one(&Sleeper::hang);
    const auto t0 = Clock::now();
    ::kill(pid, SIGKILL);
    try {
      pending.get();
      throw std::runtime_error("a call to a killed worker succeeded");
    } catch (const SupervisionError&) {
      detect.push_back(ms_since(t0));
    }
    procs.stop().get();

    // The floor: SIGKILL a bare process and wait for the kernel to report it.
    const pid_t bare = start_bare(1).front();
    const auto t1 = Clock::now();
    ::kill(bare, SIGKILL);
    ::waitpid(bare, nullptr, 0);
    reap.push_back(ms_since(t1));
  }
  print_figure("kill_to_failed_future_p50", median(detect), "ms");
  print_figure("kill_to_waitpid_p50", median(reap), "ms");
  print_figure("detect_ratio", median(detect) / median(reap), "x");

  constexpr std::size_t kProcs = 16;
  std::vector<double> stop;
  std::vector<double> term;
  for (int i = 0; i < kRounds; ++i) {
    auto procs = this_host().spawn_procs({{"procs", kProcs}});
    auto mesh = procs.spawn<Sleeper>("sleepers");
    if (mesh.call(&Sleeper::pid).get().size() != kProcs) throw std::runtime_error("bad reply");
    auto t0 = Clock::now();
    procs.stop().get();
    stop.push_back(ms_since(t0));

    const std::vector<pid_t> bare = start_bare(kProcs);
    t0 = Clock::now();
    for (pid_t p : bare) ::kill(p, SIGTERM);
    for (pid_t p : bare) ::waitpid(p, nullptr, 0);
    term.push_back(ms_since(t0));
  }
  print_figure("stop_procs16_p50", median(stop), "ms");
  print_figure("sigterm16_p50", median(term), "ms");
  print_figure("stop_ratio", median(stop) / median(term), "x");
  return 0;
}

}  // namespace baton::bench
