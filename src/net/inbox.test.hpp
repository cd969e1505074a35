#pragma once

// Test helpers shared by the net layer's tests: an inbox that collects what a link delivers,
// and envelopes to send. Waits are on conditions with a generous deadline (a failure, never a
// sleep).

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/net/link.hpp"

namespace baton::net::testing {

inline constexpr std::chrono::seconds kDeadline{20};
/// The spin window where a test makes its event loop spin (spin_for_tests): long enough that the
/// frames of a ping-pong come within it even under a sanitizer, which slows them tenfold.
inline constexpr std::chrono::milliseconds kSpinWindow{20};

/// Envelopes and close reasons of one link, collected from the I/O thread.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Envelope> envelopes;
  std::vector<std::string> closed;
  std::vector<LinkEnd> ends;  // how it closed, beside each reason

  /// A handler feeding this inbox; `also` sees each envelope first (to echo it, say).
  LinkHandler handler(std::function<void(Envelope&)> also = nullptr) {
    return LinkHandler{[this, also = std::move(also)](Envelope env) {
                         if (also) also(env);
                         std::lock_guard lock(mu);
                         envelopes.push_back(std::move(env));
                         cv.notify_all();
                       },
                       [this](LinkEnd end, const std::string& reason) {
                         std::lock_guard lock(mu);
                         closed.push_back(reason);
                         ends.push_back(end);
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
  /// How the link ended, once it has (wait_closed() first).
  LinkEnd end() {
    std::lock_guard lock(mu);
    return ends.at(0);
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

/// A raw unix-socket client that skips the framing: hostile bytes, hand-made frames, and
/// handshakes done (or not) by hand.
class RawClient {
 public:
  explicit RawClient(const std::string& path) : fd_(::socket(AF_UNIX, SOCK_STREAM, 0)) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("raw connect failed");
    }
  }
  ~RawClient() { ::close(fd_); }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void write(const std::string& bytes) {
    std::size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the server already closed: fine for these tests
      off += static_cast<std::size_t>(n);
    }
  }
  /// Exactly `n` bytes, or fewer if the server closes first.
  std::string read(std::size_t n) {
    std::string out;
    while (out.size() < n) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kDeadline).count())) != 1) {
        break;
      }
      char buf[256];
      const ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) break;
      out.append(buf, static_cast<std::size_t>(got));
    }
    return out;
  }
  void shutdown_writes() { ::shutdown(fd_, SHUT_WR); }
  int fd() const { return fd_; }
  /// True once the server has closed the connection (reads end of stream or a reset).
  bool closed_by_server() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kDeadline).count())) != 1) {
      return false;
    }
    char c;
    return ::recv(fd_, &c, 1, 0) <= 0;
  }

 private:
  int fd_;
};

}  // namespace baton::net::testing
