// Futures inside actors (F-1..F-3 in future.hpp), run step by step on a ManualExecutor.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/actor/proc.hpp"

namespace baton {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class Doubler : public Actor {
 public:
  int twice(int x) { return 2 * x; }
  static constexpr auto endpoints = baton::endpoints<&Doubler::twice>();
};

// Records, for each step, whether it ran inside this actor's own handling.
class Chainer : public Actor {
 public:
  /// F-2: each blocking wait on a call to `d` throws; returns what each threw.
  std::vector<std::string> block_on(const ActorRef<Doubler>& d) {
    std::vector<std::string> out;
    auto f = d.call(&Doubler::twice, 1);
    const auto attempt = [&](auto fn) {
      try {
        fn();
        out.emplace_back("no error");
      } catch (const UsageError& e) {
        out.emplace_back(e.what());
      }
    };
    attempt([&] { (void)f.get(); });
    attempt([&] { f.wait(); });
    attempt([&] { (void)f.get(10ms); });
    attempt([&] { (void)d.call(&Doubler::twice, 2).get(); });
    return out;
  }
  /// F-3: the continuation of a call made here runs here, as a message of its own.
  void chain(const ActorRef<Doubler>& d, int x) {
    in_handler_ = true;
    d.call(&Doubler::twice, x).then([this](int v) {
      on_own_strand_.push_back(!in_handler_ && detail::current_cell() == self_cell());
      results_.push_back(v);
    });
    in_handler_ = false;
  }
  std::vector<int> results() { return results_; }
  std::vector<bool> on_own_strand() { return on_own_strand_; }
  static constexpr auto endpoints = baton::endpoints<&Chainer::block_on, &Chainer::chain,
                                                     &Chainer::results, &Chainer::on_own_strand>();

 private:
  const detail::Cell* self_cell() const { return detail::resolve_actor(id()).get(); }
  bool in_handler_ = false;
  std::vector<int> results_;
  std::vector<bool> on_own_strand_;
};

struct Continuations : ::testing::Test {
  ManualExecutor exec;
  ProcOptions options() {
    ProcOptions o;
    o.name = "cont";
    o.max_batch = 1;
    return o;
  }
};

TEST_F(Continuations, BlockingInsideAnActorIsAUsageErrorThatSaysToAwait) {  // F-2
  Proc proc(options(), exec);
  auto d = proc.spawn<Doubler>("d");
  auto c = proc.spawn<Chainer>("c");
  auto errors = c.call(&Chainer::block_on, d);
  exec.run_until_idle();
  ASSERT_TRUE(errors.ready());
  const auto got = errors.get();  // outside actors get() blocks as before
  ASSERT_EQ(got.size(), 4U);
  for (const auto& e : got) {
    EXPECT_THAT(e, HasSubstr("inside actor cont/c[0]"));
    EXPECT_THAT(e, HasSubstr("co_await"));
  }
  EXPECT_THAT(got[1], HasSubstr("Future::wait()"));
  EXPECT_THAT(got[2], HasSubstr("Future::get(timeout)"));
}

TEST_F(Continuations, ThenInsideAnActorRunsOnThatActorAsAMessage) {  // F-3
  Proc proc(options(), exec);
  auto d = proc.spawn<Doubler>("d");
  auto c = proc.spawn<Chainer>("c");
  c.send(&Chainer::chain, d, 5);
  c.send(&Chainer::chain, d, 7);
  exec.run_until_idle();
  auto results = c.call(&Chainer::results);
  auto strand = c.call(&Chainer::on_own_strand);
  exec.run_until_idle();
  EXPECT_THAT(results.get(), ElementsAre(10, 14));
  // Before F-3 these ran on the doubler's thread, inside its handling of twice().
  EXPECT_THAT(strand.get(), ElementsAre(true, true));
}

class Awaiter : public Actor {
 public:
  /// A coroutine endpoint that awaits a chain of its own: a call, then two continuations.
  Task<int> chained(ActorRef<Doubler> d, int x) {
    const int v =
        co_await d.call(&Doubler::twice, x).then([](int y) { return y + 1; }).then([this](int y) {
          on_own_strand_ = detail::current_cell() == detail::resolve_actor(id()).get();
          return y * 10;
        });
    co_return v;
  }
  bool on_own_strand() const { return on_own_strand_; }
  static constexpr auto endpoints = baton::endpoints<&Awaiter::chained, &Awaiter::on_own_strand>();

 private:
  bool on_own_strand_ = false;
};

TEST_F(Continuations, ACoroutineEndpointMayAwaitWhatItChainedWithThen) {  // F-3
  Proc proc(options(), exec);
  auto d = proc.spawn<Doubler>("d");
  auto a = proc.spawn<Awaiter>("a");
  auto first = a.call(&Awaiter::chained, d, 4);
  auto second = a.call(&Awaiter::chained, d, 5);  // waits for the first, one message at a time
  exec.run_until_idle();
  // Queued behind the endpoint awaiting them, the continuations would never have run.
  ASSERT_TRUE(first.ready());
  ASSERT_TRUE(second.ready());
  EXPECT_EQ(first.get(), 90);
  EXPECT_EQ(second.get(), 110);
  auto strand = a.call(&Awaiter::on_own_strand);
  exec.run_until_idle();
  EXPECT_TRUE(strand.get());
}

// Where Keeper's continuations leave their futures, for the test to look at after it stopped.
std::vector<Future<int>> g_next;  // NOLINT: test-only, cleared by the test
int g_ran = 0;                    // NOLINT

class Keeper : public Actor {
 public:
  void chain(const ActorRef<Doubler>& d) {
    g_next.push_back(d.call(&Doubler::twice, 3).then([](int v) {
      ++g_ran;
      return v;
    }));
  }
  static constexpr auto endpoints = baton::endpoints<&Keeper::chain>();
};

TEST_F(Continuations, AContinuationWhoseActorStoppedFailsItsFutureInsteadOfRunning) {  // F-3
  g_next.clear();
  g_ran = 0;
  Proc proc(options(), exec);
  auto d = proc.spawn<Doubler>("d");
  auto k = proc.spawn<Keeper>("k");
  exec.run_until_idle();
  k.send(&Keeper::chain, d);
  ASSERT_TRUE(exec.run_one());  // k registers the continuation; d's reply is not there yet
  ASSERT_EQ(g_next.size(), 1U);
  auto stopped = k.stop();  // queued before the continuation can be
  exec.run_until_idle();
  EXPECT_TRUE(stopped.ready());
  ASSERT_TRUE(g_next[0].ready());
  EXPECT_EQ(g_ran, 0);
  try {
    g_next[0].get();
    ADD_FAILURE() << "expected SupervisionError";
  } catch (const SupervisionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("ended before it could run"));
  }
  g_next.clear();
}

}  // namespace
}  // namespace baton
