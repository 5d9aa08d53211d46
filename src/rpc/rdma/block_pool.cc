#include "rpc/rdma/block_pool.h"

#include <atomic>
#include <cstdlib>

#include "rrpc/util/mutex.h"

namespace rrpc::rdma {

// The pool's memory: `count` slots of a Block header and its bytes, and the list of lent blocks
// that came back. Freed by the last of the pool and the lent blocks.
class RegisteredBlockPool::Arena final : public BlockRecycler {
 public:
  Arena(uint8_t* base, uint32_t count, uint32_t block_size)
      : base_(base), slot_size_(SlotSize(block_size)) {
    for (uint32_t i = 0; i < count; ++i) Block::Place(header(i), block_size, this);
    MutexLock lock(mu_);
    returned_.reserve(count);  // Recycle never allocates
  }

  static size_t SlotSize(uint32_t block_size) {
    return (sizeof(Block) + block_size + 63) / 64 * 64;
  }
  Block* header(uint32_t index) const {
    return reinterpret_cast<Block*>(base_ + size_t{index} * slot_size_);
  }
  uint8_t* base() const { return base_; }

  BlockRef Lend(uint32_t index) {
    refs_.fetch_add(1, std::memory_order_relaxed);
    lent_.fetch_add(1, std::memory_order_relaxed);
    return BlockRef(header(index));
  }
  uint32_t lent() const { return lent_.load(std::memory_order_relaxed); }

  // Any thread: the last reference to a lent block went.
  void Recycle(Block* block) override {
    const auto index = static_cast<uint32_t>((reinterpret_cast<uint8_t*>(block) - base_) /
                                             static_cast<ptrdiff_t>(slot_size_));
    {
      MutexLock lock(mu_);
      returned_.push_back(index);
      has_returned_.store(true, std::memory_order_release);
    }
    lent_.fetch_sub(1, std::memory_order_relaxed);
    Unref();
  }

  // The owner thread: moves the blocks that came back to `free`.
  void TakeReturned(std::vector<uint32_t>* free) {
    if (!has_returned_.load(std::memory_order_acquire)) return;
    MutexLock lock(mu_);
    free->insert(free->end(), returned_.begin(), returned_.end());
    returned_.clear();
    has_returned_.store(false, std::memory_order_relaxed);
  }

  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 private:
  ~Arena() { free(base_); }

  uint8_t* const base_;  // owned
  const size_t slot_size_;
  std::atomic<uint32_t> refs_{1};
  std::atomic<uint32_t> lent_{0};
  std::atomic<bool> has_returned_{false};
  Mutex mu_;
  std::vector<uint32_t> returned_ RRPC_GUARDED_BY(mu_);
};

Result<std::unique_ptr<RegisteredBlockPool>> RegisteredBlockPool::Create(ProtectionDomain* pd,
                                                                         uint32_t count,
                                                                         uint32_t block_size) {
  if (count == 0 || block_size == 0) return Status::InvalidArgument("empty block pool");
  const size_t bytes = size_t{count} * Arena::SlotSize(block_size);
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, bytes) != 0) {
    return Status::RuntimeError("out of memory for an RDMA block pool");
  }
  std::unique_ptr<RegisteredBlockPool> pool(new RegisteredBlockPool(
      new Arena(static_cast<uint8_t*>(mem), count, block_size), count, block_size));
  RRPC_ASSIGN_OR_RETURN(pool->mr_, pd->RegisterMemory(mem, bytes));
  return pool;
}

RegisteredBlockPool::RegisteredBlockPool(Arena* arena, uint32_t count, uint32_t block_size)
    : arena_(arena), count_(count), block_size_(block_size) {
  free_.reserve(count);
  for (uint32_t i = count; i > 0; --i) free_.push_back(i - 1);
}

RegisteredBlockPool::~RegisteredBlockPool() {
  mr_.reset();  // deregister before the memory may go
  arena_->Unref();
}

uint8_t* RegisteredBlockPool::block(uint32_t index) const { return arena_->header(index)->data(); }

bool RegisteredBlockPool::Take(uint32_t* index) {
  if (free_.empty()) arena_->TakeReturned(&free_);
  if (free_.empty()) return false;
  *index = free_.back();
  free_.pop_back();
  return true;
}

void RegisteredBlockPool::Return(uint32_t index) { free_.push_back(index); }

BlockRef RegisteredBlockPool::Lend(uint32_t index) { return arena_->Lend(index); }

uint32_t RegisteredBlockPool::lent() const { return arena_->lent(); }

bool RegisteredBlockPool::Owns(const Block* block) const {
  return block->recycler() == static_cast<const BlockRecycler*>(arena_);
}

}  // namespace rrpc::rdma
