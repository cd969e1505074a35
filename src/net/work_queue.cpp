#include "net/work_queue.hpp"

#include <utility>

namespace baton::net {

SerialQueue::~SerialQueue() {
  stop();
}

bool SerialQueue::post(std::function<void()> job) {
  // Once the lock is let go, the job may run and let go of this queue: only `state` is used.
  const std::shared_ptr<State> state = state_;
  {
    std::lock_guard lock(state->mu);
    if (state->stopping) return false;
    state->jobs.push_back(std::move(job));
    if (!thread_.joinable()) {
      thread_ = std::thread([state] { run(state); });
      state->id = thread_.get_id();
    }
  }
  state->cv.notify_one();
  return true;
}

void SerialQueue::stop() {
  std::thread t;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    t = std::move(thread_);
  }
  state_->cv.notify_one();
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();  // a job let go of the queue: the thread ends after it
    return;
  }
  t.join();
}

bool SerialQueue::on_this_thread() const {
  std::lock_guard lock(state_->mu);
  return state_->id == std::this_thread::get_id();
}

void SerialQueue::run(const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  for (;;) {
    state->cv.wait(lock, [&] { return state->stopping || !state->jobs.empty(); });
    if (state->jobs.empty()) return;  // stopping, with nothing left to run
    auto job = std::move(state->jobs.front());
    state->jobs.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what it held goes here, not under the lock
    lock.lock();
  }
}

TimerQueue::~TimerQueue() {
  {
    std::lock_guard lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void TimerQueue::at(Clock::time_point when, std::function<void()> job) {
  {
    std::lock_guard lock(mu_);
    jobs_.emplace(when, std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

void TimerQueue::run() {
  std::unique_lock lock(mu_);
  while (!quit_) {
    if (jobs_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto next = jobs_.begin()->first;
    if (Clock::now() < next) {
      cv_.wait_until(lock, next);
      continue;
    }
    auto job = std::move(jobs_.begin()->second);
    jobs_.erase(jobs_.begin());
    lock.unlock();
    job();
    job = nullptr;  // what it held goes here, not under the lock
    lock.lock();
  }
}

}  // namespace baton::net
