// SetupThread: jobs run in order on one thread; the queue's bound refuses a job beyond it; the
// destructor lets the running job finish and drops (destroys) the queued ones.
#include "rpc/rdma/setup_thread.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

#include "util/countdown_latch.h"

namespace rrpc::rdma {
namespace {

const MonoDelta kBound = MonoDelta::FromSeconds(30);

TEST(SetupThreadTest, RunsJobsInOrderOnOneThreadOtherThanTheCaller) {
  SetupThread setup(16);
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
    SetupThread setup(2);
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
