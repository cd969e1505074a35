// baton ping-pong: two actor meshes in worker processes, one calling the other.
//
// Four worker procs are split in two: pingers on procs 0..1, pongers on procs 2..3. The
// controller hands the ponger mesh to the pingers; every pinger then rallies with the ponger
// facing it, a thousand round trips between worker processes with no controller in the way.

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <cstdio>
#include <cstdlib>

class Pinger;

class Ponger : public baton::Actor {
 public:
  int pong(int ball) { return ball + 1; }
  static constexpr auto endpoints = baton::endpoints<&Ponger::pong>();
};

class Pinger : public baton::Actor {
 public:
  /// Hits the ball back and forth `rounds` times with the ponger of the same index.
  baton::Task<int> rally(baton::ActorMesh<Ponger> pongers, int rounds) {
    const std::size_t me = context().rank;
    auto partner = pongers.slice("side", me % pongers.size());
    int ball = 0;
    for (int i = 0; i < rounds; ++i) ball = co_await partner.call_one(&Ponger::pong, ball) + 1;
    co_return ball;
  }
  static constexpr auto endpoints = baton::endpoints<&Pinger::rally>();
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "ping_pong: two actor meshes in worker processes rally a thousand round trips "
      "with no controller in the way"};
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);  // in a worker process this never returns

  auto procs = baton::this_host().spawn_procs({{"side", 4}});
  auto pingers = procs.slice("side", 0, 2).spawn<Pinger>("pingers");
  auto pongers = procs.slice("side", 2, 4).spawn<Ponger>("pongers");

  constexpr int kRounds = 1000;
  baton::ValueMesh<int> balls = pingers.call(&Pinger::rally, pongers, kRounds).get();
  for (const auto& [point, ball] : balls.items()) {
    std::printf("pinger %s: %d hits after %d rounds\n", point.to_string().c_str(), ball, kRounds);
    if (ball != 2 * kRounds) return 1;
  }
  procs.stop().get();
  return 0;
}
