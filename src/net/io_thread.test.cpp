// The I/O thread's run to completion (work a handler woke runs on the loop thread after it),
// the watchdog that takes the event loop over while such work runs long or blocks, and a
// waiting thread that runs the event loop itself (a guest). Every wait has a deadline: a
// broken take-over fails the test instead of hanging it.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "net/io_thread.hpp"
#include "net/link_impl.hpp"
#include "net/watchdog.hpp"

namespace baton::net {
namespace {

using namespace std::chrono_literals;
constexpr auto kDeadline = 30s;

/// Runs `f` as a handler of `io`'s event loop.
void in_handler(IoThread& io, std::function<void()> f) {
  asio::post(io.impl().ctx, std::move(f));
}

TEST(IoThread, WorkWokenInAHandlerRunsOnTheLoopThreadRightAfterIt) {
  IoThread io;
  std::promise<std::thread::id> handler_thread;
  std::promise<std::thread::id> work_thread;
  std::atomic<bool> handler_done{false};
  std::atomic<bool> work_saw_handler_done{false};
  in_handler(io, [&] {
    ASSERT_EQ(inline_io_thread(), &io);
    run_after_handler(io, [&] {
      work_saw_handler_done = handler_done.load();
      EXPECT_EQ(inline_io_thread(), nullptr);  // work does not chain more work here
      EXPECT_FALSE(on_io_thread());            // a send from work may wait, as anywhere
      work_thread.set_value(std::this_thread::get_id());
    });
    handler_thread.set_value(std::this_thread::get_id());
    handler_done = true;
  });
  auto h = handler_thread.get_future();
  auto w = work_thread.get_future();
  ASSERT_EQ(w.wait_for(kDeadline), std::future_status::ready);
  EXPECT_EQ(h.get(), w.get());
  EXPECT_TRUE(work_saw_handler_done);
  EXPECT_EQ(inline_io_thread(), nullptr);  // not on this thread
}

/// Runs work on `io`'s loop thread that waits for a handler posted after it, which only another
/// thread running the event loop meanwhile can run; true if the work saw that handler run.
bool work_sees_a_later_handler(IoThread& io, bool says_it_blocks) {
  std::promise<void> released;
  auto release = released.get_future();
  std::promise<bool> work_result;
  in_handler(io, [&] {
    run_after_handler(io, [&] {
      if (says_it_blocks) blocking_here();
      work_result.set_value(release.wait_for(kDeadline) == std::future_status::ready);
    });
  });
  in_handler(io, [&] { released.set_value(); });
  auto result = work_result.get_future();
  return result.wait_for(kDeadline + 5s) == std::future_status::ready && result.get();
}

TEST(IoThread, LongWorkLetsTheWatchdogRunTheEventLoop) {
  IoThread io;
  EXPECT_TRUE(work_sees_a_later_handler(io, /*says_it_blocks=*/false));
  // And the loop thread has its loop back: a later handler runs.
  std::promise<void> later;
  in_handler(io, [&] { later.set_value(); });
  EXPECT_EQ(later.get_future().wait_for(kDeadline), std::future_status::ready);
}

TEST(IoThread, LongWorkAfterAStreamOfShortWorkIsStillTakenOver) {
  IoThread io;
  // Short work, back to back, until the watchdog has seen it come and go and waits longer
  // between its looks.
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  while (io.impl().watchdog->wait() <= 2ms && std::chrono::steady_clock::now() < until) {
    std::promise<void> ran;
    in_handler(io, [&] { run_after_handler(io, [&] { ran.set_value(); }); });
    ASSERT_EQ(ran.get_future().wait_for(kDeadline), std::future_status::ready);
  }
  ASSERT_GT(io.impl().watchdog->wait(), 2ms);
  EXPECT_TRUE(work_sees_a_later_handler(io, /*says_it_blocks=*/false));
}

TEST(IoThread, WorkThatSaysItBlocksHandsTheLoopOverAtOnce) {
  IoThread io;
  EXPECT_TRUE(work_sees_a_later_handler(io, /*says_it_blocks=*/true));
}

TEST(IoThread, AWaitingThreadRunsTheEventLoopItself) {
  IoThread io;
  int on_guest = 0;
  for (int round = 0; round < 100; ++round) {
    std::atomic<bool> done{false};
    std::thread::id ran_on;
    // Posted before the guest leads or while it does: either way it runs, and `done` ends it.
    in_handler(io, [&] {
      ran_on = std::this_thread::get_id();
      done = true;
    });
    const bool led = drive_until(
        io, [&] { return done.load(); }, [](const std::function<void()>&) {}, nullptr);
    ASSERT_TRUE(led);
    ASSERT_TRUE(done);
    if (ran_on == std::this_thread::get_id()) ++on_guest;
  }
  // The loop thread stays parked between two close turns, so the guest ran handlers itself
  // (each round's may also have run before the loop thread parked).
  EXPECT_GT(on_guest, 0);
}

TEST(IoThread, AGuestIsWokenWhenAnotherThreadCompletesItsWait) {
  IoThread io;
  std::atomic<bool> done{false};
  std::thread completer;
  const bool led = drive_until(
      io, [&] { return done.load(); },
      [&](std::function<void()> w) {
        completer = std::thread([&, w = std::move(w)] {
          done = true;  // nothing on the event loop: only the wake ends the guest's wait
          w();
        });
      },
      nullptr);
  completer.join();
  EXPECT_TRUE(led);
  EXPECT_TRUE(done);
}

TEST(IoThread, AGuestGivesUpAtItsDeadline) {
  IoThread io;
  const auto deadline = std::chrono::steady_clock::now() + 20ms;
  EXPECT_TRUE(drive_until(
      io, [] { return false; }, [](const std::function<void()>&) {}, &deadline));
  EXPECT_GE(std::chrono::steady_clock::now(), deadline);
  // The loop thread takes its loop back: a handler posted now runs without a guest.
  std::promise<void> later;
  in_handler(io, [&] { later.set_value(); });
  EXPECT_EQ(later.get_future().wait_for(kDeadline), std::future_status::ready);
}

TEST(Watchdog, LooksWhileArmedAndStopsWhenThereIsNothingToWatch) {
  std::atomic<int> looks{0};
  std::atomic<int> left{3};
  std::promise<void> disarmed;
  std::atomic<bool> told{false};
  Watchdog dog(1ms, 1ms, [&] {
    ++looks;
    const bool more = --left > 0;
    if (!more && !told.exchange(true)) disarmed.set_value();
    return more ? Look::closely : Look::done;
  });
  dog.arm();
  ASSERT_EQ(disarmed.get_future().wait_for(kDeadline), std::future_status::ready);
  EXPECT_GE(looks.load(), 3);
  // Armed again, it looks again.
  std::promise<void> again;
  std::atomic<bool> told_again{false};
  Watchdog dog2(1ms, 1ms, [&] {
    if (!told_again.exchange(true)) again.set_value();
    return Look::done;
  });
  dog2.arm();
  EXPECT_EQ(again.get_future().wait_for(kDeadline), std::future_status::ready);
}

TEST(Watchdog, LooksFurtherApartWhileWhatItFindsKeepsEndingAndCloselyWhileSomethingRuns) {
  const std::vector<Look> answers = {Look::loosely, Look::loosely, Look::loosely, Look::loosely,
                                     Look::loosely, Look::closely, Look::loosely, Look::done};
  std::vector<std::chrono::microseconds> waits;  // the watchdog's thread only, until `done`
  std::promise<void> done;
  Watchdog* self = nullptr;
  Watchdog dog(1ms, 8ms, [&] {
    if (waits.size() == answers.size()) return Look::done;  // the look after the disarm
    waits.push_back(self->wait());
    const Look answer = answers[waits.size() - 1];
    if (waits.size() == answers.size()) done.set_value();
    return answer;
  });
  self = &dog;
  dog.arm();
  ASSERT_EQ(done.get_future().wait_for(kDeadline), std::future_status::ready);
  const std::vector<std::chrono::microseconds> expected = {1ms, 2ms, 4ms, 8ms, 8ms, 8ms, 1ms, 8ms};
  EXPECT_EQ(waits, expected);
}

}  // namespace
}  // namespace baton::net
