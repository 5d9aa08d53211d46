#include "util/spin_wait.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace rrpc {
namespace {

TEST(SpinUntilTest, ReturnsTrueAtOnceWhenAlreadyDone) {
  EXPECT_TRUE(SpinUntil([] { return true; }, MonoDelta()));
  EXPECT_TRUE(SpinUntil([] { return true; }, MonoDelta::FromSeconds(600)));
}

TEST(SpinUntilTest, GivesUpAfterItsLimit) {
  EXPECT_FALSE(SpinUntil([] { return false; }, MonoDelta()));
  const MonoTime start = MonoTime::Now();
  EXPECT_FALSE(SpinUntil([] { return false; }, MonoDelta::FromMilliseconds(2)));
  EXPECT_GE(MonoTime::Now() - start, MonoDelta::FromMilliseconds(2));
}

// Another thread's store ends the poll; the limit is long enough never to run out here.
TEST(SpinUntilTest, SeesAnotherThreadsStore) {
  std::atomic<bool> flag{false};
  std::thread setter([&] { flag.store(true, std::memory_order_release); });
  EXPECT_TRUE(
      SpinUntil([&] { return flag.load(std::memory_order_acquire); }, MonoDelta::FromSeconds(600)));
  setter.join();
}

// A PollPolicy that counts the polls it allowed and their hits, to check totals.
struct CountedPollPolicy {
  bool Begin() {
    const bool poll = policy.BeginPoll();
    polls += poll ? 1 : 0;
    return poll;
  }
  void End(bool hit) {
    hits += hit ? 1 : 0;
    policy.EndPoll(hit);
  }
  PollPolicy policy;
  uint64_t polls = 0;
  uint64_t hits = 0;
};

// Polls that find nothing back off: kMaxScore misses in a row from a full score stop polling,
// after which only one wait in kProbeEvery polls; a probe that hits restores polling on every
// wait. One poll at a time.
TEST(PollPolicyTest, OnePollAtATimeAndBacksOffWhenPollsFindNothing) {
  using Policy = PollPolicy;
  CountedPollPolicy p;
  ASSERT_TRUE(p.Begin());
  EXPECT_FALSE(p.Begin()) << "a second waiter polled while the first did";
  p.End(/*hit=*/false);
  for (uint32_t i = 1; i < Policy::kMaxScore; i++) {
    ASSERT_TRUE(p.Begin()) << "miss " << i;
    p.End(false);
  }
  for (int probe = 0; probe < 3; probe++) {
    for (uint32_t i = 1; i < Policy::kProbeEvery; i++) {
      ASSERT_FALSE(p.Begin()) << "probe " << probe << " wait " << i;
    }
    ASSERT_TRUE(p.Begin()) << "probe " << probe;
    p.End(false);
  }
  // A probe that hits: waits poll again, two misses per hit's worth.
  for (uint32_t i = 1; i < Policy::kProbeEvery; i++) ASSERT_FALSE(p.Begin());
  ASSERT_TRUE(p.Begin());
  p.End(/*hit=*/true);
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(p.Begin()) << i;
    p.End(false);
  }
  EXPECT_FALSE(p.Begin()) << "score should be spent";
  EXPECT_EQ(Policy::kMaxScore + 3 + 1 + 2, p.polls);
  EXPECT_EQ(1u, p.hits);
}

// One hit in three polls keeps polling going indefinitely; one in four does not.
TEST(PollPolicyTest, KeepsPollingWhileAThirdOfPollsHit) {
  PollPolicy third;
  for (int i = 0; i < 300; i++) {
    ASSERT_TRUE(third.BeginPoll()) << i;
    third.EndPoll(i % 3 == 0);
  }
  PollPolicy quarter;
  bool stopped = false;
  for (int i = 0; i < 300 && !stopped; i++) {
    if (!quarter.BeginPoll()) {
      stopped = true;
      break;
    }
    quarter.EndPoll(i % 4 == 0);
  }
  EXPECT_TRUE(stopped);
}

// A thread pinned to one CPU does not poll: nothing else could run to end its poll early.
TEST(PollingCanPayTest, NotOnAThreadPinnedToOneCpu) {
  bool pinned_answer = true;
  std::thread pinned([&] {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    ASSERT_EQ(0, sched_setaffinity(0, sizeof(one), &one));
    pinned_answer = PollingCanPayOnThisThread();
  });
  pinned.join();
  EXPECT_FALSE(pinned_answer);

  cpu_set_t mine;
  CPU_ZERO(&mine);
  ASSERT_EQ(0, sched_getaffinity(0, sizeof(mine), &mine));
  EXPECT_EQ(CPU_COUNT(&mine) > 1, PollingCanPayOnThisThread());
}

}  // namespace
}  // namespace rrpc
