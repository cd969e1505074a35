// baton fault tolerance: a training loop that survives losing a worker.
//
// Four trainers take steps together and checkpoint every five. Mid-run one worker process is
// killed with SIGKILL, as a crashed host would be. The step in flight fails with a
// SupervisionError that says which rank died and how; the controller's supervise hook hears of
// the same failure. The controller then stops the broken mesh, spawns a fresh one on the same
// host mesh from the last checkpoint, and carries on to the end.

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

class Trainer : public baton::Actor {
 public:
  explicit Trainer(int from_step) : step_(from_step) {}

  /// One step of training; returns this rank's "loss".
  double step(int s) {
    if (s != step_) {
      throw std::logic_error("rank " + std::to_string(rank()) + " is at step " +
                             std::to_string(step_) + ", asked for " + std::to_string(s));
    }
    ++step_;
    return 1.0 / (1.0 + s + 0.1 * rank());
  }
  int pid() { return static_cast<int>(::getpid()); }

  static constexpr auto endpoints = baton::endpoints<&Trainer::step, &Trainer::pid>();

 private:
  int rank() const { return static_cast<int>(context().rank); }
  int step_;
};

/// What the controller's supervise hook heard of.
struct Failures {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> seen;
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "fault_tolerance: a training loop that survives losing a worker: one is killed "
      "with SIGKILL mid-run, and the controller respawns the mesh from its last "
      "checkpoint"};
  CLI11_PARSE(app, argc, argv);
  Failures failures;
  baton::RuntimeOptions options;
  options.supervise = [&failures](const baton::MeshFailure& f) {
    std::printf("supervise: %s\n", f.summary().c_str());
    std::lock_guard lock(failures.mu);
    failures.seen.push_back(f.summary());
    failures.cv.notify_all();
    return true;  // handled: the training loop below replaces the mesh
  };
  baton::Runtime rt(argc, argv, options);  // in a worker process this never returns

  constexpr int kSteps = 20;
  constexpr int kCheckpointEvery = 5;
  constexpr int kKillAt = 8;
  auto procs = baton::this_host().spawn_procs({{"gpus", 4}});
  auto trainers = procs.spawn<Trainer>("trainers", 0);
  int checkpoint = 0;
  int restarts = 0;
  bool killed = false;

  for (int s = 0; s < kSteps;) {
    if (s == kKillAt && !killed) {
      const int pid = trainers.slice("gpus", 2).call_one(&Trainer::pid).get();
      std::printf("killing rank 2 (pid %d) with SIGKILL before step %d\n", pid, s);
      ::kill(pid, SIGKILL);
      killed = true;
    }
    try {
      baton::ValueMesh<double> losses = trainers.call(&Trainer::step, s).get();
      double sum = 0;
      for (double l : losses.values()) sum += l;
      std::printf("step %2d: mean loss %.4f\n", s, sum / static_cast<double>(losses.size()));
      ++s;
      if (s % kCheckpointEvery == 0) checkpoint = s;
    } catch (const baton::SupervisionError& e) {
      std::printf("step %d failed: %s\n", s, e.what());
      {
        // The same failure reaches the supervise hook; wait for it so the log reads in order.
        std::unique_lock lock(failures.mu);
        failures.cv.wait(lock, [&] { return !failures.seen.empty(); });
      }
      std::printf("respawning 4 procs from the checkpoint at step %d\n", checkpoint);
      procs.stop().get();
      procs = baton::this_host().spawn_procs({{"gpus", 4}});
      trainers = procs.spawn<Trainer>("trainers", checkpoint);
      s = checkpoint;
      ++restarts;
    }
  }
  procs.stop().get();

  std::size_t seen = 0;
  {
    std::lock_guard lock(failures.mu);
    seen = failures.seen.size();
  }
  std::printf("finished %d steps with %d restart(s); supervise saw %zu failure(s)\n", kSteps,
              restarts, seen);
  if (restarts != 1 || seen != 1) {
    std::fprintf(stderr, "FAILED: expected exactly one restart and one failure\n");
    return 1;
  }
  std::printf("fault_tolerance: OK\n");
  return 0;
}
