#include "util/block.h"

#include <cstdlib>
#include <new>

namespace rrpc {

BlockRef Block::Allocate(size_t capacity) {
  void* mem = malloc(sizeof(Block) + capacity);
  if (mem == nullptr) throw std::bad_alloc();
  return BlockRef(new (mem) Block(capacity));
}

void Block::Release() const {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    this->~Block();
    free(const_cast<Block*>(this));
  }
}

}  // namespace rrpc
