// The C++ side of examples/python/cpp_trainers.py: a worker program whose Trainer actors a
// Python controller spawns by name and drives. Each Trainer fits y = w x + b to the shard it is
// given with gradient descent; the controller averages their weights between rounds.
//
// Run alone it says what it is for; started by the Python controller it serves as a worker.

#include <baton/baton.hpp>
#include <baton/python/expose.hpp>

#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

class Trainer : public baton::Actor {
 public:
  Trainer(double lr, std::string tag) : lr_(lr), tag_(std::move(tag)) {}

  /// The data this trainer fits: points (x, y).
  void load(std::vector<double> xs, std::vector<double> ys) {
    if (xs.size() != ys.size() || xs.empty()) {
      throw std::invalid_argument("load: xs and ys must be non-empty and of one length");
    }
    xs_ = std::move(xs);
    ys_ = std::move(ys);
  }
  /// `steps` of gradient descent on the mean squared error; returns the last loss.
  double train(int steps) {
    double loss = 0;
    const auto n = static_cast<double>(xs_.size());
    for (int s = 0; s < steps; ++s) {
      double gw = 0;
      double gb = 0;
      loss = 0;
      for (std::size_t i = 0; i < xs_.size(); ++i) {
        const double err = w_ * xs_[i] + b_ - ys_[i];
        gw += 2 * err * xs_[i] / n;
        gb += 2 * err / n;
        loss += err * err / n;
      }
      w_ -= lr_ * gw;
      b_ -= lr_ * gb;
    }
    return loss;
  }
  std::vector<double> weights() { return {w_, b_}; }
  void set_weights(std::vector<double> wb) {
    w_ = wb.at(0);
    b_ = wb.at(1);
  }
  /// Puts this trainer's weights [w, b] (float64) in the tensor store whose handle is `store`,
  /// under `key`: a Python program reads them as any tensor.
  baton::Task<std::int64_t> publish(std::string store, std::string key) {
    const baton::store::Store s = baton::store::Store::from_handle(store);
    const double wb[2] = {w_, b_};
    const baton::store::TensorInfo info{"float64", sizeof(double), {2}};
    baton::Bytes value = baton::Bytes::copy(wb, sizeof wb);
    const baton::store::Put put = co_await s.put(key, std::move(value), info);
    co_return static_cast<std::int64_t>(put.version);
  }
  /// Sets the weights from a float64 [2] tensor a Python program put in the store.
  baton::Task<void> load_from(std::string store, std::string key) {
    const baton::store::Store s = baton::store::Store::from_handle(store);
    double wb[2] = {};
    const baton::store::GetOptions latest;
    const std::string dtype = "float64";
    co_await s.get_into(key, std::as_writable_bytes(std::span(wb)), latest, dtype);
    w_ = wb[0];
    b_ = wb[1];
  }
  /// What this trainer is: its tag, rank and data size.
  std::map<std::string, std::string> about() {
    return {{"tag", tag_},
            {"rank", std::to_string(context().rank)},
            {"points", std::to_string(xs_.size())}};
  }

  static constexpr auto endpoints =
      baton::endpoints<&Trainer::load, &Trainer::train, &Trainer::weights, &Trainer::set_weights,
                       &Trainer::about, &Trainer::publish, &Trainer::load_from>();

 private:
  double lr_;
  std::string tag_;
  double w_ = 0;
  double b_ = 0;
  std::vector<double> xs_;
  std::vector<double> ys_;
};

int main(int argc, char** argv) {
  baton::expose<Trainer, double, std::string>("Trainer");
  baton::Runtime rt(argc, argv);  // started by a controller, this serves and never returns
  std::fprintf(stderr,
               "cpp_trainers: the worker program of examples/python/cpp_trainers.py; run that\n");
  return 2;
}
