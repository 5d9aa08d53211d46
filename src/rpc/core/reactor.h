// Reactor: one thread running a libev loop that owns a set of connections and does all their
// socket I/O. It accepts on its own SO_REUSEPORT listener (so accepting scales with reactors) and
// serves what it accepts unless another reactor owns fewer server connections (that one does),
// keeps the client connections it opened, and takes work from other threads through a queue and
// one ev_async wakeup: outbound calls from callers, responses from workers, and tasks.
// Everything not marked "any thread" runs on the reactor thread only.
#pragma once

#include <ev.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "rpc/core/write_turns.h"
#include "rrpc/rpc/connection_info.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/log_throttle.h"
#include "util/socket.h"

namespace rrpc::rpc {

class Connection;
class InboundCall;
class Messenger;
class MessengerMetrics;
class OutboundCall;
class RemoteMethod;
class TransportFactory;

class Reactor {
 public:
  Reactor(Messenger* messenger, int index);
  ~Reactor();

  // Starts the thread.
  Status Start();
  // Any thread: this reactor accepts connections on `listener` (listening, non-blocking) from
  // now on. Returns once the reactor watches it.
  void StartAccepting(Socket listener);
  // Any thread but this reactor's: stops accepting and closes the listener; connections already
  // accepted stay open. Returns once the listener is closed. Idempotent.
  void StopAccepting();
  // Any thread but this reactor's: closes every connection (failing their calls with `reason`),
  // stops the loop and joins the thread. Idempotent.
  void Shutdown() RRPC_EXCLUDES(mu_);

  // Any thread. Queue work for the loop; one wakeup serves a batch.
  void QueueOutboundCall(scoped_refptr<OutboundCall>&& call) RRPC_EXCLUDES(mu_);
  void QueueResponse(InboundCall* call) RRPC_EXCLUDES(mu_);
  void RunOnReactor(std::function<void()> task) RRPC_EXCLUDES(mu_);
  // Any thread: runs `task` on this reactor's thread once `delay` has passed (an ev_timer; e.g.
  // a retry's backoff). Exactly once, never dropped: tasks still waiting when the reactor shuts
  // down run then, early, on this reactor's thread, after its connections have closed (their
  // calls failed) and before the thread exits; a task given to a reactor that has stopped runs
  // at once on the caller's thread. Either way it finds the messenger closing(), so a call it
  // makes fails at once: a task that owns a caller's pending call ends it with that status.
  void RunAfter(MonoDelta delay, std::function<void()> task) RRPC_EXCLUDES(mu_);
  // Any thread. Snapshot of the connections (runs on the reactor; waits for it).
  std::vector<ConnectionInfo> DumpConnections();
  // Reactor thread: calls `fn` on every connection of this reactor.
  void ForEachConnection(const std::function<void(Connection*)>& fn);

  bool IsCurrentThread() const { return Current() == this; }
  // The reactor whose thread is calling, or nullptr on any other thread.
  static Reactor* Current() { return tls_current_; }
  struct ev_loop* loop() const {
    return loop_;
  }
  Messenger* messenger() const { return messenger_; }
  const std::string& messenger_name() const;
  // The messenger's options (inline: read on every call's path).
  const MessengerOptions& options() const { return options_; }
  int index() const { return index_; }
  // The messenger's metrics; nullptr when disabled.
  MessengerMetrics* metrics() const { return metrics_; }
  // The messenger's transport factory.
  TransportFactory* transport_factory() const { return transport_factory_; }

  // Reactor thread: a connection parsed a call; counts it in flight and routes it to its service.
  void RouteInboundCall(std::unique_ptr<InboundCall> call);
  // Any thread: a call routed by this reactor was answered and its response written (or dropped).
  void InboundCallDone() { inbound_calls_in_flight_.fetch_sub(1, std::memory_order_relaxed); }
  // Any thread: calls routed by this reactor and not yet answered and written (or dropped).
  int64_t inbound_calls_in_flight() const {
    return inbound_calls_in_flight_.load(std::memory_order_relaxed);
  }

  // Any thread: a peer broke the protocol or refused us (`what` says how and who); logs it
  // unless this reactor already logged its share of peer errors this period, and counts it in
  // peer_errors_total when `count`.
  void LogPeerError(const Status& what, bool count = true);

