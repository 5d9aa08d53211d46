// RegisteredBlockPool: `count` blocks of `block_size` bytes in one allocation registered once
// with the device, handed out by index. A connection keeps two (DESIGN.md, RDMA): its receive
// blocks, all posted, and its send blocks, taken per message and returned when the send
// completes. Sharing one pool can deadlock (receives can't be posted, so no grants return, so
// send blocks never free); separate pools can't.
//
// Zero copy on receive: a block holding a received message can be lent out as a util Block
// (Lend), so the frames in it go up to the calls by reference. Each block's memory is laid out as
// a Block header followed by its `block_size` bytes; the last reference to a lent block, dropped
// on any thread, puts its index on a returned list (under a mutex) that Take() drains on the
// owner thread. The memory lives in an arena shared by the pool and its lent blocks: destroying
// the pool deregisters the memory at once (the device no longer touches it) and the arena is
// freed when the last lent block comes back, so a call may outlive its connection.
// One owner thread (the connection's reactor) for everything but the release of lent blocks;
// lent() may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rpc/rdma/verbs.h"
#include "rrpc/util/block.h"

namespace rrpc::rdma {

class RegisteredBlockPool {
 public:
  static Result<std::unique_ptr<RegisteredBlockPool>> Create(ProtectionDomain* pd, uint32_t count,
                                                             uint32_t block_size);
  ~RegisteredBlockPool();

  uint32_t count() const { return count_; }
  uint32_t block_size() const { return block_size_; }
  // Free on this thread's list (blocks lent and since returned are counted once Take sees them).
  uint32_t free_blocks() const { return static_cast<uint32_t>(free_.size()); }
  uint8_t* block(uint32_t index) const;
  uint32_t lkey() const { return mr_->lkey(); }
  Sge sge(uint32_t index, uint32_t length) const {
    return Sge{reinterpret_cast<uint64_t>(block(index)), length, lkey()};
  }

  // A free block's index (lent blocks that came back included); false when none is free.
  bool Take(uint32_t* index);
  void Return(uint32_t index);
  // Lends taken block `index` as a Block whose data() is block(index); it is free again (for
  // Take) once its last reference is gone. REQUIRES: `index` taken, not posted.
  BlockRef Lend(uint32_t index);
  // Blocks lent and not yet back.
  uint32_t lent() const;
  // Whether `block` is one of this pool's (lent) blocks: its bytes are registered under lkey().
  bool Owns(const Block* block) const;

 private:
  class Arena;
  RegisteredBlockPool(Arena* arena, uint32_t count, uint32_t block_size);

  Arena* const arena_;  // one reference held; the lent blocks hold one each
  const uint32_t count_;
  const uint32_t block_size_;
  std::unique_ptr<MemoryRegion> mr_;
  std::vector<uint32_t> free_;
};

}  // namespace rrpc::rdma
