// The peer to beat in `baton-bench inproc`: the C++ Actor Framework (Debian's libcaf-dev 0.17.6)
// doing exactly what inproc.cpp does with baton. Only this benchmark links CAF.
//
// Configuration: a default `caf::actor_system_config`, i.e. CAF's work-stealing scheduler with
// its default worker count, max(hardware threads, 4) = 4 workers on the 2-core bench machine
// (baton's default pool has one per hardware thread; capping CAF at 2 measured no different),
// and its default max-throughput (unbounded: an actor drains its mailbox before yielding).
// Event-based actors only, as CAF recommends for performance; replies through the non-blocking
// `request(...).then(...)`, the counterpart of baton's `co_await call(...)`.
//
// CAF 0.17 notes: an exception thrown in a handler kills the actor with `sec::runtime_error` and
// a request without an error handler quits the requester on failure, so nobody would ever answer
// the waiting main thread; failures are therefore handed to it through its promise instead. An
// event-based actor whose behavior stack is empty terminates even with requests in flight, so
// the pinger installs a behavior that merely keeps it alive.

#include <caf/all.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <stdexcept>
#include <string>
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
  int warmup = 0;
  int total = 0;  // warm-up included
  std::vector<double>* samples = nullptr;
  std::promise<void>* done = nullptr;
};

using Pinger = caf::stateful_actor<PingState>;

void ping_failed(Pinger* self, const std::string& what) {
  self->state.done->set_exception(std::make_exception_ptr(std::runtime_error(what)));
  self->quit();
}

// Round trip `i`: timed from just before the request to the start of the reply handler, which
// starts round trip `i + 1`.
void ping_once(Pinger* self, int i) {
  auto& st = self->state;
  if (i == st.total) {
    st.done->set_value();
    self->quit();
    return;
  }
  const auto t0 = Clock::now();
  self->request(st.ponger, caf::infinite, i)
      .then(
          [self, i, t0](int r) {
            const auto t1 = Clock::now();
            if (r != i + 1) return ping_failed(self, "CAF ponger replied wrongly");
            if (i >= self->state.warmup) {
              self->state.samples->push_back(
                  std::chrono::duration<double, std::micro>(t1 - t0).count());
            }
            ping_once(self, i + 1);
          },
          [self](caf::error& err) {
            ping_failed(self, "CAF request failed: " + self->system().render(err));
          });
}

caf::behavior pinger(Pinger* self, caf::actor pong, int warmup, int n, std::vector<double>* samples,
                     std::promise<void>* done) {
  auto& st = self->state;
  st.ponger = std::move(pong);
  st.warmup = warmup;
  st.total = warmup + n;
  st.samples = samples;
  st.done = done;
  ping_once(self, 0);
  // Never matches anything; it only keeps the actor alive while its requests are in flight.
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

// Spawned ahead of the clock; told whom to blast and how much by one message, as in inproc.cpp.
caf::behavior sender(caf::event_based_actor* self) {
  return {[self](const caf::actor& to, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) self->send(to, 1);
    self->quit();
  }};
}

}  // namespace

InprocFigures caf_inproc(std::size_t rtt_iterations, std::size_t throughput_messages) {
  InprocFigures f{};
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  {
    constexpr int kWarmup = 1000;
    std::vector<double> samples;
    samples.reserve(rtt_iterations);
    std::promise<void> done;
    auto finished = done.get_future();
    auto pong = sys.spawn(ponger);
    sys.spawn(pinger, pong, kWarmup, static_cast<int>(rtt_iterations), &samples, &done);
    try {
      finished.get();
    } catch (...) {
      caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
      throw;
    }
    caf::anon_send_exit(pong, caf::exit_reason::user_shutdown);
    if (samples.size() != rtt_iterations || samples.empty())
      throw std::runtime_error("CAF rtt lost samples");
    std::nth_element(samples.begin(),
                     samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2),
                     samples.end());
    f.rtt_p50_us = samples[samples.size() / 2];
  }
  {
    const auto n = static_cast<std::int64_t>(throughput_messages);
    if (n <= 0) throw std::runtime_error("CAF throughput needs at least one message");
    std::promise<std::int64_t> done;
    auto counted = done.get_future();
    auto recv = sys.spawn(receiver, n, &done);
    auto send = sys.spawn(sender);
    const auto t0 = Clock::now();
    caf::anon_send(send, recv, n);
    const std::int64_t sum = counted.get();
    const auto t1 = Clock::now();
    if (sum != n) throw std::runtime_error("CAF receiver counted the wrong sum");
    f.throughput_msgs = static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count();
  }
  sys.await_all_actors_done();
  return f;
}

}  // namespace baton::bench
