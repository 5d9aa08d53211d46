#include "util/deadline_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <iterator>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace rrpc {
namespace {

struct FakeCall {
  MonoTime deadline;
  int id = 0;
};

struct FakeCallDeadline {
  MonoTime operator()(const FakeCall* c) const { return c->deadline; }
};

using Queue = DeadlineQueue<FakeCall, FakeCallDeadline>;
using PutResult = Queue::PutResult;

MonoTime At(int64_t ns) { return MonoTime::FromNanoseconds(ns); }

// Owns the fake calls of one test; the queue only points at them.
class Calls {
 public:
  FakeCall* Make(int64_t deadline_ns) {
    calls_.push_back(std::make_unique<FakeCall>());
    calls_.back()->deadline = At(deadline_ns);
    calls_.back()->id = static_cast<int>(calls_.size()) - 1;
    return calls_.back().get();
  }
  FakeCall* operator[](size_t i) const { return calls_[i].get(); }
  size_t size() const { return calls_.size(); }

 private:
  std::vector<std::unique_ptr<FakeCall>> calls_;
};

// Waits (bounded) until `pred` holds; false if it never did within 30 seconds.
template <typename Pred>
bool WaitUntilTrue(Pred pred) {
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
  while (!pred()) {
    if (MonoTime::Now() > deadline) return false;
    SleepFor(MonoDelta::FromMicroseconds(200));
  }
  return true;
}

PutResult PutNoEvict(Queue* q, FakeCall* c) {
  FakeCall* evicted = nullptr;
  PutResult r = q->Put(c, &evicted);
  CHECK(evicted == nullptr);
  return r;
}

TEST(MinMaxHeapTest, MatchesReferenceUnderRandomOperations) {
  using Heap = deadline_queue_internal::MinMaxHeap<int, std::less<int>>;
  std::mt19937 rng(12345);
  for (int round = 0; round < 50; round++) {
    Heap heap;
    std::multiset<int> model;
    for (int op = 0; op < 2000; op++) {
      const int dice = static_cast<int>(rng() % 10);
      if (model.empty() || dice < 5) {
        const int v = static_cast<int>(rng() % 50);  // Small range: many ties.
        heap.push(v);
        model.insert(v);
      } else if (dice < 7) {
        ASSERT_EQ(*model.begin(), heap.pop_min());
        model.erase(model.begin());
      } else {
        ASSERT_EQ(*model.rbegin(), heap.pop_max());
        model.erase(std::prev(model.end()));
      }
      ASSERT_EQ(model.size(), heap.size());
      if (!model.empty()) {
        ASSERT_EQ(*model.begin(), heap.min());
        ASSERT_EQ(*model.rbegin(), heap.max());
      }
      if (op % 64 == 0) {
        ASSERT_TRUE(heap.IsValid());
      }
    }
    ASSERT_TRUE(heap.IsValid());
  }
}

TEST(MinMaxHeapTest, DoesNotAllocateAfterReserve) {
  deadline_queue_internal::MinMaxHeap<int, std::less<int>> heap;
  heap.reserve(100);
  const int* first = nullptr;
  for (int i = 0; i < 100; i++) {
    heap.push(100 - i);
    if (first == nullptr) first = &heap.min();
  }
  // Still in the first buffer: a reallocation would have moved the root.
  EXPECT_EQ(first, &heap.min());
  EXPECT_EQ(1, heap.min());
  EXPECT_EQ(100, heap.max());
}

TEST(DeadlineQueueTest, DeliversEarliestDeadlineFirst) {
  Calls calls;
  Queue q(100);
  std::vector<int64_t> deadlines;
  for (int i = 0; i < 100; i++) deadlines.push_back((i * 37) % 100);  // A permutation of 0..99.
  for (int64_t d : deadlines) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(d)));
  EXPECT_EQ(100u, q.size());
  for (int64_t want = 0; want < 100; want++) {
    FakeCall* c = q.BlockingGet();  // Items are queued, so this does not block.
    ASSERT_NE(nullptr, c);
    EXPECT_EQ(At(want), c->deadline);
  }
  EXPECT_EQ(0u, q.size());
  EXPECT_TRUE(q.Shutdown().empty());
}

TEST(DeadlineQueueTest, EqualDeadlinesLeaveInArrivalOrder) {
  Calls calls;
  Queue q(10);
  for (int i = 0; i < 6; i++) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(i % 2)));
  // Deadline 0: ids 0, 2, 4; deadline 1: ids 1, 3, 5.
  for (int want : {0, 2, 4, 1, 3, 5}) EXPECT_EQ(want, q.BlockingGet()->id);
  q.Shutdown();
}

