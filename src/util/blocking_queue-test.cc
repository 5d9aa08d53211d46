#include "util/blocking_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

// Waits (bounded) until `pred` holds; false if it never did within 30 seconds.
template <typename Pred>
bool WaitUntilTrue(Pred pred) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (!pred()) {
    if (MonoTime::Now() > deadline) return false;
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  return true;
}

TEST(BlockingQueueTest, DeliversInFifoOrder) {
  BlockingQueue<int> q(10);
  for (int i = 0; i < 10; i++) ASSERT_EQ(QueueStatus::kOk, q.Put(i));
  EXPECT_EQ(10u, q.size());
  for (int i = 0; i < 10; i++) {
    int v = -1;
    ASSERT_TRUE(q.BlockingGet(&v));
    EXPECT_EQ(i, v);
  }
  EXPECT_EQ(0u, q.size());
}

TEST(BlockingQueueTest, TryPutFailsWhenFullAndKeepsTheItem) {
  BlockingQueue<std::unique_ptr<int>> q(2);
  ASSERT_EQ(QueueStatus::kOk, q.TryPut(std::make_unique<int>(1)));
  ASSERT_EQ(QueueStatus::kOk, q.TryPut(std::make_unique<int>(2)));
  auto third = std::make_unique<int>(3);
  EXPECT_EQ(QueueStatus::kFull, q.TryPut(std::move(third)));
  ASSERT_NE(nullptr, third);  // A failed put leaves the item with the caller.
  EXPECT_EQ(3, *third);

  std::unique_ptr<int> out;
  ASSERT_EQ(QueueStatus::kOk, q.TryGet(&out));
  EXPECT_EQ(1, *out);
  EXPECT_EQ(QueueStatus::kOk, q.TryPut(std::move(third)));
  EXPECT_EQ(nullptr, third);
}

TEST(BlockingQueueTest, TryGetOnEmptyQueueDoesNotWait) {
  BlockingQueue<int> q(1);
  int v = 7;
  EXPECT_EQ(QueueStatus::kTimedOut, q.TryGet(&v));
  EXPECT_EQ(7, v);
}

TEST(BlockingQueueTest, GetWithTimeoutTimesOutOnEmptyQueue) {
  BlockingQueue<int> q(1);
  int v = 0;
  EXPECT_EQ(QueueStatus::kTimedOut, q.GetWithTimeout(&v, MonoDelta::FromMilliseconds(2)));
  EXPECT_EQ(QueueStatus::kTimedOut, q.GetWithTimeout(&v, MonoDelta::FromMilliseconds(-1)));
  ASSERT_EQ(QueueStatus::kOk, q.Put(5));
  EXPECT_EQ(QueueStatus::kOk, q.GetWithTimeout(&v, MonoDelta::FromMilliseconds(2)));
  EXPECT_EQ(5, v);
}

TEST(BlockingQueueTest, GetWithTimeoutReceivesItemPutLater) {
  BlockingQueue<int> q(1);
  std::thread producer([&] {
    SleepFor(MonoDelta::FromMilliseconds(5));
    CHECK(q.Put(42) == QueueStatus::kOk);
  });
  int v = 0;
  // The generous timeout only bounds the test; the item normally arrives after ~5 ms.
  EXPECT_EQ(QueueStatus::kOk, q.GetWithTimeout(&v, MonoDelta::FromSeconds(60)));
  EXPECT_EQ(42, v);
  producer.join();
}

TEST(BlockingQueueTest, PutBlocksWhileFullUntilAConsumerMakesRoom) {
  BlockingQueue<int> q(1);
  ASSERT_EQ(QueueStatus::kOk, q.Put(1));
  std::atomic<bool> put_done{false};
  std::thread producer([&] {
    CHECK(q.Put(2) == QueueStatus::kOk);
    put_done = true;
  });
  // The producer cannot finish while the queue holds one item; give it a moment to try.
  SleepFor(MonoDelta::FromMilliseconds(10));
  EXPECT_FALSE(put_done.load());
  int v = 0;
  ASSERT_TRUE(q.BlockingGet(&v));
  EXPECT_EQ(1, v);
  ASSERT_TRUE(WaitUntilTrue([&] { return put_done.load(); }));
  ASSERT_TRUE(q.BlockingGet(&v));
  EXPECT_EQ(2, v);
  producer.join();
}

