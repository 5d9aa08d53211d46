#include "rpc/transport/frame_reader.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "rpc/transport/frame_format.h"

namespace rrpc::rpc {

FrameReader::FrameReader(size_t max_frame_size, size_t read_block_size)
    : max_frame_size_(max_frame_size), read_block_size_(read_block_size) {}

uint8_t* FrameReader::writable_data() {
  if (tail_size_ > 0) FoldTail();  // bytes read after the block come before any read now
  if (!block_) {
    // After a large frame, room for only the next length prefix: NextFrame() then gives the frame
    // a block of its size before any of its bytes is read (Relocate moves only the prefix).
    block_ = large_frames_ ? Block::Allocate(guessed_total_ + kFrameLengthSize) : FreshReadBlock();
    start_ = end_ = frame_end_ = 0;
  } else if (end_ == block_->capacity()) {
    // Usually consumed frames sit at the block's front and sliding the rest over makes room. A
    // block full from its first byte (Seed() filled it, no NextFrame() since) must grow instead.
    Relocate(start_ > 0 ? read_block_size_ : block_->capacity() + read_block_size_);
  }
  return block_->data() + end_;
}

BlockRef FrameReader::FreshReadBlock() {
  Block* spare = frame_reader_internal::tls_spare_block;
  // One reference (the spare's own) means every frame read into it is gone: no thread reads its
  // bytes any more (their last Release happened before this acquire load), so it is ours to
  // overwrite. The spare keeps its reference; the reader adds one.
  if (spare != nullptr && spare->capacity() == read_block_size_ && spare->HasOneRef()) {
    return BlockRef(spare);
  }
  return Block::Allocate(read_block_size_);
}

void FrameReader::ReplaceSpare(Block* block) {
  Block*& spare = frame_reader_internal::tls_spare_block;
  block->AddRef();
  if (spare != nullptr) spare->Release();  // freed now, or by its frames' last holder
  spare = block;
}

void FrameReader::RecycleReadBlocksOnThisThread() {
  frame_reader_internal::tls_recycles_read_blocks = true;
}

void FrameReader::StopRecyclingReadBlocksOnThisThread() {
  frame_reader_internal::tls_recycles_read_blocks = false;
  Block*& spare = frame_reader_internal::tls_spare_block;
  if (spare != nullptr) spare->Release();
  spare = nullptr;
}

size_t FrameReader::writable_size() const {
  return block_ ? block_->capacity() - end_ : read_block_size_;
}

void FrameReader::CommitIntoTail(size_t n) {
  const size_t room = block_->capacity() - end_;
  DCHECK_EQ(frame_end_, block_->capacity());
  DCHECK_EQ(tail_size_, 0u);
  DCHECK_LE(n - room, sizeof(tail_));
  tail_size_ = n - room;
  end_ += room;
}

Result<bool> FrameReader::NextFrameSlow(BlockSlice* frame) {
  size_t available = end_ - start_;
  if (available == 0 && tail_size_ > 0) {
    // The frame that filled the block is taken: the tail is the next frame's start.
    FoldTail();
    available = end_ - start_;
  }
  if (available < kFrameLengthSize) {
    if (available == 0) block_.reset();  // idle: hold nothing
    frame_end_ = 0;
    return false;
  }
  const uint32_t length = DecodeBigEndian32(block_->data() + start_);
  if (length == 0) return Status::Corruption("frame of length 0");
  if (length > max_frame_size_) {
    return Status::InvalidArgument("frame of " + std::to_string(length) +
                                   " bytes exceeds the maximum of " +
                                   std::to_string(max_frame_size_));
  }
  const size_t total = kFrameLengthSize + length;
  if (available < total) {
    // Make sure the whole frame fits from its start, so the next reads complete it in place.
    if (start_ + total > block_->capacity()) Relocate(total);
    frame_end_ = start_ + total;
    return false;
  }
  NoteFrameSize(total);
  TakeFrame(length, frame);
  return true;
}

void FrameReader::NoteLargeFrameSize(size_t total) {
  large_frames_ = true;
  guessed_total_ = total == last_large_total_ ? total : 0;
  last_large_total_ = total;
}

bool FrameReader::NextRaw(size_t n, Slice* out) {
  if (tail_size_ > 0) FoldTail();
  if (end_ - start_ < n) return false;
  *out = Slice(block_->data() + start_, n);
  start_ += n;
  return true;
}

std::string FrameReader::TakeBuffered() {
  if (tail_size_ > 0) FoldTail();
  std::string out;
  if (block_) out.assign(reinterpret_cast<const char*>(block_->data() + start_), end_ - start_);
  block_.reset();
  start_ = end_ = frame_end_ = 0;
  return out;
}

void FrameReader::Seed(Slice bytes) {
  if (bytes.empty()) return;
  if (tail_size_ > 0) FoldTail();
  // Room for all of them at once. They may be more than a read block (a detached stream can hand
  // over several frames), and they are already held in memory, so this adds no new exposure.
  if (!block_) {
    block_ = Block::Allocate(std::max(read_block_size_, bytes.size()));
    start_ = end_ = frame_end_ = 0;
  } else if (block_->capacity() - end_ < bytes.size()) {
    Relocate(end_ - start_ + bytes.size());
  }
  memcpy(block_->data() + end_, bytes.data(), bytes.size());
  CountCopy(copy_side_, CopyKind::kStream, bytes.size());
  end_ += bytes.size();
}

void FrameReader::Relocate(size_t needed) {
  const size_t pending = end_ - start_;
  const size_t capacity = std::max(needed, read_block_size_);
  // Frame bytes moved (the length prefix is not counted: it is rewritten, not payload).
  if (pending > kFrameLengthSize) {
    CountCopy(copy_side_, CopyKind::kStream, pending - kFrameLengthSize);
  }
  if (block_->HasOneRef() && block_->capacity() >= capacity) {
    // Nobody else reads this block: slide the partial frame to its front.
    memmove(block_->data(), block_->data() + start_, pending);
  } else {
    BlockRef fresh = Block::Allocate(capacity);
    memcpy(fresh->data(), block_->data() + start_, pending);
    block_ = std::move(fresh);
  }
  if (frame_end_ != 0) frame_end_ -= start_;
  start_ = 0;
  end_ = pending;
}

void FrameReader::FoldTail() {
  if (block_ && end_ > start_) {
    // The block still holds bytes nobody took (a frame not yet asked for, or a preamble): the
    // tail goes after them. Not the bulk path, where the frame before the tail is taken first.
    if (block_->capacity() - end_ < tail_size_) Relocate(end_ - start_ + tail_size_);
  } else {
    // Every byte of the block is taken: start the next one from the prefix. A whole, valid prefix
    // sizes it as NextFrame() would (a large frame's own size, else a read block); a bad one is
    // refused by NextFrame() from this small block, and a partial one waits for its rest here.
    size_t capacity = kFrameLengthSize;
    if (tail_size_ == kFrameLengthSize) {
      const uint32_t length = DecodeBigEndian32(tail_);
      if (length > 0 && length <= max_frame_size_) {
        capacity = std::max(kFrameLengthSize + length, read_block_size_);
      }
    }
    block_ = Block::Allocate(capacity);
    start_ = end_ = frame_end_ = 0;
  }
  // The length prefix only (not payload): not counted as a copy.
  memcpy(block_->data() + end_, tail_, tail_size_);
  end_ += tail_size_;
  tail_size_ = 0;
}

}  // namespace rrpc::rpc
