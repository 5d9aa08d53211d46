#include "util/block.h"

#include <cstdlib>
#include <new>

#include "util/home_pool.h"
#include "util/thread_stash.h"

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

// Small blocks (a small call's frame head: length, header and body, about 100 bytes for a
// 64-byte echo) all get room for this many bytes and are kept per thread: the head of a
// request is made on the calling thread and freed once written, usually by the same thread (its
// reactor, or the caller writing it itself), and a response's head by the worker that writes it.
// Saves a malloc/free pair per frame (measured with build-support/echo-cost: about 170
// instructions per echo call for the two heads). A thread that only frees them keeps at most 32
// (10 KiB); the rest go back to the heap.
constexpr size_t kSmallBlockCapacity = 256;
void FreeSmallBlock(void* mem) { free(mem); }
using SmallBlockStash = ThreadStash<void*, 32, FreeSmallBlock>;

}  // namespace

BlockRef Block::Allocate(size_t capacity) {
  void* mem;
  if (capacity <= kSmallBlockCapacity) {
    if (!SmallBlockStash::Pop(&mem)) {
      mem = malloc(sizeof(Block) + kSmallBlockCapacity);
      if (mem == nullptr) throw std::bad_alloc();
    }
    return BlockRef(new (mem) Block(capacity, nullptr));
  }
  if (capacity == kCachedBlockCapacity) {
    mem = ReadBlockPool::Allocate(sizeof(Block) + capacity);
  } else {
    mem = malloc(sizeof(Block) + capacity);
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
      if (!SmallBlockStash::Push(mem)) free(mem);
      return;
    }
    if (capacity == kCachedBlockCapacity) {
      ReadBlockPool::Free(mem);
      return;
    }
    free(mem);
  }
}

}  // namespace rrpc
