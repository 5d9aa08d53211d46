// Block: a reference-counted heap buffer, the unit of zero copy. A reactor reads socket bytes
// into a Block and hands each complete frame on as a BlockSlice that shares it, so a request
// body and its sidecars are never copied between the socket and the handler.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rrpc/util/ref_counted.h"
#include "rrpc/util/slice.h"

namespace rrpc {

class Block;
using BlockRef = scoped_refptr<Block>;

// Takes back a Block placed in memory it owns (Block::Place) when its last reference goes, on
// whichever thread drops it (e.g. an RDMA receive pool, which reposts the buffer).
class BlockRecycler {
 public:
  virtual void Recycle(Block* block) = 0;

 protected:
  ~BlockRecycler() = default;
};

// Something that lives exactly as long as one heap Block (e.g. an RDMA registration of its
// memory, so that a block sent many times is registered once): destroyed by the block's last
// Release, on whichever thread drops it, before the memory is freed or reused.
class BlockAttachment {
 public:
  virtual ~BlockAttachment() = default;
};

class Block {
 public:
  // One allocation holds the header and `capacity` bytes.
  static BlockRef Allocate(size_t capacity);

  // From now until StopKeepingLargeBlocksOnThisThread(), large heap blocks (above 64 KiB, up to
  // kMaxKeptLargeBlockCapacity) whose last reference drops on this thread are kept for reuse by
  // Allocate() on this thread at exactly their capacity, at most kMaxKeptLargeBlocks of them
  // and kMaxKeptLargeBytes in all (the oldest go back to the heap). A reactor reading a stream
  // of equal large frames (1 MiB blocks of a transfer) then reads each into memory it already
  // touched, and one serializing a stream's 64 KiB messages (an on-ready writer: a window's worth
  // of frames alive at once) writes each into memory it already touched: a fresh malloc'd block
  // is new pages to the kernel, faulted in one by one by the copy into it, because the allocator
  // hands freed memory at the top of its heap back (a TLB flush on every core).
  static constexpr size_t kMaxKeptLargeBlockCapacity = (4 << 20) + (64 << 10);
  static constexpr int kMaxKeptLargeBlocks = 32;
  static constexpr size_t kMaxKeptLargeBytes = 4 * kMaxKeptLargeBlockCapacity;
  static void KeepLargeBlocksOnThisThread();
  // Frees the blocks kept (before the thread ends).
  static void StopKeepingLargeBlocksOnThisThread();
  // The large blocks this thread keeps now (for tests).
  static int LargeBlocksKeptOnThisThread();
  // A Block at `mem` (sizeof(Block) + capacity bytes owned by `recycler`): its last Release()
  // hands it to recycler->Recycle() instead of freeing it; the recycler may lend it again with
  // BlockRef(block).
  static Block* Place(void* mem, size_t capacity, BlockRecycler* recycler);

  uint8_t* data() { return reinterpret_cast<uint8_t*>(this + 1); }
  const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(this + 1); }
  size_t capacity() const { return capacity_; }
  // Who takes the block back (Place), nullptr for a heap block (Allocate).
  const BlockRecycler* recycler() const { return recycler_; }

  // The block's attachment, nullptr when none (any thread).
  BlockAttachment* attachment() const { return attachment_.load(std::memory_order_acquire); }
  // Gives `a` to this heap block unless it already has an attachment (another thread may race
  // to attach). Returns the attachment the block has now: `a`, or the one that won, in which
  // case `a` is deleted. A placed block takes none (returns nullptr, deletes `a`).
  BlockAttachment* Attach(BlockAttachment* a);

  void AddRef() const { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Release() const;
  bool HasOneRef() const { return refs_.load(std::memory_order_acquire) == 1; }

 private:
  Block(size_t capacity, BlockRecycler* recycler) : capacity_(capacity), recycler_(recycler) {}
  const size_t capacity_;
  mutable std::atomic<int32_t> refs_{0};
  BlockRecycler* const recycler_;  // nullptr: heap memory, freed (or cached) on the last Release
  mutable std::atomic<BlockAttachment*> attachment_{nullptr};  // owned; heap blocks only
};

// Bytes inside a Block, keeping the Block alive.
struct BlockSlice {
  BlockRef block;
  Slice slice;
};

}  // namespace rrpc
