#pragma once

// Executors run actors. Each actor is a serial strand (a Runnable) that an executor runs when it
// has messages. ThreadPool is the production executor; ManualExecutor runs everything on the
// calling thread, step by step, so unit tests check ordering and failure without sleeps.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace baton {

namespace net {
class Watchdog;
}  // namespace net

class Runnable {
 public:
  /// Runs a bounded batch of work; the runnable reschedules itself if more is left.
  virtual void run() = 0;

 protected:
  ~Runnable() = default;
};

class Executor {
 public:
  virtual ~Executor() = default;
  /// Makes `r` eligible to run; `r` must stay alive until it has run.
  virtual void schedule(Runnable* r) = 0;
  /// For a caller that waits for scheduled work to be done (a proc stopping): an executor whose
  /// work runs only when driven runs it all now, on the calling thread, and returns true; one
  /// with threads of its own returns false, and the caller waits for them.
  virtual bool run_here_until_idle() { return false; }
};

/// A work-sharing thread pool. A strand woken by a worker runs next on that worker (a "next"
/// slot, so request/reply chains stay on one core). Idle workers take from the shared queue;
/// a watchdog, awake only while a slot is full, moves a slot's strand to the shared queue when
/// its owner has been busy with one strand for a while, so a long handler never holds up the
/// strand it woke. Idle workers sleep (no timer wakes them); on a machine with many cores one
/// of them at a time spins briefly first, to catch the reply of a request/reply exchange.
///
/// A handler that must block its thread (a Python actor's plain endpoint waiting on a call)
/// says so with a BlockingRegion: while it waits, the pool starts a spare worker if fewer than
/// `threads` are left running, so the proc's other actors never starve (up to kMaxSpare).
class ThreadPool final : public Executor {
 public:
  static constexpr std::size_t kMaxSpare = 64;

  /// `threads == 0` means one per core the constructing thread may run on (its affinity mask).
  explicit ThreadPool(std::size_t threads = 0);
  ~ThreadPool() override;
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void schedule(Runnable* r) override;
  /// The workers started so far. They start as work comes, up to `threads` (plus the spares
  /// blocked handlers need): a worker starts when work is queued and none is asleep to take it.
  std::size_t size() const { return started_.load(std::memory_order_acquire); }

  /// Marks the calling worker of a pool as blocked for its lifetime; nothing on other threads.
  class BlockingRegion {
   public:
    BlockingRegion();
    ~BlockingRegion();
    BlockingRegion(const BlockingRegion&) = delete;
    BlockingRegion& operator=(const BlockingRegion&) = delete;

   private:
    ThreadPool* pool_;
  };

 private:
  void begin_blocking(std::size_t index);
  void end_blocking();
  void start_worker(std::size_t index);
  struct Worker {
    std::atomic<Runnable*> next{nullptr};
    std::atomic<std::uint64_t> runs{0};  // bumped per strand run; unchanged = still busy
    std::thread thread;
  };
  void work(std::size_t index);
  Runnable* take(std::size_t index, std::vector<std::uint64_t>& seen);
  Runnable* steal(std::size_t index, std::vector<std::uint64_t>& seen);
  bool spin(std::size_t index, std::vector<std::uint64_t>& seen, Runnable*& found);
  /// The watchdog's look: frees slots whose owner is still on the strand it ran a period ago.
  bool free_stuck_slots();

  // Sized for every spare at construction, so the workers' loops never see it change.
  std::vector<std::unique_ptr<Worker>> workers_;
  std::size_t target_;
  std::atomic<std::size_t> started_{0};
  std::atomic<std::size_t> blocked_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Runnable*> queue_;
  std::atomic<std::size_t> queued_{0};
  std::atomic<int> sleeping_{0};
  bool stopping_ = false;
  std::size_t max_spinners_ = 0;  // 0 on a machine with few cores: nobody spins there
  std::atomic<std::size_t> spinners_{0};
  std::vector<std::uint64_t> watched_;  // the watchdog's: each slot's owner's runs, last look
  std::unique_ptr<net::Watchdog> watchdog_;
};

/// Runs scheduled strands on the calling thread, one step at a time, in scheduling order.
class ManualExecutor final : public Executor {
 public:
  void schedule(Runnable* r) override;
  /// Runs one scheduled strand's batch; returns false if nothing was scheduled.
  bool run_one();
  /// Runs until nothing is scheduled; returns the number of batches run.
  std::size_t run_until_idle();
  bool run_here_until_idle() override {
    run_until_idle();
    return true;
  }
  std::size_t pending() const;

 private:
  mutable std::mutex mu_;
  std::deque<Runnable*> queue_;
};

}  // namespace baton
