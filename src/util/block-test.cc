// Block: exact capacities, and the per-thread reuse of freed 64 KiB read blocks, small blocks and
// (where asked) large blocks (bounded, and safe when a block dies on another thread or at thread
// exit; the sanitizer builds check the memory side).
#include "rrpc/util/block.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

namespace rrpc {
namespace {

TEST(BlockTest, CapacityIsWhatWasAskedForInEverySizeClass) {
  for (size_t capacity : {size_t{0}, size_t{1}, size_t{100}, size_t{512}, size_t{513},
                          size_t{64 * 1024}, size_t{64 * 1024 + 1}, size_t{1 << 20}}) {
    BlockRef block = Block::Allocate(capacity);
    EXPECT_EQ(capacity, block->capacity());
    if (capacity > 0) {
      memset(block->data(), 0xab, capacity);  // every byte is ours (ASAN would object)
      EXPECT_EQ(0xab, block->data()[capacity - 1]);
    }
  }
}

TEST(BlockTest, AFreedReadBlockIsReusedByTheSameThread) {
  const uint8_t* first;
  {
    BlockRef block = Block::Allocate(64 * 1024);
    first = block->data();
  }
  BlockRef again = Block::Allocate(64 * 1024);
  EXPECT_EQ(first, again->data());
}

TEST(BlockTest, FreedSmallBlocksAreReusedByTheSameThreadForAnySmallSize) {
  const uint8_t* first;
  {
    BlockRef block = Block::Allocate(100);  // a small call's frame head
    first = block->data();
  }
  BlockRef again = Block::Allocate(256);
  EXPECT_EQ(first, again->data());
  EXPECT_EQ(256u, again->capacity());
  memset(again->data(), 0xcd, again->capacity());  // the whole small size class is ours
}

TEST(BlockTest, BlocksOfOtherSizesAreNotCached) {
  // Even on a thread that keeps large blocks, a block of a size no cache is for (above the small
  // class, not a read block's 64 KiB, or above kMaxKeptLargeBlockCapacity) is not kept.
  Block::KeepLargeBlocksOnThisThread();
  for (size_t capacity : {size_t{257}, size_t{600}, size_t{4096}, size_t{64 * 1024 - 1},
                          Block::kMaxKeptLargeBlockCapacity + 1}) {
    [[maybe_unused]] const void* mem;  // read only without a sanitizer
    {
      BlockRef block = Block::Allocate(capacity);
      block->data()[capacity - 1] = 1;
      mem = block.get();
    }
    EXPECT_EQ(0, Block::LargeBlocksKeptOnThisThread()) << capacity;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    // And it went back to the heap: for a chunk this small glibc's per-thread cache hands the
    // chunk freed last to the next malloc of its size (a cached block would not be there).
    if (sizeof(Block) + capacity <= 1000) {
      void* again = malloc(sizeof(Block) + capacity);
      EXPECT_EQ(mem, again) << capacity;
      free(again);
    }
#endif
  }
  {
    BlockRef kept = Block::Allocate(1 << 20);  // the control: a size that is kept
  }
  EXPECT_EQ(1, Block::LargeBlocksKeptOnThisThread());
  Block::StopKeepingLargeBlocksOnThisThread();
}

TEST(BlockTest, BlocksFreedOnOtherThreadsAndCachedAtThreadExitAreFine) {
  std::vector<BlockRef> made;
  for (int i = 0; i < 40; i++) made.push_back(Block::Allocate(i % 2 ? 128 : 64 * 1024));
  // (more read blocks than a thread keeps, and some of other sizes)
  // Another thread drops them all: its cache keeps a bounded few, frees the rest, and frees what
  // it kept when it exits.
  std::thread other([moved = std::move(made)]() mutable {
    moved.clear();
    BlockRef mine = Block::Allocate(64 * 1024);
  });
  other.join();
  BlockRef after = Block::Allocate(64 * 1024);
  EXPECT_EQ(64u * 1024, after->capacity());
}

// A thread that keeps large blocks (a reactor's) reuses one freed on it at exactly its capacity,
// keeps at most kMaxKeptLargeBlocks and kMaxKeptLargeBytes (the oldest go), none above the size
// limit, none once it stops; a thread that does not keep them keeps none.
TEST(BlockTest, LargeBlocksAreKeptForReuseAtTheirCapacityOnlyWhereAsked) {
  std::thread reactor([] {
    constexpr size_t kLarge = (1 << 20) + 4096;
    {
      BlockRef block = Block::Allocate(kLarge);
      block->data()[0] = 1;
    }
    EXPECT_EQ(0, Block::LargeBlocksKeptOnThisThread());  // not asked to

    Block::KeepLargeBlocksOnThisThread();
    const uint8_t* first;
    {
      BlockRef block = Block::Allocate(kLarge);
      first = block->data();
    }
    EXPECT_EQ(1, Block::LargeBlocksKeptOnThisThread());
    BlockRef other_size = Block::Allocate(kLarge + 4096);
    EXPECT_NE(first, other_size->data());
    BlockRef again = Block::Allocate(kLarge);
    EXPECT_EQ(first, again->data());
    EXPECT_EQ(kLarge, again->capacity());
    memset(again->data(), 0xab, again->capacity());  // all of it is ours (ASAN would object)
    EXPECT_EQ(0, Block::LargeBlocksKeptOnThisThread());

    // At most kMaxKeptLargeBlocks: blocks a little over 64 KiB (a stream's serialized messages).
    constexpr size_t kMid = (64 << 10) + 4096;
    std::vector<BlockRef> many;
    for (int i = 0; i < Block::kMaxKeptLargeBlocks + 3; i++) {
      many.push_back(Block::Allocate(kMid + static_cast<size_t>(i) * 4096));
    }
    many.push_back(Block::Allocate(Block::kMaxKeptLargeBlockCapacity + 1));
    many.clear();
    EXPECT_EQ(Block::kMaxKeptLargeBlocks, Block::LargeBlocksKeptOnThisThread());
    // The newest are kept: the last of the loop's sizes comes back, the first does not.
    const size_t last = kMid + (Block::kMaxKeptLargeBlocks + 2) * 4096;
    BlockRef newest = Block::Allocate(last);
    EXPECT_EQ(Block::kMaxKeptLargeBlocks - 1, Block::LargeBlocksKeptOnThisThread());
    BlockRef oldest = Block::Allocate(kMid);
    EXPECT_EQ(Block::kMaxKeptLargeBlocks - 1, Block::LargeBlocksKeptOnThisThread());

    // At most kMaxKeptLargeBytes in all: the largest blocks kept, fewer of them fit.
    Block::StopKeepingLargeBlocksOnThisThread();
    Block::KeepLargeBlocksOnThisThread();
    const size_t largest = Block::kMaxKeptLargeBlockCapacity;
    const int fit = static_cast<int>(Block::kMaxKeptLargeBytes / largest);
    for (int i = 0; i < fit + 2; i++) many.push_back(Block::Allocate(largest));
    many.clear();
    EXPECT_EQ(fit, Block::LargeBlocksKeptOnThisThread());

    Block::StopKeepingLargeBlocksOnThisThread();  // frees what it kept (ASAN: no leak)
    EXPECT_EQ(0, Block::LargeBlocksKeptOnThisThread());
    newest.reset();
    EXPECT_EQ(0, Block::LargeBlocksKeptOnThisThread());
  });
  reactor.join();
}

TEST(BlockTest, SharedReferencesKeepTheBlockUntilTheLastOneGoes) {
  BlockRef a = Block::Allocate(64 * 1024);
  memcpy(a->data(), "kept", 4);
  BlockSlice slice{a, Slice(a->data(), 4)};
  a.reset();
  BlockRef reuse = Block::Allocate(64 * 1024);  // must not get the block the slice still holds
  EXPECT_NE(slice.block->data(), reuse->data());
  EXPECT_EQ(0, memcmp(slice.slice.data(), "kept", 4));
}

}  // namespace
}  // namespace rrpc
