// Control frames over a connection (connection.h; docs/wire-format.md, "Control frames"): the
// client's pings on a silent connection with calls outstanding (MaybePing), and cancellation. The
// client finishes a cancelled call at once and, when the server negotiated CANCELLATION and the
// call's frame has started out, sends a cancel frame (ControlPB CANCEL, call id kControlCallId)
// behind it. The server tracks the calls of such a client by call id (a cancel slot, or
// cancellable_) from their arrival until they answer; a cancel flags the call: a worker skips a
// flagged call still queued (answering ERROR_CANCELLED, which the client discards), a running
// handler sees RpcContext::cancelled() and its OnCancel callback runs once.
#include <algorithm>
#include <cstdint>
#include <thread>

#include "rpc/core/connection.h"
#include "rpc/core/constants.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "util/spin_wait.h"

namespace rrpc::rpc {

namespace {
// The call whose cancel callback this thread runs (under the connection's cancel_mu_), so that
// the callback may answer the call: its untracking then must not take the lock again.
thread_local InboundCall* tls_cancelling = nullptr;
}  // namespace

// ---- Client side.

void Connection::CancelCall(OutboundCall* call) {
  DCHECK(reactor_->IsCurrentThread());
  DCHECK(direction_ == Direction::kClient);
  if (call->finished()) return;
  scoped_refptr<Connection> self(this);
  scoped_refptr<OutboundCall> keep(call);
  bool found = awaiting_response_.Erase(call->call_id());
  if (!found) {
    auto it = std::find_if(pending_calls_.begin(), pending_calls_.end(),
                           [call](const auto& c) { return c.get() == call; });
    if (it != pending_calls_.end()) {
      pending_calls_.erase(it);
      found = true;
    }
  }
  if (!found) {
    MutexLock lock(write_mu_);
    if (caller_call_ == call) {  // a synchronous caller's own write: whoever takes it finishes it
      caller_call_ = nullptr;
      found = true;
    }
  }
  if (!found) return;  // finished meanwhile by whoever held it
  // As a timeout: a half-written frame still goes out whole (from copies), then the cancel.
  if (call->started() && !call->OutboundTransfer::finished()) call->DetachUnsentPayload();
  SendCancelFrame(*call);
  call->FinishCancelled();
}

void Connection::SendCancelFrame(const OutboundCall& call) {
  DCHECK(reactor_->IsCurrentThread());
  // A call whose first byte never left is dropped from the write queue: the server never saw it.
  if (!call.started() || state_ == State::kClosed) return;
  if (state_ != State::kOpen) {
    // Sent behind the hello, cancelled before the server's reply came: whether the server takes
    // cancels is known once it does (SendHeldCancels).
    held_cancels_.push_back(call.call_id());
    return;
  }
  if (peer_cancels_) QueueCancelFrame(call.call_id());
}

void Connection::SendHeldCancels() {
  std::vector<int32_t> held;
  held.swap(held_cancels_);
  if (!peer_cancels_) return;
  for (int32_t id : held) QueueCancelFrame(id);
}

void Connection::MaybePing(MonoTime now) {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ != Direction::kClient || state_ != State::kOpen || !peer_cancels_ ||
      calls_in_flight() == 0 || options_.ping_after == MonoDelta::Max()) {
    return;
  }
  const MonoTime heard = last_activity();
  if (now - heard < options_.ping_after || last_ping_ > heard) return;  // one per silence
  last_ping_ = now;
  QueueControlFrame(ControlPB::PING, -1);
}

void Connection::QueueCancelFrame(int32_t call_id) {
  QueueControlFrame(ControlPB::CANCEL, call_id);
}

void Connection::QueueControlFrame(int kind, int32_t call_id) {
  RequestHeader header;
  header.set_call_id(kControlCallId);
  ControlPB control;
  control.set_kind(static_cast<ControlPB::Kind>(kind));
  if (call_id >= 0) control.add_call_ids(call_id);
  Result<BlockSlice> frame =
      SerializeFrameHead(header, control, 0, std::numeric_limits<uint32_t>::max());
  if (!frame.ok()) return;  // a few bytes: cannot exceed any limit
  QueueTransfer(new BytesTransfer(std::move(frame).value()));
}

// ---- Server side.

namespace {
// A cancel slot while the reactor flags its call: never a call's address.
InboundCall* const kSlotBusy = reinterpret_cast<InboundCall*>(uintptr_t{1});

// The answering thread: empties `slot` of `call`, waiting while the reactor flags it (a few
// instructions, unless the reactor is preempted there).
void EmptySlot(std::atomic<InboundCall*>* slot, InboundCall* call) {
  InboundCall* expected = call;
  for (int spins = 1; !slot->compare_exchange_weak(expected, nullptr, std::memory_order_acq_rel,
                                                   std::memory_order_relaxed);
       spins++) {
    DCHECK(expected == call || expected == kSlotBusy);
    expected = call;
    if (spins % 64 == 0) {
      std::this_thread::yield();
    } else {
      CpuRelax();
    }
  }
}
}  // namespace

