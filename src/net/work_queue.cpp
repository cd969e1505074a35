#include "net/work_queue.hpp"

#include <algorithm>
#include <utility>

namespace baton::net {

JobQueue::JobQueue(std::size_t threads) : max_threads_(std::max<std::size_t>(threads, 1)) {}

JobQueue::~JobQueue() {
  stop();
}

bool JobQueue::post(std::function<void()> job) {
  // Once the lock is let go, the job may run and let go of this queue: only `state` is used.
  const std::shared_ptr<State> state = state_;
  {
    std::lock_guard lock(state->mu);
    if (state->stopping) return false;
    state->jobs.push_back(std::move(job));
    if (state->idle < state->jobs.size() && threads_.size() < max_threads_) {
      threads_.emplace_back([state] { run(state); });
      state->ids.push_back(threads_.back().get_id());
    }
  }
  state->cv.notify_one();
  return true;
}

void JobQueue::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(state_->mu);
    state_->stopping = true;
    threads.swap(threads_);
  }
  state_->cv.notify_all();
  for (std::thread& t : threads) {
    if (t.get_id() == std::this_thread::get_id()) {
      t.detach();  // a job let go of the queue: its thread ends after it
    } else {
      t.join();
    }
  }
}

bool JobQueue::on_this_thread() const {
  std::lock_guard lock(state_->mu);
  const auto& ids = state_->ids;
  return std::find(ids.begin(), ids.end(), std::this_thread::get_id()) != ids.end();
}

void JobQueue::run(const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  for (;;) {
    ++state->idle;
    state->cv.wait(lock, [&] { return state->stopping || !state->jobs.empty(); });
    --state->idle;
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
  std::thread t;
  {
    std::lock_guard lock(state_->mu);
    state_->quit = true;
    t = std::move(thread_);
  }
  state_->cv.notify_all();
  if (!t.joinable()) return;
  if (t.get_id() == std::this_thread::get_id()) {
    t.detach();  // a job let go of the queue: the thread ends after it
  } else {
    t.join();
  }
}

TimerQueue::Key TimerQueue::at(Clock::time_point when, std::function<void()> job) {
  // Once the lock is let go, the job may run and let go of this queue: only `state` is used.
  const std::shared_ptr<State> state = state_;
  Key key;
  {
    std::lock_guard lock(state->mu);
    key = {when, ++state->last};
    state->jobs.emplace(key, std::move(job));
    if (!thread_.joinable()) thread_ = std::thread([state] { run(state); });
  }
  state->cv.notify_all();
  return key;
}

void TimerQueue::cancel(const Key& key) {
  std::function<void()> dropped;  // what it held goes after the lock
  std::lock_guard lock(state_->mu);
  auto it = state_->jobs.find(key);
  if (it == state_->jobs.end()) return;  // ran, or runs now
  dropped = std::move(it->second);
  state_->jobs.erase(it);
}

void TimerQueue::run(const std::shared_ptr<State>& state) {
  std::unique_lock lock(state->mu);
  while (!state->quit) {
    if (state->jobs.empty()) {
      state->cv.wait(lock);
      continue;
    }
    const auto next = state->jobs.begin()->first.first;
    if (Clock::now() < next) {
      state->cv.wait_until(lock, next);
      continue;
    }
    auto job = std::move(state->jobs.begin()->second);
    state->jobs.erase(state->jobs.begin());
    lock.unlock();
    job();
    job = nullptr;  // what it held goes here, not under the lock
    lock.lock();
  }
}

}  // namespace baton::net
