// The connection's write side (connection.h): transfers queued in order and written by the
// reactor (Flush, after a short write when the transport reports writability), or by a worker or
// a synchronous caller that writes a lone frame itself. write_mu_ guards the queue and the
// transport's Write().
#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

void Connection::QueueResponse(InboundCall* call) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed) {
    call->TransferAborted(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  QueueTransfer(call);
}

void Connection::QueueTransfer(OutboundTransfer* transfer) {
  DCHECK(reactor_->IsCurrentThread());
  const bool first = staged_.empty();
  staged_.push_back(transfer);
  unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                          std::memory_order_relaxed);
  // While the transport is full, OnWritable() flushes (and takes what is staged).
  if (first && !write_armed_) reactor_->ScheduleFlush(this);
  ApplyBackpressure();
}

void Connection::QueueTransferNow(OutboundTransfer* transfer) {
  DCHECK(reactor_->IsCurrentThread());
  bool was_empty;
  {
    MutexLock lock(write_mu_);
    was_empty = write_queue_.empty() && staged_.empty();
    if (was_empty) last_write_progress_ = last_activity_;  // a recent time, without a clock read
    write_queue_.Append(staged_.TakeAll());
    write_queue_.push_back(transfer);
    unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                            std::memory_order_relaxed);
  }
  if (was_empty && !write_armed_) reactor_->ScheduleFlush(this);
  ApplyBackpressure();
}

// Inline: both of its callers are hot paths in this file.
[[gnu::always_inline]] inline bool Connection::WriteAloneLocked(OutboundTransfer* transfer,
                                                                bool* transport_holds) {
  write_queue_.push_back(transfer);
  Result<size_t> written = transport_->Write(write_queue_);
  const size_t w = written.ok() ? *written : 0;
  if (w > 0) {
    transfer->Advance(w);
    bytes_sent_.fetch_add(w, std::memory_order_relaxed);
    if (MessengerMetrics* m = reactor_->metrics()) m->sent_bytes->IncrementBy(w);
  }
  if (transfer->finished()) {
    write_queue_.pop_front();
    // A transport that kept part of it (TLS: a record the socket did not take) needs the
    // reactor to finish it.
    *transport_holds = transport_->HoldsUnsentBytes();
    return true;
  }
  unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                          std::memory_order_relaxed);
  last_write_progress_ = MonoTime::Now();
  return false;
}

bool Connection::TryWriteLoneResponse(InboundCall* call) {
  // Another call in flight means more responses are coming: let the reactor batch them.
  if (inbound_in_flight_.load(std::memory_order_relaxed) != 1) return false;
  // Until the call is written or queued, its reference keeps this connection alive; once queued
  // (or deleted once written), the call may take that reference with it, so a reference of our
  // own is taken, under the lock, only when this thread must still reach the connection after
  // it (to ask the reactor for a flush): a whole response written at once needs none (two
  // atomic read-modify-writes less per call).
  scoped_refptr<Connection> self;
  bool queued = false;
  {
    MutexLock lock(write_mu_);
    if (write_closed_ || !write_queue_.empty() || !caps_.concurrent_write) return false;
    bool transport_holds = false;
    if (WriteAloneLocked(call, &transport_holds)) {
      if (transport_holds) self = this;
    } else {
      // The transport took part of it, or none, or failed: the reactor writes the rest (asking
      // the transport to report writability) or meets the error and closes the connection.
      VLOG(2) << "lone response to " << remote_.ToString() << ": " << call->bytes_written()
              << " of " << call->total_bytes()
              << " bytes written by the worker, the reactor writes the rest";
      // Held until written: a client that does not read holds it (InboundCall::Respond holds
      // only what goes to the reactor; a response written whole here is never counted).
      call->HoldMemory(call->total_bytes());
      self = this;
      queued = true;  // from here on the reactor may delete the call
    }
  }
  if (!queued) {
    const bool flush = static_cast<bool>(self);
    // Deletes the call; `this` may go with it unless `self` holds it.
    call->TransferDoneRightAfterResponse();
    if (flush) self->reactor_->RunOnReactor([self] { self->Flush(); });
    return true;
  }
  reactor_->RunOnReactor([self] { self->Flush(); });
  return true;
}

