// The peer to beat in `baton-bench inproc`: the C++ Actor Framework (Debian's libcaf-dev 0.17)
// doing exactly what inproc.cpp does with baton. Only this benchmark links CAF.
//
// Configuration: CAF's default work-stealing scheduler with its default worker count (one per
// hardware thread, as baton's default pool), event-based actors, request/then for replies.

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

#include "figures.hpp"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

caf::behavior ponger(caf::event_based_actor*) {
  return {[](int x) { return x + 1; }};
}

struct PingState {
  caf::actor ponger;
  std::size_t warmup = 0;
  std::size_t total = 0;
  std::vector<double>* samples = nullptr;
  std::promise<void>* done = nullptr;
};

void ping_once(caf::stateful_actor<PingState>* self, int i) {
  auto& st = self->state;
  if (static_cast<std::size_t>(i) == st.warmup + st.total) {
    st.done->set_value();
    self->quit();
    return;
  }
  const auto t0 = Clock::now();
  self->request(st.ponger, caf::infinite, i).then([self, i, t0](int r) {
    const auto t1 = Clock::now();
    if (r != i + 1) throw std::runtime_error("CAF ponger replied wrongly");
    auto& s = self->state;
    if (static_cast<std::size_t>(i) >= s.warmup) {
      s.samples->push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    ping_once(self, i + 1);
  });
}

caf::behavior pinger(caf::stateful_actor<PingState>* self, caf::actor pong, std::size_t warmup,
                     std::size_t total, std::vector<double>* samples, std::promise<void>* done) {
  self->state.ponger = std::move(pong);
  self->state.warmup = warmup;
  self->state.total = total;
  self->state.samples = samples;
  self->state.done = done;
  ping_once(self, 0);
  // A behavior that never matches keeps the actor alive while it waits for replies.
  return {[](const std::string&) {}};
}

struct CountState {
  std::int64_t seen = 0;
  std::int64_t sum = 0;
};

caf::behavior receiver(caf::stateful_actor<CountState>* self, std::int64_t expected,
                       std::promise<std::int64_t>* done) {
  return {[self, expected, done](int x) {
    self->state.sum += x;
    if (++self->state.seen == expected) {
      done->set_value(self->state.sum);
      self->quit();
    }
  }};
}

void sender(caf::event_based_actor* self, caf::actor to, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) self->send(to, 1);
}

}  // namespace

InprocFigures caf_inproc(std::size_t rtt_iterations, std::size_t throughput_messages) {
  InprocFigures f{};
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  {
    std::vector<double> samples;
    samples.reserve(rtt_iterations);
    std::promise<void> done;
    auto pong = sys.spawn(ponger);
    sys.spawn(pinger, pong, std::size_t{1000}, rtt_iterations, &samples, &done);
    done.get_future().get();
    caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
    if (samples.size() != rtt_iterations) throw std::runtime_error("CAF rtt lost samples");
    std::nth_element(samples.begin(),
                     samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                     samples.end());
    f.rtt_p50_us = samples[samples.size() / 2];
  }
  {
    const auto n = static_cast<std::int64_t>(throughput_messages);
    std::promise<std::int64_t> done;
    auto fut = done.get_future();
    auto recv = sys.spawn(receiver, n, &done);
    const auto t0 = Clock::now();
    sys.spawn(sender, recv, n);
    const std::int64_t sum = fut.get();
    const auto t1 = Clock::now();
    if (sum != n) throw std::runtime_error("CAF receiver counted the wrong sum");
    f.throughput_msgs = static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count();
  }
  sys.await_all_actors_done();
  return f;
}

}  // namespace baton::bench
