#include "util/home_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

constexpr size_t kSize = 200;
struct TestPoolTag {};
using TestPool = HomePool<TestPoolTag, 256>;

TEST(HomePoolTest, BlocksFreedByAnotherThreadAreReusedByTheirHome) {
  std::vector<void*> blocks;
  for (int i = 0; i < 10; i++) blocks.push_back(TestPool::Allocate(kSize));
  const size_t free_before = TestPool::FreeBlocksOnThisThreadForTests();
  std::thread other([&] {
    for (void* p : blocks) TestPool::Free(p);
  });
  other.join();
  EXPECT_EQ(TestPool::FreeBlocksOnThisThreadForTests(), free_before + 10);
  // Reused, not taken from the heap: the same addresses come back.
  for (int i = 0; i < 10; i++) {
    void* p = TestPool::Allocate(kSize);
    EXPECT_NE(std::find(blocks.begin(), blocks.end(), p), blocks.end());
    static_cast<char*>(p)[kSize - 1] = 1;  // usable to its end
    blocks[i] = p;
  }
  for (void* p : blocks) TestPool::Free(p);
}

TEST(HomePoolTest, KeepsAtMostItsLimit) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < TestPool::kMaxKept + 100; i++) blocks.push_back(TestPool::Allocate(kSize));
  std::thread other([&] {
    for (void* p : blocks) TestPool::Free(p);
  });
  other.join();
  // Taking the returned blocks keeps kMaxKept of them and gives the rest back to the heap.
  void* p = TestPool::Allocate(kSize);
  EXPECT_EQ(TestPool::FreeBlocksOnThisThreadForTests(), TestPool::kMaxKept - 1);
  TestPool::Free(p);
}

TEST(HomePoolTest, AnotherSizeComesFromTheHeap) {
  void* p = TestPool::Allocate(kSize);  // the pool's size, from the first test or this one
  const size_t free_before = TestPool::FreeBlocksOnThisThreadForTests();
  void* q = TestPool::Allocate(kSize + 64);
  TestPool::Free(q);
  EXPECT_EQ(TestPool::FreeBlocksOnThisThreadForTests(), free_before);
  TestPool::Free(p);
}

TEST(HomePoolTest, ManyThreadsFreeIntoOneHomeAtOnce) {
  constexpr int kThreads = 4, kPerThread = 500;
  std::vector<std::vector<void*>> blocks(kThreads);
  for (auto& v : blocks) {
    for (int i = 0; i < kPerThread; i++) v.push_back(TestPool::Allocate(kSize));
  }
  std::vector<std::thread> threads;
  for (auto& v : blocks) {
    threads.emplace_back([&v] {
      for (void* p : v) TestPool::Free(p);
    });
  }
  for (auto& t : threads) t.join();
  // Every block arrived once: after taking them, the home keeps exactly its limit.
  void* p = TestPool::Allocate(kSize);
  EXPECT_EQ(TestPool::FreeBlocksOnThisThreadForTests(), TestPool::kMaxKept - 1);
  TestPool::Free(p);
}

TEST(HomePoolTest, EachTagIsItsOwnPool) {
  struct OtherTag {};
  using OtherPool = HomePool<OtherTag, 4>;
  const size_t free_before = TestPool::FreeBlocksOnThisThreadForTests();
  std::vector<void*> blocks;
  for (int i = 0; i < 10; i++) blocks.push_back(OtherPool::Allocate(kSize * 2));
  std::thread other([&] {
    for (void* p : blocks) OtherPool::Free(p);
  });
  other.join();
  void* p = OtherPool::Allocate(kSize * 2);
  EXPECT_EQ(OtherPool::FreeBlocksOnThisThreadForTests(), 3u);  // its own limit, 4, minus one
  EXPECT_EQ(TestPool::FreeBlocksOnThisThreadForTests(), free_before);
  OtherPool::Free(p);
}

TEST(HomePoolTest, TheOwnerFreesWithinItsLimit) {
  struct OwnTag {};
  using OwnPool = HomePool<OwnTag, 4>;
  std::vector<void*> blocks;
  for (int i = 0; i < 10; i++) blocks.push_back(OwnPool::Allocate(kSize));
  for (void* p : blocks) OwnPool::Free(p);  // 4 kept at once, 6 more returned
  void* p = OwnPool::Allocate(kSize);       // from the kept ones
  EXPECT_EQ(OwnPool::FreeBlocksOnThisThreadForTests(), 9u);
  for (int i = 0; i < 3; i++) blocks[i] = OwnPool::Allocate(kSize);
  void* q = OwnPool::Allocate(kSize);  // kept ran dry: takes the returned ones, keeps 4
  EXPECT_EQ(OwnPool::FreeBlocksOnThisThreadForTests(), 3u);
  for (int i = 0; i < 3; i++) OwnPool::Free(blocks[i]);
  OwnPool::Free(p);
  OwnPool::Free(q);
}

TEST(HomePoolTest, AThreadThatExitsLeavesItsHomeToTheNext) {
  void* from_exited = nullptr;
  std::thread first([&] { from_exited = TestPool::Allocate(kSize); });
  first.join();
  TestPool::Free(from_exited);  // returned to a home whose thread is gone: still valid
  void* from_adopted = nullptr;
  std::thread second([&] {
    // Adopts the home `first` left (the only one this pool's exited threads left: the other
    // tests' threads only free), so it takes the block just returned to it, not heap memory
    // (the block is in that home, so the heap cannot hand out its address).
    from_adopted = TestPool::Allocate(kSize);
    TestPool::Free(from_adopted);
  });
  second.join();
  EXPECT_EQ(from_exited, from_adopted);
}

}  // namespace
}  // namespace rrpc