Connection::CallerSend Connection::TrySendCallFromCaller(const scoped_refptr<OutboundCall>& call) {
  if (direction_ != Direction::kClient) return CallerSend::kNotSent;
  scoped_refptr<Connection> self(this);
  bool done = false;
  bool transport_holds_bytes = false;
  bool caller_reads = false;
  bool resume_reads = false;  // the reads were parked but this caller will not read
  bool sent = false;
  OutboundCall* raw = call.get();
  {
    MutexLock lock(write_mu_);
    // Not before the connection sends calls (the preamble must go first), nor once it is closed.
    if (!callers_may_write_ || write_closed_ || !caps_.concurrent_write || !write_queue_.empty() ||
        caller_call_) {
      return CallerSend::kNotSent;
    }
    const bool parked = read_owner_.load(std::memory_order_relaxed) == ReadOwner::kParked;
    if (parked && !ParkedStreamQuiet(raw->sent_at())) {
      // Bytes or a close came while nobody read: the reactor reads them first (a server that
      // closed meanwhile gives this call a fresh connection, not a failure).
      read_owner_.store(ReadOwner::kReactor, std::memory_order_relaxed);
      resume_reads = true;
    } else {
      sent = true;
      caller_call_ = call;  // the response handler finds it here
      raw->set_owner(this);
      raw->set_reactor(reactor_);  // where a cancel goes
      raw->AddRef();  // the write queue's reference, dropped in TransferDone/TransferAborted
      // Part of it, none, or an error: the reactor writes the rest or meets the error.
      done = WriteAloneLocked(raw, &transport_holds_bytes);
      if (parked) {
        // The reads stay with this caller only when its call is out whole: a call the reactor
        // must still finish writing is also read by the reactor (and may time out half written).
        caller_reads = done && !transport_holds_bytes;
        read_owner_.store(caller_reads ? ReadOwner::kCaller : ReadOwner::kReactor,
                          std::memory_order_relaxed);
        resume_reads = !caller_reads;
      }
    }
  }
  if (!sent) {
    ResumeReadsAndWait(call->deadline());
    return CallerSend::kNotSent;
  }
  if (done) raw->TransferDone();
  const bool flush = !done || transport_holds_bytes;
  if (flush || resume_reads) {
    reactor_->RunOnReactor([self, flush, resume_reads] {
      if (resume_reads) self->ResumeReadsFromCaller(nullptr);
      if (flush) self->Flush();
    });
  }
  return caller_reads ? CallerSend::kSentCallerReads : CallerSend::kSent;
}

void Connection::TimeOutCallerCall(scoped_refptr<OutboundCall> call) {
  scoped_refptr<Connection> self(this);
  reactor_->RunOnReactor([self, call] {
    {
      MutexLock lock(self->write_mu_);
      if (self->caller_call_ != call) return;  // answered (or failed) first
      self->caller_call_ = nullptr;
    }
    // As OnCallTimeout: a half-written frame still goes out whole, from copies.
    if (call->started() && !call->OutboundTransfer::finished()) call->DetachUnsentPayload();
    self->SendCancelFrame(*call);
    call->FinishTimedOut();
  });
}

void Connection::Flush() {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed || state_ == State::kConnecting) return;
  scoped_refptr<Connection> self(this);
  // Transfers that left the queue, finished after unlocking: their callbacks may queue more.
  TransferQueue written, dropped;
  Status error;
  bool transport_full = false;
  {
    MutexLock lock(write_mu_);
    if (!staged_.empty()) {
      if (write_queue_.empty()) last_write_progress_ = last_activity_;  // as QueueTransferNow
      write_queue_.Append(staged_.TakeAll());
    }
    while (!write_queue_.empty()) {
      // Drop finished calls that never started out: nobody waits for them any more.
      OutboundTransfer* front = write_queue_.front();
      if (front->cancelled()) {
        write_queue_.pop_front();
        unsent_bytes_.fetch_sub(front->total_bytes(), std::memory_order_relaxed);
        dropped.push_back(front);
        continue;
      }
      Result<size_t> w = transport_->Write(write_queue_);
      if (!w.ok()) {
        error = w.status().CloneAndPrepend("write to " + remote_.ToString());
        break;
      }
      if (*w == 0) {
        transport_full = true;
        break;
      }
      bytes_sent_.fetch_add(*w, std::memory_order_relaxed);
      unsent_bytes_.fetch_sub(*w, std::memory_order_relaxed);
      if (MessengerMetrics* m = reactor_->metrics()) m->sent_bytes->IncrementBy(*w);
      size_t left = *w;
      while (left > 0) {
        OutboundTransfer* t = write_queue_.front();
        left = t->Advance(left);
        if (!t->finished()) break;
        written.push_back(write_queue_.pop_front());
      }
    }
    // Bytes the transport took but could not send yet: wait for writability as after a short
    // write, even with nothing queued.
    if (error.ok() && !transport_full && transport_->HoldsUnsentBytes()) transport_full = true;
  }
  while (!dropped.empty()) {
    dropped.pop_front()->TransferAborted(Status::Aborted("call finished before it was sent"));
  }
  while (!written.empty()) written.pop_front()->TransferDone();
  if (!error.ok()) {
    Shutdown(error);
    return;
  }
  NotifyWhenWritable(transport_full);
  ApplyBackpressure();
}

void Connection::NotifyWhenWritable(bool on) {
  DCHECK(reactor_->IsCurrentThread());
  if (on == write_armed_) return;
  write_armed_ = on;
  transport_->NotifyWhenWritable(on);
}

void Connection::OnWritable() {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  write_armed_ = false;
  const uint64_t sent_before = bytes_sent();
  Flush();
  if (bytes_sent() != sent_before) {
    // Only here after a full transport: the clock read is rare.
    MutexLock lock(write_mu_);
    last_write_progress_ = MonoTime::Now();
  }
}

}  // namespace rrpc::rpc
