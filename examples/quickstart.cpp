// baton quickstart: one program drives worker processes on this host.
//
// The controller spawns a mesh of procs ({gpus: 4}), spawns a Trainer in each, calls them all at
// once, slices the mesh, sees a remote failure arrive as an ActorError, and stops. The same
// binary is every worker: baton::Runtime serves there and never returns into main.

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

class Trainer : public baton::Actor {
 public:
  explicit Trainer(int seed) : loss_(1.0 + (seed + rank()) % 7) {}

  double train(int step) {
    if (step < 0) throw std::invalid_argument("step must be >= 0, got " + std::to_string(step));
    loss_ *= 0.9;
    return loss_;
  }
  std::string where() {
    const char* gpu = std::getenv("CUDA_VISIBLE_DEVICES");
    return id().to_string() + " (CUDA_VISIBLE_DEVICES=" + (gpu != nullptr ? gpu : "") + ")";
  }

  static constexpr auto endpoints = baton::endpoints<&Trainer::train, &Trainer::where>();

 private:
  int rank() const { return static_cast<int>(context().rank); }
  double loss_;
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "quickstart: one program drives four worker processes on this host: a mesh of "
      "trainers called whole, sliced, and a remote failure seen as an ActorError"};
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);  // in a worker process this never returns

  auto procs = baton::this_host().spawn_procs({{"gpus", 4}});
  auto trainers = procs.spawn<Trainer>("trainers", /*seed=*/42);

  for (const auto& [point, where] : trainers.call(&Trainer::where).get().items()) {
    std::printf("%s: %s\n", point.to_string().c_str(), where.c_str());
  }

  // What each rank's loss must be: it starts at 1 + (seed + rank) % 7 and loses 10% a step.
  const auto expected = [](std::size_t rank, int steps) {
    double l = 1.0 + static_cast<double>((42 + rank) % 7);
    for (int i = 0; i < steps; ++i) l *= 0.9;
    return l;
  };
  const auto check = [](const char* what, double got, double want) {
    if (std::fabs(got - want) > 1e-9) {
      std::printf("wrong %s: %.6f, expected %.6f\n", what, got, want);
      std::exit(1);
    }
  };

  baton::ValueMesh<double> loss = trainers.call(&Trainer::train, 0).get();
  for (const auto& [point, value] : loss.items()) {
    std::printf("step 0 %s loss %.4f\n", point.to_string().c_str(), value);
    check("loss after step 0", value, expected(point.rank, 1));
  }

  trainers.slice("gpus", 0, 2).broadcast(&Trainer::train, 1);
  loss = trainers.call(&Trainer::train, 2).get();
  std::printf("after a step on gpus 0..1 only: losses");
  for (double v : loss.values()) std::printf(" %.4f", v);
  std::printf("\n");
  for (std::size_t r = 0; r < loss.size(); ++r) {
    check("loss after the sliced step", loss[r], expected(r, r < 2 ? 3 : 2));
  }

  bool failed_loudly = false;
  try {
    trainers.slice("gpus", 3).call_one(&Trainer::train, -1).get();
  } catch (const baton::ActorError& e) {
    std::printf("ActorError from %s: %s\n", e.actor().c_str(), e.remote_message().c_str());
    failed_loudly = true;
  }
  if (!failed_loudly) return 1;

  procs.stop().get();
  std::printf("stopped\n");
  return 0;
}