  // Reactor thread: `conn` paused (or resumed) reading for backpressure. While any connection is
  // paused the reactor asks each to reconsider every few milliseconds: what frees their memory
  // (workers answering, other connections' calls) happens on other threads.
  void WatchPausedConnection(Connection* conn, bool paused);

  // Any thread: the server connections this reactor owns, counting those handed to it and not
  // yet started. A new connection goes to the reactor with the fewest (AcceptConnections).
  int server_connections() const { return server_connections_.load(std::memory_order_relaxed); }

  // Reactor thread: a connection closed itself; forget it.
  void ConnectionClosed(Connection* conn);
  // Reactor thread: the connection wants Flush() at the end of this loop iteration.
  void ScheduleFlush(Connection* conn);
  // Reactor thread: how much a connection's flush may write per loop turn, fed by its reads.
  WriteTurns& write_turns() { return write_turns_; }

 private:
  static void OnAsync(struct ev_loop* loop, ev_async* w, int revents);
  static void OnAccept(struct ev_loop* loop, ev_io* w, int revents);
  static void OnAcceptBackoffDone(struct ev_loop* loop, ev_timer* w, int revents);
  static void OnPausedRecheck(struct ev_loop* loop, ev_timer* w, int revents);
  static void OnIdleScan(struct ev_loop* loop, ev_timer* w, int revents);
  // A RunAfter task and its timer.
  struct DelayedTask {
    ev_timer timer;
    Reactor* reactor = nullptr;
    MonoDelta delay;
    std::function<void()> task;
  };
  static void OnDelayedTask(struct ev_loop* loop, ev_timer* w, int revents);
  // Reactor thread, while the loop runs: starts the timers of `tasks`.
  void ArmDelayedTasks(std::vector<std::unique_ptr<DelayedTask>> tasks);
  // libev's invoke-pending callback: runs the iteration's callbacks, then FinishIteration().
  static void InvokePending(struct ev_loop* loop);
  // After each loop iteration's callbacks, before the loop waits again: writes what they queued
  // (one batch per connection) and frees the connections they closed.
  void FinishIteration();
  // libev's release callback, with metrics only: the loop is about to block.
  static void OnAboutToBlock(struct ev_loop* loop) noexcept;
  // Adds the time from woke_at_ to `about_to_block` (libev timestamps) to reactor_busy_time_us.
  void RecordBusyTime(ev_tstamp about_to_block);
  void FlushScheduled();
  // Debug checks: `conn` closed during this loop iteration (it waits in closed_connections_).
  bool IsClosedThisIteration(const Connection* conn) const;
  void RunLoop();
  void DrainIncomingWork() RRPC_EXCLUDES(mu_);
  void AcceptConnections();
  // The reactor of this messenger that owns the fewest server connections: this one on a tie,
  // so connections move only to even out a real imbalance. Reactor thread.
  Reactor* FewestConnections();
  // Counts `sock` on `owner` (this reactor or another) and starts serving it there.
  void PlaceAccepted(Reactor* owner, Socket sock, const Sockaddr& peer);
  // Reactor thread: serves an accepted socket as one of this reactor's connections.
  void ServeAccepted(Socket sock, const Sockaddr& peer);
  struct HandedOver;  // an accepted socket on its way to another reactor (reactor_accept.cc)
  // accept() failed for lack of descriptors: frees the reserved one to accept and refuse what
  // waits in the backlog (the clients hear "too busy" instead of timing out), then backs off.
  void ShedBacklogWithoutDescriptors();
  // Sends `sock` the refusal frame (best effort: a new socket's buffer has room) and closes it.
  void RefuseConnection(Socket sock);
  // Stops watching the listener for a while (doubling up to a second while it keeps failing):
  // a listener that stays readable would otherwise wake the loop at once, forever.
  void BackOffAccepting();
  void StopAcceptWatchers();
  void AssignOutboundCall(scoped_refptr<OutboundCall>&& call);
  void CloseIdleConnections();
  // Closes connections whose partial frame has not completed within frame_receive_timeout.
  void CloseStalledFrames(MonoTime now);
  void CloseAll(const Status& reason);
  void WakeUp();

  // Set on each reactor thread for its lifetime (a trivially destructible thread_local: read
  // inline, several times per call, without a TLS wrapper call).
  static inline thread_local Reactor* tls_current_ = nullptr;