TEST(DeadlineQueueTest, RejectsLatestDeadlineWhenFull) {
  Calls calls;
  Queue q(3);
  for (int64_t d : {10, 20, 30}) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(d)));
  // Equal to the latest queued deadline: rejected, like a later one.
  EXPECT_EQ(PutResult::kRejected, PutNoEvict(&q, calls.Make(30)));
  EXPECT_EQ(PutResult::kRejected, PutNoEvict(&q, calls.Make(40)));
  EXPECT_EQ(3u, q.size());
  std::vector<FakeCall*> left = q.Shutdown();
  ASSERT_EQ(3u, left.size());
  EXPECT_EQ(At(10), left[0]->deadline);  // Leftovers come earliest first.
  EXPECT_EQ(At(20), left[1]->deadline);
  EXPECT_EQ(At(30), left[2]->deadline);
}

TEST(DeadlineQueueTest, EvictsExactlyTheLatestDeadlineWhenFull) {
  Calls calls;
  Queue q(3);
  FakeCall* c10 = calls.Make(10);
  FakeCall* c30 = calls.Make(30);
  FakeCall* c20 = calls.Make(20);
  for (FakeCall* c : {c10, c30, c20}) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, c));

  FakeCall* evicted = nullptr;
  FakeCall* c25 = calls.Make(25);
  EXPECT_EQ(PutResult::kQueuedEvictedOther, q.Put(c25, &evicted));
  EXPECT_EQ(c30, evicted);
  FakeCall* c5 = calls.Make(5);
  EXPECT_EQ(PutResult::kQueuedEvictedOther, q.Put(c5, &evicted));
  EXPECT_EQ(c25, evicted);
  EXPECT_EQ(3u, q.size());
  EXPECT_EQ(c5, q.BlockingGet());
  EXPECT_EQ(c10, q.BlockingGet());
  EXPECT_EQ(c20, q.BlockingGet());
  q.Shutdown();
}

TEST(DeadlineQueueTest, AmongEqualLatestDeadlinesEvictsTheNewest) {
  Calls calls;
  Queue q(3);
  FakeCall* a = calls.Make(10);
  FakeCall* b = calls.Make(30);
  FakeCall* c = calls.Make(30);
  for (FakeCall* x : {a, b, c}) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, x));
  FakeCall* evicted = nullptr;
  EXPECT_EQ(PutResult::kQueuedEvictedOther, q.Put(calls.Make(20), &evicted));
  EXPECT_EQ(c, evicted);  // The older of two equal deadlines keeps its place.
  EXPECT_EQ(PutResult::kQueuedEvictedOther, q.Put(calls.Make(20), &evicted));
  EXPECT_EQ(b, evicted);
  EXPECT_EQ(3u, q.Shutdown().size());
}

TEST(DeadlineQueueTest, ZeroSizeOnlyHandsOff) {
  Calls calls;
  Queue q(0);
  EXPECT_EQ(PutResult::kRejected, PutNoEvict(&q, calls.Make(1)));
  FakeCall* got = nullptr;
  std::thread worker([&] { got = q.BlockingGet(); });
  ASSERT_TRUE(WaitUntilTrue([&] { return q.waiting_workers() == 1; }));
  EXPECT_EQ(PutResult::kHandedOff, PutNoEvict(&q, calls.Make(2)));
  worker.join();
  EXPECT_EQ(calls[1], got);
  q.Shutdown();
}

// Background items while foreground ones wait: up to the cap of them run, then foreground only,
// whatever the deadlines; with no foreground waiting, background takes every worker.
TEST(DeadlineQueueTest, BackgroundGetsItsCapWhileForegroundWaits) {
  Calls calls;
  Queue q(10, MonoDelta(), {}, /*background_cap=*/1);
  FakeCall* evicted = nullptr;
  FakeCall* b1 = calls.Make(1);  // background due first: EDF alone would run them first
  FakeCall* b2 = calls.Make(2);
  ASSERT_EQ(PutResult::kQueued, q.Put(b1, &evicted, Queue::kBackground));
  ASSERT_EQ(PutResult::kQueued, q.Put(b2, &evicted, Queue::kBackground));
  FakeCall* f1 = calls.Make(10);
  FakeCall* f2 = calls.Make(20);
  ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, f1));
  ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, f2));
  EXPECT_EQ(b1, q.BlockingGet());  // background's one worker
  EXPECT_EQ(f1, q.BlockingGet());  // cap reached: foreground, though b2 is due earlier
  EXPECT_EQ(f2, q.BlockingGet());
  EXPECT_EQ(1u, q.background_running());
  EXPECT_EQ(b2, q.BlockingGet());  // no foreground waits: background may exceed its cap
  EXPECT_EQ(2u, q.background_running());
  q.BackgroundDone();
  q.BackgroundDone();
  EXPECT_EQ(0u, q.background_running());
  q.Shutdown();
}

