// RegisteredBlockPool: `count` blocks of `block_size` bytes in one allocation registered once
// with the device, handed out by index. A connection keeps two (DESIGN.md, RDMA): its receive
// blocks, all posted, and its send blocks, taken per message and returned when the send
// completes. Sharing one pool can deadlock (receives can't be posted, so no grants return, so
// send blocks never free); separate pools can't.
// One owner thread (the connection's reactor); not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "rpc/rdma/verbs.h"

namespace rrpc::rdma {

class RegisteredBlockPool {
 public:
  static Result<std::unique_ptr<RegisteredBlockPool>> Create(ProtectionDomain* pd, uint32_t count,
                                                             uint32_t block_size);
  ~RegisteredBlockPool();

  uint32_t count() const { return count_; }
  uint32_t block_size() const { return block_size_; }
  uint32_t free_blocks() const { return static_cast<uint32_t>(free_.size()); }
  uint8_t* block(uint32_t index) const { return base_ + size_t{index} * block_size_; }
  uint32_t lkey() const { return mr_->lkey(); }
  Sge sge(uint32_t index, uint32_t length) const {
    return Sge{reinterpret_cast<uint64_t>(block(index)), length, lkey()};
  }

  // A free block's index; false when none is free.
  bool Take(uint32_t* index);
  void Return(uint32_t index);

 private:
  RegisteredBlockPool(uint8_t* base, uint32_t count, uint32_t block_size);

  uint8_t* const base_;  // owned (aligned allocation)
  const uint32_t count_;
  const uint32_t block_size_;
  std::unique_ptr<MemoryRegion> mr_;
  std::vector<uint32_t> free_;
};

}  // namespace rrpc::rdma
