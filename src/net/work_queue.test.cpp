// The job queue and the timer queue: order, jobs at once on several threads, the thread jobs run
// on, stopping with jobs still queued, a job that lets go of its own queue, cancelled timers, and
// jobs due later dropped at the end. Waits are on futures with a generous deadline (no sleeps).

#include "net/work_queue.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <memory>
#include <thread>
#include <vector>

namespace baton::net {
namespace {

using namespace std::chrono_literals;

TEST(JobQueue, RunsJobsInOrderOnItsOwnThread) {
  JobQueue queue;
  EXPECT_FALSE(queue.on_this_thread());
  std::vector<int> order;
  std::promise<std::thread::id> ran_on;
  std::promise<bool> inside;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(queue.post([&order, i] { order.push_back(i); }));
  ASSERT_TRUE(queue.post([&] {
    ran_on.set_value(std::this_thread::get_id());
    inside.set_value(queue.on_this_thread());
  }));
  auto id = ran_on.get_future();
  ASSERT_EQ(id.wait_for(30s), std::future_status::ready);
  EXPECT_NE(id.get(), std::this_thread::get_id());
  EXPECT_TRUE(inside.get_future().get());
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(order[static_cast<std::size_t>(i)], i);
}

TEST(JobQueue, StopRunsWhatIsQueuedAndRefusesMore) {
  JobQueue queue;
  std::promise<void> release;
  auto released = release.get_future().share();
  std::atomic<int> ran{0};
  ASSERT_TRUE(queue.post([released] { released.wait(); }));  // holds the thread
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(queue.post([&ran] { ++ran; }));
  std::thread stopper([&] { queue.stop(); });
  release.set_value();
  stopper.join();  // stop() returned: everything queued before it ran
  EXPECT_EQ(ran.load(), 10);
  EXPECT_FALSE(queue.post([&ran] { ++ran; }));
  EXPECT_EQ(ran.load(), 10);
}

TEST(JobQueue, AJobMayLetGoOfItsOwnQueue) {
  std::promise<std::thread::id> deleted_on;
  std::shared_ptr<JobQueue> queue(new JobQueue, [&deleted_on](JobQueue* q) {
    delete q;  // stop() from the queue's own thread: it returns, and the thread ends alone
    deleted_on.set_value(std::this_thread::get_id());
  });
  JobQueue* raw = queue.get();
  // The job holds the last reference: the queue goes on its own thread, when the job is done
  // (under AddressSanitizer, the thread touching it after would fail this test).
  ASSERT_TRUE(raw->post([q = std::move(queue)]() mutable { q.reset(); }));
  auto deleted = deleted_on.get_future();
  ASSERT_EQ(deleted.wait_for(30s), std::future_status::ready);
  EXPECT_NE(deleted.get(), std::this_thread::get_id());
}

TEST(JobQueue, RunsAsManyJobsAtOnceAsItHasThreads) {
  JobQueue queue(2);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> first_in, second_in;
  // Each job waits for the release: both start only if two threads take them.
  ASSERT_TRUE(queue.post([&, released] {
    first_in.set_value();
    released.wait();
  }));
  ASSERT_TRUE(queue.post([&, released] {
    second_in.set_value();
    released.wait();
  }));
  EXPECT_EQ(first_in.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_EQ(second_in.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(queue.on_this_thread());
  release.set_value();
}

TEST(TimerQueue, RunsJobsInTheOrderOfTheirTimesAndDropsThoseNotDue) {
  std::vector<int> order;
  std::promise<void> last;
  std::atomic<bool> late_ran{false};
  {
    TimerQueue timers;
    const auto now = TimerQueue::Clock::now();
    timers.at(now + 30ms, [&] { order.push_back(3); });
    timers.at(now + 10ms, [&] { order.push_back(1); });
    timers.at(now + 20ms, [&] { order.push_back(2); });
    timers.at(now + 40ms, [&] { last.set_value(); });
    timers.at(now + 1h, [&] { late_ran = true; });
    ASSERT_EQ(last.get_future().wait_for(30s), std::future_status::ready);
  }  // the queue goes with a job an hour away
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  EXPECT_FALSE(late_ran.load());
}

TEST(TimerQueue, ACancelledJobNeverRuns) {
  TimerQueue timers;
  std::atomic<bool> cancelled_ran{false};
  std::promise<void> later;
  const auto now = TimerQueue::Clock::now();
  const auto key = timers.at(now + 10ms, [&] { cancelled_ran = true; });
  timers.cancel(key);
  timers.at(now + 20ms, [&] { later.set_value(); });  // due after the cancelled one would be
  ASSERT_EQ(later.get_future().wait_for(30s), std::future_status::ready);
  EXPECT_FALSE(cancelled_ran.load());
  timers.cancel(key);  // gone already: nothing happens
}

TEST(TimerQueue, AJobMayLetGoOfItsOwnQueue) {
  std::promise<std::thread::id> deleted_on;
  std::shared_ptr<TimerQueue> timers(new TimerQueue, [&deleted_on](TimerQueue* t) {
    delete t;  // from the queue's own thread: the thread ends after the job
    deleted_on.set_value(std::this_thread::get_id());
  });
  TimerQueue* raw = timers.get();
  raw->at(TimerQueue::Clock::now(), [t = std::move(timers)]() mutable { t.reset(); });
  auto deleted = deleted_on.get_future();
  ASSERT_EQ(deleted.wait_for(30s), std::future_status::ready);
  EXPECT_NE(deleted.get(), std::this_thread::get_id());
}

}  // namespace
}  // namespace baton::net
