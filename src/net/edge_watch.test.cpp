// EdgeWatch (edge_watch.hpp): a wait on an eventfd another process writes ends at its next
// write and at no other time, never reads the eventfd, ends at once for a write that came while
// no wait was armed, ends with operation_aborted when closed, and leaves the eventfd (which the
// writer still holds) out of the event loop once closed.

#include "net/edge_watch.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>

namespace baton::net::internal {
namespace {

constexpr auto kDeadline = std::chrono::seconds(30);

/// An eventfd, as a link's two sides hold it: the writer's descriptor, and the watcher's own.
struct Bell {
  Bell() : writer(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)), watched(::dup(writer)) {}
  ~Bell() { ::close(writer); }
  Bell(const Bell&) = delete;
  Bell& operator=(const Bell&) = delete;
  void ring() const {
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(writer, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  /// The count (read through the writer's descriptor, which empties it).
  std::uint64_t count() const {
    std::uint64_t n = 0;
    return ::read(writer, &n, sizeof n) == static_cast<ssize_t>(sizeof n) ? n : 0;
  }
  int writer;
  int watched;  // handed to the EdgeWatch, which owns it
};

struct EdgeWatchTest : ::testing::Test {
  asio::io_context io;
  // The loop keeps running the reactor with no wait armed, as a link's loop does.
  asio::executor_work_guard<asio::io_context::executor_type> work = asio::make_work_guard(io);
  Bell bell;
  EdgeWatch watch{io};
  std::optional<asio::error_code> ended;

  void arm() {
    ended.reset();
    watch.async_wait([this](asio::error_code ec) { ended = ec; });
  }
  /// Runs what is ready now, the reactor included, without waiting.
  void poll() {
    io.restart();
    io.poll();
  }
  /// Runs the loop until the wait ends (or the deadline passes).
  void run_until_ended() {
    io.restart();
    const auto until = std::chrono::steady_clock::now() + kDeadline;
    while (!ended && std::chrono::steady_clock::now() < until) io.run_one_until(until);
  }
  /// A fresh watch's first wait ends at once (it cannot know what came before it); taken here.
  void assign_and_settle() {
    ASSERT_FALSE(watch.assign(bell.watched));
    arm();
    run_until_ended();
    ASSERT_EQ(ended, asio::error_code());
  }
};

TEST_F(EdgeWatchTest, EachWriteEndsTheWaitArmedBeforeItAndNothingElseDoes) {
  assign_and_settle();
  for (int i = 0; i < 100; ++i) {
    arm();
    poll();
    ASSERT_FALSE(ended) << "wait " << i << " ended with no write";
    bell.ring();
    run_until_ended();
    ASSERT_EQ(ended, asio::error_code()) << "wait " << i;
  }
  // Not one read: the count holds every write.
  EXPECT_EQ(bell.count(), 100U);
}

TEST_F(EdgeWatchTest, AWriteThatCameWhileNoWaitWasArmedEndsTheNextWaitAtOnce) {
  assign_and_settle();
  arm();
  bell.ring();
  run_until_ended();
  // No wait armed now: the loop takes the next write's edge with nothing to end.
  bell.ring();
  poll();
  arm();
  poll();
  EXPECT_EQ(ended, asio::error_code());  // without it, this wait would sleep through the write
  // The write was taken: the wait after it sleeps.
  arm();
  poll();
  EXPECT_FALSE(ended);
}

TEST_F(EdgeWatchTest, CloseEndsTheWaitAndTheWritersLaterWritesReachNothing) {
  assign_and_settle();
  arm();
  watch.close();
  EXPECT_FALSE(watch.is_open());
  run_until_ended();
  EXPECT_EQ(ended, asio::error_code(asio::error::operation_aborted));
  // The writer still holds the eventfd. A new watch on the same loop (which reuses the closed
  // one's bookkeeping) must not hear its writes: the closed one left the loop's epoll.
  Bell other;
  EdgeWatch next(io);
  ASSERT_FALSE(next.assign(other.watched));
  std::optional<asio::error_code> next_ended;
  next.async_wait([&](asio::error_code ec) { next_ended = ec; });
  poll();
  ASSERT_TRUE(next_ended);  // its first wait ends at once
  next_ended.reset();
  next.async_wait([&](asio::error_code ec) { next_ended = ec; });
  bell.ring();
  poll();
  EXPECT_FALSE(next_ended) << "a closed watch's eventfd woke another watch";
  other.ring();
  io.restart();
  const auto until = std::chrono::steady_clock::now() + kDeadline;
  while (!next_ended && std::chrono::steady_clock::now() < until) io.run_one_until(until);
  EXPECT_EQ(next_ended, asio::error_code());
  // A wait on a closed watch ends at once, with an error.
  arm();
  run_until_ended();
  EXPECT_EQ(ended, asio::error_code(asio::error::bad_descriptor));
}

TEST(EdgeWatch, AnEventLoopThatGoesFirstDropsTheWaitUnrun) {
  Bell bell;
  auto held = std::make_shared<int>(0);
  bool ran = false;
  {
    asio::io_context io;
    EdgeWatch watch(io);
    ASSERT_FALSE(watch.assign(bell.watched));
    watch.async_wait([held, &ran](asio::error_code) { ran = true; });
    EXPECT_EQ(held.use_count(), 2);
  }  // the watch closes (its wait aborted, queued), then the loop goes with the wait unrun
  EXPECT_FALSE(ran);
  EXPECT_EQ(held.use_count(), 1);
}

TEST(EdgeWatch, ADescriptorEpollWillNotWatchIsRefusedAndClosed) {
  asio::io_context io;
  EdgeWatch watch(io);
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(watch.assign(fd));  // no longer open
  EXPECT_FALSE(watch.is_open());
  Bell bell;
  ASSERT_FALSE(watch.assign(bell.watched));
  Bell second;
  EXPECT_EQ(watch.assign(second.watched), std::make_error_code(std::errc::device_or_resource_busy));
  EXPECT_EQ(::fcntl(second.watched, F_GETFD), -1);  // taken, and closed
}

}  // namespace
}  // namespace baton::net::internal
