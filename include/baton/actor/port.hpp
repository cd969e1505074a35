#pragma once

// Typed ports: addresses that accept values of one type. A Port<T> is serializable and can be
// passed in any message; whoever holds it can send. A OncePort<T> accepts one value and
// completes a Future<T>; a PortReceiver<T> queues values for a thread outside actors.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "baton/actor/future.hpp"
#include "baton/wire/archive.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

namespace detail {

class PortSink {
 public:
  virtual ~PortSink() = default;
  /// Accepts one value's bytes; returns false if the port no longer accepts values.
  virtual bool deliver(const Body& body) = 0;
  /// The link a value was expected over closed first (only for ports opened for a peer).
  virtual void link_lost(const std::string& why) { (void)why; }
  /// The peer's process failed first; `error` says how (a SupervisionError).
  virtual void peer_failed(const std::exception_ptr& error) { (void)error; }
};
using PortSinkPtr = std::shared_ptr<PortSink>;

/// Sends bytes to a port; an unknown or closed port makes the value undeliverable (logged).
void send_port(const PortId& id, const PortSinkPtr& cached, const Body& body);
/// The sink of a local port by id, or null.
PortSinkPtr resolve_port(const PortId& id);
/// Where the proc `id` can be reached from another process ("" if unknown), for serialized
/// references; remember_address() records what a received reference said.
std::string address_text(const ProcId& id);
void remember_address(const ProcId& id, const std::string& address);

/// A sink that completes a future: the state of a OncePort.
class OnceSink final : public PortSink {
 public:
  explicit OnceSink(std::shared_ptr<StateBase> state) : state_(std::move(state)) {}
  bool deliver(const Body& body) override {
    if (state_->ready()) return false;
    state_->set_body(body);
    return true;
  }

 private:
  std::shared_ptr<StateBase> state_;
};

/// How a thread outside actors waits for a queue's next value (`has()`, read under `lock`'s
/// mutex) until `deadline` (null: none): it runs the event loop that values come in on, that of
/// `route` (drive_while_waiting), as a get() does, leaving in `wake` what ends that when a value
/// comes on another thread (the queue calls a copy, unlocked, after each value it queues: a value
/// another waiter took leaves this one running the loop, to be woken again); then, where it cannot
/// run that loop, it sleeps on `cv`. A loop's own thread stays parked for a while after a get(),
/// so a waiter that only slept would wait for it. Returns with `lock` held: whether `has()`.
template <class Has>
bool wait_for_value(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                    std::function<void()>& wake, const std::shared_ptr<void>& route, Has has,
                    const std::chrono::steady_clock::time_point* deadline) {
  if (!has()) {
    std::mutex& mu = *lock.mutex();
    bool left_wake = false;  // only the thread that runs the loop leaves one (one at a time)
    lock.unlock();
    drive_while_waiting(
        route,
        [&] {
          std::lock_guard l(mu);
          return has();
        },
        [&](std::function<void()> w) {
          std::unique_lock l(mu);
          if (!has()) {
            wake = std::move(w);
            left_wake = true;
            return;
          }
          l.unlock();
          w();
        },
        deadline);
    lock.lock();
    if (left_wake) wake = nullptr;  // not another waiter's, which may run the loop now
  }
  if (deadline == nullptr) {
    cv.wait(lock, has);
    return true;
  }
  return cv.wait_until(lock, *deadline, has);
}

template <class T>
class QueueSink final : public PortSink {
 public:
  bool deliver(const Body& body) override {
    T v = decode<T>(body);
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      q_.push_back(std::move(v));
      wake = wake_;  // it stays until its waiter is done: another waiter may take this value
    }
    cv_.notify_one();
    if (wake) wake();
    return true;
  }
  /// The next value, waiting until `deadline` (null: none) for it (see wait_for_value).
  std::optional<T> pop(const std::chrono::steady_clock::time_point* deadline) {
    std::unique_lock lock(mu_);
    if (!wait_for_value(
            lock, cv_, wake_, nullptr, [this] { return !q_.empty(); }, deadline)) {
      return std::nullopt;
    }
    T v = std::move(q_.front());
    q_.pop_front();
    return v;
  }
  /// The next value if one is queued.
  std::optional<T> try_pop() {
    std::lock_guard lock(mu_);
    if (q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    return v;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
  std::function<void()> wake_;  // a waiter running the event loop (wait_for_value)
};

}  // namespace detail

template <class T>
class Port;
template <class T>
class OncePort;
template <class T>
class PortReceiver;

namespace detail {
/// A port with its sink, as the proc that opened it makes it (users get ports from open_port).
template <class P>
P make_port(PortId id, PortSinkPtr sink) {
  return P(std::move(id), std::move(sink));
}
/// The receiving end of a queue port.
template <class T>
PortReceiver<T> make_receiver(std::shared_ptr<QueueSink<T>> sink) {
  return PortReceiver<T>(std::move(sink));
}
}  // namespace detail

/// Where values of type T can be sent.
template <class T>
class Port {
 public:
  Port() = default;
  /// The port `id`, wherever it lives (its proc is found when a value is sent).
  explicit Port(PortId id) : id_(std::move(id)) {}

  const PortId& id() const { return id_; }
  void send(const T& value) const { detail::send_port(id_, sink_, encode(value)); }

  // A port carries its proc's address, so a receiver in any process can reach it.
  template <class Ar>
  void save(Ar& ar) const {
    ar(id_, detail::address_text(id_.actor.proc));
  }
  template <class Ar>
  void load(Ar& ar) {
    std::string address;
    ar(id_, address);
    detail::remember_address(id_.actor.proc, address);
    sink_ = detail::resolve_port(id_);
  }

 protected:
  Port(PortId id, detail::PortSinkPtr sink) : id_(std::move(id)), sink_(std::move(sink)) {}

 private:
  template <class P>
  friend P detail::make_port(PortId id, detail::PortSinkPtr sink);

  PortId id_;
  detail::PortSinkPtr sink_;
};

/// A port that accepts exactly one value; later sends are undeliverable.
template <class T>
class OncePort : public Port<T> {
 public:
  OncePort() = default;

 private:
  OncePort(PortId id, detail::PortSinkPtr sink) : Port<T>(std::move(id), std::move(sink)) {}
  template <class P>
  friend P detail::make_port(PortId id, detail::PortSinkPtr sink);
};

/// The receiving end of a Port<T> opened outside actors.
template <class T>
class PortReceiver {
 public:
  /// Blocks until a value arrives.
  T recv() { return *sink_->pop(nullptr); }
  /// Waits at most `timeout`; throws TimeoutError if nothing arrived.
  template <class Rep, class Period>
  T recv(std::chrono::duration<Rep, Period> timeout) {
    if (timeout > std::chrono::hours(24 * 365 * 100)) return recv();  // no deadline in reach
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    auto v = sink_->pop(&deadline);
    if (!v) throw TimeoutError("no value arrived on the port within the timeout");
    return std::move(*v);
  }
  /// A value if one is queued.
  std::optional<T> try_recv() { return sink_->try_pop(); }

 private:
  explicit PortReceiver(std::shared_ptr<detail::QueueSink<T>> sink) : sink_(std::move(sink)) {}
  friend PortReceiver<T> detail::make_receiver<T>(std::shared_ptr<detail::QueueSink<T>> sink);

  std::shared_ptr<detail::QueueSink<T>> sink_;
};

}  // namespace baton
