#include "rpc/core/call_deadlines.h"

#include <algorithm>

#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"

namespace rrpc::rpc {

void CallDeadlines::Start() {
  ev_timer_init(&timer_, &CallDeadlines::OnTimer, 0.0, 0.0);
  timer_.data = this;
}

void CallDeadlines::Watch(OutboundCall* call) {
  const MonoTime deadline = call->deadline();
  if (deadline.IsMax()) return;
  if (!deadlines_.empty() && deadline < deadlines_.back().deadline) {
    // Out of order (a shorter timeout after longer ones): the shared timer would fire late.
    call->StartTimer(conn_->reactor()->loop(), &Connection::OnCallTimeout, conn_);
    return;
  }
  deadlines_.push_back({deadline, call->call_id()});
  // The timer may still be armed for an answered call's later deadline (it is not stopped when
  // calls are answered): arm it again when this one comes first. Counted from the serialization
  // time, a few microseconds ago: saves a clock read per call and errs on the late side by those
  // microseconds.
  if (!ev_is_active(&timer_) || deadline < timer_at_) Arm(call->sent_at());
}

void CallDeadlines::ForgetAnswered(int32_t call_id) {
  if (deadlines_.empty() || deadlines_.front().call_id != call_id) return;
  deadlines_.pop_front();
  // Calls answered out of order left their deadlines behind this one.
  DropAnsweredAtFront();
}

void CallDeadlines::Stop() {
  ev_timer_stop(conn_->reactor()->loop(), &timer_);
  deadlines_.clear();
}

void CallDeadlines::DropAnsweredAtFront() {
  while (!deadlines_.empty() && conn_->FindWaitingCall(deadlines_.front().call_id) == nullptr) {
    deadlines_.pop_front();
  }
}

void CallDeadlines::Arm(MonoTime now) {
  timer_at_ = deadlines_.front().deadline;
  const double after = std::max(0.0, (timer_at_ - now).ToSeconds());
  struct ev_loop* loop = conn_->reactor()->loop();
  ev_timer_stop(loop, &timer_);
  ev_timer_set(&timer_, after, 0.0);
  ev_timer_start(loop, &timer_);
}

void CallDeadlines::OnTimer(struct ev_loop*, ev_timer* w, int) {
  static_cast<CallDeadlines*>(w->data)->Expire();
}

void CallDeadlines::Expire() {
  DCHECK(conn_->reactor()->IsCurrentThread());
  scoped_refptr<Connection> self(conn_);
  const MonoTime now = MonoTime::Now();
  while (!deadlines_.empty() && deadlines_.front().deadline <= now) {
    const int32_t call_id = deadlines_.front().call_id;
    deadlines_.pop_front();
    OutboundCall* call = conn_->FindWaitingCall(call_id);
    if (call == nullptr) continue;  // answered (or failed) already
    scoped_refptr<OutboundCall> keep(call);
    // Its callback may queue calls (and deadlines) on this connection.
    Connection::OnCallTimeout(call, conn_);
    if (conn_->state() == Connection::State::kClosed) return;
  }
  DropAnsweredAtFront();
  if (!deadlines_.empty() && !ev_is_active(&timer_)) Arm(now);
}

}  // namespace rrpc::rpc
