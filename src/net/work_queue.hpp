#pragma once

// Internal: the two small threads the runtime's layers need beside their event loops and pools,
// written once. A SerialQueue runs jobs one after another on a thread of its own (started by the
// first job); a TimerQueue runs jobs at given times. Neither wakes while it has nothing due.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace baton::net {

class SerialQueue {
 public:
  SerialQueue() = default;
  /// stop().
  ~SerialQueue();
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  /// Queues `job` to run after those queued before it. False, with `job` not queued, once
  /// stop() began: the caller runs it or drops it.
  bool post(std::function<void()> job);
  /// Runs what is queued, then ends the thread and returns; called from a job (the queue's
  /// last owner let go there), it returns at once and the thread ends after that job.
  void stop();
  /// Whether the calling thread is the queue's.
  bool on_this_thread() const;

 private:
  // Shared with the thread, which outlives the queue when a job let go of it.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;
    std::thread::id id;
  };
  static void run(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // under state_->mu
};

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  TimerQueue() = default;
  /// Ends the thread; jobs not yet due are dropped.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  /// Runs `job` on the queue's thread at `when` (jobs due together run in the order given); it
  /// must not block.
  void at(Clock::time_point when, std::function<void()> job);

 private:
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::multimap<Clock::time_point, std::function<void()>> jobs_;
  bool quit_ = false;
  std::thread thread_;
};

}  // namespace baton::net
