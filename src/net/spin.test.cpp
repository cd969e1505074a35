// SpinBudget: an event loop spins while its spins pay, stops when they mostly miss, and tries
// again now and then.

#include <gtest/gtest.h>

#include "net/spin.hpp"

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

}  // namespace
}  // namespace baton::net
