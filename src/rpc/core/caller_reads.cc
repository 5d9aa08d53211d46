#include "rpc/core/caller_reads.h"

#include "rpc/core/connection.h"
#include "rpc/core/connection_writer_inl.h"
#include "rpc/core/reactor.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger_options.h"
#include "util/one_shot_event.h"

namespace rrpc::rpc {

// ---- The caller's thread.

CallerSend CallerReads::TrySend(const scoped_refptr<OutboundCall>& call) {
  scoped_refptr<Connection> self(conn_);
  bool done = false;
  bool transport_holds_bytes = false;
  bool caller_reads = false;
  bool resume_reads = false;  // the reads were parked but this caller will not read
  bool sent = false;
  OutboundCall* raw = call.get();
  {
    MutexLock lock(writer_->mu());
    // Not before the connection sends calls (the preamble must go first), nor once it is closed.
    if (!callers_may_write_ || caller_call_ || !writer_->MayWriteAloneLocked()) {
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
      raw->set_owner(conn_);
      raw->set_reactor(conn_->reactor());  // where a cancel goes
      raw->AddRef();  // the write queue's reference, dropped in TransferDone/TransferAborted
      // Part of it, none, or an error: the reactor writes the rest or meets the error.
      done = writer_->WriteAloneLocked(raw, &transport_holds_bytes);
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
    conn_->reactor()->RunOnReactor([self, flush, resume_reads] {
      if (resume_reads) self->caller_reads_.ResumeReadsFromCaller(nullptr);
      if (flush) self->Flush();
    });
  }
  return caller_reads ? CallerSend::kSentCallerReads : CallerSend::kSent;
}

bool CallerReads::ParkedStreamQuiet(MonoTime now) {
  // Right after the last response (a thread calling in a loop), a close or stray bytes are about
  // as likely to come between this look and the write as before it: skip the system call. A
  // close that does slip in fails this call as a network error, as one racing the look would.
  const MonoDelta check_after = conn_->options_.sync_peer_check_after;
  if (check_after > MonoDelta() && now - parked_at_ < check_after) return true;
  return conn_->transport_->PeerQuietWhileParked();
}

void CallerReads::ResumeReadsAndWait(MonoTime deadline) {
  // The task reads what came (a close shuts the connection down, so the call about to be queued
  // finds a fresh one); `read` is set when the task has run or was dropped by a reactor shutting
  // down, whichever, since the task's last copy notifies it on destruction.
  auto read = std::make_shared<OneShotEvent>();
  std::shared_ptr<void> notify(nullptr, [read](void*) { read->Notify(); });
  scoped_refptr<Connection> self(conn_);
  conn_->reactor()->RunOnReactor(
      [self, notify] { self->caller_reads_.ResumeReadsFromCaller(nullptr); });
  notify.reset();
  read->WaitUntil(deadline);
}

void CallerReads::ReadResponse(const scoped_refptr<OutboundCall>& call) {
  scoped_refptr<Connection> self(conn_);
  Transport* const transport = conn_->transport_.get();
  BlockSlice frame;
  size_t bytes = 0;
  // This thread owns the read side (read_owner_ kCaller): the reactor does not read, and closes
  // the socket only through CloseUnderCaller, which leaves the descriptor valid (and ends a
  // blocked recv()).
  Result<bool> got = false;
  bool timed_out = false;
  while (true) {
    size_t got_bytes = 0;
    got = transport->ReadFrameWhileParked(call->deadline(), &frame, &got_bytes);
    bytes += got_bytes;
    if (!got.ok() || *got) break;
    // The wait ended without a frame: the deadline, or one bounded wait (a call without a
    // deadline wakes at least every second).
    if (MonoTime::Now() >= call->deadline()) {
      timed_out = true;
      break;
    }
    // A reactor that needs the reads (a call it must read was queued meanwhile) gets them now,
    // not only once a byte comes; it then reads this call's response too.
    MutexLock lock(writer_->mu());
    if (reactor_wants_reads_) break;
  }
  const MonoTime now = MonoTime::Now();
  if (bytes > 0) {
    bytes_received_.fetch_add(bytes, std::memory_order_relaxed);
    read_at_ns_.store(now.ToNanoseconds(), std::memory_order_relaxed);
    if (MessengerMetrics* m = conn_->reactor()->metrics()) m->received_bytes->IncrementBy(bytes);
  }
  const bool have_frame = got.ok() && *got;
  thread_local ResponseHeaderFields header;  // decoding clears it; its vector keeps capacity
  Slice body, tail;
  const bool mine = have_frame && ParseFrame(frame.slice, &header, &body, &tail).ok() &&
                    header.call_id == call->call_id();
  scoped_refptr<OutboundCall> finish;  // taken from caller_call_: this thread finishes it
  bool hand_back = false;
  {
    MutexLock lock(writer_->mu());
    DCHECK(read_owner_.load(std::memory_order_relaxed) == ReadOwner::kCaller);
    if ((mine || timed_out) && caller_call_ == call) {
      finish = std::move(caller_call_);
      caller_call_ = nullptr;
    }
    if (writer_->closed_locked()) {
      // Shut down meanwhile (the call is failed there): nothing more to read.
      read_owner_.store(ReadOwner::kReactor, std::memory_order_relaxed);
    } else if ((mine || timed_out) && !reactor_wants_reads_ && transport->buffered_bytes() == 0) {
      // Nothing else came and nothing else waits: the reads stay parked for the next caller.
      read_owner_.store(ReadOwner::kParked, std::memory_order_relaxed);
      parked_at_ = now;
    } else {
      // Another frame (a late response, an asynchronous call's, a connection error), a bad
      // frame, the stream's end, or a reactor that needs the reads: all back to the reactor.
      read_owner_.store(ReadOwner::kReactor, std::memory_order_relaxed);
      reactor_wants_reads_ = false;
      hand_back = true;
    }
  }
  if (hand_back) {
    // The frame this thread took (not its response) goes first; what is buffered and what the
    // socket holds follow, read by the reactor as if it had never stopped.
    const bool give = have_frame && !mine;
    conn_->reactor()->RunOnReactor([self, give, frame = give ? frame : BlockSlice()]() mutable {
      self->caller_reads_.ResumeReadsFromCaller(give ? &frame : nullptr);
    });
  }
  if (finish == nullptr) return;  // the reactor has it, or finished it (failure, shutdown)
  if (mine) {
    if (MessengerMetrics* m = conn_->reactor()->metrics()) {
      m->sync_responses_read_by_caller->Increment();
    }
    finish->FinishWithResponse(std::move(frame), header, body, tail, now);
  } else {
    finish->FinishTimedOut();
  }
}

void CallerReads::TimeOut(scoped_refptr<OutboundCall> call) {
  scoped_refptr<Connection> self(conn_);
  conn_->reactor()->RunOnReactor([self, call] {
    if (!self->caller_reads_.Take(call.get())) return;  // answered (or failed) first
    // As a timeout on the reactor: a half-written frame still goes out whole, from copies.
    if (call->started() && !call->OutboundTransfer::finished()) call->DetachUnsentPayload();
    self->SendCancelFrame(*call);
    call->FinishTimedOut();
  });
}

// ---- The reactor's thread.

void CallerReads::AllowWrites() {
  MutexLock lock(writer_->mu());
  callers_may_write_ = true;
}

scoped_refptr<OutboundCall> CallerReads::TakeAnswered(int32_t call_id) {
  DCHECK(conn_->reactor()->IsCurrentThread());
  scoped_refptr<OutboundCall> call;
  MutexLock lock(writer_->mu());
  if (caller_call_ != nullptr && caller_call_->call_id() == call_id) {
    call = std::move(caller_call_);
    caller_call_ = nullptr;
    MaybeParkReads();  // its next call's response: read by its caller
  }
  return call;
}

bool CallerReads::Take(const OutboundCall* call) {
  MutexLock lock(writer_->mu());
  if (caller_call_.get() != call) return false;
  caller_call_ = nullptr;
  return true;
}

bool CallerReads::HasCall() {
  MutexLock lock(writer_->mu());
  return caller_call_ != nullptr;
}

scoped_refptr<OutboundCall> CallerReads::TakeOnClose(bool* caller_reading) {
  DCHECK(conn_->reactor()->IsCurrentThread());
  MutexLock lock(writer_->mu());
  DCHECK(writer_->closed_locked());  // no caller takes the reads or writes from now on
  scoped_refptr<OutboundCall> call = std::move(caller_call_);
  caller_call_ = nullptr;
  *caller_reading = read_owner_.load(std::memory_order_relaxed) == ReadOwner::kCaller;
  return call;
}

void CallerReads::MaybeParkReads() {
  // Only when this caller's call was all the connection had: a response the reactor waits for
  // (an asynchronous call, a call still being connected) needs the reactor's reads; bytes
  // already buffered are read by the reactor (parking them would leave them to the next caller
  // only to be handed back).
  Transport* const transport = conn_->transport_.get();
  if (!conn_->options_.sync_call_caller_reads || conn_->state_ != Connection::State::kOpen ||
      read_owner_.load(std::memory_order_relaxed) != ReadOwner::kReactor ||
      !conn_->awaiting_response_.empty() || !conn_->pending_calls_.empty() ||
      transport->buffered_bytes() != 0) {
    return;
  }
  if (!transport->ParkReads()) return;  // the transport keeps its reads (TLS, RDMA, wrappers)
  read_owner_.store(ReadOwner::kParked, std::memory_order_relaxed);
  parked_at_ = conn_->last_activity_;  // the response's arrival, just now: no clock read
}

void CallerReads::EnsureReactorReads() {
  DCHECK(conn_->reactor()->IsCurrentThread());
  // Only the reactor leaves kReactor, so this unlocked look is exact when it says kReactor.
  if (read_owner_.load(std::memory_order_relaxed) == ReadOwner::kReactor) return;
  bool resume = false;
  {
    MutexLock lock(writer_->mu());
    switch (read_owner_.load(std::memory_order_relaxed)) {
      case ReadOwner::kReactor:
        break;
      case ReadOwner::kParked:
        read_owner_.store(ReadOwner::kReactor, std::memory_order_relaxed);
        resume = true;
        break;
      case ReadOwner::kCaller:
        reactor_wants_reads_ = true;  // the caller hands them back when it is done
        break;
    }
  }
  // Not read_now: this runs while a call is being queued; the loop reads in this iteration.
  if (resume) conn_->transport_->ResumeReads(/*read_now=*/false);
}

void CallerReads::ResumeReadsFromCaller(BlockSlice* frame) {
  DCHECK(conn_->reactor()->IsCurrentThread());
  if (conn_->state_ == Connection::State::kClosed) return;
  scoped_refptr<Connection> self(conn_);
  if (frame != nullptr) {
    conn_->OnFrame(std::move(*frame));
    if (conn_->state_ == Connection::State::kClosed) return;
  }
  {
    // The frame may have been a caller's response after all that parked the reads again (and a
    // caller may own them by now): then there is nothing to resume. Only this thread leaves
    // kReactor, so the answer holds after unlocking.
    MutexLock lock(writer_->mu());
    if (read_owner_.load(std::memory_order_relaxed) != ReadOwner::kReactor) return;
  }
  conn_->transport_->ResumeReads(/*read_now=*/true);
}

}  // namespace rrpc::rpc
