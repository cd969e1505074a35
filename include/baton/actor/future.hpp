#pragma once

// Future<T>: the result of a call. Block with get(), bound the wait with get(timeout) (throws
// TimeoutError and stays usable), chain with then(), or co_await it inside a Task.
//
// Invariants (tests cite them):
//   F-1 copies of a future share one result; every continuation registered on any of them runs
//       exactly once, none is dropped, and none moves the value from under another holder;
//   F-2 inside an actor, get() and wait() throw UsageError: a blocking wait there holds a thread
//       of the proc's pool and can deadlock it (co_await the future, or use then());
//   F-3 a continuation registered by then() inside an actor runs on that actor, one message at a
//       time like its endpoints; registered by a coroutine endpoint, it runs like that endpoint's
//       own resumptions while it is in progress (so it may co_await what it chained), after it as
//       a message; registered elsewhere it runs on the thread that completes the future (at once
//       if it is already complete).

#include <atomic>
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
#include <vector>

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

/// Runs `fn(true)` on the strand of the actor running on this thread when the returned poster is
/// called, or `fn(false)` on the calling thread if that actor has ended by then. Empty outside
/// actors.
using StrandPoster = std::function<void(std::function<void(bool alive)> fn)>;
StrandPoster current_strand_poster();

/// F-2: throws UsageError if the calling thread runs an actor, unless that thread was let
/// block there (may_block_in_actor). `what` names the call.
void check_may_block(const char* what);
/// Whether the actor running on this thread may block it: set, for the length of one handler,
/// by the bindings of a language whose actors may (a Python actor's plain endpoint, as in
/// Monarch), never for C++ actors. Their waits take a ThreadPool::BlockingRegion.
bool& may_block_in_actor();

class StateBase;

/// How a thread outside actors and I/O threads waits for `s`: it runs the event loop of this
/// process's links itself until `s` is ready or `deadline` (null: none) passes, so it reads its
/// reply where it comes in, with no hand-off from the I/O thread. Returns false, having waited
/// for nothing, where it cannot (another thread runs that loop so); the wait then sleeps.
bool drive_until_ready(StateBase& s, const std::chrono::steady_clock::time_point* deadline);
/// The same for any wait outside actors (a port's or a stream's next value): runs the event loop
/// of `route` (a proc's state; null: the proc that links this process) until `done()` or
/// `deadline`. `when_done(wake)` must make `wake` run once `done()` turns true on another thread.
bool drive_while_waiting(const std::shared_ptr<void>& route, const std::function<bool()>& done,
                         const std::function<void(std::function<void()>)>& when_done,
                         const std::chrono::steady_clock::time_point* deadline);

/// Shared state of a future, type-erased so replies can complete it from bytes.
class StateBase {
 public:
  virtual ~StateBase() = default;

