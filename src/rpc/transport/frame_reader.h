// FrameReader: cuts a connection's incoming byte stream into frames without copying them. The
// connection reads socket bytes into writable_space(); each complete frame comes out of
// NextFrame() as a BlockSlice sharing the read block, so a call holds its bytes by reference.
// An idle connection holds no block at all (memory per idle connection matters with 10,000s of
// them): the block is dropped once every byte in it is consumed.
//
// The length prefix is checked against the maximum before any byte of the frame is buffered
// beyond the read block, so an oversized frame is refused without allocating for it.
//
// Large frames (above the read block size) are read into a block of exactly their size. Once a
// connection has seen one, it reads only a length prefix whenever it starts a frame afresh, and
// sizes the frame's block from it: the frame's bytes then go from the socket straight to where
// the handler reads them, instead of their first read block being copied over (a bulk stream of
// 1 MiB frames would otherwise copy up to 64 KiB of each). A small frame after that costs one
// more recv(), and the reader goes back to full-block reads.
//
// Bulk streams mostly repeat one size (blocks of a file, chunks of a transfer; a varint in the
// header may differ). Once the last two large frames' sizes were within kSizeSlack of each other,
// a frame started afresh is read straight into a block of the smaller size (with the prefix after
// it, below) instead: one read per frame where the prefix read made two, with no byte moved while
// the guess holds. A
// large frame's block has kSizeSlack bytes of room past the frame, so a frame a little larger
// than guessed still completes in place; a smaller one leaves the next frame's first bytes to be
// moved (at most the guessed frame's, counted as stream copies), and a size further off stops the
// guessing until two sizes are close again, so alternating sizes are never guessed. The guessed
// block is no more exposure than a prefix claiming that size: it is allocated as bytes arrive, and
// the connection's inbound memory budget counts the bytes read.
//
// Reads into a large frame's block stop where the frame ends, so a read that fills the room asked
// for could not tell a drained socket from a full one without another recv() (EAGAIN, once per
// large frame). ReadSpace() offers a scatter read instead: the rest of the frame, then room for
// the next frame's length prefix only (4 bytes kept in the reader, never payload). One readv()
// then completes the frame, learns the next one's size, and comes back short when the socket is
// drained.
// Owned and used by one connection on its reactor thread; not thread-safe.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "rpc/transport/frame_format.h"
#include "rrpc/util/block.h"
#include "rrpc/util/copy_counter.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

namespace frame_reader_internal {
// A reactor thread's spare read block (FrameReader::RecycleReadBlocksOnThisThread): one reference
// owned, or null. Trivially destructible thread_locals, so the inline paths reach them without a
// TLS wrapper call.
inline thread_local Block* tls_spare_block = nullptr;
inline thread_local bool tls_recycles_read_blocks = false;
}  // namespace frame_reader_internal

class FrameReader {
 public:
  // `read_block_size`: bytes read per recv when no frame is pending (frames larger than this get
  // a block of their own size).
  FrameReader(size_t max_frame_size, size_t read_block_size);

  // From now until StopRecyclingReadBlocksOnThisThread(), readers on this thread (a reactor's)
  // keep the last read block a frame took whole as the thread's spare, and read into it again
  // once every frame in it has been released, instead of allocating a block per read: a lone
  // small frame per read (the echo case) takes its block with it to the call, and the block's
  // allocation and last release through the block pool would be paid per read. One spare per
  // thread, of the readers' read block size: memory per reactor, not per connection. Large frames'
  // blocks whose last reference drops on this thread are kept for reuse at their size too
  // (Block::KeepLargeBlocksOnThisThread).
  static void RecycleReadBlocksOnThisThread();
  // Drops this thread's spare and the large blocks it keeps (before the thread ends).
  static void StopRecyclingReadBlocksOnThisThread();

  // Which side's copy counter (util/copy_counter.h) the bytes this reader moves count on.
  void set_copy_side(CopySide side) { copy_side_ = side; }

  // Room to read into (never empty). Call Commit() with the bytes actually read.
  uint8_t* writable_data();
  // The room writable_data() made. REQUIRES: writable_data() called first (until it has made
  // room, a block full up to a partial frame reports 0).
  size_t writable_size() const;
  // The scatter-read form of the two above: fills `iov` with the room to read into and returns
  // how many entries it used. The second, when there is one, is the next frame's length prefix
  // (see the class comment). Commit() then takes the bytes read across all of them.
  int ReadSpace(iovec iov[2]) {
    iov[0].iov_base = writable_data();
    const size_t stop = read_end();
    iov[0].iov_len = stop - end_;
    if (stop != frame_end_) return 1;
    // The reads stop where the pending frame ends: the next prefix too, nothing more.
    iov[1].iov_base = tail_;
    iov[1].iov_len = sizeof(tail_);
    tail_after_ = stop;
    return 2;
  }
  void Commit(size_t n) {
    if (tail_after_ != 0 && n > tail_after_ - end_) {
      CommitIntoTail(n);
    } else {
      end_ += n;
    }
  }

  // Yields the next complete frame (the bytes after its length prefix) in `frame`. Returns false
  // when more bytes are needed, or a Corruption/InvalidArgument status when the stream is bad
  // (zero or oversized length): the connection must then close.
  //
  // Inline for the common case, a whole valid frame buffered (taken with a few instructions and
  // no Status or Result built), and every byte taken; everything else (a partial
  // frame, the prefix after the block, a bad length) goes to NextFrameSlow.
  Result<bool> NextFrame(BlockSlice* frame) {
    const size_t available = end_ - start_;
    if (available >= kFrameLengthSize) {
      const uint32_t length = DecodeBigEndian32(block_->data() + start_);
      const size_t total = kFrameLengthSize + size_t{length};
      if (length != 0 && length <= max_frame_size_ && total <= available) {
        NoteFrameSize(total);
        TakeFrame(length, frame);
        return true;
      }
    } else if (available == 0 && tail_size_ == 0) {
      block_.reset();  // every byte taken: an idle connection holds no block
      frame_end_ = 0;
      return false;
    }
    return NextFrameSlow(frame);
  }

