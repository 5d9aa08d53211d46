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
  tail_after_ = 0;
  if (tail_size_ > 0) FoldTail();  // bytes read after the block come before any read now
  if (!block_) {
    start_ = end_ = frame_end_ = 0;
    if (!large_frames_) {
      block_ = FreshReadBlock();
    } else if (guessed_total_ == 0) {
      // After a large frame, room for only the next length prefix: NextFrame() then gives the
      // frame a block of its size before any of its bytes is read (Relocate moves only the
      // prefix).
      block_ = Block::Allocate(kFrameLengthSize);
    } else {
      // The frame at its guessed size, read up to there and the next prefix (ReadSpace).
      block_ = BlockForFrame(guessed_total_);
      frame_end_ = guessed_total_;
    }
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
  Block::KeepLargeBlocksOnThisThread();  // large frames' blocks, reused at their size
}

void FrameReader::StopRecyclingReadBlocksOnThisThread() {
  frame_reader_internal::tls_recycles_read_blocks = false;
  Block::StopKeepingLargeBlocksOnThisThread();
  Block*& spare = frame_reader_internal::tls_spare_block;
  if (spare != nullptr) spare->Release();
  spare = nullptr;
}

size_t FrameReader::writable_size() const { return block_ ? read_end() - end_ : read_block_size_; }

BlockRef FrameReader::BlockForFrame(size_t total) {
  if (total <= read_block_size_) return Block::Allocate(read_block_size_);
  constexpr size_t kPage = 4096;
  return Block::Allocate((total + kSizeSlack + kPage - 1) / kPage * kPage);
}

void FrameReader::CommitIntoTail(size_t n) {
  const size_t room = tail_after_ - end_;
  DCHECK_EQ(tail_size_, 0u);
  DCHECK_LE(n - room, sizeof(tail_));
  tail_size_ = n - room;
  end_ += room;
}

Result<bool> FrameReader::NextFrameSlow(BlockSlice* frame) {
  // Bytes a scatter read put after the frame's (known or guessed) end: the next frame's start
  // once the frame is taken, or the frame's own next bytes when it is larger than guessed.
  if (tail_size_ > 0) FoldTail();
  const size_t available = end_ - start_;
  if (available < kFrameLengthSize) {
    if (available == 0) block_.reset();  // idle: hold nothing
    frame_end_ = 0;  // unknown: a guess is dropped, so no low watermark waits on it
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
    // Make sure the whole frame fits from its start, so the next reads complete it in place
    // (a block read at a guessed size has room for a slightly larger frame).
    if (start_ + total > block_->capacity()) Relocate(total, /*frame_sized=*/true);
    frame_end_ = start_ + total;
    return false;
  }
  NoteFrameSize(total);
  TakeFrame(length, frame);
  return true;
}

void FrameReader::NoteLargeFrameSize(size_t total) {
  large_frames_ = true;
  const size_t last = last_large_total_;
  const bool close = last != 0 && (total > last ? total - last : last - total) <= kSizeSlack;
  guessed_total_ = close ? std::min(total, last) : 0;
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

void FrameReader::Relocate(size_t needed, bool frame_sized) {
  const size_t pending = end_ - start_;
  // Frame bytes moved (the length prefix is not counted: it is rewritten, not payload).
  if (pending > kFrameLengthSize) {
    CountCopy(copy_side_, CopyKind::kStream, pending - kFrameLengthSize);
  }
  if (block_->HasOneRef() && block_->capacity() >= std::max(needed, read_block_size_)) {
    // Nobody else reads this block: slide the partial frame to its front.
    memmove(block_->data(), block_->data() + start_, pending);
  } else {
    BlockRef fresh =
        frame_sized ? BlockForFrame(needed) : Block::Allocate(std::max(needed, read_block_size_));
    memcpy(fresh->data(), block_->data() + start_, pending);
    block_ = std::move(fresh);
  }
  if (frame_end_ != 0) frame_end_ -= start_;
  start_ = 0;
  end_ = pending;
}

void FrameReader::FoldTail() {
  if (block_ && end_ > start_) {
    // The block still holds bytes nobody took (a frame larger than guessed, a frame not yet
    // asked for, a preamble): the tail goes after them, in a block with room for the whole
    // frame when its prefix says how large it is.
    if (block_->capacity() - end_ < tail_size_) {
      size_t needed = end_ - start_ + tail_size_;
      bool frame_sized = false;
      if (end_ - start_ >= kFrameLengthSize) {
        const uint32_t length = DecodeBigEndian32(block_->data() + start_);
        if (length <= max_frame_size_ && kFrameLengthSize + length >= needed) {
          needed = kFrameLengthSize + length;
          frame_sized = true;
        }
      }
      Relocate(needed, frame_sized);
    }
  } else {
    // Every byte of the block is taken: start the next one from the prefix. A whole, valid prefix
    // sizes it as NextFrame() would (a large frame's own size, else a read block); a bad one is
    // refused by NextFrame() from this small block, and a partial one waits for its rest here.
    block_.reset();
    if (tail_size_ == kFrameLengthSize) {
      const uint32_t length = DecodeBigEndian32(tail_);
      if (length > 0 && length <= max_frame_size_)
        block_ = BlockForFrame(kFrameLengthSize + length);
    }
    if (!block_) block_ = Block::Allocate(kFrameLengthSize);
    start_ = end_ = frame_end_ = 0;
  }
  // The length prefix only (not payload): not counted as a copy.
  memcpy(block_->data() + end_, tail_, tail_size_);
  end_ += tail_size_;
  tail_size_ = 0;
}

}  // namespace rrpc::rpc
