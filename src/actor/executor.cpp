#include "baton/actor/executor.hpp"

#include <chrono>

#include "net/io_thread.hpp"
#include "net/watchdog.hpp"
#include "wire/cpus.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BATON_CPU_RELAX() _mm_pause()
#else
#define BATON_CPU_RELAX() std::this_thread::yield()
#endif

namespace baton {
namespace {

// The pool whose worker is running on this thread, and that worker's index.
thread_local ThreadPool* t_pool = nullptr;
thread_local std::size_t t_worker = 0;

// How long an idle worker spins before it sleeps, where one may: long enough to catch the reply
// of a request/reply exchange, short enough not to burn a core when the proc is idle.
constexpr auto kSpin = std::chrono::microseconds(50);
// Spinning pays only where cores are plenty: one spinner per this many hardware threads, and
// none below it (a spinner there takes the core the thread with the reply needs).
constexpr unsigned kCoresPerSpinner = 8;
// How long a strand may wait in a busy worker's slot before it goes to the shared queue.
constexpr auto kStuckAfter = std::chrono::milliseconds(2);

/// Whether work just queued in a pool needs one more worker (workers start as work comes):
/// more strands wait in the shared queue than workers sleep to take them, fewer than `target`
/// run (those blocked in a BlockingRegion not counted), and the pool has room for another.
/// Strands, not wake-ups, are counted: a sleeper woken for one strand that then runs long (or
/// blocks until another actor of its proc answers) must not leave a second one queued behind it.
bool wants_another(std::size_t queued, std::size_t sleeping, bool stopping, std::size_t started,
                   std::size_t blocked, std::size_t target, std::size_t capacity) {
  return queued > sleeping && !stopping && started - blocked < target && started < capacity;
}

}  // namespace

ThreadPool::ThreadPool(std::size_t threads) {
  const std::size_t cores = wire::usable_cpus();
  if (threads == 0) threads = cores;
  target_ = threads;
  max_spinners_ = cores / kCoresPerSpinner;
  workers_.reserve(threads + kMaxSpare);
  for (std::size_t i = 0; i < threads + kMaxSpare; ++i) {
    workers_.push_back(std::make_unique<Worker>());
  }
  watched_.assign(workers_.size(), ~std::uint64_t{0});
  watchdog_ = std::make_unique<net::Watchdog>(kStuckAfter, kStuckAfter, [this] {
    return free_stuck_slots() ? net::Look::closely : net::Look::done;
  });
  // Workers start as work comes (schedule()): a proc whose actors all run on its I/O thread, run
  // to completion, never starts one, and a worker's start is not paid before it is needed.
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  // No worker starts once stopping_ is set, so the count read here is final.
  const std::size_t n = started_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) workers_[i]->thread.join();
  watchdog_.reset();
}

void ThreadPool::start_worker(std::size_t index) {
  workers_[index]->thread = std::thread([this, index] { work(index); });
  started_.store(index + 1, std::memory_order_release);
}

ThreadPool::BlockingRegion::BlockingRegion() : pool_(t_pool) {
  if (pool_ != nullptr) {
    pool_->begin_blocking(t_worker);
  } else {
    net::blocking_here();  // an actor run on an I/O thread: the event loop moves elsewhere
  }
}

ThreadPool::BlockingRegion::~BlockingRegion() {
  if (pool_ != nullptr) pool_->end_blocking();
}

void ThreadPool::begin_blocking(std::size_t index) {
  // The strand this worker woke would wait behind the block: it goes to the shared queue.
  Runnable* woken = workers_[index]->next.exchange(nullptr, std::memory_order_acq_rel);
  {
    std::lock_guard lock(mu_);
    if (woken != nullptr) {
      queue_.push_back(woken);
      queued_.fetch_add(1, std::memory_order_release);
    }
    const std::size_t blocked = blocked_.fetch_add(1, std::memory_order_acq_rel) + 1;
    const std::size_t n = started_.load(std::memory_order_relaxed);
    if (!stopping_ && n - blocked < target_ && n < workers_.size()) start_worker(n);
  }
  if (woken != nullptr) cv_.notify_one();
}

void ThreadPool::end_blocking() {
  blocked_.fetch_sub(1, std::memory_order_acq_rel);
}