TEST(BlockingQueueTest, ShutdownWakesBlockedProducersAndConsumers) {
  BlockingQueue<int> full(1);
  ASSERT_EQ(QueueStatus::kOk, full.Put(1));
  BlockingQueue<int> empty(1);

  std::atomic<int> producer_result{-1};
  std::atomic<int> consumer_result{-1};
  std::thread producer([&] { producer_result = static_cast<int>(full.Put(2)); });
  std::thread consumer([&] {
    int v;
    consumer_result = empty.BlockingGet(&v) ? 1 : 0;
  });
  SleepFor(MonoDelta::FromMilliseconds(5));
  full.Shutdown();
  empty.Shutdown();
  producer.join();
  consumer.join();
  EXPECT_EQ(static_cast<int>(QueueStatus::kShutdown), producer_result.load());
  EXPECT_EQ(0, consumer_result.load());
}

TEST(BlockingQueueTest, ConsumersDrainItemsQueuedBeforeShutdown) {
  BlockingQueue<int> q(4);
  ASSERT_EQ(QueueStatus::kOk, q.Put(1));
  ASSERT_EQ(QueueStatus::kOk, q.Put(2));
  q.Shutdown();
  q.Shutdown();  // Idempotent.
  EXPECT_TRUE(q.is_shut_down());
  EXPECT_EQ(QueueStatus::kShutdown, q.Put(3));
  EXPECT_EQ(QueueStatus::kShutdown, q.TryPut(3));
  int v = 0;
  ASSERT_TRUE(q.BlockingGet(&v));
  EXPECT_EQ(1, v);
  ASSERT_EQ(QueueStatus::kOk, q.GetWithTimeout(&v, MonoDelta::FromSeconds(1)));
  EXPECT_EQ(2, v);
  EXPECT_FALSE(q.BlockingGet(&v));
  EXPECT_EQ(QueueStatus::kShutdown, q.GetWithTimeout(&v, MonoDelta::FromSeconds(1)));
  EXPECT_EQ(QueueStatus::kShutdown, q.TryGet(&v));
}

TEST(BlockingQueueTest, ManyProducersAndConsumersDeliverEachItemExactlyOnce) {
  constexpr int kProducers = 4;
  constexpr int kConsumers = 4;
  constexpr int kItemsPerProducer = 5000;
  constexpr int kTotal = kProducers * kItemsPerProducer;
  BlockingQueue<int> q(16);  // Small, so producers block often.
  std::vector<std::atomic<int>> seen(kTotal);
  for (auto& s : seen) s = 0;

  std::vector<std::thread> consumers;
  for (int c = 0; c < kConsumers; c++) {
    consumers.emplace_back([&] {
      int v;
      while (q.BlockingGet(&v)) seen[v]++;
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; p++) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kItemsPerProducer; i++) {
        const int item = p * kItemsPerProducer + i;
        if (i % 2 == 0) {
          CHECK(q.Put(item) == QueueStatus::kOk);
        } else {
          // TryPut with a bounded number of retries; a full queue just means "try again".
          bool done = false;
          for (int attempt = 0; attempt < 10000000 && !done; attempt++) {
            QueueStatus s = q.TryPut(item);
            CHECK(s == QueueStatus::kOk || s == QueueStatus::kFull) << QueueStatusToString(s);
            done = s == QueueStatus::kOk;
            if (!done) std::this_thread::yield();
          }
          CHECK(done);
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  q.Shutdown();  // Consumers drain the rest, then stop.
  for (auto& t : consumers) t.join();
  EXPECT_EQ(0u, q.size());
  for (int i = 0; i < kTotal; i++) ASSERT_EQ(1, seen[i].load()) << "item " << i;
}

}  // namespace
}  // namespace rrpc
