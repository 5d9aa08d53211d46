#include "rrpc/util/block.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "util/home_pool.h"

namespace rrpc {

namespace {

// Read blocks (the read-block size) come from a HomePool (util/home_pool.h): a reactor allocates
// one per batch of reads, and the last call in it usually dies on a worker (which answered and
// wrote the response itself); the block goes back to the reactor that made it, with one
// compare-and-swap, for its next read. Reusing it skips a 64 KiB malloc/free pair and the
// allocator's fast-bin consolidation that freeing a large chunk triggers. (Before: a per-thread
// stash behind a small pool shared by all threads under a mutex, a lock on each side per call.)
// At most 16 kept per reactor (1 MiB).
constexpr size_t kCachedBlockCapacity = 64 * 1024;
struct ReadBlockPoolTag {};
using ReadBlockPool = HomePool<ReadBlockPoolTag, 16>;

// Small blocks (a frame head too large for its call's inline buffer, a control frame) all get
// room for this many bytes, from a HomePool too: each goes back to the thread that made it,
// which keeps at most 32 (10 KiB).
constexpr size_t kSmallBlockCapacity = 256;
struct SmallBlockPoolTag {};
using SmallBlockPool = HomePool<SmallBlockPoolTag, 32>;

// Large blocks kept by a thread that asked to (Block::KeepLargeBlocksOnThisThread), oldest
// first. Not a HomePool: blocks of many sizes, and a reactor whose stream changed
// size must keep the new size's blocks, so here the oldest goes. Trivially destructible (the
// thread empties it before it ends).
struct KeptLargeBlock {
  void* mem;
  size_t capacity;
};
struct KeptLargeBlocks {
  bool enabled = false;
  int count = 0;
  size_t bytes = 0;  // the capacities of the blocks kept
  KeptLargeBlock kept[Block::kMaxKeptLargeBlocks];

  // Takes entry `i` out, the others keeping their order.
  void* Take(int i) {
    void* mem = kept[i].mem;
    bytes -= kept[i].capacity;
    std::copy(kept + i + 1, kept + count, kept + i);
    count--;
    return mem;
  }
};
thread_local KeptLargeBlocks tls_kept_large;

// Memory for a large block of exactly `capacity` bytes kept by this thread, or nullptr.
void* TakeKeptLargeBlock(size_t capacity) {
  KeptLargeBlocks& k = tls_kept_large;
  for (int i = k.count - 1; i >= 0; i--) {  // the newest first: the likeliest still cached
    if (k.kept[i].capacity == capacity) return k.Take(i);
  }
  return nullptr;
}

// Keeps `mem` (a large block's memory) on this thread when it keeps large blocks; false if not.
bool KeepLargeBlock(void* mem, size_t capacity) {
  KeptLargeBlocks& k = tls_kept_large;
  if (!k.enabled || capacity > Block::kMaxKeptLargeBlockCapacity) return false;
  while (k.count == Block::kMaxKeptLargeBlocks || k.bytes + capacity > Block::kMaxKeptLargeBytes) {
    free(k.Take(0));
  }
  k.kept[k.count++] = {mem, capacity};
  k.bytes += capacity;
  return true;
}

}  // namespace

void Block::KeepLargeBlocksOnThisThread() { tls_kept_large.enabled = true; }

void Block::StopKeepingLargeBlocksOnThisThread() {
  KeptLargeBlocks& k = tls_kept_large;
  k.enabled = false;
  while (k.count > 0) free(k.Take(k.count - 1));
}

int Block::LargeBlocksKeptOnThisThread() { return tls_kept_large.count; }

BlockRef Block::Allocate(size_t capacity) {
  void* mem;
  if (capacity <= kSmallBlockCapacity) {
    mem = SmallBlockPool::Allocate(sizeof(Block) + kSmallBlockCapacity);
    return BlockRef(new (mem) Block(capacity, nullptr));
  }
  if (capacity == kCachedBlockCapacity) {
    mem = ReadBlockPool::Allocate(sizeof(Block) + capacity);
  } else {
    mem = capacity > kCachedBlockCapacity ? TakeKeptLargeBlock(capacity) : nullptr;
    if (mem == nullptr) mem = malloc(sizeof(Block) + capacity);
    if (mem == nullptr) throw std::bad_alloc();
  }
  return BlockRef(new (mem) Block(capacity, nullptr));
}

Block* Block::Place(void* mem, size_t capacity, BlockRecycler* recycler) {
  return new (mem) Block(capacity, recycler);
}

BlockAttachment* Block::Attach(BlockAttachment* a) {
  if (recycler_ != nullptr) {
    delete a;
    return nullptr;
  }
  BlockAttachment* expected = nullptr;
  if (attachment_.compare_exchange_strong(expected, a, std::memory_order_acq_rel)) return a;
  delete a;
  return expected;
}

void Block::Release() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (recycler_ != nullptr) {
      recycler_->Recycle(const_cast<Block*>(this));
      return;
    }
    // Whatever is tied to the memory (a registration) goes before the memory does.
    if (BlockAttachment* a = attachment_.load(std::memory_order_acquire)) delete a;
    const size_t capacity = capacity_;
    this->~Block();
    void* mem = const_cast<Block*>(this);
    if (capacity <= kSmallBlockCapacity) {
      SmallBlockPool::Free(mem);
      return;
    }
    if (capacity == kCachedBlockCapacity) {
      ReadBlockPool::Free(mem);
      return;
    }
    if (capacity > kCachedBlockCapacity && KeepLargeBlock(mem, capacity)) return;
    free(mem);
  }
}

}  // namespace rrpc
