#pragma once

// Test helpers shared by the net layer's tests: an inbox that collects what a link delivers,
// and envelopes to send. Waits are on conditions with a generous deadline (a failure, never a
// sleep).

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "baton/net/link.hpp"

namespace baton::net::testing {

inline constexpr std::chrono::seconds kDeadline{20};

/// Envelopes and close reasons of one link, collected from the I/O thread.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Envelope> envelopes;
  std::vector<std::string> closed;

  /// A handler feeding this inbox; `also` sees each envelope first (to echo it, say).
  LinkHandler handler(std::function<void(Envelope&)> also = nullptr) {
    return LinkHandler{[this, also = std::move(also)](Envelope env) {
                         if (also) also(env);
                         std::lock_guard lock(mu);
                         envelopes.push_back(std::move(env));
                         cv.notify_all();
                       },
                       [this](const std::string& reason) {
                         std::lock_guard lock(mu);
                         closed.push_back(reason);
                         cv.notify_all();
                       }};
  }
  bool wait_envelopes(std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, kDeadline, [&] { return envelopes.size() >= n; });
  }
  std::string wait_closed() {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, kDeadline, [&] { return !closed.empty(); })) return "never closed";
    return closed.front();
  }
  std::size_t count() {
    std::lock_guard lock(mu);
    return envelopes.size();
  }
};

/// Envelope number `i` (its port), carrying `i` and a part of `part` bytes.
inline Envelope make(std::uint64_t i, std::size_t part = 0) {
  Envelope env;
  env.sender = ActorId::parse("ctl/client[0]");
  env.dest = PortId{ActorId::parse("w.1/trainer[0]"), i};
  env.body =
      encode(static_cast<int>(i), Bytes::copy(std::string(part, static_cast<char>('a' + i % 26))));
  return env;
}

}  // namespace baton::net::testing
