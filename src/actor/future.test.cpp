// Future, Promise and Task on their own, without actors.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "baton/actor/future.hpp"
#include "baton/actor/task.hpp"

namespace baton {
namespace {

using namespace std::chrono_literals;

TEST(Future, GetReturnsTheValueSetByAnotherThread) {
  Promise<int> p;
  auto f = p.get_future();
  std::thread t([p] { p.set_value(7); });
  EXPECT_EQ(f.get(), 7);
  t.join();
}

TEST(Future, GetWithTimeoutThrowsAndTheFutureStaysUsable) {
  Promise<std::string> p;
  auto f = p.get_future();
  try {
    f.get(10ms);
    FAIL() << "expected TimeoutError";
  } catch (const TimeoutError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("still usable"));
  }
  EXPECT_FALSE(f.ready());
  p.set_value("late");
  EXPECT_EQ(f.get(10ms), "late");
  EXPECT_EQ(f.get(), "late");
}

TEST(Future, ExceptionsPropagateToEveryGet) {
  Promise<int> p;
  auto f = p.get_future();
  p.set_exception(std::make_exception_ptr(std::runtime_error("remote boom")));
  EXPECT_THROW(f.get(), std::runtime_error);
  EXPECT_THROW(f.get(), std::runtime_error);
}

TEST(Future, FirstCompletionWins) {
  Promise<int> p;
  p.set_value(1);
  p.set_value(2);
  p.set_exception(std::make_exception_ptr(std::runtime_error("late")));
  EXPECT_EQ(p.get_future().get(), 1);
}

/// The message of what `f` throws.
std::string thrown(Future<int> f) {
  try {
    f.get();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "nothing thrown";
}

TEST(Future, FailuresArePassedThroughTheRenameBeforeAnyoneSeesThem) {
  const auto named = [](std::exception_ptr e) {
    try {
      std::rethrow_exception(std::move(e));
    } catch (const std::exception& x) {
      return std::make_exception_ptr(std::runtime_error(std::string("rank 3: ") + x.what()));
    }
  };
  // Renamed first, failed after (the reply comes later): the rename applies as it fails.
  Promise<int> later;
  later.get_future().state()->rename_failures(named);
  later.set_exception(std::make_exception_ptr(std::runtime_error("boom")));
  EXPECT_EQ(thrown(later.get_future()), "rank 3: boom");
  // Failed first (a reply that came before the caller named it): renamed at once.
  Promise<int> sooner;
  sooner.set_exception(std::make_exception_ptr(std::runtime_error("boom")));
  sooner.get_future().state()->rename_failures(named);
  EXPECT_EQ(thrown(sooner.get_future()), "rank 3: boom");
  // A value is left alone, before or after.
  Promise<int> fine;
  fine.get_future().state()->rename_failures(named);
  fine.set_value(5);
  fine.get_future().state()->rename_failures(named);
  EXPECT_EQ(fine.get_future().get(), 5);
}

TEST(Future, ThenChainsAndSkipsOnFailure) {
  Promise<int> p;
  int calls = 0;
  auto doubled = p.get_future().then([&](int v) {
    ++calls;
    return v * 2;
  });
  auto text = std::move(doubled).then([](int v) { return std::to_string(v); });
  EXPECT_FALSE(text.ready());
  p.set_value(21);
  EXPECT_EQ(text.get(), "42");
  EXPECT_EQ(calls, 1);

  Promise<int> q;
  auto skipped = q.get_future().then([&](int v) {
    ++calls;
    return v;
  });
  q.set_exception(std::make_exception_ptr(std::logic_error("nope")));
  EXPECT_THROW(skipped.get(), std::logic_error);
  EXPECT_EQ(calls, 1);
}

TEST(Future, SetBodyDecodesTheReplyOrFails) {
  auto state = std::make_shared<detail::State<std::vector<int>>>();
  state->set_body(encode(std::vector<int>{1, 2, 3}));
  EXPECT_EQ(Future<std::vector<int>>(state).get(), (std::vector<int>{1, 2, 3}));

  auto bad = std::make_shared<detail::State<std::string>>();
  Body garbage;
  garbage.head = "\xff\xff\xff\xff\xff\xff\xff\x7f";  // a string length no buffer can hold
  bad->set_body(garbage);
  EXPECT_THROW(Future<std::string>(bad).get(), DecodeError);
}

TEST(Future, EmptyFutureIsAUsageError) {
  Future<int> f;
  EXPECT_FALSE(f.valid());
  EXPECT_THROW((void)f.ready(), UsageError);
}

TEST(Future, EveryContinuationOnCopiesRunsAndNoneMovesTheValueFromAnother) {  // F-1
  Promise<std::vector<int>> p;
  auto f = p.get_future();
  auto g = f;  // a copy shares the result
  std::vector<std::size_t> sizes;
  auto a = Future<std::vector<int>>(f).then(
      [&](const std::vector<int>& v) { sizes.push_back(v.size()); });
  auto b = std::move(g).then([&](const std::vector<int>& v) { sizes.push_back(v.size()); });
  auto c = Future<std::vector<int>>(f).then(
      [&](const std::vector<int>& v) { sizes.push_back(v.size()); });
  p.set_value(std::vector<int>{1, 2, 3});
  EXPECT_TRUE(a.ready() && b.ready() && c.ready());
  EXPECT_THAT(sizes, ::testing::ElementsAre(3U, 3U, 3U));
  // A get() that consumes its copy leaves the others whole.
  EXPECT_EQ(Future<std::vector<int>>(f).get().size(), 3U);
  EXPECT_EQ(f.get().size(), 3U);
}

TEST(Future, TheLastReaderMayTakeTheValue) {  // F-1
  Promise<std::vector<int>> p;
  p.set_value(std::vector<int>(1000, 7));
  auto f = p.get_future();
  const int* before = f.get().data();
  std::vector<int> taken = std::move(f).get();
  EXPECT_EQ(taken.data(), before);  // moved, not copied: nobody else could read it
}

TEST(Future, GetWithTimeoutWorksOnATemporary) {
  Promise<std::string> p;
  p.set_value("now");
  EXPECT_EQ(p.get_future().get(10ms), "now");
  Promise<int> never;
  EXPECT_THROW((void)never.get_future().get(1ms), TimeoutError);
}

TEST(Future, CoAwaitingACopyLeavesTheOriginalWhole) {  // F-1
  Promise<std::string> p;
  auto f = p.get_future();
  auto task = [](Future<std::string>& src) -> Task<std::size_t> {
    std::string s = co_await src;  // an lvalue: awaits a copy
    co_return s.size();
  }(f);
  task.start(nullptr, nullptr);
  p.set_value("payload");
  ASSERT_TRUE(task.done());
  EXPECT_EQ(task.take(), 7U);
  EXPECT_EQ(f.get(), "payload");
}

Task<int> add_later(Future<int> a, int b) {
  co_return co_await std::move(a) + b;
}
Task<int> nested(Future<int> a) {
  int x = co_await add_later(std::move(a), 1);
  co_return x * 10;
}

TEST(Task, AwaitsFuturesAndOtherTasksOutsideActors) {
  Promise<int> p;
  Task<int> t = nested(p.get_future());
  bool done = false;
  t.start([](void* d) { *static_cast<bool*>(d) = true; }, &done);
  EXPECT_FALSE(t.done());
  p.set_value(4);  // resumes inline: no actor context on this thread
  EXPECT_TRUE(t.done());
  EXPECT_TRUE(done);
  EXPECT_EQ(t.take(), 50);
}

Task<void> throws_after(Future<int> a) {
  co_await std::move(a);
  throw std::runtime_error("task failed");
}

TEST(Task, ExceptionsSurfaceFromTake) {
  Promise<int> p;
  Task<void> t = throws_after(p.get_future());
  t.start(nullptr, nullptr);
  p.set_value(0);
  ASSERT_TRUE(t.done());
  EXPECT_THROW(t.take(), std::runtime_error);
}

}  // namespace
}  // namespace baton
