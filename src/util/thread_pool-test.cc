#include "util/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc {
namespace {

std::unique_ptr<ThreadPool> MakePool(const std::string& name, int threads,
                                     size_t max_queued = std::numeric_limits<size_t>::max()) {
  ThreadPoolOptions opts;
  opts.name = name;
  opts.num_threads = threads;
  opts.max_queued_tasks = max_queued;
  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(opts);
  CHECK(pool.ok()) << pool.status();
  return std::move(pool).value();
}

TEST(ThreadPoolTest, RejectsZeroThreads) {
  ThreadPoolOptions opts;
  opts.num_threads = 0;
  Result<std::unique_ptr<ThreadPool>> pool = ThreadPool::Create(opts);
  ASSERT_FALSE(pool.ok());
  EXPECT_TRUE(pool.status().IsInvalidArgument()) << pool.status();
}

TEST(ThreadPoolTest, RunsEverySubmittedTaskOnce) {
  auto pool = MakePool("runs", 3);
  constexpr int kTasks = 1000;
  std::vector<std::atomic<int>> runs(kTasks);
  for (auto& r : runs) r = 0;
  for (int i = 0; i < kTasks; i++) {
    ASSERT_TRUE(pool->Submit([&runs, i] { runs[i]++; }).ok());
  }
  pool->Wait();
  for (int i = 0; i < kTasks; i++) ASSERT_EQ(1, runs[i].load()) << i;
}

TEST(ThreadPoolTest, ThreadsAreNamedAndRegistered) {
  ThreadPoolOptions opts;
  opts.name = "named";
  opts.category = "pool-test";
  opts.num_threads = 2;
  auto created = ThreadPool::Create(opts);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<ThreadPool> pool = std::move(created).value();

  std::vector<std::string> registered;
  for (const ThreadInfo& t : ThreadRegistry::Get()->List()) {
    if (t.category == "pool-test") registered.push_back(t.name);
  }
  EXPECT_EQ((std::vector<std::string>{"named-0", "named-1"}), registered);

  // Both threads must be busy at once for both names to show up: each task waits for the other.
  CountDownLatch both_running(2);
  std::mutex mu;
  std::set<std::string> os_names;
  for (int i = 0; i < 2; i++) {
    ASSERT_TRUE(pool->Submit([&] {
                      char buf[32] = {};
                      pthread_getname_np(pthread_self(), buf, sizeof(buf));
                      {
                        std::lock_guard<std::mutex> l(mu);
                        os_names.insert(buf);
                      }
                      both_running.CountDown();
                      both_running.Wait();
                    })
                    .ok());
  }
  pool->Wait();
  EXPECT_EQ((std::set<std::string>{"named-0", "named-1"}), os_names);

  pool->Shutdown();
  for (const ThreadInfo& t : ThreadRegistry::Get()->List()) EXPECT_NE("pool-test", t.category);
}

TEST(ThreadPoolTest, WaitCoversTasksStillRunning) {
  auto pool = MakePool("wait", 2);
  CountDownLatch release(1);
  std::atomic<bool> finished{false};
  ASSERT_TRUE(pool->Submit([&] {
                    release.Wait();
                    finished = true;
                  })
                  .ok());
  EXPECT_FALSE(pool->WaitFor(MonoDelta::FromMilliseconds(5)));  // Blocked on `release`.
  EXPECT_FALSE(finished.load());
  release.CountDown();
  pool->Wait();
  EXPECT_TRUE(finished.load());
  EXPECT_TRUE(pool->WaitFor(MonoDelta::FromMilliseconds(0)));
}

TEST(ThreadPoolTest, TasksMaySubmitTasks) {
  auto pool = MakePool("chain", 2);
  std::atomic<int> depth{0};
  std::function<void()> step = [&] {
    if (++depth < 50) CHECK(pool->Submit(step).ok());
  };
  ASSERT_TRUE(pool->Submit(step).ok());
  // Wait() also covers tasks submitted by the running ones: the pool is never idle in between.
  pool->Wait();
  EXPECT_EQ(50, depth.load());
}

TEST(ThreadPoolTest, SubmitFailsWhenQueueIsFull) {
  auto pool = MakePool("full", 1, /*max_queued=*/2);
  CountDownLatch started(1);
  CountDownLatch release(1);
  ASSERT_TRUE(pool->Submit([&] {
                    started.CountDown();
                    release.Wait();
                  })
                  .ok());
  started.Wait();  // The only thread is busy; the next tasks stay queued.
  ASSERT_TRUE(pool->Submit([] {}).ok());
  ASSERT_TRUE(pool->Submit([] {}).ok());
  Status s = pool->Submit([] {});
  EXPECT_TRUE(s.IsServiceUnavailable()) << s;
  release.CountDown();
  pool->Wait();
  EXPECT_TRUE(pool->Submit([] {}).ok());
}

TEST(ThreadPoolTest, ShutdownRunsQueuedTasksThenRefusesNewOnes) {
  auto pool = MakePool("drain", 1);
  CountDownLatch started(1);
  CountDownLatch release(1);
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool->Submit([&] {
                    started.CountDown();
                    release.Wait();
                    ran++;
                  })
                  .ok());
  started.Wait();
  for (int i = 0; i < 10; i++) ASSERT_TRUE(pool->Submit([&] { ran++; }).ok());

  std::thread shutter([&] { pool->Shutdown(); });
  // Shutdown has begun once Submit is refused; the queued tasks have not run yet.
  for (int i = 0; i < 30000 && pool->Submit([] {}).ok(); i++) {
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  Status s = pool->Submit([&] { ran++; });
  EXPECT_TRUE(s.IsAborted()) << s;
  release.CountDown();
  shutter.join();
  // The tasks accepted before shutdown began (1 + 10 + however many empty ones) all ran.
  EXPECT_EQ(11, ran.load());
  pool->Shutdown();  // Idempotent.
  EXPECT_TRUE(pool->Submit([] {}).IsAborted());
}

TEST(ThreadPoolTest, DestructorShutsDown) {
  std::atomic<int> ran{0};
  {
    auto pool = MakePool("dtor", 2);
    for (int i = 0; i < 100; i++) ASSERT_TRUE(pool->Submit([&] { ran++; }).ok());
  }
  EXPECT_EQ(100, ran.load());
}

TEST(ThreadPoolTest, ClosuresAreDestroyedBeforeWaitReturns) {
  auto pool = MakePool("captures", 2);
  auto token = std::make_shared<int>(1);
  for (int i = 0; i < 10; i++) ASSERT_TRUE(pool->Submit([token] {}).ok());
  pool->Wait();
  EXPECT_EQ(1, token.use_count());
}

}  // namespace
}  // namespace rrpc
