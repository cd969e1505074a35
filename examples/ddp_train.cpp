// ddp_train: data-parallel training of a small libtorch MLP on the scikit-learn digits data set
// (8x8 images of digits, shipped in Debian's python3-sklearn). N trainer actors in N procs each
// train on a shard; their gradients are averaged with an allreduce at every step, so every
// replica takes the same step. An evaluator actor in a proc of its own scores the held-out fifth
// of the data after each epoch. The run fails (exit 1) unless the loss falls and the final
// accuracy reaches --min-accuracy.
//
// --kill-at STEP kills the last trainer's process (SIGKILL) at that step: the others'
// allreduce fails naming it, supervision reports it, and the controller respawns it in a new
// proc, restores the weights from a surviving rank through an RdmaBuffer, rebuilds the group
// and finishes the training; it prints what happened and how long the recovery took.
//
// Where libtorch has CUDA (or ROCm) and the machine has a GPU for each trainer, each trainer's
// model, data and gradients live on GPU rank and the allreduce runs through NCCL (RCCL), which
// takes one rank per GPU; otherwise on the CPU through Gloo. --device cpu keeps them there.
//
//   ddp_train [--trainers N] [--epochs E] [--batch B] [--min-accuracy A] [--kill-at STEP]
//             [--data digits.csv.gz] [--device auto|cpu] [--plain 1]
//
// --plain 1 trains the same model on the same data in this process alone, with no baton, and
// prints its samples/s: the baseline of `baton-bench ddp`.

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <baton/baton.hpp>
#include <baton/collective/tensor.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace {

using baton::Task;
namespace collective = baton::collective;

constexpr const char* kDigits =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

/// The digits: 64 pixels (0-16, scaled to 0-1) and a label per sample; every fifth sample is
/// held out for evaluation.
struct Digits {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::size_t size() const { return y.size(); }
};

void load(const std::string& path, Digits& train, Digits& test) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    throw std::runtime_error("cannot read " + path +
                             " (Debian's python3-sklearn has it; make deps)");
  }
  char line[1024];
  std::size_t n = 0;
  while (gzgets(in, line, sizeof line) != nullptr) {
    std::istringstream fields(line);
    std::vector<float> row;
    for (std::string f; std::getline(fields, f, ',');) row.push_back(std::stof(f));
    if (row.size() != 65) continue;
    Digits& to = n++ % 5 == 0 ? test : train;
    for (std::size_t i = 0; i < 64; ++i) to.x.push_back(row[i] / 16.0F);
    to.y.push_back(static_cast<std::int64_t>(row[64]));
  }
  gzclose(in);
  if (train.size() == 0) throw std::runtime_error(path + " holds no digits");
}

torch::nn::Sequential make_model() {
  torch::manual_seed(0);  // every replica starts from the same weights
  return torch::nn::Sequential(torch::nn::Linear(64, 64), torch::nn::ReLU(),
                               torch::nn::Linear(64, 10));
}

/// The loss on rows `rows` of (x, y), its gradients left in `model`.
torch::Tensor forward_backward(torch::nn::Sequential& model, const torch::Tensor& x,
                               const torch::Tensor& y, const torch::Tensor& rows) {
  auto loss = torch::nn::functional::cross_entropy(model->forward(x.index_select(0, rows)),
                                                   y.index_select(0, rows));
  loss.backward();
  return loss;
}

