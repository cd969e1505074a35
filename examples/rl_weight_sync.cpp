// rl_weight_sync: reinforcement learning as one program. Generator actors play CartPole (written
// here in C++) with a policy network; a trainer improves the policy from their episodes
// (REINFORCE); an evaluator scores it. The weights travel through baton's tensor store: the
// trainer runs as two ranks (replicas fed the same batches), and after each update each rank
// puts its half of the flat weight vector as a shard of one tensor; the store makes a version of
// the two halves, and generators and the evaluator read whole copies of the version they were
// told, never a mix of two updates, without the controller carrying any weights. Generators
// never wait for the trainer: a batch is played with weights at most --max-staleness updates
// old (the store keeps that many versions), else dropped. The run fails (exit 1) unless the
// evaluator's mean return reaches --target within --updates.
//
//   rl_weight_sync [--generators G] [--updates U] [--episodes E] [--target R] [--max-staleness S]

#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <string>
#include <vector>

namespace {

using baton::Task;
using Clock = std::chrono::steady_clock;

/// CartPole, as the classic control task defines it: push the cart left or right to keep the
/// pole up; +1 for every step it stays up, at most 500.
class CartPole {
 public:
  explicit CartPole(std::uint64_t seed) : random_(seed) {}
  std::vector<float> reset() {
    std::uniform_real_distribution<float> u(-0.05F, 0.05F);
    s_ = {u(random_), u(random_), u(random_), u(random_)};
    steps_ = 0;
    return s_;
  }
  /// Applies `action` (0: left, 1: right); returns whether the episode is over.
  bool step(int action) {
    constexpr float kGravity = 9.8F, kCart = 1.0F, kPole = 0.1F, kHalfLength = 0.5F;
    constexpr float kForce = 10.0F, kTau = 0.02F;
    const float force = action == 1 ? kForce : -kForce;
    const float cos = std::cos(s_[2]);
    const float sin = std::sin(s_[2]);
    const float total = kCart + kPole;
    const float temp = (force + kPole * kHalfLength * s_[3] * s_[3] * sin) / total;
    const float angular =
        (kGravity * sin - cos * temp) / (kHalfLength * (4.0F / 3.0F - kPole * cos * cos / total));
    const float linear = temp - kPole * kHalfLength * angular * cos / total;
    s_[0] += kTau * s_[1];
    s_[1] += kTau * linear;
    s_[2] += kTau * s_[3];
    s_[3] += kTau * angular;
    ++steps_;
    return std::abs(s_[0]) > 2.4F || std::abs(s_[2]) > 12.0F * 3.14159265F / 180.0F ||
           steps_ >= 500;
  }
  const std::vector<float>& state() const { return s_; }

 private:
  std::mt19937_64 random_;
  std::vector<float> s_;
  int steps_ = 0;
};

// The store's key of the policy's weights, and their element type.
const std::string kKey = "policy";
const std::string kFloat32 = "float32";

torch::nn::Sequential make_policy() {
  torch::manual_seed(1);
  return torch::nn::Sequential(torch::nn::Linear(4, 64), torch::nn::Tanh(),
                               torch::nn::Linear(64, 2));
}

std::int64_t parameter_count(torch::nn::Sequential& m) {
  std::int64_t n = 0;
  for (auto& p : m->parameters()) n += p.numel();
  return n;
}

void load_weights(torch::nn::Sequential& m, const std::vector<float>& w) {
  torch::NoGradGuard no_grad;
  std::int64_t at = 0;
  for (auto& p : m->parameters()) {
    const auto n = p.numel();
    p.view(-1).copy_(torch::from_blob(const_cast<float*>(w.data()) + at, {n}));
    at += n;
  }
}

/// Episodes a generator played: states, actions and discounted returns-to-go, step by step.
struct Batch {
  std::vector<float> states;
  std::vector<std::int64_t> actions;
  std::vector<float> returns;
  double mean_return = 0;  // of the episodes (their lengths)
  int version = 0;         // of the weights they were played with
  double sync_ms = 0;      // the one-sided read of those weights

