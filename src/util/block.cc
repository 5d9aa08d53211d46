#include "util/block.h"

#include <cstdlib>
#include <new>

namespace rrpc {

namespace {

// Freed blocks of the read-block size, kept per thread for the next Allocate of that size. A
// reactor allocates a read block per batch of reads and frees it when the last call in it dies,
// on the same thread; reusing it skips a 64 KiB malloc/free pair and the allocator's fast-bin
// consolidation that freeing a large chunk triggers. Bounded, so a thread that only frees
// blocks (they came from another thread) keeps at most kMaxCachedBlocks of them.
constexpr size_t kCachedBlockCapacity = 64 * 1024;
constexpr int kMaxCachedBlocks = 4;

// Trivially destructible, so it stays usable while other thread_locals are destroyed at thread
// exit; BlockCacheCleanup empties and closes it then.
struct BlockCache {
  void* blocks[kMaxCachedBlocks];
  int count;
  bool closed;
};
thread_local BlockCache tls_block_cache;

struct BlockCacheCleanup {
  ~BlockCacheCleanup() {
    BlockCache& cache = tls_block_cache;
    cache.closed = true;
    while (cache.count > 0) free(cache.blocks[--cache.count]);
  }
};

// Keeps `mem` for reuse if there is room; false: the caller frees it.
bool CacheBlock(void* mem) {
  BlockCache& cache = tls_block_cache;
  if (cache.closed || cache.count == kMaxCachedBlocks) return false;
  thread_local BlockCacheCleanup cleanup;  // registered on first use, runs at thread exit
  (void)cleanup;
  cache.blocks[cache.count++] = mem;
  return true;
}

}  // namespace

BlockRef Block::Allocate(size_t capacity) {
  if (capacity == kCachedBlockCapacity) {
    BlockCache& cache = tls_block_cache;
    if (cache.count > 0) return BlockRef(new (cache.blocks[--cache.count]) Block(capacity));
  }
  void* mem = malloc(sizeof(Block) + capacity);
  if (mem == nullptr) throw std::bad_alloc();
  return BlockRef(new (mem) Block(capacity));
}

void Block::Release() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    const size_t capacity = capacity_;
    this->~Block();
    void* mem = const_cast<Block*>(this);
    if (capacity == kCachedBlockCapacity && CacheBlock(mem)) return;
    free(mem);
  }
}

}  // namespace rrpc