/// The same training in this process alone, with no baton: the baseline of `--plain`.
/// Returns samples per second.
double plain_training(const std::string& data, int epochs, int batch) {
  Digits train;
  Digits test;
  load(data, train, test);
  torch::set_num_threads(1);
  auto model = make_model();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.2));
  const auto n = static_cast<std::int64_t>(train.size());
  const auto x = torch::from_blob(train.x.data(), {n, 64});
  const auto y = torch::from_blob(train.y.data(), {n}, torch::kLong);
  const auto t0 = std::chrono::steady_clock::now();
  std::int64_t samples = 0;
  for (int e = 1; e <= epochs; ++e) {
    const auto order = torch::randperm(n, torch::kLong);
    for (std::int64_t s = 0; (s + 1) * batch <= n; ++s) {
      optimizer.zero_grad();
      (void)forward_backward(model, x, y, order.slice(0, s * batch, (s + 1) * batch));
      optimizer.step();
      samples += batch;
    }
  }
  return static_cast<double>(samples) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Trainer : public baton::Actor {
 public:
  Trainer(const std::string& data, const std::string& device)
      : use_gpu_(device != "cpu"), model_(make_model()) {
    torch::set_num_threads(1);
    Digits test;
    load(data, train_, test);
    x_ = torch::from_blob(train_.x.data(), {static_cast<std::int64_t>(train_.size()), 64});
    y_ =
        torch::from_blob(train_.y.data(), {static_cast<std::int64_t>(train_.size())}, torch::kLong);
    // Plain SGD: no optimizer state, so a respawned replica needs the weights alone.
    optimizer_ =
        std::make_unique<torch::optim::SGD>(model_->parameters(), torch::optim::SGDOptions(0.2));
  }
  /// Joins the group; returns the device this rank trains on.
  Task<std::string> join(collective::Group g) {
    co_await comm_.join(g, *this);
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (use_gpu_ && torch::cuda::is_available() && device_.is_cpu() && comm_.size() <= gpus) {
      device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(comm_.rank()));
      model_->to(device_);  // the parameters keep their identity: the optimizer still has them
      x_ = x_.to(device_);
      y_ = y_.to(device_);
    }
    co_return device_.str();
  }
  /// One pass over this rank's shard; returns {mean loss, samples}. The rank `victim` kills its
  /// own process when it reaches step `kill_at` (counted over the whole run).
  Task<std::vector<double>> epoch(int e, int batch, int kill_at, int victim) {
    const auto ranks = static_cast<std::size_t>(comm_.size());
    const auto me = static_cast<std::size_t>(comm_.rank());
    std::vector<std::int64_t> shard;
    for (std::size_t i = me; i < train_.size(); i += ranks)
      shard.push_back(static_cast<std::int64_t>(i));
    torch::manual_seed(static_cast<std::uint64_t>(e) * 1000 + me);
    const auto order = torch::randperm(static_cast<std::int64_t>(shard.size()), torch::kLong);
    const auto index =
        torch::from_blob(shard.data(), {static_cast<std::int64_t>(shard.size())}, torch::kLong)
            .index_select(0, order)
            .to(device_);
    // Every rank takes the same number of steps: the allreduce of each is collective.
    const std::size_t steps = (train_.size() / ranks) / static_cast<std::size_t>(batch);
    double loss_sum = 0;
    for (std::size_t s = 0; s < steps; ++s) {
      if (comm_.rank() == victim && steps_done_++ == kill_at) ::kill(::getpid(), SIGKILL);
      const auto rows = index.slice(0, static_cast<std::int64_t>(s) * batch,
                                    static_cast<std::int64_t>(s + 1) * batch);
      optimizer_->zero_grad();
      const auto loss = forward_backward(model_, x_, y_, rows);
      // The gradients, flattened, averaged over the ranks, and put back.
      std::vector<torch::Tensor> grads;
      for (auto& p : model_->parameters()) grads.push_back(p.grad().view(-1));
      torch::Tensor flat = torch::cat(grads);
      co_await collective::allreduce(comm_, flat, collective::ReduceOp::avg);
      std::int64_t at = 0;
      for (auto& p : model_->parameters()) {
        const auto n = p.grad().numel();
        p.grad().view(-1).copy_(flat.slice(0, at, at + n));
        at += n;
      }
      optimizer_->step();
      loss_sum += loss.item<double>();
    }
    co_return std::vector<double>{loss_sum / static_cast<double>(steps),
                                  static_cast<double>(steps * static_cast<std::size_t>(batch))};
  }
  /// The weights, flattened (every replica has the same).
  std::vector<float> weights() {
    std::vector<torch::Tensor> all;
    for (auto& p : model_->parameters()) all.push_back(p.detach().view(-1));
    const torch::Tensor flat = torch::cat(all).to(torch::kCPU).contiguous();
    return {flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel()};
  }
  /// This replica's weights, published for one-sided reads.
  baton::RdmaBuffer publish() {
    snapshot_ = weights();
    published_ =
        baton::RdmaBuffer::register_memory(snapshot_.data(), snapshot_.size() * sizeof(float));
    return published_;
  }
  /// Takes the weights another replica published; says how they moved.
  Task<std::string> restore(baton::RdmaBuffer from, std::int64_t floats) {
    std::vector<float> got(static_cast<std::size_t>(floats));
    co_await from.read_into(got.data(), got.size() * sizeof(float));
    torch::NoGradGuard no_grad;
    std::int64_t at = 0;
    for (auto& p : model_->parameters()) {
      const auto n = p.numel();
      p.view(-1).copy_(torch::from_blob(got.data() + at, {n}));
      at += n;
    }
    co_return std::string(baton::to_string(baton::rdma_backend(from, got.data())));
  }
  static constexpr auto endpoints =
      baton::endpoints<&Trainer::join, &Trainer::epoch, &Trainer::weights, &Trainer::publish,
                       &Trainer::restore>();

 private:
  int steps_done_ = 0;
  bool use_gpu_;
  torch::Device device_ = torch::kCPU;
  torch::Tensor x_;  // the training data, on device_
  torch::Tensor y_;
  std::vector<float> snapshot_;
  baton::RdmaBuffer published_;
  Digits train_;
  torch::nn::Sequential model_;
  std::unique_ptr<torch::optim::SGD> optimizer_;
  collective::Communicator comm_;
};

