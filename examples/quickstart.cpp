// baton quickstart, in one process: spawn actors, call them, await one from another, and see a
// remote failure arrive as an ActorError while the actor keeps serving.
// (The multi-process version, with spawn_procs and meshes, comes with the mesh layer.)

#include <baton/baton.hpp>

#include <cstdio>
#include <string>

class Trainer : public baton::Actor {
 public:
  explicit Trainer(int seed) : loss_(1.0 + seed % 7) {}

  double train(int step) {
    if (step < 0) throw std::invalid_argument("step must be >= 0, got " + std::to_string(step));
    loss_ *= 0.9;
    return loss_;
  }

  static constexpr auto endpoints = baton::endpoints<&Trainer::train>();

 private:
  double loss_;
};

// An actor whose endpoint is a coroutine that awaits other actors without blocking a thread.
class Coordinator : public baton::Actor {
 public:
  baton::Task<double> run_steps(baton::ActorRef<Trainer> a, baton::ActorRef<Trainer> b, int n) {
    double total = 0;
    for (int step = 0; step < n; ++step) {
      total += co_await a.call(&Trainer::train, step);
      total += co_await b.call(&Trainer::train, step);
    }
    co_return total / (2 * n);
  }

  static constexpr auto endpoints = baton::endpoints<&Coordinator::run_steps>();
};

int main() {
  baton::Proc proc(baton::ProcOptions{.name = "quickstart"});

  auto t0 = proc.spawn<Trainer>("trainer", /*seed=*/42);
  auto t1 = proc.spawn<Trainer>("trainer", /*seed=*/7);
  std::printf("spawned %s and %s\n", t0.id().to_string().c_str(), t1.id().to_string().c_str());

  std::printf("t0.train(0) -> %.4f\n", t0.call(&Trainer::train, 0).get());

  auto coord = proc.spawn<Coordinator>("coordinator");
  const double mean = coord.call(&Coordinator::run_steps, t0, t1, 5).get();
  std::printf("coordinator ran 5 steps on both trainers: mean loss %.4f\n", mean);

  try {
    t0.call(&Trainer::train, -1).get();
  } catch (const baton::ActorError& e) {
    std::printf("ActorError from %s: %s\n", e.actor().c_str(), e.remote_message().c_str());
  }
  std::printf("t0 still serving: t0.train(6) -> %.4f\n", t0.call(&Trainer::train, 6).get());

  proc.stop();
  std::printf("stopped\n");
  return 0;
}
