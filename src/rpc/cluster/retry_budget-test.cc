#include "rrpc/rpc/cluster/retry_budget.h"

#include <gtest/gtest.h>

namespace rrpc::rpc {
namespace {

TEST(RetryBudgetTest, AllowsAShareOfCallsPlusAFloorPerSecond) {
  RetryBudget budget(RetryBudgetOptions{0.1, 2, 100});
  const MonoTime t0 = MonoTime::Now();
  // Starts full: a burst right after start may fail over.
  int allowed = 0;
  while (budget.TryWithdraw(t0)) allowed++;
  EXPECT_EQ(allowed, 100 + 2);
  // 50 calls fund 5 retries; this second's floor is spent.
  for (int i = 0; i < 50; i++) budget.Deposit();
  allowed = 0;
  while (budget.TryWithdraw(t0)) allowed++;
  EXPECT_EQ(allowed, 5);
  // The next second brings the floor back.
  allowed = 0;
  while (budget.TryWithdraw(t0 + MonoDelta::FromSeconds(1))) allowed++;
  EXPECT_EQ(allowed, 2);
  EXPECT_EQ(budget.refused(), 3);
}

TEST(RetryBudgetTest, DepositsStopAtTheBucketSize) {
  RetryBudget budget(RetryBudgetOptions{1, 0, 3});
  for (int i = 0; i < 100; i++) budget.Deposit();
  int allowed = 0;
  while (budget.TryWithdraw(MonoTime::Now())) allowed++;
  EXPECT_EQ(allowed, 3);
}

}  // namespace
}  // namespace rrpc::rpc
