// The runtime on its real thread pool: many senders, many actors, many client threads at once.
// Correctness is checked by exact counts and per-sender order, never by timing.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "baton/actor/executor.hpp"
#include "baton/actor/proc.hpp"
#include "wire/cpus.hpp"
#include "wire/cpus.test.hpp"

namespace baton {
namespace {

class Checker : public Actor {
 public:
  // plain members, no atomics; a data race here would show up as a wrong total (and
  // under ThreadSanitizer as a report).
  void note(int sender, std::int64_t seq) {
    auto& next = next_[static_cast<std::size_t>(sender)];
    if (seq != next) ++out_of_order_;
    next = seq + 1;
    ++total_;
  }
  std::vector<std::int64_t> summary() { return {total_, out_of_order_}; }
  static constexpr auto endpoints = baton::endpoints<&Checker::note, &Checker::summary>();

 private:
  std::vector<std::int64_t> next_ = std::vector<std::int64_t>(64, 0);
  std::int64_t total_ = 0;
  std::int64_t out_of_order_ = 0;
};

class Blaster : public Actor {
 public:
  explicit Blaster(int who) : who_(who) {}
  int blast(const ActorRef<Checker>& to, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) to.send(&Checker::note, who_, i);
    return who_;
  }
  static constexpr auto endpoints = baton::endpoints<&Blaster::blast>();