void ThreadPool::schedule(Runnable* r) {
  if (t_pool == this) {
    // Run the woken strand next on this worker; the one it displaces goes to the shared queue.
    r = workers_[t_worker]->next.exchange(r, std::memory_order_acq_rel);
    if (r == nullptr) {
      watchdog_->arm();  // in case this worker's strand runs long
      return;
    }
  }
  {
    std::lock_guard lock(mu_);
    queue_.push_back(r);
    queued_.fetch_add(1, std::memory_order_release);
    // Nobody asleep to take it (sleepers count under mu_): one more worker, up to `threads`
    // running, where fewer run.
    const std::size_t n = started_.load(std::memory_order_relaxed);
    if (wants_another(queue_.size(), sleeping_.load(std::memory_order_relaxed), stopping_, n,
                      blocked_.load(std::memory_order_acquire), target_, workers_.size())) {
      start_worker(n);  // it takes the queue's work as it starts
    }
  }
  if (sleeping_.load(std::memory_order_acquire) > 0) cv_.notify_one();
}

bool ThreadPool::free_stuck_slots() {
  bool full = false;
  bool freed = false;
  const std::size_t n = started_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    Worker& w = *workers_[i];
    if (w.next.load(std::memory_order_acquire) == nullptr) {
      watched_[i] = ~std::uint64_t{0};
      continue;
    }
    full = true;
    const std::uint64_t runs = w.runs.load(std::memory_order_relaxed);
    if (watched_[i] != runs) {
      watched_[i] = runs;  // its owner moved on since the last look: give it a period
      continue;
    }
    // Taken and queued under the lock, so a worker that finds the queue empty there and its
    // slot empty (and stops) cannot miss it.
    std::lock_guard lock(mu_);
    if (Runnable* r = w.next.exchange(nullptr, std::memory_order_acq_rel)) {
      queue_.push_back(r);
      queued_.fetch_add(1, std::memory_order_release);
      freed = true;
      // Its owner runs long, and no worker may be asleep to take it (workers start as work
      // comes): one more starts then, as in schedule().
      const std::size_t m = started_.load(std::memory_order_relaxed);
      if (wants_another(queue_.size(), sleeping_.load(std::memory_order_relaxed), stopping_, m,
                        blocked_.load(std::memory_order_acquire), target_, workers_.size())) {
        start_worker(m);
      }
    }
  }
  if (freed) cv_.notify_one();
  return full;
}

Runnable* ThreadPool::steal(std::size_t index, std::vector<std::uint64_t>& seen) {
  if (queued_.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(mu_);
    if (!queue_.empty()) {
      Runnable* r = queue_.front();
      queue_.pop_front();
      queued_.fetch_sub(1, std::memory_order_release);
      return r;
    }
  }
  const std::size_t n = started_.load(std::memory_order_acquire);
  for (std::size_t k = 1; k < n; ++k) {
    const std::size_t victim = (index + k) % n;
    Worker& w = *workers_[victim];
    if (w.next.load(std::memory_order_relaxed) == nullptr) {
      seen[victim] = ~std::uint64_t{0};
      continue;
    }
    // Its owner will run it as soon as its current strand yields; steal only if the owner is
    // still on the same strand as when we first saw the slot full.
    const std::uint64_t runs = w.runs.load(std::memory_order_relaxed);
    if (seen[victim] != runs) {
      seen[victim] = runs;
      continue;
    }
    if (Runnable* r = w.next.exchange(nullptr, std::memory_order_acq_rel)) return r;
  }
  return nullptr;
}

Runnable* ThreadPool::take(std::size_t index, std::vector<std::uint64_t>& seen) {
  if (Runnable* r = workers_[index]->next.exchange(nullptr, std::memory_order_acq_rel)) return r;
  return steal(index, seen);
}

bool ThreadPool::spin(std::size_t index, std::vector<std::uint64_t>& seen, Runnable*& found) {
  if (spinners_.fetch_add(1, std::memory_order_acq_rel) >= max_spinners_) {
    spinners_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (found == nullptr && std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 64 && found == nullptr; ++i) {
      BATON_CPU_RELAX();
      found = take(index, seen);
    }
  }
  spinners_.fetch_sub(1, std::memory_order_acq_rel);
  return found != nullptr;
}

void ThreadPool::work(std::size_t index) {
  t_pool = this;
  t_worker = index;
  Worker& self = *workers_[index];
  std::vector<std::uint64_t> seen(workers_.size(), ~std::uint64_t{0});
  auto run = [&](Runnable* r) {
    self.runs.store(self.runs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    r->run();
  };
  for (;;) {
    if (Runnable* r = take(index, seen)) {
      run(r);
      continue;
    }
    Runnable* found = nullptr;
    if (spin(index, seen, found)) {
      run(found);
      continue;
    }
    std::unique_lock lock(mu_);
    if (stopping_ && queue_.empty() && self.next.load() == nullptr) return;
    sleeping_.fetch_add(1, std::memory_order_acq_rel);
    // Shared work wakes us; a strand stuck in a busy worker's slot comes here by the watchdog.
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    sleeping_.fetch_sub(1, std::memory_order_acq_rel);
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