// A foreground flood never shuts background out: each time background runs below its cap, the
// next free worker takes a background item, however many foreground ones wait.
TEST(DeadlineQueueTest, ForegroundFloodLeavesBackgroundItsShare) {
  Calls calls;
  Queue q(100, MonoDelta(), {}, /*background_cap=*/1);
  FakeCall* evicted = nullptr;
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(PutResult::kQueued, q.Put(calls.Make(1000 + i), &evicted, Queue::kBackground));
  for (int i = 0; i < 50; i++) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(i)));
  int background_got = 0;
  for (int round = 0; round < 3; round++) {
    FakeCall* c = q.BlockingGet();
    ASSERT_GE(c->deadline, At(1000)) << "round " << round << ": background's turn";
    background_got++;
    // The background item runs on one worker while another takes foreground.
    EXPECT_LT(q.BlockingGet()->deadline, At(1000));
    q.BackgroundDone();
  }
  EXPECT_EQ(3, background_got);
  EXPECT_EQ(0u, q.size(Queue::kBackground));
  q.Shutdown();
}

// Each lane is bounded on its own: a full foreground lane neither evicts nor refuses background.
TEST(DeadlineQueueTest, LanesAreBoundedSeparately) {
  Calls calls;
  Queue q(2);
  FakeCall* evicted = nullptr;
  ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(5)));
  ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(6)));
  EXPECT_EQ(PutResult::kRejected, PutNoEvict(&q, calls.Make(7)));
  EXPECT_EQ(PutResult::kQueued, q.Put(calls.Make(100), &evicted, Queue::kBackground));
  EXPECT_EQ(PutResult::kQueued, q.Put(calls.Make(200), &evicted, Queue::kBackground));
  EXPECT_EQ(PutResult::kQueuedEvictedOther, q.Put(calls.Make(1), &evicted, Queue::kBackground));
  EXPECT_EQ(At(200), evicted->deadline) << "evicted from its own lane";
  EXPECT_EQ(2u, q.size(Queue::kForeground));
  EXPECT_EQ(4u, q.Shutdown().size());
}

// Matches every Put and Get against a model: a set ordered by (deadline, arrival), as the queue
// promises. Small deadline ranges make ties common.
TEST(DeadlineQueueTest, MatchesReferenceModelUnderRandomOperations) {
  std::mt19937 rng(987654);
  for (int round = 0; round < 20; round++) {
    const size_t max_size = 1 + rng() % 40;
    const int64_t deadline_range = 1 + rng() % 100;
    Calls calls;
    Queue q(max_size);
    std::set<std::pair<int64_t, int>> model;  // (deadline, id); ids grow with arrival.
    for (int op = 0; op < 3000; op++) {
      if (!model.empty() && rng() % 3 == 0) {
        FakeCall* c = q.BlockingGet();
        ASSERT_NE(nullptr, c);
        ASSERT_EQ(model.begin()->second, c->id);
        model.erase(model.begin());
        continue;
      }
      FakeCall* c = calls.Make(static_cast<int64_t>(rng() % deadline_range));
      const std::pair<int64_t, int> key(c->deadline.ToNanoseconds(), c->id);
      FakeCall* evicted = nullptr;
      const PutResult r = q.Put(c, &evicted);
      if (model.size() < max_size) {
        ASSERT_EQ(PutResult::kQueued, r);
        ASSERT_EQ(nullptr, evicted);
        model.insert(key);
      } else if (key.first >= model.rbegin()->first) {
        ASSERT_EQ(PutResult::kRejected, r);
        ASSERT_EQ(nullptr, evicted);
      } else {
        ASSERT_EQ(PutResult::kQueuedEvictedOther, r);
        ASSERT_NE(nullptr, evicted);
        ASSERT_EQ(model.rbegin()->second, evicted->id);
        ASSERT_LT(c->deadline, evicted->deadline);
        model.erase(std::prev(model.end()));
        model.insert(key);
      }
      ASSERT_EQ(model.size(), q.size());
    }
    std::vector<FakeCall*> left = q.Shutdown();
    ASSERT_EQ(model.size(), left.size());
    size_t i = 0;
    for (const auto& key : model) ASSERT_EQ(key.second, left[i++]->id);
  }
}

