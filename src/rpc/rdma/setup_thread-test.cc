// SetupThread: with one thread, jobs run in order on it; with more, a job held (a verb that
// blocks) holds one thread while the others run the jobs queued after it, in order, and no more
// than max_threads run at once; the queue's bound refuses a job beyond it; the destructor lets
// the running jobs finish and drops (destroys) the queued ones.
#include "rpc/rdma/setup_thread.h"

#include <gtest/gtest.h>

#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "util/countdown_latch.h"

namespace rrpc::rdma {
namespace {

const MonoDelta kBound = MonoDelta::FromSeconds(30);

TEST(SetupThreadTest, RunsJobsInOrderOnOneThreadOtherThanTheCaller) {
  SetupThread setup(/*max_threads=*/1, /*max_queued=*/16);
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  CountDownLatch done(3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(setup.Submit([&, i] {
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
      done.CountDown();
    }));
  }
  ASSERT_TRUE(done.WaitFor(kBound));
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_EQ(threads[0], threads[1]);
  EXPECT_EQ(threads[1], threads[2]);
}

TEST(SetupThreadTest, AHeldJobHoldsOneThreadWhileTheNextRunInOrder) {
  CountDownLatch entered(1), release(1), done(3);
  std::mutex mu;
  std::vector<int> order;
  // Two threads: one held, the other runs the rest one after another.
  SetupThread setup(/*max_threads=*/2, /*max_queued=*/16);
  ASSERT_TRUE(setup.Submit([&] {
    entered.CountDown();
    release.Wait();  // an RTR toward a peer that does not answer
  }));
  ASSERT_TRUE(entered.WaitFor(kBound));
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(setup.Submit([&, i] {
      {
        std::lock_guard<std::mutex> lock(mu);
        order.push_back(i);
      }
      done.CountDown();
    }));
  }
  const bool ran = done.WaitFor(kBound);
  release.CountDown();
  EXPECT_TRUE(ran) << "the jobs after a held one waited for it";
  ASSERT_TRUE(done.WaitFor(kBound));
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
}

TEST(SetupThreadTest, RunsNoMoreThanMaxThreadsAtOnce) {
  CountDownLatch entered(2), release(1), third(1);
  std::mutex mu;
  std::set<std::thread::id> threads;
  bool third_ran = false;
  {
    SetupThread setup(/*max_threads=*/2, /*max_queued=*/16);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(setup.Submit([&] {
        {
          std::lock_guard<std::mutex> lock(mu);
          threads.insert(std::this_thread::get_id());
        }
        entered.CountDown();
        release.Wait();
      }));
    }
    const bool both = entered.WaitFor(kBound);  // the two run at once, on two threads
    ASSERT_TRUE(setup.Submit([&] {
      {
        std::lock_guard<std::mutex> lock(mu);
        third_ran = true;
        threads.insert(std::this_thread::get_id());
      }
      third.CountDown();
    }));
    bool ran_early;
    {
      std::lock_guard<std::mutex> lock(mu);
      ran_early = third_ran;  // both threads are busy: it waits in the queue
    }
    release.CountDown();
    EXPECT_TRUE(both) << "two held jobs did not run at once";
    EXPECT_FALSE(ran_early);
    ASSERT_TRUE(third.WaitFor(kBound));
  }
  EXPECT_EQ(threads.size(), 2u);
}

// Counts `latch` down when destroyed (with the closure holding it).
struct DropSignal {
  explicit DropSignal(CountDownLatch* l) : latch(l) {}
  ~DropSignal() { latch->CountDown(); }
  CountDownLatch* latch;
};

TEST(SetupThreadTest, RefusesAJobBeyondItsBoundAndDropsQueuedOnesWhenDestroyed) {
  CountDownLatch running(1), release(1), dropped(1);
  bool ran_queued = false;
  std::thread releaser;
  {
    SetupThread setup(/*max_threads=*/1, /*max_queued=*/2);
    ASSERT_TRUE(setup.Submit([&] {
      running.CountDown();
      release.Wait();
    }));
    ASSERT_TRUE(running.WaitFor(kBound));  // the first job runs: the queue is empty
    auto signal = std::make_shared<DropSignal>(&dropped);
    ASSERT_TRUE(setup.Submit([&ran_queued, signal] { ran_queued = true; }));
    signal.reset();
    ASSERT_TRUE(setup.Submit([] {}));
    EXPECT_FALSE(setup.Submit([] {}));  // two queued: the bound
    // The running job ends only once the destructor has dropped the queued ones.
    releaser = std::thread([&] {
      dropped.Wait();
      release.CountDown();
    });
  }
  releaser.join();
  EXPECT_FALSE(ran_queued);
}

}  // namespace
}  // namespace rrpc::rdma