  template <class Ar>
  void serialize(Ar& ar) {
    ar(states, actions, returns, mean_return, version, sync_ms);
  }
};

class Generator : public baton::Actor {
 public:
  Generator() : policy_(make_policy()), env_(1000 + static_cast<std::uint64_t>(context().rank)) {
    torch::set_num_threads(1);
  }
  /// Reads weights `version` from the store (a whole copy, assembled from the trainer's two
  /// shards) and plays `episodes` episodes.
  Task<Batch> play(baton::store::Store store, int version, int episodes) {
    Batch b;
    b.version = version;
    if (version != have_) {
      std::vector<float> w(static_cast<std::size_t>(parameter_count(policy_)));
      const auto t0 = Clock::now();
      const baton::store::GetOptions which{.version = static_cast<std::uint64_t>(version)};
      co_await store.get_into(kKey, std::as_writable_bytes(std::span(w)), which, kFloat32);
      b.sync_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      load_weights(policy_, w);
      have_ = version;
    }
    torch::NoGradGuard no_grad;
    double total = 0;
    for (int e = 0; e < episodes; ++e) {
      std::vector<float> s = env_.reset();
      std::size_t first = b.actions.size();
      bool over = false;
      while (!over) {
        const auto logits = policy_->forward(torch::from_blob(s.data(), {1, 4}));
        const int action =
            static_cast<int>(torch::multinomial(torch::softmax(logits, 1), 1).item<std::int64_t>());
        b.states.insert(b.states.end(), s.begin(), s.end());
        b.actions.push_back(action);
        over = env_.step(action);
        s = env_.state();
      }
      const std::size_t length = b.actions.size() - first;
      total += static_cast<double>(length);
      // Rewards of 1 per step, discounted by 0.99, summed to the episode's end.
      float g = 0;
      std::vector<float> returns(length);
      for (std::size_t i = length; i-- > 0;) returns[i] = g = 1.0F + 0.99F * g;
      b.returns.insert(b.returns.end(), returns.begin(), returns.end());
    }
    b.mean_return = total / episodes;
    co_return b;
  }
  static constexpr auto endpoints = baton::endpoints<&Generator::play>();

 private:
  torch::nn::Sequential policy_;
  CartPole env_;
  int have_ = -1;
};

/// One rank of the trainer. Both ranks hold the whole policy and take the same steps on the same
/// batches; each publishes its half of the weights, a shard of the flat weight vector.
class Trainer : public baton::Actor {
 public:
  Trainer(baton::store::Store store, int keep)
      : policy_(make_policy()), store_(std::move(store)), keep_(keep) {
    torch::set_num_threads(1);
    optimizer_ = std::make_unique<torch::optim::Adam>(policy_->parameters(),
                                                      torch::optim::AdamOptions(0.01));
  }
  /// Puts this rank's shard of the current weights; the version it went into.
  Task<int> publish() {
    std::vector<torch::Tensor> all;
    for (auto& p : policy_->parameters()) all.push_back(p.detach().view(-1));
    const torch::Tensor flat = torch::cat(all).contiguous();
    const std::int64_t n = flat.numel();
    const baton::store::Box mine =
        baton::store::chunk(baton::store::Box::whole({n}), 0, context().rank, 2);
    const auto* first = flat.data_ptr<float>() + mine.offsets[0];
    // (Named, not temporaries in the co_await: GCC 12 mishandles those.)
    const baton::store::PutOptions shard{.shard = mine, .keep = static_cast<std::size_t>(keep_)};
    const baton::store::TensorInfo info{"float32", sizeof(float), {n}};
    baton::Bytes half =
        baton::Bytes::copy(first, static_cast<std::size_t>(mine.sizes[0]) * sizeof(float));
    const baton::store::Put put = co_await store_.put(kKey, std::move(half), info, shard);
    co_return static_cast<int>(put.version);
  }
  /// One policy-gradient step on `batch`; the new weights are published.
  Task<int> update(Batch batch) {
    const auto n = static_cast<std::int64_t>(batch.actions.size());
    const auto states = torch::from_blob(batch.states.data(), {n, 4});
    const auto actions = torch::from_blob(batch.actions.data(), {n, 1}, torch::kLong);
    auto returns = torch::from_blob(batch.returns.data(), {n}).clone();
    returns = (returns - returns.mean()) / (returns.std() + 1e-6);
    const auto logp = torch::log_softmax(policy_->forward(states), 1).gather(1, actions).view(-1);
    const auto loss = -(logp * returns).mean();
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
    co_return co_await publish();
  }
  static constexpr auto endpoints = baton::endpoints<&Trainer::publish, &Trainer::update>();

 private:
  torch::nn::Sequential policy_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  baton::store::Store store_;
  int keep_;
};

class Evaluator : public baton::Actor {
 public:
  Evaluator() : policy_(make_policy()), env_(7) { torch::set_num_threads(1); }
  /// The mean return of `episodes` greedy episodes with weights `version` from the store.
  Task<double> score(baton::store::Store store, int version, int episodes) {
    std::vector<float> w(static_cast<std::size_t>(parameter_count(policy_)));
    const baton::store::GetOptions which{.version = static_cast<std::uint64_t>(version)};
    co_await store.get_into(kKey, std::as_writable_bytes(std::span(w)), which, kFloat32);
    load_weights(policy_, w);
    torch::NoGradGuard no_grad;
    double total = 0;
    for (int e = 0; e < episodes; ++e) {
      std::vector<float> s = env_.reset();
      for (bool over = false; !over; ++total) {
        const auto logits = policy_->forward(torch::from_blob(s.data(), {1, 4}));
        over = env_.step(static_cast<int>(logits.argmax(1).item<std::int64_t>()));
        s = env_.state();
      }
    }
    co_return total / episodes;
  }
  static constexpr auto endpoints = baton::endpoints<&Evaluator::score>();

