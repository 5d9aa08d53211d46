// OneShotEvent: set before the wait, set while the waiter sleeps, and a wait that times out and
// then still sees the event.
#include "util/one_shot_event.h"

#include <gtest/gtest.h>

#include <thread>

namespace rrpc {
namespace {

TEST(OneShotEventTest, AWaitAfterNotifyReturnsAtOnce) {
  OneShotEvent event;
  EXPECT_FALSE(event.IsSet());
  event.Notify();
  EXPECT_TRUE(event.IsSet());
  EXPECT_TRUE(event.Poll(MonoDelta()));
  EXPECT_TRUE(event.WaitUntil(MonoTime::Now() - MonoDelta::FromSeconds(1)));  // past deadline
  event.Wait();
}

TEST(OneShotEventTest, NotifyFromAnotherThreadWakesASleepingWaiter) {
  for (int i = 0; i < 200; i++) {  // the notify lands before, during and after the sleep
    OneShotEvent event;
    std::thread notifier([&event] { event.Notify(); });
    event.Wait();
    EXPECT_TRUE(event.IsSet());
    notifier.join();
  }
}

TEST(OneShotEventTest, AWaitThatTimedOutLeavesTheEventUsable) {
  OneShotEvent event;
  EXPECT_FALSE(event.WaitUntil(MonoTime::Now() + MonoDelta::FromMilliseconds(5)));
  EXPECT_FALSE(event.Poll(MonoDelta::FromMicroseconds(10)));
  std::thread notifier([&event] { event.Notify(); });
  EXPECT_TRUE(event.WaitUntil(MonoTime::Now() + MonoDelta::FromSeconds(60)));
  notifier.join();
}

}  // namespace
}  // namespace rrpc