  // Takes the next `n` bytes unframed (a connection preamble) into `out`, valid until the next
  // call on this reader. False, taking nothing, while fewer than `n` are buffered.
  bool NextRaw(size_t n, Slice* out);
  // Bytes received but not yet returned as frames.
  size_t buffered() const { return end_ - start_ + tail_size_; }
  // Bytes still to come of the partial frame whose length is known (0 when none is pending, or
  // when its length prefix is not read yet: a guessed size is no promise of bytes to come).
  size_t missing_frame_bytes() const {
    return frame_end_ > end_ && end_ - start_ >= kFrameLengthSize ? frame_end_ - end_ : 0;
  }
  // Takes every byte received and not yet returned (for handing the stream to another
  // transport); the reader is empty afterwards.
  std::string TakeBuffered();
  // Adds bytes received elsewhere (by the transport this stream was detached from) as if read.
  void Seed(Slice bytes);

 private:
  // NextFrame() for every case but a whole valid frame buffered.
  Result<bool> NextFrameSlow(BlockSlice* frame);
  // Where reads into the block stop: the end of a pending large frame (known, or guessed for a
  // block read afresh), whose block has room past it (BlockForFrame), so the next frame starts in
  // a block of its own instead of being moved out of this one; else the block's end.
  size_t read_end() const {
    return frame_end_ > end_ && frame_end_ > read_block_size_ ? frame_end_ : block_->capacity();
  }
  // Records a frame's size (length prefix included) for sizing the next read: a small one sends
  // the reader back to full-block reads, a large one to reading the next frame at its guessed
  // size (see the class comment).
  void NoteFrameSize(size_t total) {
    if (total <= read_block_size_) {
      large_frames_ = false;
    } else {
      NoteLargeFrameSize(total);
    }
  }
  void NoteLargeFrameSize(size_t total);
  // Hands out the whole frame of `length` bytes buffered at start_, and moves past it.
  void TakeFrame(uint32_t length, BlockSlice* frame) {
    frame_end_ = 0;
    frame->slice = Slice(block_->data() + start_ + kFrameLengthSize, length);
    start_ += kFrameLengthSize + size_t{length};
    if (start_ == end_ && tail_size_ == 0) {
      // The block's last bytes: the frame takes the reader's reference instead of adding one,
      // which the reader would drop at the next call anyway (an idle connection holds no block).
      // Saves an atomic increment and decrement per frame read alone.
      frame->block = std::move(block_);
      KeepAsSpare(frame->block.get());
    } else {
      frame->block = block_;
    }
  }
  // A read block handed out whole becomes this thread's spare (when it recycles blocks). The
  // usual case, the spare itself coming back out, costs a compare.
  void KeepAsSpare(Block* block) {
    if (block == frame_reader_internal::tls_spare_block ||
        !frame_reader_internal::tls_recycles_read_blocks || block->capacity() != read_block_size_) {
      return;
    }
    ReplaceSpare(block);
  }
  static void ReplaceSpare(Block* block);
  // A read block to read into afresh: the thread's spare when every frame in it has been
  // released, else a new one.
  BlockRef FreshReadBlock();
  // Moves the pending partial frame into a block with room for `needed` bytes from its start:
  // the frame's own (BlockForFrame) when `needed` is its size.
  void Relocate(size_t needed, bool frame_sized = false);
  // A block for a frame of `total` bytes (length prefix included): a read block, or for a large
  // frame a block with room for kSizeSlack more bytes, rounded up to whole pages, so that frames
  // whose sizes differ by a few bytes (a varint in a header) fit blocks of one capacity: the
  // guessed read of the next frame still completes it in place, and Block keeps blocks for reuse
  // by capacity (Block::KeepLargeBlocksOnThisThread).
  BlockRef BlockForFrame(size_t total);
  static constexpr size_t kSizeSlack = 256;
  // Commit() of a scatter read that ran past the block into the tail.
  void CommitIntoTail(size_t n);
  // Moves the bytes a scatter read put after the block (the next frame's prefix, or part of it)
  // into the block, or into a fresh one sized from the prefix once the block is all consumed.
  void FoldTail();

  const size_t max_frame_size_;
  const size_t read_block_size_;
  CopySide copy_side_ = CopySide::kServer;
  // The last frame was larger than a read block: read the next one's length prefix first, or
  // the whole of it at its guessed size.
  bool large_frames_ = false;
  // The size (length prefix included) of the last large frame, and the one the next frame is
  // guessed to have: the smaller of the last two large frames' sizes when they differ by at most
  // kSizeSlack, else 0 (no guess).
  size_t last_large_total_ = 0;
  size_t guessed_total_ = 0;
  BlockRef block_;
  size_t start_ = 0;  // first unconsumed byte
  size_t end_ = 0;    // one past the last received byte
  // Where the partial frame at start_ ends in the block, once NextFrame() has read its length,
  // or where a frame read afresh at its guessed size is guessed to end; 0 when unknown. A scatter
  // read stops there and offers the tail when the frame is large or ends with the block.
  size_t frame_end_ = 0;
  // Where the last ReadSpace() put the tail (its first region's end); 0: no tail offered.
  size_t tail_after_ = 0;
  // Bytes logically after end_ that a scatter read put here: at most a length prefix.
  uint8_t tail_[kFrameLengthSize];
  size_t tail_size_ = 0;
};

}  // namespace rrpc::rpc
