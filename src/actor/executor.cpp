#include "baton/actor/executor.hpp"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BATON_CPU_RELAX() _mm_pause()
#else
#define BATON_CPU_RELAX() std::this_thread::yield()
#endif

namespace baton {
namespace {

// The pool whose worker is running on this thread, and that worker's index.
thread_local const ThreadPool* t_pool = nullptr;
thread_local std::size_t t_worker = 0;

// How long an idle worker spins before it sleeps: long enough to catch the reply of a
// request/reply exchange, short enough not to burn a core when the proc is idle.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

ThreadPool::ThreadPool(std::size_t threads) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(threads);
  for (std::size_t i = 0; i < threads; ++i) workers_.push_back(std::make_unique<Worker>());
  for (std::size_t i = 0; i < threads; ++i) {
    workers_[i]->thread = std::thread([this, i] { work(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w->thread.join();
}

void ThreadPool::schedule(Runnable* r) {
  if (t_pool == this) {
    // Run the woken strand next on this worker; the one it displaces goes to the shared queue.
    Runnable* displaced = workers_[t_worker]->next.exchange(r, std::memory_order_acq_rel);
    if (displaced == nullptr) {
      if (sleeping_.load(std::memory_order_acquire) > 0 &&
          queued_.load(std::memory_order_relaxed) == 0) {
        cv_.notify_one();  // let an idle worker steal it if this one stays busy
      }
      return;
    }
    r = displaced;
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(r);
    queued_.fetch_add(1, std::memory_order_release);
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_one();
}

Runnable* ThreadPool::steal(std::size_t index) {
  if (queued_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mu_);
    if (!queue_.empty()) {
      Runnable* r = queue_.front();
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_release);
      return r;
    }
  }
  for (std::size_t k = 1; k < workers_.size(); ++k) {
    auto& other = workers_[(index + k) % workers_.size()]->next;
    if (other.load(std::memory_order_relaxed) != nullptr) {
      if (Runnable* r = other.exchange(nullptr, std::memory_order_acq_rel)) return r;
    }
  }
  return nullptr;
}

Runnable* ThreadPool::take(std::size_t index) {
  if (Runnable* r = workers_[index]->next.exchange(nullptr, std::memory_order_acq_rel)) return r;
  return steal(index);
}

void ThreadPool::work(std::size_t index) {
  t_pool = this;
  t_worker = index;
  for (;;) {
    if (Runnable* r = take(index)) {
      r->run();
      continue;
    }
    const auto until = std::chrono::steady_clock::now() + kSpin;
    Runnable* found = nullptr;
    while (found == nullptr && std::chrono::steady_clock::now() < until) {
      for (int i = 0; i < 64 && found == nullptr; ++i) {
        BATON_CPU_RELAX();
        found = take(index);
      }
    }
    if (found != nullptr) {
      found->run();
      continue;
    }
    std::unique_lock lock(mu_);
    sleeping_.fetch_add(1, std::memory_order_acq_rel);
    cv_.wait(lock, [&] {
      if (stopping_ || !queue_.empty()) return true;
      for (auto& w : workers_) {
        if (w->next.load(std::memory_order_acquire) != nullptr) return true;
      }
      return false;
    });
    sleeping_.fetch_sub(1, std::memory_order_acq_rel);
    if (stopping_ && queue_.empty()) {
      bool any = false;
      for (auto& w : workers_) any = any || w->next.load() != nullptr;
      if (!any) return;
    }
  }
}

void ManualExecutor::schedule(Runnable* r) {
  std::lock_guard lock(mu_);
  queue_.push_back(r);
}

bool ManualExecutor::run_one() {
  Runnable* r = nullptr;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) return false;
    r = queue_.front();
    queue_.pop_front();
  }
  r->run();
  return true;
}

std::size_t ManualExecutor::run_until_idle() {
  std::size_t n = 0;
  while (run_one()) ++n;
  return n;
}

std::size_t ManualExecutor::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

}  // namespace baton
