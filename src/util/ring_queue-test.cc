// RingQueue: FIFO order across wrap-around and growth, no allocation while empty, and a long
// random run checked against std::deque.
#include "util/ring_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <memory>
#include <random>

namespace rrpc {
namespace {

TEST(RingQueueTest, AllocatesNothingUntilTheFirstPush) {
  RingQueue<int> q;
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.capacity(), 0u);
  q.clear();
  EXPECT_EQ(q.capacity(), 0u);
  q.push_back(1);
  EXPECT_GT(q.capacity(), 0u);
  // Small enough to sit in a connection object: the array pointer and three counters.
  EXPECT_LE(sizeof(RingQueue<int>), 24u);
}

TEST(RingQueueTest, KeepsOrderAcrossWrapAroundAndGrowth) {
  RingQueue<int> q;
  int next_in = 0;
  int next_out = 0;
  // Wrap around a few times at the first capacity, then grow while wrapped.
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 5; i++) q.push_back(next_in++);
    for (int i = 0; i < 4; i++) {
      ASSERT_EQ(q.front(), next_out++);
      q.pop_front();
    }
    ASSERT_EQ(q.back(), next_in - 1);
  }
  EXPECT_EQ(q.size(), 20u);
  while (!q.empty()) {
    ASSERT_EQ(q.front(), next_out++);
    q.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
}

TEST(RingQueueTest, ReleasesPoppedAndClearedValuesAndKeepsItsArray) {
  RingQueue<std::shared_ptr<int>> q;
  auto v = std::make_shared<int>(5);
  q.push_back(v);
  q.push_back(v);
  EXPECT_EQ(v.use_count(), 3);
  q.pop_front();
  EXPECT_EQ(v.use_count(), 2);  // the slot let go of it
  const size_t capacity = q.capacity();
  q.clear();
  EXPECT_EQ(v.use_count(), 1);
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.capacity(), capacity);
}

TEST(RingQueueTest, MatchesStdDequeOverARandomRun) {
  RingQueue<int> q;
  std::deque<int> reference;
  std::mt19937 rng(7);
  for (int step = 0; step < 100000; step++) {
    const unsigned r = rng() % 10;
    if (r < 5) {
      const int v = static_cast<int>(rng());
      q.push_back(v);
      reference.push_back(v);
    } else if (r < 9) {
      if (reference.empty()) continue;
      ASSERT_EQ(q.front(), reference.front());
      q.pop_front();
      reference.pop_front();
    } else if (step % 1000 == 9) {
      q.clear();
      reference.clear();
    }
    ASSERT_EQ(q.size(), reference.size());
    if (!reference.empty()) {
      ASSERT_EQ(q.front(), reference.front());
      ASSERT_EQ(q.back(), reference.back());
    }
  }
}

}  // namespace
}  // namespace rrpc
