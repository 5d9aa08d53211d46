#include "util/home_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

constexpr size_t kSize = 200;

TEST(HomePoolTest, BlocksFreedByAnotherThreadAreReusedByTheirHome) {
  std::vector<void*> blocks;
  for (int i = 0; i < 10; i++) blocks.push_back(HomePool::Allocate(kSize));
  const size_t free_before = HomePool::FreeBlocksOnThisThreadForTests();
  std::thread other([&] {
    for (void* p : blocks) HomePool::Free(p);
  });
  other.join();
  EXPECT_EQ(HomePool::FreeBlocksOnThisThreadForTests(), free_before + 10);
  // Reused, not taken from the heap: the same addresses come back.
  for (int i = 0; i < 10; i++) {
    void* p = HomePool::Allocate(kSize);
    EXPECT_NE(std::find(blocks.begin(), blocks.end(), p), blocks.end());
    static_cast<char*>(p)[kSize - 1] = 1;  // usable to its end
    blocks[i] = p;
  }
  for (void* p : blocks) HomePool::Free(p);
}

TEST(HomePoolTest, KeepsAtMostItsLimit) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < HomePool::kMaxKept + 100; i++) blocks.push_back(HomePool::Allocate(kSize));
  std::thread other([&] {
    for (void* p : blocks) HomePool::Free(p);
  });
  other.join();
  // Taking the returned blocks keeps kMaxKept of them and gives the rest back to the heap.
  void* p = HomePool::Allocate(kSize);
  EXPECT_EQ(HomePool::FreeBlocksOnThisThreadForTests(), HomePool::kMaxKept - 1);
  HomePool::Free(p);
}

TEST(HomePoolTest, AnotherSizeComesFromTheHeap) {
  void* p = HomePool::Allocate(kSize);  // the pool's size, from the first test or this one
  const size_t free_before = HomePool::FreeBlocksOnThisThreadForTests();
  void* q = HomePool::Allocate(kSize + 64);
  HomePool::Free(q);
  EXPECT_EQ(HomePool::FreeBlocksOnThisThreadForTests(), free_before);
  HomePool::Free(p);
}

TEST(HomePoolTest, ManyThreadsFreeIntoOneHomeAtOnce) {
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::vector<void*>> blocks(kThreads);
  for (auto& v : blocks) {
    for (int i = 0; i < kPerThread; i++) v.push_back(HomePool::Allocate(kSize));
  }
  std::vector<std::thread> threads;
  for (auto& v : blocks) {
    threads.emplace_back([&v] {
      for (void* p : v) HomePool::Free(p);
    });
  }
  for (auto& t : threads) t.join();
  // Every block arrived once: after taking them, the home keeps exactly its limit.
  void* p = HomePool::Allocate(kSize);
  EXPECT_EQ(HomePool::FreeBlocksOnThisThreadForTests(), HomePool::kMaxKept - 1);
  HomePool::Free(p);
}

TEST(HomePoolTest, AThreadThatExitsLeavesItsHomeToTheNext) {
  void* from_exited = nullptr;
  std::thread first([&] { from_exited = HomePool::Allocate(kSize); });
  first.join();
  HomePool::Free(from_exited);  // returned to a home whose thread is gone: still valid
  std::thread second([&] {
    void* p = HomePool::Allocate(kSize);  // adopts a home left by an exited thread
    HomePool::Free(p);
  });
  second.join();
}

}  // namespace
}  // namespace rrpc
