// The I/O thread: an Asio event loop on a thread of its own, which also runs, right after a
// handler, the work that handler woke (an idle actor's message), so a request is read, handled
// and answered on one thread. A watchdog takes the event loop over while such work runs long.

#include <future>
#include <utility>

#include "net/io_thread.hpp"
#include "net/link_impl.hpp"
#include "net/spin.hpp"

namespace baton::net {

namespace internal {
thread_local bool t_io_thread = false;
}  // namespace internal

namespace {

// How long woken work may hold the loop thread before the watchdog runs the event loop in its
// stead (between one and two periods).
constexpr auto kTakeOver = std::chrono::milliseconds(2);
// The longest wait between two looks while short work keeps coming (Look::loosely): work that
// starts in such a stream runs up to this long before the watchdog first sees it, then one or
// two periods more before it takes over.
constexpr auto kLongestWait = std::chrono::milliseconds(32);

thread_local IoThread* t_inline = nullptr;         // in a handler of this IoThread's loop
thread_local IoThread::Impl* t_running = nullptr;  // running work this loop thread woke
thread_local IoThread::Impl* t_guest = nullptr;    // leading this loop as a guest

// How long the loop thread, parked for guests, waits after the last guest's turn before it takes
// its loop back (a caller making call after call keeps it parked, with no wake-up per call).
constexpr auto kTakeBack = std::chrono::milliseconds(5);

}  // namespace

IoThread::IoThread() : impl_(std::make_shared<Impl>()) {
  std::weak_ptr<Impl> weak = impl_;
  impl_->watchdog = std::make_unique<Watchdog>(kTakeOver, kLongestWait, [weak] {
    const auto impl = weak.lock();  // kept for the look: its last owner may let go meanwhile
    return impl ? impl->watch() : Look::done;
  });
  impl_->thread = std::thread([impl = impl_, self = this] { impl->loop(self); });
}

IoThread::~IoThread() {
  {
    std::lock_guard lock(impl_->lead_mu);
    impl_->stopping = true;
  }
  impl_->lead_cv.notify_all();
  impl_->guard.reset();
  impl_->ctx.stop();
  if (impl_->thread.get_id() == std::this_thread::get_id()) {
    impl_->thread.detach();  // dropped by its own work: the loop ends when that work returns
  } else {
    impl_->thread.join();
  }
}

void IoThread::Impl::loop(IoThread* self) {
  internal::t_io_thread = true;
  for (;;) {
    if (guest_wanted.load(std::memory_order_relaxed)) park();
    t_inline = inline_enabled.load(std::memory_order_relaxed) ? self : nullptr;
    const std::size_t n = run_one_spinning(ctx, spinners, nullptr);
    t_inline = nullptr;
    run_after();
    if (n == 0) return;
  }
}

void IoThread::Impl::park() {
  std::unique_lock lock(lead_mu);
  parked = true;
  lead_cv.notify_all();
  std::uint64_t turns = guest_turns;
  while (!stopping) {
    lead_cv.wait_for(lock, kTakeBack);
    if (leading || guest || guest_turns != turns) {
      turns = guest_turns;  // a guest leads, waits to, or led a moment ago: it may come back
      continue;
    }
    guest_wanted.store(false);
    break;
  }
  parked = false;
}

void IoThread::Impl::run_after() {
  while (!after.empty()) {
    std::function<void()> f = std::move(after.front());
    after.pop_front();
    work_serial.fetch_add(1);  // odd: work runs
    watchdog->arm();
    internal::t_io_thread = false;  // as on any thread: a send may wait for room
    t_running = this;
    f();
    t_running = nullptr;
    internal::t_io_thread = true;
    blocking.store(false);
    work_serial.fetch_add(1);  // even: back to the loop
    if (driving.load()) {
      // The watchdog runs the loop: have it let go before this thread runs handlers again.
      asio::post(ctx, [] {});
      std::unique_lock lock(drive_mu);
      drive_cv.wait(lock, [&] { return !driving.load(); });
    }
  }
}

Look IoThread::Impl::watch() {
  const std::uint64_t serial = work_serial.load();
  if ((serial & 1) == 0) {
    // Nothing runs. Work that came and went since the last look keeps the watchdog armed, its
    // looks further apart while only short work comes; none disarms it.
    const bool came = serial != watched_serial;
    watched_serial = serial;
    return came ? Look::loosely : Look::done;
  }
  if (serial != watched_serial && !blocking.load()) {
    watched_serial = serial;  // started since the last look
    return Look::closely;
  }
  // The same work for a whole period, or about to block: run the event loop until it ends.
  watched_serial = serial;
  {
    std::lock_guard lock(drive_mu);
    driving.store(true);
  }
  internal::t_io_thread = true;
  while (work_serial.load() == serial && !ctx.stopped()) ctx.run_one_for(kTakeOver);
  internal::t_io_thread = false;
  {
    std::lock_guard lock(drive_mu);
    driving.store(false);
  }
  drive_cv.notify_all();
  return Look::closely;
}

IoThread* inline_io_thread() {
  // One piece of woken work per turn runs here: a handler that reads on (several frames in the
  // ring) sends what the others wake to the pool, so a long one holds up no other.
  return t_inline != nullptr && t_inline->impl().after.empty() ? t_inline : nullptr;
}

bool inline_work_waits() {
  return t_inline != nullptr && !t_inline->impl().after.empty();
}

void run_after_handler(IoThread& io, std::function<void()> f) {
  io.impl().after.push_back(std::move(f));
}

namespace {

struct Quiet {
  explicit Quiet(std::shared_ptr<IoThread::Impl> i) : impl(std::move(i)), timer(impl->ctx) {}
  std::shared_ptr<IoThread::Impl> impl;
  std::promise<void> done;
  asio::steady_timer timer;
};

/// Keeps `q->done` once the loop thread runs this between handlers, with nothing queued.
void when_quiet(const std::shared_ptr<Quiet>& q) {
  if (q->impl->thread.get_id() == std::this_thread::get_id()) return q->done.set_value();
  // The watchdog runs the event loop while the loop thread's work goes on: look again shortly.
  q->timer.expires_after(std::chrono::milliseconds(1));
  q->timer.async_wait([q](const asio::error_code&) { when_quiet(q); });
}

}  // namespace

void stop_inline(IoThread& io) {
  auto impl = io.impl().shared_from_this();
  impl->inline_enabled.store(false);
  if (t_running == impl.get()) return;  // its own work: nothing else of it runs meanwhile
  auto q = std::make_shared<Quiet>(impl);
  auto done = q->done.get_future();
  asio::post(impl->ctx, [q] { when_quiet(q); });
  // A stopped loop runs nothing more; a loop thread stuck in work for this long is reported
  // by whoever waits on that work.
  done.wait_for(std::chrono::seconds(10));
}

bool on_io_thread() {
  return internal::t_io_thread;
}

bool drive_until(IoThread& io, const std::function<bool()>& done,
                 const std::function<void(std::function<void()>)>& when_done,
                 const std::chrono::steady_clock::time_point* deadline) {
  const auto impl = io.impl().shared_from_this();
  auto past = [&] { return deadline != nullptr && std::chrono::steady_clock::now() >= *deadline; };
  std::unique_lock lock(impl->lead_mu);
  if (impl->guest || impl->stopping) return false;
  impl->guest = true;
  impl->guest_wanted.store(true);
  lock.unlock();
  when_done([impl] {
    if (t_guest == impl.get()) return;  // the guest completed it: it sees so between handlers
    std::lock_guard l(impl->lead_mu);
    if (impl->leading) asio::post(impl->ctx, [] {});  // out of its wait for events
    impl->lead_cv.notify_all();                       // out of its wait for the loop
  });
  lock.lock();
  if (!impl->parked) {
    lock.unlock();
    asio::post(impl->ctx, [] {});  // the loop thread parks at its next turn
    lock.lock();
    auto ready = [&] { return impl->parked || impl->stopping || done(); };
    if (deadline != nullptr) {
      impl->lead_cv.wait_until(lock, *deadline, ready);
    } else {
      impl->lead_cv.wait(lock, ready);
    }
  }
  if (impl->parked && !impl->stopping) {
    impl->leading = true;
    lock.unlock();
    t_guest = impl.get();
    const bool was_io = std::exchange(internal::t_io_thread, true);
    while (!done() && !past() && !impl->ctx.stopped()) {
      run_one_spinning(impl->ctx, impl->spinners, deadline);
    }
    internal::t_io_thread = was_io;
    t_guest = nullptr;
    lock.lock();
    impl->leading = false;
    ++impl->guest_turns;
  }
  // The parked loop thread is not woken: it takes the loop back once no guest came for a while
  // (park), and a wake per call would only cost the caller a core on a small machine.
  impl->guest = false;
  lock.unlock();
  return done() || past();
}

void spin_for_tests(IoThread& io, std::chrono::microseconds window, bool force) {
  io.impl().spinners.set_for_tests(window, force);
}

std::uint64_t guest_turns(IoThread& io) {
  std::lock_guard lock(io.impl().lead_mu);
  return io.impl().guest_turns;
}

SpinCounts spin_counts(IoThread& io) {
  const Spinners::Stats s = io.impl().spinners.stats();
  return {s.caught, s.ran_out, s.hot};
}

void blocking_here() {
  IoThread::Impl* impl = t_running;
  if (impl == nullptr) return;
  impl->blocking.store(true);
  impl->watchdog->poke();
}

}  // namespace baton::net