TEST(DeadlineQueueTest, HandsOffToMostRecentlyIdleWorkerFirst) {
  constexpr int kWorkers = 4;
  Calls calls;
  Queue q(10);
  std::vector<FakeCall*> got(kWorkers, nullptr);
  std::vector<std::thread> workers;
  // Start the workers one at a time, each blocked before the next starts: worker i is the i-th
  // to go idle, so the stack top is worker kWorkers - 1.
  for (int i = 0; i < kWorkers; i++) {
    workers.emplace_back([&, i] { got[i] = q.BlockingGet(); });
    ASSERT_TRUE(WaitUntilTrue([&] { return q.waiting_workers() == static_cast<size_t>(i + 1); }));
  }
  for (int i = 0; i < kWorkers; i++) {
    // Deadlines are deliberately decreasing: a hand-off ignores deadlines and the heap.
    EXPECT_EQ(PutResult::kHandedOff, PutNoEvict(&q, calls.Make(100 - i)));
    EXPECT_EQ(0u, q.size());
    EXPECT_EQ(static_cast<size_t>(kWorkers - 1 - i), q.waiting_workers());
  }
  for (auto& w : workers) w.join();
  for (int i = 0; i < kWorkers; i++) EXPECT_EQ(calls[kWorkers - 1 - i], got[i]) << "worker " << i;
  // No worker waits any more, so the next item is queued.
  EXPECT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(1)));
  EXPECT_EQ(1u, q.Shutdown().size());
}

TEST(DeadlineQueueTest, ShutdownWakesWaitingWorkers) {
  constexpr int kWorkers = 3;
  Queue q(10);
  std::atomic<int> got_null{0};
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; i++) {
    workers.emplace_back([&] {
      if (q.BlockingGet() == nullptr) got_null++;
    });
  }
  ASSERT_TRUE(WaitUntilTrue([&] { return q.waiting_workers() == kWorkers; }));
  EXPECT_TRUE(q.Shutdown().empty());
  for (auto& w : workers) w.join();
  EXPECT_EQ(kWorkers, got_null.load());
  EXPECT_EQ(0u, q.waiting_workers());
}

TEST(DeadlineQueueTest, ShutdownReturnsLeftoversAndRefusesMore) {
  Calls calls;
  Queue q(10);
  for (int64_t d : {30, 10, 20}) ASSERT_EQ(PutResult::kQueued, PutNoEvict(&q, calls.Make(d)));
  std::vector<FakeCall*> left = q.Shutdown();
  ASSERT_EQ(3u, left.size());
  EXPECT_EQ(calls[1], left[0]);
  EXPECT_EQ(calls[2], left[1]);
  EXPECT_EQ(calls[0], left[2]);
  EXPECT_EQ(0u, q.size());
  EXPECT_EQ(PutResult::kShutdown, PutNoEvict(&q, calls.Make(1)));
  EXPECT_EQ(nullptr, q.BlockingGet());  // Returns at once.
  EXPECT_TRUE(q.Shutdown().empty());    // A second call finds nothing.
}

