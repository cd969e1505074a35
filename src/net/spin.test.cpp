// SpinBudget: an event loop spins while its spins pay, stops when they mostly miss, and tries
// again now and then.

#include <gtest/gtest.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "net/spin.hpp"
#include "wire/cpus.hpp"
#include "wire/cpus.test.hpp"

namespace baton::net {
namespace {

/// How many of the next `chances` chances to spin `budget` takes, each spin ending as `catches`.
int taken(SpinBudget& budget, int chances, bool catches) {
  int n = 0;
  for (int i = 0; i < chances; ++i) {
    if (!budget.allow()) continue;
    ++n;
    if (catches) {
      budget.caught();
    } else {
      budget.missed();
    }
  }
  return n;
}

TEST(SpinBudget, SpinsThatCatchKeepSpinning) {
  SpinBudget budget;
  EXPECT_EQ(taken(budget, 1000, true), 1000);
}

TEST(SpinBudget, SpinsThatMissStopAfterAFewAndAreTriedAgainOneChanceInSixteen) {
  SpinBudget budget;
  // A full credit of 8 pays for four misses; then one chance in kProbeEvery is taken.
  EXPECT_EQ(taken(budget, 4, false), 4);
  EXPECT_FALSE(budget.allow());
  const int chances = 160 * SpinBudget::kProbeEvery;
  const int probes = taken(budget, chances, false);
  EXPECT_EQ(probes, chances / SpinBudget::kProbeEvery);
}

TEST(SpinBudget, AProbeThatCatchesLetsTheLoopSpinAgain) {
  SpinBudget budget;
  taken(budget, 100, false);  // no credit left
  int chances = 0;
  while (!budget.allow()) ++chances;  // the probe
  EXPECT_LT(chances, SpinBudget::kProbeEvery);
  budget.caught();
  EXPECT_TRUE(budget.allow()) << "a catch earns a spin at once";
  EXPECT_EQ(taken(budget, 200, true), 200);
}

/// Spins catching `in_three` of every three: the share of chances taken over a long run.
double share_taken(int in_three) {
  SpinBudget budget;
  int spins = 0;
  int chances = 0;
  for (int i = 0; i < 30000; ++i) {
    ++chances;
    if (!budget.allow()) continue;
    if (spins++ % 3 < in_three) {
      budget.caught();
    } else {
      budget.missed();
    }
  }
  return static_cast<double>(spins) / chances;
}

TEST(SpinBudget, TwoCatchesInThreePayOneInThreeDoesNot) {
  EXPECT_GT(share_taken(3), 0.99);
  EXPECT_GT(share_taken(2), 0.9);  // break even: the credit stays where it started
  EXPECT_LT(share_taken(1), 0.2);  // mostly declined: probes, and the credit a catch earns
  EXPECT_LT(share_taken(0), 1.0 / SpinBudget::kProbeEvery + 0.01);
}

/// A spinner of its own over one ring that no peer writes unless `catches`, when a frame is
/// there before each spin: how many of `chances` spins were taken (caught or ran out).
std::uint64_t spins_taken(int chances, bool catches) {
  asio::io_context ctx;
  auto busy = asio::make_work_guard(ctx);  // poll_one finds nothing, and the loop goes on
  auto& spinners = asio::use_service<Spinners>(ctx);
  spinners.set_for_tests(std::chrono::microseconds(1), true);
  shm::RingControl control{};
  auto owner = std::make_shared<int>(0);
  auto target = std::make_shared<SpinTarget>();
  target->owner = owner;
  target->control = &control;
  target->resume = [] {};
  spinners.add(target);
  for (int i = 0; i < chances; ++i) {
    target->seen.store(control.head.load());
    if (catches) control.head.fetch_add(1);  // a frame came as the spin starts
    spinners.set_hot(*target, true);         // a spin that runs out cools it: busy again
    spinners.spin(ctx, nullptr);
  }
  const Spinners::Stats s = spinners.stats();
  return s.caught + s.ran_out;
}

TEST(SpinBudget, TheSpinnersOfAnEventLoopStopSpinningWhenTheirSpinsMiss) {
  EXPECT_EQ(spins_taken(320, true), 320u);
  // Four misses spend the credit; then one chance in kProbeEvery.
  const std::uint64_t taken = spins_taken(320, false);
  EXPECT_GE(taken, 4u);
  EXPECT_LE(taken, 4u + 320 / SpinBudget::kProbeEvery);
}

/// A spinner over one hot ring, reading the machine's load from a file of the test's.
struct LoadedSpinner {
  explicit LoadedSpinner(const std::string& load) : path(::testing::TempDir() + "loadavg") {
    set_load(load);
    spinners.load_from_for_tests(path, std::chrono::hours(1));
    target->owner = owner;
    target->control = &control;
    target->resume = [] {};
    spinners.add(target);
  }
  void set_load(const std::string& load) const { std::ofstream(path) << load; }
  std::size_t spin() {
    spinners.set_hot(*target, true);
    return spinners.spin(ctx, nullptr);
  }

