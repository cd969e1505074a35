#pragma once

// Internal: a thread that looks at something every period while there is something to look at,
// and sleeps without a single wake-up while there is not (an idle proc burns no CPU).

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace baton::net {

class Watchdog {
 public:
  /// `look` runs on the watchdog's thread every `period` while armed, and returns whether
  /// there is still something to watch; false disarms the watchdog until the next arm().
  /// Throws std::system_error if the process has no descriptor left for its timer.
  Watchdog(std::chrono::microseconds period, std::function<bool()> look);
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

 private:
  /// What the thread shares with its owner (it outlives a watchdog ended from its own look).
  struct State {
    const std::chrono::microseconds period;
    std::atomic<bool> armed{false};
    std::atomic<bool> stopping{false};
    int timer = -1;  // a timerfd: fires every period while armed
    int wake = -1;   // an eventfd: a poke, or the stop
    explicit State(std::chrono::microseconds every);
    ~State();
    State(const State&) = delete;
    State& operator=(const State&) = delete;
    /// Starts the timer if it is not armed yet.
    void arm();
    /// Wakes the thread now.
    void ring() const;
  };
  void arm_slow();
  static void run(const std::shared_ptr<State>& state, const std::function<bool()>& look);

  std::function<bool()> look_;
  std::shared_ptr<State> state_;
  std::once_flag started_;
  std::thread thread_;
};

}  // namespace baton::net