// Producers and workers race through a small queue; every item must end up in exactly one place:
// a worker, a rejection, an eviction or the shutdown leftovers.
void StressDeliversEveryItemExactlyOnce(MonoDelta idle_spin) {
  constexpr int kProducers = 3;
  constexpr int kWorkers = 4;
  constexpr int kItemsPerProducer = 20000;
  constexpr int kTotal = kProducers * kItemsPerProducer;
  std::vector<FakeCall> items(kTotal);
  std::mt19937 rng(4242);
  for (int i = 0; i < kTotal; i++) {
    items[i].id = i;
    items[i].deadline = At(static_cast<int64_t>(rng() % 1000));
  }
  Queue q(8, idle_spin);
  std::vector<std::atomic<int>> outcomes(kTotal);
  for (auto& o : outcomes) o = 0;
  std::atomic<int> handed_off{0}, queued{0}, rejected{0}, evicted{0}, processed{0};

  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; w++) {
    workers.emplace_back([&] {
      while (FakeCall* c = q.BlockingGet()) {
        outcomes[c->id]++;
        processed++;
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; p++) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kItemsPerProducer; i++) {
        // Pausing now and then lets workers go idle, so hand-offs and heap pops both happen.
        if (i % 8 == 0) std::this_thread::yield();
        FakeCall* c = &items[p * kItemsPerProducer + i];
        FakeCall* out = nullptr;
        switch (q.Put(c, &out)) {
          case PutResult::kHandedOff:
            handed_off++;
            break;
          case PutResult::kQueued:
            queued++;
            break;
          case PutResult::kQueuedEvictedOther:
            CHECK(out != nullptr);
            CHECK(out->deadline > c->deadline);
            outcomes[out->id]++;
            evicted++;
            break;
          case PutResult::kRejected:
            outcomes[c->id]++;
            rejected++;
            break;
          case PutResult::kShutdown:
            LOG(FATAL) << "shut down early";
        }
      }
    });
  }
  for (auto& t : producers) t.join();
  std::vector<FakeCall*> left = q.Shutdown();
  for (FakeCall* c : left) outcomes[c->id]++;
  for (auto& t : workers) t.join();

  for (int i = 0; i < kTotal; i++) ASSERT_EQ(1, outcomes[i].load()) << "item " << i;
  // Items that entered the heap (kQueued, kQueuedEvictedOther) left it through a worker, an
  // eviction or Shutdown; hand-offs went straight to a worker.
  EXPECT_EQ(kTotal, handed_off + queued + evicted + rejected);
  EXPECT_EQ(handed_off + queued - static_cast<int>(left.size()), processed.load());
  LOG(INFO) << "handed off " << handed_off << ", queued " << queued << ", evicted " << evicted
            << ", rejected " << rejected << ", left " << left.size();
}

TEST(DeadlineQueueTest, StressDeliversEveryItemExactlyOnce) {
  StressDeliversEveryItemExactlyOnce(MonoDelta());
}

// The same race with idle workers polling before they sleep: hand-offs land both on the poller
// and on sleepers, and polls time out and back off, all while items fly.
TEST(DeadlineQueueTest, StressWithPollingWorkersDeliversEveryItemExactlyOnce) {
  StressDeliversEveryItemExactlyOnce(MonoDelta::FromMicroseconds(20));
}

// A poll long enough never to run out here: an item put while the worker polls reaches it
// without a futex wake, and is counted as a hit.
TEST(DeadlineQueueTest, PollingWorkerTakesAHandOffWithoutSleeping) {
  Calls calls;
  Queue q(10, MonoDelta::FromSeconds(600));
  FakeCall* got = nullptr;
  Queue::WaitReport report;
  std::thread worker([&] { got = q.BlockingGet(&report); });
  ASSERT_TRUE(WaitUntilTrue([&] { return q.waiting_workers() == 1; }));
  EXPECT_EQ(PutResult::kHandedOff, PutNoEvict(&q, calls.Make(1)));
  worker.join();
  EXPECT_EQ(calls[0], got);
  EXPECT_TRUE(report.polled);
  EXPECT_TRUE(report.poll_hit);
  EXPECT_TRUE(q.Shutdown().empty());
}

// Only one idle worker polls; the others sleep at once. With two idle workers and a poll that
// cannot run out, exactly one of the two hand-offs is a polled one.
TEST(DeadlineQueueTest, OnlyOneWorkerPollsAtATime) {
  Calls calls;
  Queue q(10, MonoDelta::FromSeconds(600));
  std::vector<Queue::WaitReport> reports(2);
  std::vector<std::thread> workers;
  for (int i = 0; i < 2; i++) {
    workers.emplace_back([&, i] { CHECK(q.BlockingGet(&reports[i]) != nullptr); });
  }
  ASSERT_TRUE(WaitUntilTrue([&] { return q.waiting_workers() == 2; }));
  EXPECT_EQ(PutResult::kHandedOff, PutNoEvict(&q, calls.Make(1)));
  EXPECT_EQ(PutResult::kHandedOff, PutNoEvict(&q, calls.Make(2)));
  for (auto& w : workers) w.join();
  // Exactly one of them polled (and got its item that way); the other slept.
  EXPECT_NE(reports[0].polled, reports[1].polled);
  EXPECT_EQ(reports[0].polled, reports[0].poll_hit);
  EXPECT_EQ(reports[1].polled, reports[1].poll_hit);
  EXPECT_EQ(1, reports[0].polled + reports[1].polled);
  EXPECT_EQ(1, reports[0].poll_hit + reports[1].poll_hit);
  EXPECT_TRUE(q.Shutdown().empty());
}

}  // namespace
}  // namespace rrpc
