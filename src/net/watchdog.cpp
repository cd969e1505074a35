#include "net/watchdog.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <system_error>

namespace baton::net {

Watchdog::State::State(std::chrono::microseconds every, std::chrono::microseconds at_most)
    : period(every),
      longest(std::max(every, at_most)),
      wait_us(every.count()),
      timer(::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)),
      wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (timer >= 0 && wake >= 0) return;
  const int error = errno;
  if (timer >= 0) ::close(timer);
  if (wake >= 0) ::close(wake);
  throw std::system_error(error, std::generic_category(),
                          "cannot make a watchdog's timer (raise the open-file limit, ulimit -n)");
}

Watchdog::State::~State() {
  ::close(timer);
  ::close(wake);
}

void Watchdog::State::arm() {
  if (armed.exchange(true, std::memory_order_seq_cst)) return;
  set_timer(period.count());
}

void Watchdog::State::set_timer(std::int64_t us) {
  itimerspec every{};
  every.it_value = {static_cast<time_t>(us / 1000000), static_cast<long>(us % 1000000) * 1000};
  every.it_interval = every.it_value;
  (void)::timerfd_settime(timer, 0, &every, nullptr);  // cannot fail on a valid timerfd
}

void Watchdog::State::ring() const {
  const std::uint64_t one = 1;
  (void)::write(wake, &one, sizeof one);  // cannot fail short of 2^64 - 2 rings unread
}

Watchdog::Watchdog(std::chrono::microseconds period, std::chrono::microseconds longest,
                   std::function<Look()> look)
    : look_(std::move(look)), state_(std::make_shared<State>(period, longest)) {}

Watchdog::~Watchdog() {
  state_->stopping.store(true, std::memory_order_seq_cst);
  state_->ring();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // it touches only `state_` and the look's copy from here on
  } else {
    thread_.join();
  }
}

void Watchdog::arm_slow() {
  std::call_once(started_, [this] {
    thread_ = std::thread([state = state_, look = look_] { run(state, look); });
  });
  state_->arm();
}

void Watchdog::poke() {
  arm_slow();
  state_->ring();
}

void Watchdog::run(const std::shared_ptr<State>& state, const std::function<Look()>& look) {
  // The timer's interval: one period from each arm, doubled by each look that finds only work
  // that ended (`grown`), one period while a look finds work running, and back to `grown` once
  // that work has ended (this thread alone sets it while armed; arm() starts the timer at one
  // period only after this thread disarmed it).
  const std::int64_t period = state->period.count();
  const std::int64_t longest = state->longest.count();
  std::int64_t wait = period;
  std::int64_t grown = period;
  auto set_wait = [&](std::int64_t us) {
    if (us == wait) return;
    wait = us;
    state->wait_us.store(us, std::memory_order_relaxed);
    state->set_timer(us);
  };
  for (;;) {
    // Asleep until the timer fires (armed) or a poke or the stop comes: no wake-up otherwise.
    pollfd fds[2] = {{state->timer, POLLIN, 0}, {state->wake, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
    if (state->stopping.load()) return;
    std::uint64_t count = 0;
    (void)::read(state->wake, &count, sizeof count);  // non-blocking: EAGAIN if not poked
    (void)::read(state->timer, &count, sizeof count);
    if ((fds[0].revents | fds[1].revents) == 0) continue;
    const Look found = look();
    if (state->stopping.load()) return;  // the look may have ended the owner: touch nothing
    if (found == Look::closely) set_wait(period);
    if (found == Look::loosely) {
      grown = std::min(grown * 2, longest);
      set_wait(grown);
    }
    if (found != Look::done) continue;
    // Stop the timer, then disarm, then look once more: an arm() that saw the flag still set
    // before the store counted on this look to see what it armed for.
    state->set_timer(0);
    wait = period;
    grown = period;
    state->wait_us.store(period, std::memory_order_relaxed);
    state->armed.store(false, std::memory_order_seq_cst);
    const Look again = look();
    if (state->stopping.load()) return;
    if (again != Look::done) state->arm();
  }
}

}  // namespace baton::net
