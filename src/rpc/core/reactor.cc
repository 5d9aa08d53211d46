#include "rpc/core/reactor.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/transport/frame_reader.h"
#include "rpc/transport/reactor_thread.h"
#include "rrpc/rpc/messenger.h"
#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc::rpc {

namespace {
// How often connections paused for backpressure look again whether they may read.
constexpr double kPausedRecheckSeconds = 0.005;
}  // namespace

Reactor::Reactor(Messenger* messenger, int index)
    : messenger_(messenger),
      options_(messenger->options()),
      index_(index),
      metrics_(MessengerInternals::metrics(*messenger)),
      transport_factory_(MessengerInternals::transport_factory(*messenger)) {
  loop_ = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
  CHECK(loop_ != nullptr) << "ev_loop_new failed";
}

Reactor::~Reactor() {
  Shutdown();
  ev_loop_destroy(loop_);
  if (reserved_fd_ >= 0) ::close(reserved_fd_);
}

const std::string& Reactor::messenger_name() const { return messenger_->name(); }

void Reactor::RouteInboundCall(std::unique_ptr<InboundCall> call) {
  DCHECK(IsCurrentThread());
  inbound_calls_in_flight_.fetch_add(1, std::memory_order_relaxed);
  MessengerInternals::service_pool(*messenger_)->QueueInboundCall(std::move(call));
}

Status Reactor::Start() {
  ev_async_init(&async_watcher_, &Reactor::OnAsync);
  async_watcher_.data = this;
  ev_async_start(loop_, &async_watcher_);
  // libev runs the callbacks of each loop iteration through this, and the reactor's own
  // end-of-iteration work follows them there: no prepare or check watcher to queue and invoke
  // per iteration (libev's queueing and invoking, and two clock reads, per iteration saved).
  ev_set_invoke_pending_cb(loop_, &Reactor::InvokePending);
  // With metrics, libev calls this just before it blocks, with its clock freshly read.
  if (metrics_ != nullptr) ev_set_loop_release_cb(loop_, &Reactor::OnAboutToBlock, nullptr);
  const double scan = options().idle_scan_period.ToSeconds();
  ev_timer_init(&idle_timer_, &Reactor::OnIdleScan, scan, scan);
  idle_timer_.data = this;
  // After the iteration's I/O: a reactor that ran late reads what its peers sent before it
  // judges a connection idle or stalled.
  ev_set_priority(&idle_timer_, EV_MINPRI);
  ev_timer_start(loop_, &idle_timer_);
  ev_timer_init(&paused_recheck_timer_, &Reactor::OnPausedRecheck, kPausedRecheckSeconds,
                kPausedRecheckSeconds);
  paused_recheck_timer_.data = this;
  ev_timer_init(&accept_backoff_timer_, &Reactor::OnAcceptBackoffDone, 0.0, 0.0);
  accept_backoff_timer_.data = this;
  reserved_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  refusal_frame_ =
      BuildServerReply(NegotiatePB(),
                       Status::ServiceUnavailable("too many connections: " + messenger_->name() +
                                                  " is at its connection limit"),
                       ErrorStatusPB::ERROR_SERVER_TOO_BUSY)
          .slice.ToString();
  CountDownLatch started(1);
  RRPC_ASSIGN_OR_RETURN(
      thread_, StartThread("reactor", messenger_->name() + "-reactor-" + std::to_string(index_),
                           [this, &started] {
                             tls_current_ = this;
                             EnterReactorThread(loop_);
                             started.CountDown();
                             RunLoop();
                           }));
  started.Wait();
  return Status::OK();
}

void Reactor::RunLoop() {
  FrameReader::RecycleReadBlocksOnThisThread();
  ev_run(loop_, 0);
  // Shutdown() broke the loop after CloseAll(). From here nothing more is queued (RunAfter runs a
  // task at once on its caller's thread, calls fail there): what is queued fails or runs now, and
  // the delayed tasks still waiting run now, on this thread, each once.
  {
    MutexLock lock(mu_);
    accepting_work_ = false;
  }
  DrainIncomingWork();
  std::unordered_map<DelayedTask*, std::unique_ptr<DelayedTask>> delayed;
  delayed.swap(armed_delayed_);
  for (auto& [raw, task] : delayed) {
    ev_timer_stop(loop_, &task->timer);
    task->task();
  }
  delayed.clear();
  closed_connections_.clear();
  // What transports keep per reactor thread lets go of the loop now, on this thread.
  LeaveReactorThread();
  FrameReader::StopRecyclingReadBlocksOnThisThread();
  VLOG(1) << "reactor " << index_ << " stopped";
}