  bool ready() const {
    std::lock_guard lock(mu_);
    return ready_;
  }
  /// Blocks until ready; for the runtime (Future::wait() adds the F-2 check).
  void wait() const {
    if (!ready() && drive_until_ready(const_cast<StateBase&>(*this), nullptr)) return;
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
    if (!ready() && d <= std::chrono::hours(1)) {
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(d);
      if (drive_until_ready(const_cast<StateBase&>(*this), &deadline)) return ready();
    }
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, d, [&] { return ready_; });
  }
  /// Fails the state (virtual: a remote caller's state forwards the failure over a link).
  virtual void set_exception(std::exception_ptr e) {
    std::unique_lock lock(mu_);
    if (ready_) return;  // first completion wins; a late duplicate is dropped
    error_ = rename_ ? rename_(std::move(e)) : std::move(e);
    finish(lock);
  }
  /// Each failure of this state is passed through `rename` before anyone sees it (a mesh names
  /// the member it called); one set already is renamed now. Only while no one else holds the
  /// state's future: its continuations would have seen the failure as it was.
  void rename_failures(std::function<std::exception_ptr(std::exception_ptr)> rename) {
    std::lock_guard lock(mu_);
    if (ready_) {
      if (error_) error_ = rename(std::move(error_));
      return;
    }
    rename_ = std::move(rename);
  }
  /// Completes the state from a serialized reply (decoding errors fail the future).
  virtual void set_body(const Body& body) = 0;
  /// Runs `cb` once the state is ready (at once if it already is), on the completing thread.
  /// Every callback registered runs, in the order registered (F-1).
  void on_ready(std::function<void()> cb) {
    std::unique_lock lock(mu_);
    if (ready_) {
      lock.unlock();
      cb();
      return;
    }
    if (!callback_) {
      callback_ = std::move(cb);
    } else {
      more_callbacks_.push_back(std::move(cb));
    }
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
    auto more = std::move(more_callbacks_);
    lock.unlock();
    cv_.notify_all();
    if (cb) cb();
    for (auto& c : more) c();
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool ready_ = false;
  std::exception_ptr error_;
  std::function<void()> callback_;  // the first; most futures have one
  std::vector<std::function<void()>> more_callbacks_;
  std::function<std::exception_ptr(std::exception_ptr)> rename_;  // see rename_failures

  std::weak_ptr<void> route_;  // see set_reply_route

 public:
  /// Futures and continuations that may read the value (see Reader); F-1 lets one move it out
  /// only while it is the sole reader.
  std::atomic<int> readers{0};
  /// Where the reply comes in: the runtime's record of the proc whose link carries the call, so
  /// that a thread waiting for it outside actors runs that proc's event loop (drive_until_ready).
  void set_reply_route(std::weak_ptr<void> route) {
    std::lock_guard lock(mu_);
    route_ = std::move(route);
  }
  std::shared_ptr<void> reply_route() const {
    std::lock_guard lock(mu_);
    return route_.lock();
  }
};

/// A counted reader of a state: what a Future holds, and what a continuation holds once the
/// future is consumed, so the last reader alone may move the value out (F-1).
template <class S>
class Reader {
 public:
  Reader() = default;
  explicit Reader(std::shared_ptr<S> s) : s_(std::move(s)) { acquire(); }
  Reader(const Reader& o) : s_(o.s_) { acquire(); }
  Reader(Reader&& o) noexcept : s_(std::move(o.s_)) {}
  Reader& operator=(const Reader& o) {
    if (this != &o) {
      release();
      s_ = o.s_;
      acquire();
    }
    return *this;
  }
  Reader& operator=(Reader&& o) noexcept {
    if (this != &o) {
      release();
      s_ = std::move(o.s_);
    }
    return *this;
  }
  ~Reader() { release(); }

  S* get() const { return s_.get(); }
  S* operator->() const { return s_.get(); }
  S& operator*() const { return *s_; }
  const std::shared_ptr<S>& ptr() const { return s_; }
  explicit operator bool() const { return s_ != nullptr; }
  /// True if no other reader shares the state.
  bool sole() const { return s_->readers.load(std::memory_order_acquire) == 1; }

 private:
  void acquire() {
    if (s_) s_->readers.fetch_add(1, std::memory_order_acq_rel);
  }
  void release() {
    if (s_) s_->readers.fetch_sub(1, std::memory_order_acq_rel);
    s_.reset();
  }
  std::shared_ptr<S> s_;
};

