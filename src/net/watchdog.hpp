#pragma once

// Internal: a thread that looks at something every period while there is something to look at,
// less often while what it finds keeps ending before it looks, and sleeps without a single
// wake-up while there is nothing (an idle proc burns no CPU).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace baton::net {

/// What a look found, and so when the next one comes.
enum class Look {
  done,     // nothing to watch: the watchdog disarms until the next arm()
  closely,  // something runs that may run long: the next look comes one period later
  loosely,  // work came and went since the last look and none runs now: the wait between looks
            // doubles (up to the longest wait; it stays so across looks that find work running,
            // and starts again from one period at the next arm), so a stream of short work wakes
            // the watchdog about once per longest wait rather than once per period
};

class Watchdog {
 public:
  /// `look` runs on the watchdog's thread while armed: one period after the arm, then as its
  /// answers say (above), never more than `longest` apart. Throws std::system_error if the
  /// process has no descriptor left for its timer.
  Watchdog(std::chrono::microseconds period, std::chrono::microseconds longest,
           std::function<Look()> look);
  /// Stops the thread; on the watchdog's own thread (a look that dropped the last owner), the
  /// thread ends right after instead.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// There is something to watch: starts the watchdog's timer (the thread starts on the first
  /// call). Arming wakes no thread: the first look comes a period later, from the kernel's
  /// timer, so work that arms it and ends sooner costs one system call and one wake-up of the
  /// watchdog, off its path. One load when it is already armed.
  void arm() {
    if (state_->armed.load(std::memory_order_seq_cst)) return;
    arm_slow();
  }
  /// Runs a look now instead of at the end of the period.
  void poke();
  /// How long the watchdog waits between its looks now (tests).
  std::chrono::microseconds wait() const {
    return std::chrono::microseconds(state_->wait_us.load(std::memory_order_relaxed));
  }

 private:
  /// What the thread shares with its owner (it outlives a watchdog ended from its own look).
  struct State {
    const std::chrono::microseconds period;
    const std::chrono::microseconds longest;
    std::atomic<bool> armed{false};
    std::atomic<std::int64_t> wait_us;  // the timer's interval while armed (the thread's)
    std::atomic<bool> stopping{false};
    int timer = -1;  // a timerfd: fires every period while armed
    int wake = -1;   // an eventfd: a poke, or the stop
    State(std::chrono::microseconds every, std::chrono::microseconds at_most);
    ~State();
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    /// Starts the timer, one period, if it is not armed yet.
    void arm();
    /// Sets the timer to fire every `us` from now (0: stops it).
    void set_timer(std::int64_t us);
    /// Wakes the thread now.
    void ring() const;
  };
  void arm_slow();
  static void run(const std::shared_ptr<State>& state, const std::function<Look()>& look);

  std::function<Look()> look_;
  std::shared_ptr<State> state_;
  std::once_flag started_;
  std::thread thread_;
};

}  // namespace baton::net
