// CallDeadlines: the deadlines of a client connection's calls, watched by one timer instead of a
// timer started and stopped per call. Calls are queued in order, so their deadlines mostly come in
// nondecreasing order (every call of a connection with the same timeout): those are listed, and the
// one timer is armed at the first. It is not stopped when calls are answered: it fires at the first
// deadline still listed, times out the calls whose deadlines passed, and re-arms for the next one
// still waiting. A call whose deadline would break the order gets a timer of its own
// (OutboundCall::StartTimer).
//
// Threads: the reactor's only. Ownership: a member of its Connection (conn_), which owns the calls;
// this holds only their ids. Allocates nothing until a call is watched.
#pragma once

#include <ev.h>

#include <cstdint>

#include "rrpc/util/monotime.h"
#include "util/ring_queue.h"

namespace rrpc::rpc {

class Connection;
class OutboundCall;

class CallDeadlines {
 public:
  explicit CallDeadlines(Connection* conn) : conn_(conn) {}
  CallDeadlines(const CallDeadlines&) = delete;
  CallDeadlines& operator=(const CallDeadlines&) = delete;

  // Prepares the timer (Connection::Start).
  void Start();
  // `call` was queued on the connection: its deadline is watched (a call without one is not).
  void Watch(OutboundCall* call);
  // A response arrived for `call_id`: forgets the deadlines of calls no longer waiting at the
  // front of the list (each looked up at most once or twice), so it holds no more than the calls
  // in flight.
  void ForgetAnswered(int32_t call_id);
  // The connection closes (its calls are failed there): stops the timer, forgets every deadline.
  void Stop();

 private:
  struct CallDeadline {
    MonoTime deadline;
    int32_t call_id;
  };

  static void OnTimer(struct ev_loop* loop, ev_timer* w, int revents);
  // Times out the calls whose deadlines passed, then sleeps until the first one still waiting.
  void Expire();
  // Drops the deadlines at the front of the list whose calls are no longer waiting.
  void DropAnsweredAtFront();
  // (Re)arms the timer for the front of the list, `now` being about now.
  void Arm(MonoTime now);

  Connection* const conn_;
  RingQueue<CallDeadline> deadlines_;
  ev_timer timer_;
  MonoTime timer_at_;  // the deadline the timer is armed for, while active
};

}  // namespace rrpc::rpc