void Reactor::Shutdown() {
  if (!thread_.joinable()) return;
  CHECK(!IsCurrentThread()) << "a reactor cannot shut itself down";
  RunOnReactor([this] {
    CloseAll(Status::Aborted("messenger shutting down"));
    if (listener_.valid()) {
      StopAcceptWatchers();
      listener_.Close();
    }
    ev_break(loop_, EVBREAK_ALL);
  });
  thread_.join();
}

void Reactor::RunAfter(MonoDelta delay, std::function<void()> task) {
  auto delayed = std::make_unique<DelayedTask>();
  delayed->reactor = this;
  delayed->delay = delay;
  delayed->task = std::move(task);
  bool wake = false;
  std::unique_ptr<DelayedTask> refused;  // not queued: the reactor is gone
  {
    MutexLock lock(mu_);
    if (accepting_work_) {
      incoming_delayed_.push_back(std::move(delayed));
      wake = !wakeup_pending_;
      wakeup_pending_ = true;
    } else {
      refused = std::move(delayed);
    }
  }
  if (refused) {
    refused->task();
    return;
  }
  if (wake) WakeUp();
}

void Reactor::ArmDelayedTasks(std::vector<std::unique_ptr<DelayedTask>> tasks) {
  for (auto& t : tasks) {
    ev_timer_init(&t->timer, &Reactor::OnDelayedTask, std::max(0.0, t->delay.ToSeconds()), 0.0);
    t->timer.data = t.get();
    ev_timer_start(loop_, &t->timer);
    DelayedTask* raw = t.get();
    armed_delayed_.emplace(raw, std::move(t));
  }
}

void Reactor::OnDelayedTask(struct ev_loop*, ev_timer* w, int) {
  auto* raw = static_cast<DelayedTask*>(w->data);
  Reactor* self = raw->reactor;
  auto it = self->armed_delayed_.find(raw);
  std::unique_ptr<DelayedTask> task = std::move(it->second);
  self->armed_delayed_.erase(it);
  task->task();
}

void Reactor::WakeUp() { ev_async_send(loop_, &async_watcher_); }

void Reactor::QueueOutboundCall(scoped_refptr<OutboundCall>&& call) {
  call->set_reactor(this);  // where a cancel goes
  if (IsCurrentThread() && assigning_depth_ == 0) {
    // A callback issuing the next call: no queue, no wakeup, same connection.
    AssignOutboundCall(std::move(call));
    return;
  }
  // From another thread, or from a callback of a call that failed while being assigned (see
  // assigning_depth_): through the queue, on the next loop iteration.
  bool wake = false;
  scoped_refptr<OutboundCall> refused;  // not queued: the reactor is gone
  {
    MutexLock lock(mu_);
    if (accepting_work_) {
      incoming_calls_.push_back(std::move(call));
      wake = !wakeup_pending_;
      wakeup_pending_ = true;
    } else {
      refused = std::move(call);
    }
  }
  if (refused) {
    refused->FailBeforeSend(Status::Aborted("messenger shut down"));
    return;
  }
  if (wake) WakeUp();
}

void Reactor::QueueResponse(InboundCall* call) {
  if (IsCurrentThread()) {
    call->connection()->QueueResponse(call);
    return;
  }
  bool wake = false;
  bool queued = false;
  {
    MutexLock lock(mu_);
    if (accepting_work_) {
      incoming_responses_.push_back(call);
      queued = true;
      wake = !wakeup_pending_;
      wakeup_pending_ = true;
    }
  }
  if (!queued) {
    call->TransferAborted(Status::Aborted("messenger shut down"));
    return;
  }
  if (wake) WakeUp();
}

void Reactor::RunOnReactor(std::function<void()> task) {
  bool wake = false;
  {
    MutexLock lock(mu_);
    if (!accepting_work_) return;  // the reactor is gone: nothing would run it
    incoming_tasks_.push_back(std::move(task));
    wake = !wakeup_pending_;
    wakeup_pending_ = true;
  }
  if (wake) WakeUp();
}

