#pragma once

// Future<T>: the result of a call. Block with get(), bound the wait with get(timeout) (throws
// TimeoutError and stays usable), chain with then(), or co_await it inside a Task.

#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "baton/actor/errors.hpp"
#include "baton/wire/archive.hpp"

namespace baton {

template <class T>
class Future;
template <class T>
class Promise;

namespace detail {

/// Where a coroutine suspended inside an actor is resumed: on that actor's strand.
class ResumeContext {
 public:
  virtual void post_resume(std::coroutine_handle<> h) = 0;

 protected:
  ~ResumeContext() = default;
};

/// The context of the actor running on this thread, or nullptr outside actors.
ResumeContext*& current_resume_context();

/// Shared state of a future, type-erased so replies can complete it from bytes.
class StateBase {
 public:
  virtual ~StateBase() = default;

  bool ready() const {
    std::lock_guard lock(mu_);
    return ready_;
  }
  void wait() const {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_; });
  }
  template <class Clock, class Duration>
  bool wait_until(std::chrono::time_point<Clock, Duration> t) const {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, t, [&] { return ready_; });
  }
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> d) const {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return ready_; });
  }
  /// Fails the state (virtual: a remote caller's state forwards the failure over a link).
  virtual void set_exception(std::exception_ptr e) {
    std::unique_lock lock(mu_);
    if (ready_) return;  // first completion wins; a late duplicate is dropped
    error_ = std::move(e);
    finish(lock);
  }
  /// Completes the state from a serialized reply (decoding errors fail the future).
  virtual void set_body(const Body& body) = 0;
  /// Runs `cb` once the state is ready (at once if it already is), on the completing thread.
  void on_ready(std::function<void()> cb) {
    std::unique_lock lock(mu_);
    if (ready_) {
      lock.unlock();
      cb();
      return;
    }
    callback_ = std::move(cb);
  }
  std::exception_ptr error() const {
    std::lock_guard lock(mu_);
    return error_;
  }

 protected:
  void finish(std::unique_lock<std::mutex>& lock) {
    ready_ = true;
    auto cb = std::move(callback_);
    callback_ = nullptr;
    lock.unlock();
    cv_.notify_all();
    if (cb) cb();
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool ready_ = false;
  std::exception_ptr error_;
  std::function<void()> callback_;
};

template <class T>
class State final : public StateBase {
 public:
  void set_value(T v) {
    std::unique_lock lock(mu_);
    if (ready_) return;
    value_.emplace(std::move(v));
    finish(lock);
  }
  void set_body(const Body& body) override {
    try {
      set_value(decode<T>(body));
    } catch (...) {
      set_exception(std::current_exception());
    }
  }
  /// The value; rethrows the stored exception. Requires ready().
  T& value() {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    return *value_;
  }

 private:
  std::optional<T> value_;
};

template <>
class State<void> final : public StateBase {
 public:
  void set_value() {
    std::unique_lock lock(mu_);
    if (ready_) return;
    finish(lock);
  }
  void set_body(const Body& body) override {
    if (body.head.empty() && body.parts.empty()) {
      set_value();
    } else {
      set_exception(std::make_exception_ptr(DecodeError("unexpected value for a void reply")));
    }
  }
  void value() {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
  }
};

template <class T>
struct is_future : std::false_type {};
template <class T>
struct is_future<Future<T>> : std::true_type {};

}  // namespace detail

template <class T>
class Future {
 public:
  using value_type = T;

  Future() = default;
  explicit Future(std::shared_ptr<detail::State<T>> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool ready() const { return check().ready(); }
  void wait() const { check().wait(); }

  /// Blocks until the result is there; rethrows a remote failure.
  decltype(auto) get() & {
    check().wait();
    return state_->value();
  }
  /// Blocks until the result is there and moves it out.
  T get() && {
    check().wait();
    if constexpr (std::is_void_v<T>) {
      state_->value();
    } else {
      return std::move(state_->value());
    }
  }
  /// Like get(), but throws TimeoutError after `timeout`; the future stays usable.
  template <class Rep, class Period>
  decltype(auto) get(std::chrono::duration<Rep, Period> timeout) & {
    if (!check().wait_for(timeout)) {
      throw TimeoutError(
          "no result within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
          " ms; the future is still usable: call get() again to keep waiting");
    }
    return state_->value();
  }

  /// Runs `f(value)` when the result arrives, on the completing thread; a failure skips `f`
  /// and fails the returned future. Consumes this future.
  template <class F>
  auto then(F f) && {
    using R =
        std::conditional_t<std::is_void_v<T>, std::invoke_result<F>, std::invoke_result<F, T>>;
    using U = typename R::type;
    auto next = std::make_shared<detail::State<U>>();
    auto state = std::move(state_);
    check_state(state.get());
    auto* raw = state.get();
    raw->on_ready([state = std::move(state), next, f = std::move(f)]() mutable {
      try {
        if constexpr (std::is_void_v<T>) {
          state->value();
          if constexpr (std::is_void_v<U>) {
            f();
            next->set_value();
          } else {
            next->set_value(f());
          }
        } else {
          if constexpr (std::is_void_v<U>) {
            f(std::move(state->value()));
            next->set_value();
          } else {
            next->set_value(f(std::move(state->value())));
          }
        }
      } catch (...) {
        next->set_exception(std::current_exception());
      }
    });
    return Future<U>(std::move(next));
  }

  /// Awaiting a future inside an actor resumes on that actor's strand.
  auto operator co_await() && {
    struct Awaiter {
      std::shared_ptr<detail::State<T>> state;
      bool await_ready() const { return state->ready(); }
      void await_suspend(std::coroutine_handle<> h) {
        detail::ResumeContext* ctx = detail::current_resume_context();
        state->on_ready([h, ctx] {
          if (ctx != nullptr) {
            ctx->post_resume(h);
          } else {
            h.resume();
          }
        });
      }
      T await_resume() {
        if constexpr (std::is_void_v<T>) {
          state->value();
        } else {
          return std::move(state->value());
        }
      }
    };
    check();
    return Awaiter{std::move(state_)};
  }
  auto operator co_await() & { return Future(state_).operator co_await(); }

  /// The shared state, for the runtime.
  const std::shared_ptr<detail::State<T>>& state() const { return state_; }

 private:
  static void check_state(const void* s) {
    if (s == nullptr) throw UsageError("use of an empty or moved-from baton::Future");
  }
  detail::State<T>& check() const {
    check_state(state_.get());
    return *state_;
  }

  std::shared_ptr<detail::State<T>> state_;
};

template <class T>
class Promise {
 public:
  Promise() : state_(std::make_shared<detail::State<T>>()) {}

  Future<T> get_future() const { return Future<T>(state_); }
  template <class... V>
  void set_value(V&&... v) const {
    state_->set_value(std::forward<V>(v)...);
  }
  void set_exception(std::exception_ptr e) const { state_->set_exception(std::move(e)); }

 private:
  std::shared_ptr<detail::State<T>> state_;
};

/// A future that is already complete.
template <class T>
Future<std::decay_t<T>> make_ready_future(T&& value) {
  Promise<std::decay_t<T>> p;
  p.set_value(std::forward<T>(value));
  return p.get_future();
}
inline Future<void> make_ready_future() {
  Promise<void> p;
  p.set_value();
  return p.get_future();
}

}  // namespace baton
