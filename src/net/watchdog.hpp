#pragma once

// Internal: a thread that looks at something every period while there is something to look at,
// and sleeps without a single wake-up while there is not (an idle proc burns no CPU).

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace baton::net {

class Watchdog {
 public:
  /// `look` runs on the watchdog's thread every `period` while armed, and returns whether
  /// there is still something to watch; false disarms the watchdog until the next arm().
  Watchdog(std::chrono::microseconds period, std::function<bool()> look);
  /// Stops the thread; on the watchdog's own thread (a look that dropped the last owner), the
  /// thread ends right after instead.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// There is something to watch: wakes the watchdog if it sleeps (the thread starts on the
  /// first call). One relaxed load when it is already armed.
  void arm() {
    if (state_->armed.load(std::memory_order_seq_cst)) return;
    arm_slow();
  }
  /// Runs a look now instead of at the end of the period.
  void poke();

 private:
  struct State {
    std::atomic<bool> armed{false};
    std::mutex mu;
    std::condition_variable cv;
    bool poked = false;
    bool stopping = false;
  };
  void arm_slow();
  static void run(const std::shared_ptr<State>& state, std::chrono::microseconds period,
                  const std::function<bool()>& look);

  std::chrono::microseconds period_;
  std::function<bool()> look_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::once_flag started_;
  std::thread thread_;
};

}  // namespace baton::net
