// Reads by a synchronous caller (connection.h, read_owner_; docs/architecture.md, "The
// synchronous call path"). After the reactor delivered a caller's response and nothing else
// waits on the connection, it parks its reads (MaybeParkReads); the next caller that writes its
// call on the parked connection takes the reads (TrySendCallFromCaller) and reads its response
// itself (ReadResponseAsCaller), so the kernel wakes it from its own blocking recv() as raw TCP's
// client is woken, instead of the reactor waking it. Anything that is not exactly its
// response goes back to the reactor with the read side, and the connection goes on as if the
// reactor had read it. write_mu_ guards the hand-overs, as it guards caller_call_: a call is
// finished by whoever takes it from caller_call_ under that lock, so still exactly once.
#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger_options.h"
#include "util/one_shot_event.h"

namespace rrpc::rpc {

void Connection::MaybeParkReads() {
  DCHECK(reactor_->IsCurrentThread());
  // Only when this caller's call was all the connection had: a response the reactor waits for
  // (an asynchronous call, a call still being connected) needs the reactor's reads; bytes
  // already buffered are read by the reactor (parking them would leave them to the next caller
  // only to be handed back).
  if (!options_.sync_call_caller_reads || state_ != State::kOpen ||
      read_owner_.load(std::memory_order_relaxed) != ReadOwner::kReactor ||
      !awaiting_response_.empty() || !pending_calls_.empty() || transport_->buffered_bytes() != 0) {
    return;
  }
  if (!transport_->ParkReads()) return;  // the transport keeps its reads (TLS, RDMA, wrappers)
  read_owner_.store(ReadOwner::kParked, std::memory_order_relaxed);
  parked_at_ = last_activity_;  // the response's arrival, just now: no clock read
}

void Connection::EnsureReactorReads() {
  DCHECK(reactor_->IsCurrentThread());
  // Only the reactor leaves kReactor, so this unlocked look is exact when it says kReactor.
  if (read_owner_.load(std::memory_order_relaxed) == ReadOwner::kReactor) return;
  bool resume = false;
  {
    MutexLock lock(write_mu_);
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
  if (resume) transport_->ResumeReads(/*read_now=*/false);
}

void Connection::ResumeReadsFromCaller(BlockSlice* frame) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed) return;
  scoped_refptr<Connection> self(this);
  if (frame != nullptr) {
    OnFrame(std::move(*frame));
    if (state_ == State::kClosed) return;
  }
  {
    // The frame may have been a caller's response after all that parked the reads again (and a
    // caller may own them by now): then there is nothing to resume. Only this thread leaves
    // kReactor, so the answer holds after unlocking.
    MutexLock lock(write_mu_);
    if (read_owner_.load(std::memory_order_relaxed) != ReadOwner::kReactor) return;
  }
  transport_->ResumeReads(/*read_now=*/true);
}

void Connection::ResumeReadsAndWait(MonoTime deadline) {
  // The task reads what came (a close shuts this connection down, so the call about to be queued
  // finds a fresh one); `read` is set when the task has run or was dropped by a reactor shutting
  // down, whichever, since the task's last copy notifies it on destruction.
  auto read = std::make_shared<OneShotEvent>();
  std::shared_ptr<void> notify(nullptr, [read](void*) { read->Notify(); });
  scoped_refptr<Connection> self(this);
  reactor_->RunOnReactor([self, notify] { self->ResumeReadsFromCaller(nullptr); });
  notify.reset();
  read->WaitUntil(deadline);
}

bool Connection::ParkedStreamQuiet(MonoTime now) {
  // Right after the last response (a thread calling in a loop), a close or stray bytes are about
  // as likely to come between this look and the write as before it: skip the system call. A
  // close that does slip in fails this call as a network error, as one racing the look would.
  const MonoDelta check_after = options_.sync_peer_check_after;
  if (check_after > MonoDelta() && now - parked_at_ < check_after) return true;
  return transport_->PeerQuietWhileParked();
}

void Connection::ReadResponseAsCaller(const scoped_refptr<OutboundCall>& call) {
  scoped_refptr<Connection> self(this);
  BlockSlice frame;
  size_t bytes = 0;
  // This thread owns the read side (read_owner_ kCaller): the reactor does not read, and closes
  // the socket only through CloseUnderCaller, which leaves the descriptor valid (and ends a
  // blocked recv()).
  Result<bool> got = false;
  bool timed_out = false;
  while (true) {
    size_t got_bytes = 0;
    got = transport_->ReadFrameWhileParked(call->deadline(), &frame, &got_bytes);
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
    MutexLock lock(write_mu_);
    if (reactor_wants_reads_) break;
  }
  const MonoTime now = MonoTime::Now();
  if (bytes > 0) {
    caller_bytes_received_.fetch_add(bytes, std::memory_order_relaxed);
    caller_read_at_ns_.store(now.ToNanoseconds(), std::memory_order_relaxed);
    if (MessengerMetrics* m = reactor_->metrics()) m->received_bytes->IncrementBy(bytes);
  }
  const bool have_frame = got.ok() && *got;
  thread_local ResponseHeaderFields header;  // decoding clears it; its vector keeps capacity
  Slice body, tail;
  const bool mine = have_frame && ParseFrame(frame.slice, &header, &body, &tail).ok() &&
                    header.call_id == call->call_id();
  scoped_refptr<OutboundCall> finish;  // taken from caller_call_: this thread finishes it
  bool hand_back = false;
  {
    MutexLock lock(write_mu_);
    DCHECK(read_owner_.load(std::memory_order_relaxed) == ReadOwner::kCaller);
    if ((mine || timed_out) && caller_call_ == call) {
      finish = std::move(caller_call_);
      caller_call_ = nullptr;
    }
    if (write_closed_) {
      // Shut down meanwhile (the call is failed there): nothing more to read.
      read_owner_.store(ReadOwner::kReactor, std::memory_order_relaxed);
    } else if ((mine || timed_out) && !reactor_wants_reads_ && transport_->buffered_bytes() == 0) {
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
    reactor_->RunOnReactor([self, give, frame = give ? frame : BlockSlice()]() mutable {
      self->ResumeReadsFromCaller(give ? &frame : nullptr);
    });
  }
  if (finish == nullptr) return;  // the reactor has it, or finished it (failure, shutdown)
  if (mine) {
    if (MessengerMetrics* m = reactor_->metrics()) m->sync_responses_read_by_caller->Increment();
    finish->FinishWithResponse(std::move(frame), header, body, tail, now);
  } else {
    finish->FinishTimedOut();
  }
}

}  // namespace rrpc::rpc
