#include "rpc/core/connection_writer.h"

#include <algorithm>

#include "rpc/core/connection.h"
#include "rpc/core/connection_writer_inl.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

void ConnectionWriter::Stage(OutboundTransfer* transfer) {
  DCHECK(conn_->reactor_->IsCurrentThread());
  const bool first = staged_.empty();
  staged_.push_back(transfer);
  unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                          std::memory_order_relaxed);
  // While the transport is full, OnWritable() flushes (and takes what is staged).
  if (first && !write_armed_) conn_->reactor_->ScheduleFlush(conn_);
  conn_->ApplyBackpressure();
}

void ConnectionWriter::QueueNow(OutboundTransfer* transfer) {
  DCHECK(conn_->reactor_->IsCurrentThread());
  bool was_empty;
  {
    MutexLock lock(mu_);
    was_empty = queue_.empty() && staged_.empty();
    // A recent time, without a clock read.
    if (was_empty) last_write_progress_ = conn_->last_activity_;
    queue_.Append(staged_.TakeAll());
    queue_.push_back(transfer);
    unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                            std::memory_order_relaxed);
  }
  if (was_empty && !write_armed_) conn_->reactor_->ScheduleFlush(conn_);
  conn_->ApplyBackpressure();
}

bool ConnectionWriter::TryWriteLoneResponse(InboundCall* call) {
  // Until the call is written or queued, its reference keeps the connection alive; once queued
  // (or deleted once written), the call may take that reference with it, so a reference of our
  // own is taken, under the lock, only when this thread must still reach the connection after
  // it (to ask the reactor for a flush): a whole response written at once needs none.
  scoped_refptr<Connection> self;
  bool queued = false;
  {
    MutexLock lock(mu_);
    if (!MayWriteAloneLocked()) return false;
    bool transport_holds = false;
    if (WriteAloneLocked(call, &transport_holds)) {
      if (transport_holds) self = conn_;
    } else {
      // The transport took part of it, or none, or failed: the reactor writes the rest (asking
      // the transport to report writability) or meets the error and closes the connection.
      VLOG(2) << "lone response to " << conn_->remote_.ToString() << ": " << call->bytes_written()
              << " of " << call->total_bytes()
              << " bytes written by the worker, the reactor writes the rest";
      // Held until written: a client that does not read holds it (InboundCall::Respond holds
      // only what goes to the reactor; a response written whole here is never counted).
      call->HoldMemory(call->total_bytes());
      self = conn_;
      queued = true;  // from here on the reactor may delete the call
    }
  }
  if (!queued) {
    const bool flush = static_cast<bool>(self);
    // Deletes the call; the connection (and this writer) may go with it unless `self` holds it.
    call->TransferDoneRightAfterResponse();
    if (flush) self->reactor()->RunOnReactor([self] { self->Flush(); });
    return true;
  }
  self->reactor()->RunOnReactor([self] { self->Flush(); });
  return true;
}

void ConnectionWriter::Flush() {
  DCHECK(conn_->reactor_->IsCurrentThread());
  const Connection::State state = conn_->state_;
  if (state == Connection::State::kClosed || state == Connection::State::kConnecting) return;
  scoped_refptr<Connection> self(conn_);
  // Transfers that left the queue, finished after unlocking: their callbacks may queue more.
  TransferQueue written, dropped;
  Status error;
  bool wait_writable = false;
  // While other connections of the reactor are busy, this turn's share (WriteTurns); the rest
  // goes in the next turn, as after a short write.
  size_t budget = conn_->reactor_->write_turns().BudgetBytes();
  {
    MutexLock lock(mu_);
    Transport* const transport = conn_->transport_.get();
    if (!staged_.empty()) {
      if (queue_.empty()) last_write_progress_ = conn_->last_activity_;  // as QueueNow
      queue_.Append(staged_.TakeAll());
    }
    while (!queue_.empty()) {
      // Drop finished calls that never started out: nobody waits for them any more.
      OutboundTransfer* front = queue_.front();
      if (front->cancelled()) {
        queue_.pop_front();
        unsent_bytes_.fetch_sub(front->total_bytes(), std::memory_order_relaxed);
        dropped.push_back(front);
        continue;
      }
      if (budget == 0) {
        wait_writable = true;
        break;
      }
      Result<size_t> w = transport->Write(queue_, budget);
      if (!w.ok()) {
        error = w.status().CloneAndPrepend("write to " + conn_->remote_.ToString());
        break;
      }
      if (*w == 0) {
        wait_writable = true;
        break;
      }
      if (budget != TransferQueue::kNoByteLimit) budget -= std::min(budget, *w);
      bytes_sent_.fetch_add(*w, std::memory_order_relaxed);
      unsent_bytes_.fetch_sub(*w, std::memory_order_relaxed);
      if (MessengerMetrics* m = conn_->reactor_->metrics()) m->sent_bytes->IncrementBy(*w);
      size_t left = *w;
      while (left > 0) {
        OutboundTransfer* t = queue_.front();
        left = t->Advance(left);
        if (!t->finished()) break;
        written.push_back(queue_.pop_front());
      }
    }
    // Bytes the transport took but could not send yet: wait for writability as after a short
    // write, even with nothing queued.
    if (error.ok() && !wait_writable && transport->HoldsUnsentBytes()) wait_writable = true;
  }
  while (!dropped.empty()) {
    dropped.pop_front()->TransferAborted(Status::Aborted("call finished before it was sent"));
  }
  while (!written.empty()) written.pop_front()->TransferDone();
  if (!error.ok()) {
    conn_->Shutdown(error);
    return;
  }
  NotifyWhenWritable(wait_writable);
  conn_->ApplyBackpressure();
}

void ConnectionWriter::FlushEarly() {
  // Writes wait for the end of the loop iteration, to go out together, but a large one gains
  // nothing from company and loses the time its peer could spend on it while this loop reads
  // on: in a read loop of large frames answered inline, each answer would leave only after the
  // last read, and the peers would take turns instead of working at once. On transports whose
  // writes may overlap their reads (TCP); a frame whose callbacks closed the connection flushes
  // nothing.
  if (write_armed_ || !conn_->caps_.concurrent_write) return;
  Flush();
}

void ConnectionWriter::NotifyWhenWritable(bool on) {
  DCHECK(conn_->reactor_->IsCurrentThread());
  if (on == write_armed_) return;
  write_armed_ = on;
  conn_->transport_->NotifyWhenWritable(on);
}

void ConnectionWriter::OnWritable() {
  DCHECK(conn_->reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(conn_);
  write_armed_ = false;
  const uint64_t sent_before = bytes_sent();
  Flush();
  if (bytes_sent() != sent_before) {
    // Only here after a full transport: the clock read is rare.
    MutexLock lock(mu_);
    last_write_progress_ = MonoTime::Now();
  }
}

TransferQueue ConnectionWriter::Close() {
  DCHECK(conn_->reactor_->IsCurrentThread());
  write_armed_ = false;
  MutexLock lock(mu_);
  closed_ = true;
  TransferQueue unsent = queue_.TakeAll();
  unsent.Append(staged_.TakeAll());
  unsent_bytes_.store(0, std::memory_order_relaxed);
  return unsent;
}

bool ConnectionWriter::QueueEmpty() {
  MutexLock lock(mu_);
  return queue_.empty();
}

bool ConnectionWriter::IsStalledSince(MonoTime since) {
  MutexLock lock(mu_);
  return !queue_.empty() && last_write_progress_ < since;
}

}  // namespace rrpc::rpc