 private:
  int who_;
};

TEST(ThreadPool, ManySendersToOneActorKeepPerSenderOrder) {
  Proc proc(ProcOptions{.name = "pool1", .threads = 4});
  auto checker = proc.spawn<Checker>("checker");
  constexpr int kSenders = 8;
  constexpr std::int64_t kEach = 20000;
  std::vector<Future<int>> done;
  for (int s = 0; s < kSenders; ++s) {
    auto b = proc.spawn<Blaster>("blaster", s);
    done.push_back(b.call(&Blaster::blast, checker, kEach));
  }
  for (int s = 0; s < kSenders; ++s) EXPECT_EQ(done[static_cast<std::size_t>(s)].get(), s);
  // Each blaster's messages were queued before its reply was sent, and each blaster ran to the
  // end before replying, so they are all in the checker's mailbox ahead of this call.
  const std::vector<std::int64_t> summary = checker.call(&Checker::summary).get();
  EXPECT_EQ(summary[0], kSenders * kEach);
  EXPECT_EQ(summary[1], 0) << "messages from one sender arrived out of order";
}

class Echo : public Actor {
 public:
  int echo(int x) { return x; }
  static constexpr auto endpoints = baton::endpoints<&Echo::echo>();
};

class Relay : public Actor {
 public:
  Task<std::int64_t> relay(ActorRef<Echo> echo, int n) {
    std::int64_t sum = 0;
    for (int i = 0; i < n; ++i) sum += co_await echo.call(&Echo::echo, i);
    co_return sum;
  }
  static constexpr auto endpoints = baton::endpoints<&Relay::relay>();
};

TEST(ThreadPool, ConcurrentCoroutineChainsAllComplete) {
  Proc proc(ProcOptions{.name = "pool2", .threads = 3});
  constexpr int kPairs = 16;
  constexpr int kCalls = 500;
  std::vector<Future<std::int64_t>> sums;
  for (int p = 0; p < kPairs; ++p) {
    auto echo = proc.spawn<Echo>("echo");
    auto relay = proc.spawn<Relay>("relay");
    sums.push_back(relay.call(&Relay::relay, echo, kCalls));
  }
  for (auto& s : sums) EXPECT_EQ(s.get(), std::int64_t{kCalls} * (kCalls - 1) / 2);
}

/// A flag one actor sets and another waits for, sleeping on a condition; reset by each test
/// that uses it, so a repeated run starts from a clear flag.
class Flag {
 public:
  void reset() {
    std::lock_guard lock(mu_);
    set_ = false;
  }
  void set() {
    {
      std::lock_guard lock(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  /// True once set; false if `bound` passed first.
  bool wait_for(std::chrono::seconds bound) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, bound, [&] { return set_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool set_ = false;
};
Flag g_flag;

class FlagSetter : public Actor {
 public:
  void set() { g_flag.set(); }
  static constexpr auto endpoints = baton::endpoints<&FlagSetter::set>();
};

class LongHandler : public Actor {
 public:
  // Wakes the setter (it lands in this worker's "next" slot), then keeps this worker blocked
  // until the setter has run: only another worker stealing the slot can end the wait, and if
  // none does the bound ends it with false.
  bool wake_and_wait(const ActorRef<FlagSetter>& setter) {
    setter.send(&FlagSetter::set);
    return g_flag.wait_for(std::chrono::seconds(60));
  }
  static constexpr auto endpoints = baton::endpoints<&LongHandler::wake_and_wait>();
};

TEST(ThreadPool, ALongHandlerDoesNotHoldUpTheStrandItWoke) {
  g_flag.reset();
  Proc proc(ProcOptions{.name = "pool6", .threads = 2});
  auto setter = proc.spawn<FlagSetter>("setter");
  auto waiter = proc.spawn<LongHandler>("waiter");
  EXPECT_TRUE(waiter.call(&LongHandler::wake_and_wait, setter).get());
}

TEST(ThreadPool, ClientThreadsGetTheirOwnReplies) {
  Proc proc(ProcOptions{.name = "pool3", .threads = 2});
  auto echo = proc.spawn<Echo>("echo");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        const int v = t * 100000 + i;
        if (echo.call(&Echo::echo, v).get() != v) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(ThreadPool, DestroyingABusyProcStopsEverythingAndFailsNothingSilently) {
  std::vector<Future<int>> pending;
  {
    Proc proc(ProcOptions{.name = "pool4", .threads = 2});
    auto echo = proc.spawn<Echo>("echo");
    for (int i = 0; i < 10000; ++i) pending.push_back(echo.call(&Echo::echo, i));
  }
  // Stop drains queued messages first, so every call was answered before the proc went away.
  for (int i = 0; i < 10000; ++i) {
    ASSERT_TRUE(pending[static_cast<std::size_t>(i)].ready());
    EXPECT_EQ(pending[static_cast<std::size_t>(i)].get(), i);
  }
}

TEST(ThreadPool, CallsAfterTheProcIsGoneFailClearly) {
  ActorRef<Echo> echo;
  {
    Proc proc(ProcOptions{.name = "pool5", .threads = 1});
    echo = proc.spawn<Echo>("echo");
    EXPECT_EQ(echo.call(&Echo::echo, 3).get(), 3);
  }
  auto f = echo.call(&Echo::echo, 4);
  ASSERT_TRUE(f.ready());
  EXPECT_THROW(f.get(), UndeliverableError);
}

/// A strand that says it runs, then waits until it is let go.
struct Held final : Runnable {
  void run() override {
    running.count_down();
    go.wait();
  }
  std::latch running{1};
  std::latch go{1};
};

/// The workers a pool made with the default size starts for two strands that run at once, the
/// pool made on a thread that may run on `cores` of this thread's cores (all: 0).
std::size_t workers_for_two(std::size_t cores) {
  std::size_t workers = 0;
  std::thread([&] {
    if (cores != 0) {
      ASSERT_TRUE(wire::testing::bind_to_cores(cores));
    }
    ThreadPool pool;
    Held first;
    Held second;
    pool.schedule(&first);
    first.running.wait();
    pool.schedule(&second);  // a second worker starts here, if the pool may have one
    workers = pool.size();
    first.go.count_down();
    second.running.wait();  // it runs, on whichever worker
    second.go.count_down();
  }).join();
  return workers;
}

TEST(ThreadPool, ByDefaultStartsAsManyWorkersAsTheCoresTheProcMayRunOn) {
  if (wire::usable_cpus() < 2) GTEST_SKIP() << "this machine lets the test run on one core only";
  // Bound to one core (taskset, a scheduler's CPU binding), however many the machine has: one
  // worker, the second strand waiting for it.
  EXPECT_EQ(workers_for_two(1), 1u);
  EXPECT_EQ(workers_for_two(0), 2u);
}

}  // namespace
}  // namespace baton
