#pragma once

// Internal: the rdma layer's worker threads and timers.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace baton::rdma_detail {

/// A few threads that run copies and UCX submissions, so no caller or I/O thread blocks on a
/// large transfer; and the watchdog for timeouts.
class Workers {
 public:
  static Workers& get() {
    static Workers w;
    return w;
  }
  void post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
  }
  using TimerKey = std::pair<std::chrono::steady_clock::time_point, std::uint64_t>;
  /// Runs `f` on a worker thread at `when`, unless cancelled before.
  TimerKey at(std::chrono::steady_clock::time_point when, std::function<void()> f) {
    TimerKey key;
    {
      std::lock_guard lock(mu_);
      key = {when, ++last_timer_};
      timers_.emplace(key, std::move(f));
    }
    cv_.notify_all();
    return key;
  }
  void cancel(const TimerKey& key) {
    std::lock_guard lock(mu_);
    timers_.erase(key);  // gone already if it ran
  }

 private:
  Workers() {
    for (int i = 0; i < 2; ++i) {
      threads_.emplace_back([this] { run(); });
    }
  }
  ~Workers() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      auto now = std::chrono::steady_clock::now();
      if (!timers_.empty() && timers_.begin()->first.first <= now) {
        auto f = std::move(timers_.begin()->second);
        timers_.erase(timers_.begin());
        lock.unlock();
        f();
        lock.lock();
        continue;
      }
      if (!queue_.empty()) {
        auto f = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        f();
        lock.lock();
        continue;
      }
      if (timers_.empty()) {
        cv_.wait(lock);
      } else {
        const auto until = timers_.begin()->first.first;  // the node may go while we wait
        cv_.wait_until(lock, until);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::map<TimerKey, std::function<void()>> timers_;
  std::uint64_t last_timer_ = 0;
  std::vector<std::thread> threads_;
  bool stop_ = false;
};

}  // namespace baton::rdma_detail
