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

template <class T>
class QueueSink final : public PortSink {
 public:
  bool deliver(const Body& body) override {
    T v = decode<T>(body);
    {
      std::lock_guard lock(mu_);
      q_.push_back(std::move(v));
    }
    cv_.notify_one();
    return true;
  }
  template <class Pred>
  std::optional<T> pop(std::unique_lock<std::mutex>& lock, Pred wait) {
    if (!wait(lock)) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    return v;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
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
  T recv() {
    std::unique_lock lock(sink_->mu_);
    return *sink_->pop(lock, [&](auto& l) {
      sink_->cv_.wait(l, [&] { return !sink_->q_.empty(); });
      return true;
    });
  }
  /// Waits at most `timeout`; throws TimeoutError if nothing arrived.
  template <class Rep, class Period>
  T recv(std::chrono::duration<Rep, Period> timeout) {
    std::unique_lock lock(sink_->mu_);
    auto v = sink_->pop(lock, [&](auto& l) {
      return sink_->cv_.wait_for(l, timeout, [&] { return !sink_->q_.empty(); });
    });
    if (!v) throw TimeoutError("no value arrived on the port within the timeout");
    return std::move(*v);
  }
  /// A value if one is queued.
  std::optional<T> try_recv() {
    std::unique_lock lock(sink_->mu_);
    return sink_->pop(lock, [&](auto&) { return !sink_->q_.empty(); });
  }

 private:
  explicit PortReceiver(std::shared_ptr<detail::QueueSink<T>> sink) : sink_(std::move(sink)) {}
  friend PortReceiver<T> detail::make_receiver<T>(std::shared_ptr<detail::QueueSink<T>> sink);

  std::shared_ptr<detail::QueueSink<T>> sink_;
};

}  // namespace baton