 private:
  torch::nn::Sequential policy_;
  CartPole env_;
};

}  // namespace

int main(int argc, char** argv) {
  int generators_n = 2;
  int updates = 300;
  int episodes = 4;
  int max_staleness = 2;
  double target = 150;
  CLI::App app{
      "rl_weight_sync: REINFORCE on CartPole as one program, the weights synced through the "
      "tensor store; fails unless the evaluator's mean return reaches --target"};
  app.add_option("--generators", generators_n, "generator actors playing episodes")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--updates", updates, "the most policy updates before giving up")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--episodes", episodes, "episodes per generator per batch")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--target", target, "the mean return to reach")->capture_default_str();
  app.add_option("--max-staleness", max_staleness, "updates a played batch's weights may lag")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  baton::Runtime rt(argc, argv);  // in a worker process this never returns
  auto gen_procs =
      baton::this_host().spawn_procs({{"generators", static_cast<std::size_t>(generators_n)}});
  auto generators = gen_procs.spawn<Generator>("generators");
  // The store's volume lives with the trainer's two ranks, which put the weights.
  auto trainer_procs = baton::this_host().spawn_procs({{"trainer", 2}});
  const baton::store::Store store = baton::store::Store::create(trainer_procs);
  // A generator may read weights max_staleness updates old, and one more is being played.
  const int keep = max_staleness + 2;
  auto trainer = trainer_procs.spawn<Trainer>("trainer", store, keep);
  auto eval_proc = baton::this_host().spawn_procs({{"evaluator", 1}});
  auto evaluator = eval_proc.spawn<Evaluator>("evaluator").at(0);
  std::printf("rl_weight_sync: %d generators, %d episodes each per batch, up to %d updates\n",
              generators_n, episodes, updates);

  auto newest = [](const baton::ValueMesh<int>& versions) {
    return std::max(versions[0], versions[1]);  // the rank whose put completed the version
  };
  int latest = newest(trainer.call(&Trainer::publish).get());
  // Every generator plays all the time: when its batch arrives it starts the next one, with
  // whatever weights are latest then.
  std::deque<std::pair<int, baton::Future<Batch>>> playing;
  for (int g = 0; g < generators_n; ++g) {
    playing.emplace_back(
        g,
        generators.at(static_cast<std::size_t>(g)).call(&Generator::play, store, latest, episodes));
  }
  const auto start = Clock::now();
  double samples = 0;
  double best = 0;
  double sync_ms = 0;
  int syncs = 0;
  int dropped = 0;
  int staleness_sum = 0;
  int update = 0;
  for (; update < updates;) {
    auto [g, next] = std::move(playing.front());
    playing.pop_front();
    Batch batch = next.get();
    playing.emplace_back(
        g,
        generators.at(static_cast<std::size_t>(g)).call(&Generator::play, store, latest, episodes));
    if (batch.sync_ms > 0) {
      sync_ms += batch.sync_ms;
      ++syncs;
    }
    const int staleness = latest - batch.version;
    if (staleness > max_staleness) {
      ++dropped;
      continue;
    }
    staleness_sum += staleness;
    samples += static_cast<double>(batch.actions.size());
    latest = newest(trainer.call(&Trainer::update, batch).get());
    ++update;
    if (update % 10 == 0) {
      const double score = evaluator.call(&Evaluator::score, store, latest, 5).get();
      best = std::max(best, score);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      std::printf(
          "update %4d  mean return %6.1f  eval %6.1f  %7.0f samples/s  weight sync %.3f ms  "
          "staleness %.2f  dropped %d\n",
          update, batch.mean_return, score, samples / seconds, syncs > 0 ? sync_ms / syncs : 0.0,
          static_cast<double>(staleness_sum) / update, dropped);
      std::fflush(stdout);
      if (score >= target) break;
    }
  }
  for (auto& p : playing) (void)p.second.get();
  gen_procs.stop().get();
  trainer_procs.stop().get();
  eval_proc.stop().get();
  std::printf("rl_weight_sync: best evaluated mean return %.1f after %d updates (target %.0f)\n",
              best, update, target);
  if (best < target) {
    std::fprintf(stderr, "rl_weight_sync: the policy did not reach the target return\n");
    return 1;
  }
  return 0;
}
