// baton's side of `baton-bench inproc`: request/reply latency and one-way throughput between
// two actors in one proc, measured exactly as caf_inproc.cpp measures CAF.

#include <algorithm>
#include <chrono>
#include <vector>

#include "baton/baton.hpp"
#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

class Ponger : public Actor {
 public:
  int ping(int x) { return x + 1; }
  static constexpr auto endpoints = baton::endpoints<&Ponger::ping>();
};

class Pinger : public Actor {
 public:
  // Sequential round trips, each timed on its own; the first `warmup` are not kept.
  Task<std::vector<double>> run(ActorRef<Ponger> ponger, int warmup, int n) {
    std::vector<double> samples;
    samples.reserve(static_cast<std::size_t>(n));
    for (int i = 0; i < warmup + n; ++i) {
      const auto t0 = Clock::now();
      const int r = co_await ponger.call(&Ponger::ping, i);
      const auto t1 = Clock::now();
      if (r != i + 1) throw std::runtime_error("wrong reply");
      if (i >= warmup)
        samples.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    co_return samples;
  }
  static constexpr auto endpoints = baton::endpoints<&Pinger::run>();
};

class Receiver : public Actor {
 public:
  Receiver(std::int64_t expected, OncePort<std::int64_t> done) : expected_(expected), done_(done) {}
  void count(int x) {
    sum_ += x;
    if (++seen_ == expected_) done_.send(sum_);
  }
  static constexpr auto endpoints = baton::endpoints<&Receiver::count>();

 private:
  std::int64_t expected_;
  OncePort<std::int64_t> done_;
  std::int64_t seen_ = 0;
  std::int64_t sum_ = 0;
};

class Sender : public Actor {
 public:
  void blast(ActorRef<Receiver> to, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) to.send(&Receiver::count, 1);
  }
  static constexpr auto endpoints = baton::endpoints<&Sender::blast>();
};

}  // namespace

InprocFigures baton_inproc(std::size_t rtt_iterations, std::size_t throughput_messages) {
  InprocFigures f{};
  Proc proc(ProcOptions{.name = "bench"});
  {
    auto ponger = proc.spawn<Ponger>("ponger");
    auto pinger = proc.spawn<Pinger>("pinger");
    auto samples = pinger.call(&Pinger::run, ponger, 1000, static_cast<int>(rtt_iterations)).get();
    std::nth_element(samples.begin(),
                     samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                     samples.end());
    f.rtt_p50_us = samples[samples.size() / 2];
  }
  {
    const auto n = static_cast<std::int64_t>(throughput_messages);
    auto [port, done] = proc.open_once_port<std::int64_t>();
    auto receiver = proc.spawn<Receiver>("receiver", n, port);
    auto sender = proc.spawn<Sender>("sender");
    const auto t0 = Clock::now();
    sender.send(&Sender::blast, receiver, n);
    const std::int64_t sum = done.get();
    const auto t1 = Clock::now();
    if (sum != n) throw std::runtime_error("receiver counted the wrong sum");
    f.throughput_msgs = static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count();
  }
  return f;
}

}  // namespace baton::bench
