// ConnectionWriter: a connection's write side. Transfers (calls, responses, connection bytes) are
// queued in order and written to the transport in batches (one Transport::Write, a writev, per
// batch), at most the reactor's turn share per loop turn while other connections of the reactor
// are busy (WriteTurns); the transport is asked to report writability after a short write or when
// the turn's share is used, and the rest goes in the next turn.
//
// Threads: the reactor stages, queues and flushes; a worker (a lone response) or a synchronous
// caller (its own call; CallerReads) may write one frame itself, under mu_, when nothing else
// waits. mu_ guards the queue and the transport's Write(), so one thread writes at a time; it is
// never held while a transfer's TransferDone/TransferAborted runs (those may queue more work). It
// also guards what the connection hands over with a write (the transport's replacement,
// CallerReads' state).
//
// Ownership: a member of its Connection (conn_, which owns the transport it writes to). The
// queue owns the references its transfers represent until they finish.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "rpc/transport/outbound_transfer.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

class Connection;
class InboundCall;

class ConnectionWriter {
 public:
  explicit ConnectionWriter(Connection* conn) : conn_(conn) {}
  ConnectionWriter(const ConnectionWriter&) = delete;
  ConnectionWriter& operator=(const ConnectionWriter&) = delete;

  // Reactor thread: a call or response to write, staged (no lock) until the end of this loop
  // iteration's Flush(), which moves what is staged to the queue under one lock.
  void Stage(OutboundTransfer* transfer);
  // Reactor thread: connection bytes (preamble, negotiation, a fatal error frame) straight to the
  // queue, behind what is staged: nothing written later, by any thread, may pass them.
  void QueueNow(OutboundTransfer* transfer) RRPC_EXCLUDES(mu_);
  // Reactor thread: writes what is queued, as far as the transport takes it.
  void Flush() RRPC_EXCLUDES(mu_);
  // Reactor thread, after a frame was handled: flushes now when at least kEarlyFlushBytes wait
  // (FlushEarly says why). Inline: checked after every frame.
  void FlushEarlyIfLarge() {
    if (unsent_bytes_.load(std::memory_order_relaxed) >= kEarlyFlushBytes) FlushEarly();
  }
  // Reactor thread: the transport reported writability.
  void OnWritable() RRPC_EXCLUDES(mu_);
  // Reactor thread: the connection's transport was replaced (it reports nothing yet).
  void OnTransportReplaced() { write_armed_ = false; }
  // Reactor thread, from Connection::Shutdown: no thread writes to the transport any more; returns
  // what was queued or staged, for the caller to abort.
  TransferQueue Close() RRPC_EXCLUDES(mu_);

  // A worker thread, server side: Connection::TryWriteLoneResponse, once the call is known to be
  // the connection's only one in flight.
  bool TryWriteLoneResponse(InboundCall* call) RRPC_EXCLUDES(mu_);
  // A lone frame (a worker's response, a synchronous caller's call), the queue empty: queues
  // `transfer` and writes it as far as the transport takes it now, on the calling thread. True
  // when it went out whole (it is off the queue; *transport_holds tells whether the transport
  // kept part of it, e.g. a TLS record, for the reactor to finish); false when the reactor must
  // write the rest (counted in unsent_bytes; the transfer stays queued). Inline
  // (connection_writer_inl.h): the hot path of both lone writers.
  inline bool WriteAloneLocked(OutboundTransfer* transfer, bool* transport_holds)
      RRPC_REQUIRES(mu_);
  // Whether a thread other than the reactor may write now: not closed, nothing queued, and a
  // transport that allows writes from other threads. Inline (connection_writer_inl.h).
  inline bool MayWriteAloneLocked() const RRPC_REQUIRES(mu_);
  bool closed_locked() const RRPC_REQUIRES(mu_) { return closed_; }

  // Any thread.
  bool QueueEmpty() RRPC_EXCLUDES(mu_);
  // True when bytes wait to be written and none has gone out since `since`.
  bool IsStalledSince(MonoTime since) RRPC_EXCLUDES(mu_);
  // Reactor thread: nothing staged (the queue is asked with QueueEmpty()).
  bool nothing_staged() const { return staged_.empty(); }
  // Bytes queued or staged, not yet written; read without the lock (backpressure).
  size_t unsent_bytes() const { return unsent_bytes_.load(std::memory_order_relaxed); }
  uint64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }

  // The lock of the write side and of what is handed over with a write.
  Mutex& mu() RRPC_RETURN_CAPABILITY(mu_) { return mu_; }

 private:
  // Staged bytes from which a frame's handling flushes them at once (FlushEarlyIfLarge).
  static constexpr size_t kEarlyFlushBytes = 32 * 1024;

  void FlushEarly();
  void NotifyWhenWritable(bool on);

  Connection* const conn_;
  Mutex mu_;
  // Reactor thread: the transport reports writability (after a short write).
  bool write_armed_ = false;
  // Set by Close: no thread writes to the transport any more.
  bool closed_ RRPC_GUARDED_BY(mu_) = false;
  // Transfers to write, in order.
  TransferQueue queue_ RRPC_GUARDED_BY(mu_);
  // Reactor thread only: calls and responses the reactor queued in this loop iteration, not yet
  // in queue_ (Stage); Flush() appends them under the lock it takes anyway, so the reactor takes
  // mu_ once per batch instead of once more per frame. A worker's or caller's lone write may go
  // out before them: whole frames of independent calls, so only their order changes; connection
  // bytes never wait here (QueueNow).
  TransferQueue staged_;
  // Bytes of the queue (and staged) not yet written. Changed under mu_ (or, for staged bytes, by
  // the reactor); read without it for backpressure.
  std::atomic<size_t> unsent_bytes_{0};
  // When the queue last went from empty to non-empty or the transport last took bytes after
  // being full.
  MonoTime last_write_progress_ RRPC_GUARDED_BY(mu_);
  std::atomic<uint64_t> bytes_sent_{0};  // changed under mu_
};

}  // namespace rrpc::rpc
