#include "rpc/rdma/block_pool.h"

#include <cstdlib>

namespace rrpc::rdma {

Result<std::unique_ptr<RegisteredBlockPool>> RegisteredBlockPool::Create(ProtectionDomain* pd,
                                                                         uint32_t count,
                                                                         uint32_t block_size) {
  if (count == 0 || block_size == 0) return Status::InvalidArgument("empty block pool");
  void* mem = nullptr;
  if (posix_memalign(&mem, 4096, size_t{count} * block_size) != 0) {
    return Status::RuntimeError("out of memory for an RDMA block pool");
  }
  std::unique_ptr<RegisteredBlockPool> pool(
      new RegisteredBlockPool(static_cast<uint8_t*>(mem), count, block_size));
  RRPC_ASSIGN_OR_RETURN(pool->mr_, pd->RegisterMemory(mem, size_t{count} * block_size));
  return pool;
}

RegisteredBlockPool::RegisteredBlockPool(uint8_t* base, uint32_t count, uint32_t block_size)
    : base_(base), count_(count), block_size_(block_size) {
  free_.reserve(count);
  for (uint32_t i = count; i > 0; --i) free_.push_back(i - 1);
}

RegisteredBlockPool::~RegisteredBlockPool() {
  mr_.reset();  // deregister before freeing
  free(base_);
}

bool RegisteredBlockPool::Take(uint32_t* index) {
  if (free_.empty()) return false;
  *index = free_.back();
  free_.pop_back();
  return true;
}

void RegisteredBlockPool::Return(uint32_t index) { free_.push_back(index); }

}  // namespace rrpc::rdma
