#include "util/block.h"

#include <cstdlib>
#include <new>

#include "util/mutex.h"
#include "util/thread_stash.h"

namespace rrpc {

namespace {

// Freed blocks of the read-block size are kept per thread for the next Allocate of that size. A
// reactor allocates a read block per batch of reads and frees it when the last call in it dies,
// on the same thread; reusing it skips a 64 KiB malloc/free pair and the allocator's fast-bin
// consolidation that freeing a large chunk triggers. Bounded, so a thread that only frees
// blocks (they came from another thread) keeps at most four of them.
constexpr size_t kCachedBlockCapacity = 64 * 1024;

void FreeMemory(void* mem) { free(mem); }
using ReadBlockStash = ThreadStash<void*, 4, FreeMemory>;

// Small blocks (a small call's frame head: length, header and body, about 100 bytes for a
// 64-byte echo) all get room for this many bytes and are kept per thread too: the head of a
// request is made on the calling thread and freed once written, usually by the same thread (its
// reactor, or the caller writing it itself), and a response's head by the worker that writes it.
// Saves a malloc/free pair per frame (measured with build-support/echo-cost: about 170
// instructions per echo call for the two heads). A thread that only frees them keeps at most 32
// (10 KiB); the rest go back to the heap.
constexpr size_t kSmallBlockCapacity = 256;
void FreeSmallBlock(void* mem) { free(mem); }
using SmallBlockStash = ThreadStash<void*, 32, FreeSmallBlock>;

// Behind the per-thread stashes, a small pool shared by all threads: a read block whose last call
// a worker answered (and wrote itself) is freed on the worker, while its reactor needs the next
// one. Without it every such block was a 64 KiB malloc on the reactor and a free on the worker
// (measured with build-support/echo-cost: 140 instructions per echo call more).
class SharedBlockPool {
 public:
  bool Put(void* mem) {
    MutexLock lock(mu_);
    if (count_ == kCapacity) return false;
    blocks_[count_++] = mem;
    return true;
  }
  bool Take(void** mem) {
    MutexLock lock(mu_);
    if (count_ == 0) return false;
    *mem = blocks_[--count_];
    return true;
  }

 private:
  static constexpr int kCapacity = 16;
  Mutex mu_;
  void* blocks_[kCapacity] GUARDED_BY(mu_);
  int count_ GUARDED_BY(mu_) = 0;
};
// Never destroyed: threads may free blocks during static destruction.
SharedBlockPool& SharedPool() {
  static SharedBlockPool* pool = new SharedBlockPool;
  return *pool;
}

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
  if (capacity != kCachedBlockCapacity ||
      (!ReadBlockStash::Pop(&mem) && !SharedPool().Take(&mem))) {
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
    if (capacity == kCachedBlockCapacity && (ReadBlockStash::Push(mem) || SharedPool().Put(mem))) {
      return;
    }
    free(mem);
  }
}

}  // namespace rrpc