/// True for a type a future may hold that never travels between processes (a ProcMesh: worker
/// processes this one started): no reply can complete its future.
template <class T>
struct local_only : std::false_type {};

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
    if constexpr (local_only<T>::value) {
      (void)body;
      set_exception(std::make_exception_ptr(
          DecodeError("a reply cannot carry this value: it never leaves its process")));
    } else {
      try {
        set_value(decode<T>(body));
      } catch (...) {
        set_exception(std::current_exception());
      }
    }
  }
  /// The value; rethrows the stored exception. Requires ready().
  T& value() {
    std::lock_guard lock(mu_);
    if (error_) std::rethrow_exception(error_);
    return *value_;
  }
  /// The value for a holder that may consume it: moved out when `sole` (nobody else can see
  /// the state), else copied (F-1). Requires ready().
  T take(bool sole) {
    if constexpr (std::is_copy_constructible_v<T>) {
      if (!sole) return value();
    }
    return std::move(value());
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
  void take(bool) { value(); }
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

  bool valid() const { return static_cast<bool>(state_); }
  bool ready() const { return check().ready(); }
  /// Blocks until the result is there. Inside an actor: UsageError (F-2).
  void wait() const {
    detail::check_may_block("Future::wait()");
    check().wait();
  }

  /// Blocks until the result is there; rethrows a remote failure. Inside an actor: UsageError
  /// (F-2; co_await the future instead).
  decltype(auto) get() & {
    detail::check_may_block("Future::get()");
    check().wait();
    return state_->value();
  }
  /// Blocks until the result is there and returns it (moved out unless a copy of this future
  /// still shares it).
  T get() && {
    detail::check_may_block("Future::get()");
    check().wait();
    return take();
  }
  /// Like get(), but throws TimeoutError after `timeout`; the future stays usable.
  template <class Rep, class Period>
  decltype(auto) get(std::chrono::duration<Rep, Period> timeout) & {
    wait_or_throw(timeout);
    return state_->value();
  }
  /// Like get() on a temporary (`mesh.call(...).get(5s)`), but throws TimeoutError after
  /// `timeout`.
  template <class Rep, class Period>
  T get(std::chrono::duration<Rep, Period> timeout) && {
    wait_or_throw(timeout);
    return take();
  }

  /// Runs `f(value)` when the result arrives (F-3: on this actor's strand when called inside
  /// an actor, else on the completing thread); a failure skips `f` and fails the returned
  /// future. Consumes this future; copies of it may register continuations of their own (F-1).
  template <class F>
  auto then(F f) && {
    using R =
        std::conditional_t<std::is_void_v<T>, std::invoke_result<F>, std::invoke_result<F, T>>;
    using U = typename R::type;
    auto next = std::make_shared<detail::State<U>>();
    check_state(state_.get());
    auto* raw = state_.get();
    // The continuation takes this future's place as a reader (F-1).
    auto run = [state = std::move(state_), next, f = std::move(f)]() mutable {
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
          auto v = state->take(state.sole());
          if constexpr (std::is_void_v<U>) {
            f(std::move(v));
            next->set_value();
          } else {
            next->set_value(f(std::move(v)));
          }
        }
      } catch (...) {
        next->set_exception(std::current_exception());
      }
    };
    detail::StrandPoster post = detail::current_strand_poster();
    if (!post) {
      raw->on_ready(std::move(run));
    } else {
      raw->on_ready([post = std::move(post), run = std::move(run), next]() mutable {
        post([run = std::move(run), next](bool alive) mutable {
          if (alive) {
            run();
          } else {
            next->set_exception(std::make_exception_ptr(SupervisionError(
                "the actor that registered this continuation ended before it could run")));
          }
        });
      });
    }
    return Future<U>(std::move(next));
  }

  /// Awaiting a future inside an actor resumes on that actor's strand.
  auto operator co_await() && {
    struct Awaiter {
      detail::Reader<detail::State<T>> state;
      bool await_ready() const { return state->ready(); }
      void await_suspend(std::coroutine_handle<> h) {
        detail::ResumeContext* ctx = detail::current_resume_context();
        if (ctx == nullptr) {
          state->on_ready([h] { h.resume(); });
          return;
        }
        // The actor's cell outlives its suspended frame (the proc keeps every cell until it is
        // destroyed, after its links have failed what waits on them), and a resume that comes
        // for a frame its failed actor already destroyed is dropped there. A raw pointer keeps
        // the round trip free of reference counting.
        state->on_ready([h, ctx] { ctx->post_resume(h); });
      }
      T await_resume() { return state->take(state.sole()); }
    };
    check();
    return Awaiter{std::move(state_)};
  }
  auto operator co_await() & { return Future(*this).operator co_await(); }

  /// The shared state, for the runtime.
  const std::shared_ptr<detail::State<T>>& state() const { return state_.ptr(); }

 private:
  static void check_state(const void* s) {
    if (s == nullptr) throw UsageError("use of an empty or moved-from baton::Future");
  }
  detail::State<T>& check() const {
    check_state(state_.get());
    return *state_;
  }
  template <class Rep, class Period>
  void wait_or_throw(std::chrono::duration<Rep, Period> timeout) const {
    detail::check_may_block("Future::get(timeout)");
    if (!check().wait_for(timeout)) {
      throw TimeoutError(
          "no result within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) +
          " ms; the future is still usable: call get() again to keep waiting");
    }
  }
  T take() { return state_->take(state_.sole()); }

  detail::Reader<detail::State<T>> state_;
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