void Connection::TrackForCancelInMap(InboundCall* call) {
  DCHECK(reactor_->IsCurrentThread());
  if (cancel_slots_ == nullptr) {  // the first call: it gets a slot
    cancel_slots_ = std::make_unique<CancelSlots<kNarrowCancelSlots>>();
    if (TrackForCancelInSlot(call)) return;
  }
  MutexLock lock(cancel_mu_);
  // A duplicate id in the map stays untracked.
  if (cancellable_.TryInsert(call->call_id(), call)) {
    call->set_cancel_track(InboundCall::CancelTrack::kMap);
  }
}

void Connection::UntrackForCancel(InboundCall* call) RRPC_NO_THREAD_SAFETY_ANALYSIS {
  if (call->cancel_track() == InboundCall::CancelTrack::kSlot) {
    EmptySlot(call->cancel_slot(), call);
    return;
  }
  if (tls_cancelling == call) {
    // Answered from its own cancel callback: this thread holds cancel_mu_ already, and the
    // callback (running) is dropped by the canceller once it returns.
    cancellable_.Erase(call->call_id());
    return;
  }
  std::function<void()> callback;  // destroyed after unlocking: it may hold anything
  {
    MutexLock lock(cancel_mu_);
    cancellable_.Erase(call->call_id());
    // Set only by a handler that asked (RpcContext::OnCancel): most calls have none to drop.
    if (call->cancel_callback()) callback.swap(call->cancel_callback());
  }
}

void Connection::SetCancelCallback(InboundCall* call, std::function<void()> callback) {
  if (!call->cancel_tracked()) return;  // the client cannot cancel it: it would never run
  {
    MutexLock lock(cancel_mu_);
    if (call->cancel_track() == InboundCall::CancelTrack::kSlot) {
      // A call with a callback lives in the map: the canceller runs it under cancel_mu_, which
      // keeps the call from answering meanwhile. Moved under the lock, so a cancel that misses
      // the slot finds the map entry.
      EmptySlot(call->cancel_slot(), call);
      const bool tracked = cancellable_.TryInsert(call->call_id(), call);
      call->set_cancel_track(tracked ? InboundCall::CancelTrack::kMap
                                     : InboundCall::CancelTrack::kNone);
      if (!tracked && !call->client_cancelled()) return;  // a forged duplicate id
    }
    if (!call->client_cancelled()) {
      call->cancel_callback() = std::move(callback);
      return;
    }
  }
  callback();  // cancelled already
}

Status Connection::HandleControlFrame(Slice body) {
  DCHECK(reactor_->IsCurrentThread());
  ControlPB control;
  if (!ParseMessageQuietly(body, &control)) {
    return Status::InvalidArgument("control frame does not parse");
  }
  if (control.kind() == ControlPB::PING) return Status::OK();  // its TCP acknowledgement is all
  if (control.kind() != ControlPB::CANCEL) {
    VLOG(1) << "control frame of unknown kind " << control.kind() << " from " << remote_.ToString();
    return Status::OK();
  }
  for (int32_t id : control.call_ids()) CancelInboundCall(id);
  return Status::OK();
}

void Connection::CancelInboundCall(int32_t call_id) {
  MessengerMetrics* m = reactor_->metrics();
  if (m != nullptr) m->cancel_requests->Increment();
  if (std::atomic<InboundCall*>* found = FindCancelSlot(call_id); found != nullptr) {
    std::atomic<InboundCall*>& slot = *found;
    InboundCall* call = slot.load(std::memory_order_acquire);
    if (call != nullptr &&
        slot.compare_exchange_strong(call, kSlotBusy, std::memory_order_acquire)) {
      // The call cannot answer (and go) until the slot holds it again.
      if (!call->client_cancelled()) {
        const bool running = call->MarkCancelled();
        if (running && m != nullptr) m->calls_cancelled_running->Increment();
      }
      slot.store(call, std::memory_order_release);
      return;
    }
  }
  MutexLock lock(cancel_mu_);
  InboundCall** found = cancellable_.Find(call_id);
  if (found == nullptr) return;  // answered already, or never here
  InboundCall* call = *found;
  if (call->client_cancelled()) return;  // a second cancel of the same call
  const bool running = call->MarkCancelled();
  if (running && m != nullptr) m->calls_cancelled_running->Increment();
  std::function<void()> callback;
  callback.swap(call->cancel_callback());
  if (!callback) return;
  // Under the lock: the call cannot answer (and go) while its callback runs, unless the callback
  // answers it itself (UntrackForCancel knows it by tls_cancelling). The call must not be
  // touched after the callback returns.
  tls_cancelling = call;
  callback();
  tls_cancelling = nullptr;
}

}  // namespace rrpc::rpc
