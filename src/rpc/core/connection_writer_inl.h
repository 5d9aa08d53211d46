// The definitions of ConnectionWriter's lone write (connection_writer.h), inline because they are
// the per-call path of both lone writers: a worker's response (connection_writer.cc) and a
// synchronous caller's call (caller_reads.cc). Included by those two files only: it needs the
// whole Connection and Reactor.
#pragma once

#include "rpc/core/connection.h"
#include "rpc/core/connection_writer.h"
#include "rpc/core/reactor.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

inline bool ConnectionWriter::MayWriteAloneLocked() const {
  return !closed_ && queue_.empty() && conn_->caps_.concurrent_write;
}

[[gnu::always_inline]] inline bool ConnectionWriter::WriteAloneLocked(OutboundTransfer* transfer,
                                                                      bool* transport_holds) {
  queue_.push_back(transfer);
  Transport* const transport = conn_->transport_.get();
  Result<size_t> written = transport->Write(queue_, TransferQueue::kNoByteLimit);
  const size_t w = written.ok() ? *written : 0;
  if (w > 0) {
    transfer->Advance(w);
    bytes_sent_.fetch_add(w, std::memory_order_relaxed);
    if (MessengerMetrics* m = conn_->reactor_->metrics()) m->sent_bytes->IncrementBy(w);
  }
  if (transfer->finished()) {
    queue_.pop_front();
    // A transport that kept part of it (TLS: a record the socket did not take) needs the
    // reactor to finish it.
    *transport_holds = transport->HoldsUnsentBytes();
    return true;
  }
  unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                          std::memory_order_relaxed);
  last_write_progress_ = MonoTime::Now();
  return false;
}

}  // namespace rrpc::rpc
