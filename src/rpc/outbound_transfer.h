// OutboundTransfer: the bytes of one frame waiting in a connection's write queue: a head block
// (length prefix, header, body) and sidecars sent from where they are, without copying. Both a
// client's request (OutboundCall) and a server's response (InboundCall) are transfers.
// Reactor thread only, once queued.
#pragma once

#include <sys/uio.h>

#include <vector>

#include "util/block.h"
#include "util/status.h"

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

  // Appends iovecs for the unwritten bytes, at most `max`; returns how many were added.
  int FillIovecs(iovec* iov, int max) const;
  // Records `n` more bytes written; returns the bytes of `n` this transfer did not need.
  size_t Advance(size_t n);

 protected:
  // Sets the bytes to send; the transfer keeps references to their blocks.
  void SetPayload(BlockSlice head, std::vector<BlockSlice> sidecars);
  void ClearPayload();

 private:
  BlockSlice head_;
  std::vector<BlockSlice> sidecars_;
  size_t total_bytes_ = 0;
  size_t bytes_written_ = 0;
};

// Connection-level bytes (preamble, negotiation) that nobody waits on; deletes itself when done.
class BytesTransfer final : public OutboundTransfer {
 public:
  explicit BytesTransfer(BlockSlice bytes) { SetPayload(std::move(bytes), {}); }
  void TransferDone() override { delete this; }
  void TransferAborted(const Status&) override { delete this; }
};

}  // namespace rrpc::rpc
