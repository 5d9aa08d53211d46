// OutboundTransfer: the bytes of one frame waiting in a connection's write queue: a head block
// (length prefix, header, body) and sidecars sent from where they are, without copying. Both a
// client's request (OutboundCall) and a server's response (InboundCall) are transfers.
// Reactor thread only, once queued.
#pragma once

#include <sys/uio.h>

#include <limits>
#include <utility>
#include <vector>

#include "rrpc/util/block.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class OutboundTransfer {
 public:
  virtual ~OutboundTransfer() = default;

  // The reactor calls exactly one of these when the transfer leaves the write queue: every byte
  // written, or the connection failed (or the transfer was cancelled before its first byte).
  // Either may delete `this`.
  virtual void TransferDone() = 0;
  virtual void TransferAborted(const Status& status) = 0;

  // True when nothing of it has been written and it need not be: the writer drops it (calling
  // TransferAborted) instead of sending it.
  virtual bool cancelled() const { return false; }

  size_t total_bytes() const { return total_bytes_; }
  size_t bytes_written() const { return bytes_written_; }
  bool started() const { return bytes_written_ > 0; }
  bool finished() const { return bytes_written_ == total_bytes_; }

  // Appends iovecs for the unwritten bytes, at most `max`; returns how many were added. With
  // `blocks`, blocks[k] is set to the Block holding iov[k]'s bytes, nullptr for borrowed bytes
  // (a transport that reads them after Write returns takes a reference: RDMA zero copy).
  int FillIovecs(iovec* iov, int max, Block** blocks = nullptr) const {
    // Inline for the common frame, a head and no sidecars (a small call or response).
    if (!sidecars_.empty() || max < 1) return FillIovecsWithSidecars(iov, max, blocks);
    const Slice& s = head_.slice;
    if (bytes_written_ >= s.size()) return 0;
    iov[0].iov_base = const_cast<uint8_t*>(s.data() + bytes_written_);
    iov[0].iov_len = s.size() - bytes_written_;
    if (blocks != nullptr) blocks[0] = head_.block.get();
    return 1;
  }
  // Records `n` more bytes written; returns the bytes of `n` this transfer did not need.
  size_t Advance(size_t n);

 protected:
  // Sets the bytes to send; the transfer keeps references to their blocks.
  void SetPayload(BlockSlice head, std::vector<BlockSlice> sidecars);
  // The same for a frame without sidecars (most small calls), inline: no vector passed and freed.
  void SetPayload(BlockSlice head) {
    head_ = std::move(head);
    sidecars_.clear();
    total_bytes_ = head_.slice.size();
    bytes_written_ = 0;
  }
  void ClearPayload() {
    head_.block.reset();
    head_.slice = Slice();
    sidecars_.clear();
  }
  // Copies the unwritten borrowed sidecars (those without a block) into blocks of their own, so
  // the rest of the frame can still be written after the owner of the borrowed bytes has let
  // them go. Fully written sidecars are left alone: only their sizes are read again.
  void CopyUnsentBorrowedSidecars();

 private:
  friend class TransferQueue;
  int FillIovecsWithSidecars(iovec* iov, int max, Block** blocks) const;
  OutboundTransfer* next_in_queue_ = nullptr;  // TransferQueue's link
  BlockSlice head_;
  std::vector<BlockSlice> sidecars_;
  size_t total_bytes_ = 0;
  size_t bytes_written_ = 0;
};

// A FIFO of transfers linked through the transfers themselves: two pointers when empty (an idle
// connection pays for nothing more) and no allocation per queued frame.
class TransferQueue {
 public:
  bool empty() const { return head_ == nullptr; }
  OutboundTransfer* front() const { return head_; }
  void push_back(OutboundTransfer* t) {
    t->next_in_queue_ = nullptr;
    if (tail_ == nullptr) {
      head_ = tail_ = t;
    } else {
      tail_->next_in_queue_ = t;
      tail_ = t;
    }
  }
  OutboundTransfer* pop_front() {
    OutboundTransfer* t = head_;
    head_ = t->next_in_queue_;
    if (head_ == nullptr) tail_ = nullptr;
    t->next_in_queue_ = nullptr;
    return t;
  }
  static OutboundTransfer* next(const OutboundTransfer* t) { return t->next_in_queue_; }
  // Fills `iov` with the unwritten bytes of the transfers from the front, stopping before a
  // cancelled one, when `max` iovecs are used or at `max_bytes` (the last iovec shortened;
  // kNoByteLimit: no limit); returns how many it filled. `blocks`, when given, gets the Block of
  // each iovec (OutboundTransfer::FillIovecs).
  static constexpr size_t kNoByteLimit = std::numeric_limits<size_t>::max();
  int GatherIovecs(iovec* iov, int max, size_t max_bytes, Block** blocks = nullptr) const {
    int n = 0;
    for (OutboundTransfer* t = head_; t != nullptr && n < max; t = t->next_in_queue_) {
      if (t->cancelled()) break;
      n += t->FillIovecs(iov + n, max - n, blocks == nullptr ? nullptr : blocks + n);
    }
    if (max_bytes == kNoByteLimit) return n;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
      if (iov[i].iov_len >= max_bytes - total) {
        iov[i].iov_len = max_bytes - total;
        return i + 1;
      }
      total += iov[i].iov_len;
    }
    return n;
  }

  // Moves every transfer of `other` to the back of this queue, in order.
  void Append(TransferQueue other) {
    if (other.head_ == nullptr) return;
    if (tail_ == nullptr) {
      head_ = other.head_;
    } else {
      tail_->next_in_queue_ = other.head_;
    }
    tail_ = other.tail_;
  }

  // Takes every transfer, leaving this queue empty.
  TransferQueue TakeAll() {
    TransferQueue out;
    std::swap(out.head_, head_);
    std::swap(out.tail_, tail_);
    return out;
  }

 private:
  OutboundTransfer* head_ = nullptr;
  OutboundTransfer* tail_ = nullptr;
};

// Connection-level bytes (preamble, negotiation) that nobody waits on; deletes itself when done.
class BytesTransfer final : public OutboundTransfer {
 public:
  explicit BytesTransfer(BlockSlice bytes) { SetPayload(std::move(bytes), {}); }
  void TransferDone() override { delete this; }
  void TransferAborted(const Status&) override { delete this; }
};

}  // namespace rrpc::rpc
