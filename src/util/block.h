// Block: a reference-counted heap buffer, the unit of zero copy. A reactor reads socket bytes
// into a Block and hands each complete frame on as a BlockSlice that shares it, so a request
// body and its sidecars are never copied between the socket and the handler.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "util/ref_counted.h"
#include "util/slice.h"

namespace rrpc {

class Block;
using BlockRef = scoped_refptr<Block>;

class Block {
 public:
  // One allocation holds the header and `capacity` bytes.
  static BlockRef Allocate(size_t capacity);

  uint8_t* data() { return reinterpret_cast<uint8_t*>(this + 1); }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  size_t capacity() const { return capacity_; }

  void AddRef() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() const;
  bool HasOneRef() const { return refs_.load(std::memory_order_acquire) == 1; }

 private:
  explicit Block(size_t capacity) : capacity_(capacity) {}
  const size_t capacity_;
  mutable std::atomic<int32_t> refs_{0};
};

// Bytes inside a Block, keeping the Block alive.
struct BlockSlice {
  BlockRef block;
  Slice slice;
};

}  // namespace rrpc