class Evaluator : public baton::Actor {
 public:
  explicit Evaluator(const std::string& data) : model_(make_model()) {
    torch::set_num_threads(1);
    Digits train;
    load(data, train, test_);
  }
  /// The held-out accuracy of `weights`.
  double accuracy(const std::vector<float>& weights) {
    torch::NoGradGuard no_grad;
    std::int64_t at = 0;
    for (auto& p : model_->parameters()) {
      const auto n = p.numel();
      p.view(-1).copy_(torch::from_blob(const_cast<float*>(weights.data()) + at, {n}));
      at += n;
    }
    const auto x = torch::from_blob(test_.x.data(), {static_cast<std::int64_t>(test_.size()), 64});
    const auto y =
        torch::from_blob(test_.y.data(), {static_cast<std::int64_t>(test_.size())}, torch::kLong);
    const auto right = model_->forward(x).argmax(1).eq(y).sum().item<std::int64_t>();
    return static_cast<double>(right) / static_cast<double>(test_.size());
  }
  static constexpr auto endpoints = baton::endpoints<&Evaluator::accuracy>();

 private:
  Digits test_;
  torch::nn::Sequential model_;
};

/// An indicatif-style line: redrawn in place on a terminal, a line each otherwise.
void progress(int epoch, int epochs, double loss, double accuracy, double samples_per_s) {
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  constexpr int kWidth = 24;
  const int done = kWidth * epoch / epochs;
  std::printf("%s[%s%s] epoch %d/%d  loss %.4f  accuracy %.3f  %.0f samples/s%s", tty ? "\r" : "",
              std::string(static_cast<std::size_t>(done), '#').c_str(),
              std::string(static_cast<std::size_t>(kWidth - done), '-').c_str(), epoch, epochs,
              loss, accuracy, samples_per_s, tty && epoch < epochs ? "" : "\n");
  std::fflush(stdout);
}

}  // namespace

/// The trainers, in group rank order: the first mesh's members, then any respawned ones.
struct Trainers {
  std::vector<baton::ActorMesh<Trainer>> parts;