std::vector<ConnectionInfo> Reactor::DumpConnections() {
  std::vector<ConnectionInfo> out;
  if (stopped_.load()) return out;
  auto done_ptr = std::make_shared<CountDownLatch>(1);
  auto out_ptr = std::make_shared<std::vector<ConnectionInfo>>();
  RunOnReactor([this, out_ptr, done_ptr] {
    std::vector<ConnectionInfo>& out = *out_ptr;
    const MonoTime now = MonoTime::Now();
    for (const auto& [raw, conn] : connections_) {
      ConnectionInfo info;
      info.remote = conn->remote().ToString();
      info.direction = conn->direction() == Connection::Direction::kClient ? "client" : "server";
      switch (conn->state()) {
        case Connection::State::kConnecting:
          info.state = "connecting";
          break;
        case Connection::State::kNegotiating:
          info.state = "negotiating";
          break;
        case Connection::State::kOpen:
          info.state = "open";
          break;
        case Connection::State::kClosed:
          info.state = "closed";
          break;
      }
      info.transport = conn->transport_name();
      conn->DescribeTransport(&info.transport_details);
      if (!conn->identity().user.empty()) {
        info.transport_details.emplace_back("user", conn->identity().user);
        info.transport_details.emplace_back("auth", AuthMethodName(conn->identity().method));
      }
      info.reactor = index_;
      info.bytes_received = conn->bytes_received();
      info.bytes_sent = conn->bytes_sent();
      info.calls_in_flight = conn->calls_in_flight();
      info.reads_paused = conn->reads_paused();
      if (const MemoryTracker* memory = conn->inbound_memory()) {
        info.inbound_memory_bytes = memory->consumption();
        info.inbound_memory_peak_bytes = memory->peak();
      }
      info.age_seconds = (now - conn->created()).ToSeconds();
      out.push_back(std::move(info));
    }
    done_ptr->CountDown();
  });
  // Bounded: a reactor shutting down may drop the task; the shared state outlives us then.
  if (done_ptr->WaitFor(MonoDelta::FromSeconds(5))) out = std::move(*out_ptr);
  return out;
}

void Reactor::ForEachConnection(const std::function<void(Connection*)>& fn) {
  DCHECK(IsCurrentThread());
  std::vector<scoped_refptr<Connection>> all;
  all.reserve(connections_.size());
  for (const auto& [raw, conn] : connections_) all.push_back(conn);
  for (auto& conn : all) fn(conn.get());
}

void Reactor::OnAsync(struct ev_loop*, ev_async* w, int) {
  static_cast<Reactor*>(w->data)->DrainIncomingWork();
}

void Reactor::DrainIncomingWork() {
  DCHECK(IsCurrentThread());
  std::vector<scoped_refptr<OutboundCall>> calls;
  std::vector<InboundCall*> responses;
  std::vector<std::function<void()>> tasks;
  std::vector<std::unique_ptr<DelayedTask>> delayed;
  {
    MutexLock lock(mu_);
    calls.swap(incoming_calls_);
    responses.swap(incoming_responses_);
    tasks.swap(incoming_tasks_);
    delayed.swap(incoming_delayed_);
    wakeup_pending_ = false;
  }
  // After CloseAll() (the reactor is shutting down) calls and responses fail, and delayed tasks
  // run now instead of waiting for a loop that is about to stop.
  const bool open = !stopped_.load(std::memory_order_relaxed);
  for (InboundCall* call : responses) {
    if (open) {
      call->connection()->QueueResponse(call);
    } else {
      call->TransferAborted(Status::Aborted("messenger shut down"));
    }
  }
  for (auto& call : calls) {
    if (open) {
      AssignOutboundCall(std::move(call));
    } else {
      call->FinishWithError(Status::Aborted("messenger shut down"));
    }
  }
  for (auto& task : tasks) task();
  if (open) {
    ArmDelayedTasks(std::move(delayed));
  } else {
    for (auto& t : delayed) t->task();
  }
}

void Reactor::AssignOutboundCall(scoped_refptr<OutboundCall>&& call) {
  DCHECK(IsCurrentThread());
  assigning_depth_++;
  struct Unwind {
    int* depth;
    ~Unwind() { (*depth)--; }
  } unwind{&assigning_depth_};
  if (stopped_.load(std::memory_order_relaxed)) {
    call->FinishWithError(Status::Aborted("messenger shutting down"));
    return;
  }
  // Bulk calls travel apart from small ones (MessengerOptions::bulk_connection_bytes).
  const bool bulk = call->IsBulk(options());
  if (!bulk && last_client_connection_ != nullptr &&
      (call->remote_method() == last_client_method_.get() ||
       last_client_connection_->remote() == call->remote())) {
    if (call->remote_method() != last_client_method_.get()) {
      last_client_method_ = call->remote_method();
    }
    last_client_connection_->QueueOutboundCall(std::move(call));
    return;
  }
  auto& by_remote = bulk ? bulk_connections_ : client_connections_;
  auto it = by_remote.find(call->remote());
  Connection* conn = it == by_remote.end() ? nullptr : it->second;
  if (conn == nullptr) {
    Result<std::unique_ptr<Transport>> transport =
        transport_factory_->NewClientTransport(call->remote());
    if (!transport.ok()) {
      call->FinishWithError(
          transport.status().CloneAndPrepend("connect to " + call->remote().ToString()));
      return;
    }
    scoped_refptr<Connection> fresh(new Connection(this, Connection::Direction::kClient,
                                                   std::move(transport).value(), call->remote()));
    conn = fresh.get();
    connections_.emplace(conn, std::move(fresh));
    by_remote.emplace(call->remote(), conn);
    conn->Start();
  }
  if (!bulk) {
    last_client_connection_ = conn;
    last_client_method_ = call->remote_method();
  }
  conn->QueueOutboundCall(std::move(call));
}

