// baton parameter server: a server actor holds the model's weights and one gradient slot per
// worker, all as RdmaBuffers. Each step every worker pulls the weights straight from the
// server's memory, computes its gradient and pushes it into its slot; the server then applies
// the mean. Only handles and "step done" travel as actor messages; the weights and gradients
// move through RdmaBuffer. The controller checks the final weights against the same arithmetic
// done locally.

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr std::size_t kWeights = std::size_t{1} << 22;  // 4 Mi floats: 16 MiB
constexpr int kWorkers = 4;
constexpr int kSteps = 5;
constexpr float kRate = 0.1F;

/// Worker `rank`'s gradient for weight `i` at weights `w` (a toy loss pulling each weight
/// towards a target that depends on the rank).
float gradient(float w, std::size_t i, int rank) {
  const float target = static_cast<float>(i % 97) * 0.01F + static_cast<float>(rank);
  return w - target;
}

struct Handles {
  baton::RdmaBuffer weights;
  std::vector<baton::RdmaBuffer> gradients;  // one slot per worker
  template <class Ar>
  void serialize(Ar& ar) {
    ar(weights, gradients);
  }
};

}  // namespace

class Server : public baton::Actor {
 public:
  Server() : weights_(kWeights, 0.0F), grads_(kWorkers, std::vector<float>(kWeights)) {}
  Handles handles() {
    Handles h;
    h.weights = baton::RdmaBuffer::register_memory(weights_.data(), kWeights * sizeof(float));
    for (auto& g : grads_) {
      h.gradients.push_back(baton::RdmaBuffer::register_memory(g.data(), kWeights * sizeof(float)));
    }
    return h;
  }
  /// Applies the mean of the gradients the workers pushed for this step.
  void apply() {
    for (std::size_t i = 0; i < kWeights; ++i) {
      float sum = 0;
      for (const auto& g : grads_) sum += g[i];
      weights_[i] -= kRate * sum / static_cast<float>(kWorkers);
    }
  }
  static constexpr auto endpoints = baton::endpoints<&Server::handles, &Server::apply>();

 private:
  std::vector<float> weights_;
  std::vector<std::vector<float>> grads_;
};

class Worker : public baton::Actor {
 public:
  /// One step: pull the weights, compute this rank's gradient, push it into its slot.
  baton::Task<double> step(Handles h) {
    const auto rank = static_cast<int>(context().rank);
    auto t0 = std::chrono::steady_clock::now();
    w_.resize(kWeights);
    g_.resize(kWeights);
    co_await h.weights.read_into(w_.data(), kWeights * sizeof(float));
    for (std::size_t i = 0; i < kWeights; ++i) g_[i] = gradient(w_[i], i, rank);
    co_await h.gradients.at(static_cast<std::size_t>(rank))
        .write_from(g_.data(), kWeights * sizeof(float));
    std::chrono::duration<double, std::milli> ms = std::chrono::steady_clock::now() - t0;
    co_return ms.count();
  }
  static constexpr auto endpoints = baton::endpoints<&Worker::step>();

 private:
  std::vector<float> w_, g_;
};

int main(int argc, char** argv) {
  // --help says what it does; it takes no other arguments.
  CLI::App app{
      "parameter_server: a server actor's weights and gradient slots as RdmaBuffers, "
      "pulled and pushed by four workers; the result checked against the same "
      "arithmetic done here"};
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);
  auto server_proc = baton::this_host().spawn_procs({{"server", 1}});
  auto worker_procs = baton::this_host().spawn_procs({{"workers", kWorkers}});
  auto server = server_proc.spawn<Server>("server");
  auto workers = worker_procs.spawn<Worker>("workers");
  const Handles handles = server.call_one(&Server::handles).get();

  for (int s = 0; s < kSteps; ++s) {
    auto times = workers.call(&Worker::step, handles).get();
    double slowest = 0;
    for (double t : times.values()) slowest = std::max(slowest, t);
    server.call_one(&Server::apply).get();
    std::printf(
        "step %d: %d workers pulled %zu MiB of weights and pushed their gradients; "
        "slowest %.1f ms\n",
        s, kWorkers, kWeights * sizeof(float) >> 20, slowest);
  }

  // The same arithmetic here, then the server's weights read back through their RdmaBuffer.
  std::vector<float> expect(kWeights, 0.0F);
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t i = 0; i < kWeights; ++i) {
      float sum = 0;
      for (int r = 0; r < kWorkers; ++r) sum += gradient(expect[i], i, r);
      expect[i] -= kRate * sum / static_cast<float>(kWorkers);
    }
  }
  std::vector<float> got(kWeights);
  handles.weights.read_into(got.data(), kWeights * sizeof(float)).get();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < kWeights; ++i) {
    if (std::fabs(got[i] - expect[i]) > 1e-5F) ++wrong;
  }
  std::printf("final weights: %zu of %zu differ from the local computation; w[100] = %.5f\n", wrong,
              kWeights, static_cast<double>(got[100]));
  server_proc.stop().get();
  worker_procs.stop().get();
  return wrong == 0 ? 0 : 1;
}