  Messenger* const messenger_;
  const MessengerOptions& options_;  // the messenger's
  const int index_;
  struct ev_loop* loop_ = nullptr;
  std::thread thread_;

  Socket listener_;
  ev_io accept_watcher_;
  ev_timer accept_backoff_timer_;
  MonoDelta accept_backoff_;  // 0 while accepting works
  // A descriptor on /dev/null held in reserve: closed to make room for one accept() when the
  // process is out of descriptors, reopened after (-1 when that failed).
  int reserved_fd_ = -1;
  // The bytes sent to a refused connection: a negotiation error, ERROR_SERVER_TOO_BUSY.
  std::string refusal_frame_;
  LogThrottle accept_error_log_{3, MonoDelta::FromSeconds(10)};
  ev_async async_watcher_;
  ev_timer idle_timer_;
  ev_timer paused_recheck_timer_;  // runs while paused_connections_ is not empty
  std::unordered_set<Connection*> paused_connections_;  // reactor thread

  MessengerMetrics* const metrics_;  // the messenger's; nullptr when disabled
  // A hostile peer can make one error per connection or frame: the log shows a few per period.
  LogThrottle peer_error_log_{5, MonoDelta::FromSeconds(10)};
  TransportFactory* const transport_factory_;  // the messenger's
  // Incremented by this reactor, decremented by whichever thread finishes a call: a counter per
  // reactor, on a cache line of its own, so reactors never share one.
  alignas(64) std::atomic<int64_t> inbound_calls_in_flight_{0};
  // server_connections(): incremented by the reactor placing a connection here, decremented by
  // this one when it closes (or by whoever drops a HandedOver this reactor never ran).
  std::atomic<int> server_connections_{0};
  // Reactor thread only, with metrics: when the loop last woke up (libev's clock; 0: not since it
  // last blocked), and the busy time not yet counted in whole microseconds (a fraction of one).
  ev_tstamp woke_at_ = 0;
  double busy_us_unpublished_ = 0;
  // Reactor thread only: AssignOutboundCall frames on the stack. A call that fails at once
  // (its connection closing, a connect refused on the spot) runs its callback inside
  // AssignOutboundCall; a callback that issues the next call from there would recurse without
  // bound while the failure lasts, so such a call waits for the next loop iteration.
  int assigning_depth_ = 0;

  // Incoming work from other threads.
  Mutex mu_;
  std::vector<scoped_refptr<OutboundCall>> incoming_calls_ RRPC_GUARDED_BY(mu_);
  std::vector<InboundCall*> incoming_responses_ RRPC_GUARDED_BY(mu_);
  std::vector<std::function<void()>> incoming_tasks_ RRPC_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<DelayedTask>> incoming_delayed_ RRPC_GUARDED_BY(mu_);
  bool wakeup_pending_ RRPC_GUARDED_BY(mu_) = false;
  bool accepting_work_ RRPC_GUARDED_BY(mu_) = true;  // false once the loop has stopped for good

  // Reactor thread only.
  // RunAfter tasks whose timers run, owned here until they fire (or run early at shutdown).
  std::unordered_map<DelayedTask*, std::unique_ptr<DelayedTask>> armed_delayed_;
  std::unordered_map<Connection*, scoped_refptr<Connection>> connections_;
  std::unordered_map<Sockaddr, Connection*> client_connections_;  // by remote address
  // Connections for calls of at least options().bulk_connection_bytes, by remote address.
  std::unordered_map<Sockaddr, Connection*> bulk_connections_;
  // The connection of client_connections_ the last small call went to (nullptr after it closed):
  // a client calling one server again and again skips the map lookup (hashing and comparing the
  // address).
  Connection* last_client_connection_ = nullptr;
  // The method record (core/remote_method.h) of a call that last went to
  // last_client_connection_: a call of the same record goes to the same address, found by a
  // pointer compare instead of comparing addresses. Held so that its address is never reused.
  scoped_refptr<const RemoteMethod> last_client_method_;
  std::vector<Connection*> flush_list_;
  WriteTurns write_turns_;
  // FlushScheduled's batch: a member, so its capacity is kept (no allocation per loop turn).
  std::vector<Connection*> flush_batch_;
  // Connections closed during this loop iteration, kept alive until it ends (ConnectionClosed).
  std::vector<scoped_refptr<Connection>> closed_connections_;
  std::atomic<bool> stopped_{false};
};

}  // namespace rrpc::rpc
