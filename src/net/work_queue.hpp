#pragma once

// Internal: the small threads the runtime's layers need beside their event loops and pools,
// written once. A JobQueue runs jobs on threads of its own (started as jobs come), one after
// another with one thread; a TimerQueue runs jobs at given times. Neither wakes while it has
// nothing due, and either may be let go of by one of its own jobs.

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace baton::net {

class JobQueue {
 public:
  /// Up to `threads` threads (at least one); with one, each job runs after the one before it.
  explicit JobQueue(std::size_t threads = 1);
  /// stop().
  ~JobQueue();
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  /// Queues `job` to start after those queued before it. False, with `job` not queued, once
  /// stop() began: the caller runs it or drops it.
  bool post(std::function<void()> job);
  /// Runs what is queued, then ends the threads and returns; called from a job (the queue's
  /// last owner let go there), it waits for the other threads, and that job's thread ends
  /// after the job.
  void stop();
  /// Whether the calling thread is one of the queue's.
  bool on_this_thread() const;

 private:
  // Shared with the threads, which outlive the queue when a job let go of it.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> jobs;
    std::size_t idle = 0;  // threads waiting for a job
    bool stopping = false;
    std::vector<std::thread::id> ids;
  };
  static void run(const std::shared_ptr<State>& state);

  const std::size_t max_threads_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::vector<std::thread> threads_;  // under state_->mu
};

class TimerQueue {
 public:
  using Clock = std::chrono::steady_clock;
  /// What cancel() takes: the job's time and the order it was given in.
  using Key = std::pair<Clock::time_point, std::uint64_t>;
  TimerQueue() = default;
  /// Ends the thread (after the job it runs, if one let go of the queue); jobs not yet due are
  /// dropped.
  ~TimerQueue();
  TimerQueue(const TimerQueue&) = delete;
  TimerQueue& operator=(const TimerQueue&) = delete;

  /// Runs `job` on the queue's thread at `when` (jobs due together run in the order given); it
  /// must not block.
  Key at(Clock::time_point when, std::function<void()> job);
  /// Drops the job of `key` unless it ran or runs already.
  void cancel(const Key& key);

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::map<Key, std::function<void()>> jobs;
    std::uint64_t last = 0;
    bool quit = false;
  };
  static void run(const std::shared_ptr<State>& state);

  std::shared_ptr<State> state_ = std::make_shared<State>();
  std::thread thread_;  // under state_->mu
};

}  // namespace baton::net