void Reactor::ScheduleFlush(Connection* conn) {
  DCHECK(IsCurrentThread());
  flush_list_.push_back(conn);
}

void Reactor::InvokePending(struct ev_loop* loop) {
  // libev calls this once per iteration, after the wait (and once when ev_run starts).
  Reactor* const reactor = tls_current_;  // the loop's own (libev runs it on its thread)
  // libev read the clock when the wait returned and not since: the time this iteration woke up.
  if (reactor->metrics_ != nullptr) reactor->woke_at_ = ev_now(loop);
  do {
    ev_invoke_pending(loop);
    reactor->FinishIteration();
    // What the flushes fed libev (a transport started for a new call's connection) runs now, as
    // it did when this work ran in a prepare watcher.
  } while (ev_pending_count(loop) != 0);
}

void Reactor::FinishIteration() {
  FlushScheduled();
  // Every callback of this iteration has returned: closed connections may go now.
  closed_connections_.clear();
}

void Reactor::OnAboutToBlock(struct ev_loop* loop) noexcept {
  // Runs on the reactor thread, inside ev_run, right after libev updated its clock before
  // blocking: the flushes of the last iteration are done (FinishIteration), so from waking to now
  // is the busy time, measured with libev's own two clock reads per iteration.
  Reactor* const reactor = tls_current_;  // the loop's own (libev runs it on its thread)
  reactor->RecordBusyTime(ev_now(loop));
}

void Reactor::RecordBusyTime(ev_tstamp about_to_block) {
  // libev's timestamps are CLOCK_REALTIME's scale kept in step with the monotonic clock; a clock
  // step between two resyncs could make one interval negative or huge: such an interval counts 0.
  // (woke_at_ is 0 before the first iteration woke: the interval is then huge.) Kept in floating
  // point and published in whole microseconds: per iteration a subtraction, a multiply and a
  // compare; the counter's add only once a microsecond has gathered (no integer nanosecond carry
  // with its division and remainder per iteration).
  const double seconds = about_to_block - woke_at_;
  woke_at_ = 0;
  if (!(seconds > 0 && seconds < 60)) return;
  busy_us_unpublished_ += seconds * 1e6;
  if (busy_us_unpublished_ >= 1) {
    const int64_t whole = static_cast<int64_t>(busy_us_unpublished_);
    busy_us_unpublished_ -= static_cast<double>(whole);
    metrics_->reactor_busy_time_us->IncrementBy(whole);
  }
}

void Reactor::FlushScheduled() {
  DCHECK(IsCurrentThread());
  // A flush can finish calls whose callbacks queue more work; loop until quiet.
  while (!flush_list_.empty()) {
    flush_batch_.swap(flush_list_);
    for (Connection* conn : flush_batch_) {
      // Alive: a connection is in connections_ until it closes, and a closed one stays in
      // closed_connections_ until FinishIteration() clears it after this flush (a closed
      // connection's Flush() does nothing). No lookup per flush.
      DCHECK(connections_.count(conn) != 0 || IsClosedThisIteration(conn));
      conn->Flush();
    }
    flush_batch_.clear();
  }
}

bool Reactor::IsClosedThisIteration(const Connection* conn) const {
  for (const auto& closed : closed_connections_) {
    if (closed.get() == conn) return true;
  }
  return false;
}

void Reactor::OnIdleScan(struct ev_loop*, ev_timer* w, int) {
  static_cast<Reactor*>(w->data)->CloseIdleConnections();
}

