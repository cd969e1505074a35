#include "net/watchdog.hpp"

namespace baton::net {

Watchdog::Watchdog(std::chrono::microseconds period, std::function<bool()> look)
    : period_(period), look_(std::move(look)) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
  }
  state_->cv.notify_all();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // it touches only `state_` and the look's copy from here on
  } else {
    thread_.join();
  }
}

void Watchdog::arm_slow() {
  std::call_once(started_, [this] {
    thread_ =
        std::thread([state = state_, period = period_, look = look_] { run(state, period, look); });
  });
  {
    std::lock_guard lock(state_->mu);
    state_->armed.store(true, std::memory_order_seq_cst);
  }
  state_->cv.notify_one();
}

void Watchdog::poke() {
  {
    std::lock_guard lock(state_->mu);
    state_->poked = true;
  }
  arm_slow();  // sets the flag and wakes it
}

void Watchdog::run(const std::shared_ptr<State>& state, std::chrono::microseconds period,
                   const std::function<bool()>& look) {
  std::unique_lock lock(state->mu);
  for (;;) {
    // Asleep until armed: no timer, no wake-up.
    state->cv.wait(lock, [&] { return state->stopping || state->armed.load(); });
    if (state->stopping) return;
    state->cv.wait_for(lock, period, [&] { return state->stopping || state->poked; });
    if (state->stopping) return;
    state->poked = false;
    lock.unlock();
    const bool more = look();
    lock.lock();
    if (state->stopping) return;  // the look may have ended the owner: touch nothing of it
    if (more) continue;
    // Disarm, then look once more: an arm() that saw the flag still set before the store
    // counted on this look to see what it armed for.
    state->armed.store(false, std::memory_order_seq_cst);
    lock.unlock();
    const bool again = look();
    lock.lock();
    if (state->stopping) return;
    if (again) state->armed.store(true, std::memory_order_seq_cst);
  }
}

}  // namespace baton::net