  std::size_t size() const {
    std::size_t n = 0;
    for (const auto& p : parts) n += p.size();
    return n;
  }
  /// A group of them all, in order, which each joins; the devices they train on, by rank.
  std::vector<std::string> join() const {
    std::vector<baton::ActorId> ids;
    std::vector<std::string> addresses;
    for (const auto& p : parts) {
      for (std::size_t r = 0; r < p.size(); ++r) {
        ids.push_back(p.at(r).id());
        addresses.push_back(baton::detail::address_text(p.at(r).id().proc));
      }
    }
    const collective::Group group = collective::make_group(ids, addresses);
    std::vector<baton::Future<baton::ValueMesh<std::string>>> joined;
    joined.reserve(parts.size());
    for (const auto& p : parts) joined.push_back(p.call(&Trainer::join, group));
    std::vector<std::string> devices;
    for (auto& j : joined) {
      for (auto& d : j.get().values()) devices.push_back(d);
    }
    return devices;
  }
  /// One epoch on every trainer; {loss, samples} by rank.
  std::vector<std::vector<double>> epoch(int e, int batch, int kill_at, int victim) const {
    std::vector<baton::Future<baton::ValueMesh<std::vector<double>>>> calls;
    calls.reserve(parts.size());
    for (const auto& p : parts) calls.push_back(p.call(&Trainer::epoch, e, batch, kill_at, victim));
    std::vector<std::vector<double>> out;
    for (auto& c : calls) {
      for (auto& v : c.get().values()) out.push_back(v);
    }
    return out;
  }
};