void Reactor::CloseIdleConnections() {
  DCHECK(IsCurrentThread());
  const MonoTime now = MonoTime::Now();
  if (metrics_ != nullptr) {
    metrics_->inbound_memory_bytes->Set(
        MessengerInternals::inbound_memory(*messenger_)->consumption());
    metrics_->inbound_memory_peak_bytes->Set(
        MessengerInternals::inbound_memory(*messenger_)->peak());
  }
  CloseStalledFrames(now);
  if (options().ping_after != MonoDelta::Max()) {
    for (const auto& [raw, conn] : connections_) raw->MaybePing(now);
  }
  if (options().idle_timeout == MonoDelta::Max()) return;
  const MonoTime cutoff = now - options().idle_timeout;
  std::vector<scoped_refptr<Connection>> idle, stalled;
  for (const auto& [raw, conn] : connections_) {
    if (!conn->is_open()) continue;
    if (conn->IsIdle() && conn->last_activity() < cutoff) idle.push_back(conn);
    if (conn->IsWriteStalledSince(cutoff)) stalled.push_back(conn);
  }
  for (auto& conn : idle) {
    conn->Shutdown(Status::NetworkError("connection idle for longer than " +
                                        options().idle_timeout.ToString()));
  }
  for (auto& conn : stalled) {
    LogPeerError(Status::NetworkError("closing connection to " + conn->remote().ToString() +
                                      ": the peer read nothing for longer than " +
                                      options().idle_timeout.ToString()));
    conn->Shutdown(Status::NetworkError("peer stopped reading for longer than " +
                                        options().idle_timeout.ToString()));
  }
}

void Reactor::LogPeerError(const Status& what, bool count) {
  if (count && metrics_ != nullptr) metrics_->peer_errors->Increment();
  int64_t dropped = 0;
  if (peer_error_log_.Allow(&dropped)) {
    LOG(WARNING) << what.ToString() << LogThrottle::Suffix(dropped);
  }
}

void Reactor::WatchPausedConnection(Connection* conn, bool paused) {
  DCHECK(IsCurrentThread());
  if (paused) {
    paused_connections_.insert(conn);
    if (!ev_is_active(&paused_recheck_timer_)) ev_timer_again(loop_, &paused_recheck_timer_);
  } else {
    paused_connections_.erase(conn);
    if (paused_connections_.empty()) ev_timer_stop(loop_, &paused_recheck_timer_);
  }
}

void Reactor::OnPausedRecheck(struct ev_loop*, ev_timer* w, int) {
  auto* reactor = static_cast<Reactor*>(w->data);
  std::vector<scoped_refptr<Connection>> paused;
  for (Connection* conn : reactor->paused_connections_) paused.emplace_back(conn);
  for (auto& conn : paused) conn->ReconsiderReading();  // may resume, or close, it
}

void Reactor::CloseStalledFrames(MonoTime now) {
  const MonoDelta timeout = options().frame_receive_timeout;
  if (timeout == MonoDelta::Max()) return;
  std::vector<scoped_refptr<Connection>> stalled;
  for (const auto& [raw, conn] : connections_) {
    if (conn->direction() == Connection::Direction::kServer &&
        conn->IsFrameStalledSince(now - timeout)) {
      stalled.push_back(conn);
    }
  }
  for (auto& conn : stalled) {
    if (metrics_ != nullptr) metrics_->frames_refused->Increment();
    Status s = Status::TimedOut("frame from " + conn->remote().ToString() +
                                " did not arrive whole within " + timeout.ToString());
    LogPeerError(s);
    conn->CloseWithFatalError(ErrorStatusPB::FATAL_INVALID_FRAME, s);
  }
}

void Reactor::ConnectionClosed(Connection* conn) {
  DCHECK(IsCurrentThread());
  WatchPausedConnection(conn, false);
  if (conn->direction() == Connection::Direction::kServer) {
    MessengerInternals::RemoveServerConnection(messenger_);
    server_connections_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (conn == last_client_connection_) last_client_connection_ = nullptr;
  for (auto* by_remote : {&client_connections_, &bulk_connections_}) {
    auto it = by_remote->find(conn->remote());
    if (it != by_remote->end() && it->second == conn) by_remote->erase(it);
  }
  auto entry = connections_.find(conn);
  if (entry == connections_.end()) return;
  // Not released here: a closing connection is usually deep inside its own transport's callback
  // (a bad frame, the peer closing), and dropping the last reference would free the transport
  // under it. Released once the loop iteration's callbacks have all returned (FinishIteration).
  closed_connections_.push_back(std::move(entry->second));
  connections_.erase(entry);
}

void Reactor::CloseAll(const Status& reason) {
  DCHECK(IsCurrentThread());
  std::vector<scoped_refptr<Connection>> all;
  all.reserve(connections_.size());
  for (const auto& [raw, conn] : connections_) all.push_back(conn);
  for (auto& conn : all) conn->Shutdown(reason);
  flush_list_.clear();
  stopped_.store(true);
}

}  // namespace rrpc::rpc
