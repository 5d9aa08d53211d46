// The client side's call deadlines (connection.h: call_deadlines_): one timer per connection for
// the calls queued in deadline order, instead of a timer started and stopped per call. Reactor
// thread only.
#include <algorithm>

#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"

namespace rrpc::rpc {

void Connection::WatchDeadline(OutboundCall* call) {
  const MonoTime deadline = call->deadline();
  if (deadline.IsMax()) return;
  if (!call_deadlines_.empty() && deadline < call_deadlines_.back().deadline) {
    // Out of order (a shorter timeout after longer ones): the shared timer would fire late.
    call->StartTimer(reactor_->loop(), &Connection::OnCallTimeout, this);
    return;
  }
  call_deadlines_.push_back({deadline, call->call_id()});
  // The timer may still be armed for an answered call's later deadline (it is not stopped when
  // calls are answered): arm it again when this one comes first. Counted from the serialization
  // time, a few microseconds ago: saves a clock read per call and errs on the late side by those
  // microseconds.
  if (!ev_is_active(&call_deadline_timer_) || deadline < call_deadline_timer_at_) {
    ArmCallDeadlineTimer(call->sent_at());
  }
}

void Connection::ForgetAnsweredDeadlines(int32_t call_id) {
  if (call_deadlines_.empty() || call_deadlines_.front().call_id != call_id) return;
  call_deadlines_.pop_front();
  // Calls answered out of order left their deadlines behind this one.
  DropAnsweredDeadlinesAtFront();
}

void Connection::DropAnsweredDeadlinesAtFront() {
  while (!call_deadlines_.empty() && FindWaitingCall(call_deadlines_.front().call_id) == nullptr) {
    call_deadlines_.pop_front();
  }
}

OutboundCall* Connection::FindWaitingCall(int32_t call_id) {
  if (scoped_refptr<OutboundCall>* call = awaiting_response_.Find(call_id)) return call->get();
  for (const auto& call : pending_calls_) {  // only while connecting: a handful
    if (call->call_id() == call_id) return call.get();
  }
  return nullptr;
}

void Connection::ArmCallDeadlineTimer(MonoTime now) {
  call_deadline_timer_at_ = call_deadlines_.front().deadline;
  const double after = std::max(0.0, (call_deadline_timer_at_ - now).ToSeconds());
  ev_timer_stop(reactor_->loop(), &call_deadline_timer_);
  ev_timer_set(&call_deadline_timer_, after, 0.0);
  ev_timer_start(reactor_->loop(), &call_deadline_timer_);
}

void Connection::OnCallDeadlineTimer(struct ev_loop*, ev_timer* w, int) {
  static_cast<Connection*>(w->data)->ExpireCallDeadlines();
}

void Connection::ExpireCallDeadlines() {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  const MonoTime now = MonoTime::Now();
  while (!call_deadlines_.empty() && call_deadlines_.front().deadline <= now) {
    const int32_t call_id = call_deadlines_.front().call_id;
    call_deadlines_.pop_front();
    OutboundCall* call = FindWaitingCall(call_id);
    if (call == nullptr) continue;  // answered (or failed) already
    scoped_refptr<OutboundCall> keep(call);
    OnCallTimeout(call, this);  // its callback may queue calls (and deadlines) on this connection
    if (state_ == State::kClosed) return;
  }
  DropAnsweredDeadlinesAtFront();
  if (!call_deadlines_.empty() && !ev_is_active(&call_deadline_timer_)) ArmCallDeadlineTimer(now);
}

}  // namespace rrpc::rpc