int main(int argc, char** argv) {
  int trainers_n = 2;
  int epochs = 15;
  int batch = 16;
  int kill_at = -1;
  bool plain = false;
  double min_accuracy = 0.9;
  std::string data = kDigits;
  std::string device = "auto";
  CLI::App app{
      "ddp_train: data-parallel training of a libtorch MLP on the digits data; fails unless the "
      "loss falls and the accuracy reaches --min-accuracy"};
  app.add_option("--trainers", trainers_n, "trainer actors, one proc each")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--epochs", epochs, "passes over the training data")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--batch", batch, "samples per trainer per step")
      ->check(CLI::Range(1, 1'000'000))
      ->capture_default_str();
  app.add_option("--min-accuracy", min_accuracy, "the held-out accuracy the run must reach")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--kill-at", kill_at, "SIGKILL the last trainer's process at this step");
  app.add_option("--data", data, "the digits data, gzipped CSV")->capture_default_str();
  app.add_option("--device", device, "where the trainers compute (auto: a GPU each if there are)")
      ->check(CLI::IsMember({"auto", "cpu"}))
      ->capture_default_str();
  app.add_option("--plain", plain, "1: train in this process alone, with no baton (a baseline)");
  CLI11_PARSE(app, argc, argv);

  baton::RuntimeOptions options;
  options.supervise = [](const baton::MeshFailure& f) {
    std::printf("ddp_train: supervision: %s\n", f.to_string().c_str());
    return true;  // the training loop recovers from it
  };
  baton::Runtime rt(argc, argv, options);  // in a worker process this never returns
  if (plain) {
    std::printf("ddp_train: plain single-process libtorch: %.0f samples/s\n",
                plain_training(data, epochs, batch));
    return 0;
  }
  if (trainers_n < 2 && kill_at >= 0) {
    std::fprintf(stderr, "ddp_train: --kill-at needs 2 trainers or more (a survivor)\n");
    return 2;
  }
  auto procs = baton::this_host().spawn_procs({{"trainers", static_cast<std::size_t>(trainers_n)}});
  auto eval_proc = baton::this_host().spawn_procs({{"evaluators", 1}});
  auto evaluator = eval_proc.spawn<Evaluator>("evaluator", data);
  Trainers trainers{{procs.spawn<Trainer>("trainers", data, device)}};
  const std::vector<std::string> devices = trainers.join();
  std::vector<baton::ProcMesh> respawned;
  std::string on;
  for (const auto& d : devices) on += (on.empty() ? "" : ", ") + d;
  std::printf("ddp_train: %d trainers, %d epochs, batch %d per trainer, digits from %s\n",
              trainers_n, epochs, batch, data.c_str());
  std::printf("ddp_train: trainers on %s, gradients allreduced through %s\n", on.c_str(),
              devices.front() == "cpu" ? "Gloo" : "NCCL/RCCL");
  const int victim = trainers_n - 1;
  bool recovered = false;
  double first_loss = 0;
  double loss = 0;
  double accuracy = 0;
  double rate_sum = 0;  // samples/s per trainer, summed over the epochs
  for (int e = 1; e <= epochs; ++e) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<double>> results;
    try {
      results = trainers.epoch(e, batch, recovered ? -1 : kill_at, victim);
    } catch (const std::exception& failure) {
      if (kill_at < 0 || recovered) throw;
      // A trainer died mid-epoch: respawn it, give it a survivor's weights, rebuild the group,
      // and run the epoch again.
      const auto t_fail = std::chrono::steady_clock::now();
      const std::string why = failure.what();
      std::printf("\nddp_train: trainer rank %d died at step %d: %s\n", victim, kill_at,
                  why.substr(0, why.find('\n')).c_str());
      auto survivors =
          trainers.parts.front().slice("trainers", 0, static_cast<std::size_t>(victim));
      respawned.push_back(baton::this_host().spawn_procs({{"trainers", 1}}));
      auto fresh = respawned.back().spawn<Trainer>("trainers-respawned", data, device);
      const baton::RdmaBuffer weights = survivors.at(0).call(&Trainer::publish).get();
      const auto floats = static_cast<std::int64_t>(weights.size() / sizeof(float));
      const std::string via = fresh.at(0).call(&Trainer::restore, weights, floats).get();
      trainers.parts = {survivors, fresh};
      (void)trainers.join();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_fail)
              .count();
      std::printf(
          "ddp_train: respawned rank %d in a new proc, restored its weights from rank 0 "
          "through an RdmaBuffer (%s), rebuilt the group: recovered in %.0f ms\n",
          victim, via.c_str(), ms);
      recovered = true;
      --e;
      continue;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    loss = 0;
    double samples = 0;
    for (const auto& r : results) {
      loss += r[0] / static_cast<double>(results.size());
      samples += r[1];
    }
    if (e == 1) first_loss = loss;
    const auto weights = trainers.parts.front().at(0).call(&Trainer::weights).get();
    accuracy = evaluator.at(0).call(&Evaluator::accuracy, weights).get();
    rate_sum += samples / seconds / trainers_n;
    progress(e, epochs, loss, accuracy, samples / seconds / trainers_n);
  }
  // Data-parallel: every replica took the same steps, so all hold the same weights.
  std::vector<std::vector<float>> replicas;
  for (const auto& p : trainers.parts) {
    for (auto& w : p.call(&Trainer::weights).get().values()) replicas.push_back(w);
  }
  bool same = true;
  for (const auto& w : replicas) same = same && w == replicas.front();
  procs.stop().get();
  for (auto& r : respawned) r.stop().get();
  eval_proc.stop().get();
  std::printf("ddp_train: final held-out accuracy %.3f (loss %.4f, from %.4f)\n", accuracy, loss,
              first_loss);
  std::printf("ddp_train: %.0f samples/s per trainer\n", rate_sum / epochs);
  if (!same) {
    std::fprintf(stderr, "ddp_train: the replicas' weights differ\n");
    return 1;
  }
  if (kill_at >= 0 && !recovered) {
    std::fprintf(stderr, "ddp_train: --kill-at %d: no trainer was killed (fewer steps?)\n",
                 kill_at);
    return 1;
  }
  if (!(loss < first_loss) || accuracy < min_accuracy) {
    std::fprintf(stderr, "ddp_train: the model did not learn (want accuracy >= %.2f)\n",
                 min_accuracy);
    return 1;
  }
  return 0;
}