  std::string path;
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> busy = asio::make_work_guard(ctx);
  Spinners& spinners = asio::use_service<Spinners>(ctx);
  shm::RingControl control{};
  std::shared_ptr<int> owner = std::make_shared<int>(0);
  std::shared_ptr<SpinTarget> target = std::make_shared<SpinTarget>();
};

TEST(Spinners, AMachineFoundBusyIsNotLookedAtAgainUntilTheVerdictIsOld) {
  // Three hundred threads runnable: no core to spare for a spin.
  LoadedSpinner s("2.00 1.50 1.00 300/900 4242\n");
  EXPECT_EQ(s.spin(), 0u);
  EXPECT_EQ(s.spinners.stats().load_looks, 1u);
  EXPECT_EQ(s.spinners.stats().caught + s.spinners.stats().ran_out, 0u);  // it did not spin
  // The machine is idle now, but the busy verdict (held for an hour here) still stands: no
  // look, no spin.
  s.set_load("0.00 0.00 0.00 1/900 4242\n");
  for (int i = 0; i < 100; ++i) EXPECT_EQ(s.spin(), 0u);
  EXPECT_EQ(s.spinners.stats().load_looks, 1u);
  EXPECT_EQ(s.spinners.stats().caught + s.spinners.stats().ran_out, 0u);
}

TEST(Spinners, AMachineWithRoomIsLookedAtForEverySpin) {
  LoadedSpinner s("0.00 0.00 0.00 1/900 4242\n");
  s.spinners.set_for_tests(std::chrono::microseconds(1), false);  // short spins that run out
  for (int i = 0; i < 3; ++i) s.spin();
  EXPECT_GE(s.spinners.stats().load_looks, 3u);
  EXPECT_GE(s.spinners.stats().ran_out, 1u);  // it spun
}

/// The spin window of an event loop whose spinner is made on a thread bound to `cpus` of the
/// cores this one may run on (all of them: -1).
std::chrono::microseconds window_bound_to(int cpus) {
  std::chrono::microseconds window{-1};
  std::thread([&] {
    if (cpus >= 0) {
      ASSERT_TRUE(wire::testing::bind_to_cores(static_cast<std::size_t>(cpus)));
      ASSERT_EQ(wire::usable_cpus(), static_cast<std::size_t>(cpus));
    }
    asio::io_context ctx;
    window = asio::use_service<Spinners>(ctx).window();
  }).join();
  return window;
}

TEST(Spinners, AnEventLoopBoundToOneCoreNeverSpins) {
  if (wire::usable_cpus() < 2) GTEST_SKIP() << "this machine lets the test run on one core only";
  // Bound to one core (taskset, a scheduler's CPU binding), the peer a spin waits for could
  // only run once the spin ended: no window.
  EXPECT_EQ(window_bound_to(1).count(), 0);
  // Two cores, or all of them: the default window.
  EXPECT_GT(window_bound_to(2).count(), 0);
  EXPECT_GT(window_bound_to(-1).count(), 0);
}

}  // namespace
}  // namespace baton::net
