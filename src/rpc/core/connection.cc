#include "rpc/core/connection.h"

#include <algorithm>

#include "rpc/core/constants.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/reactor.h"
#include "rpc/core/wire_codec.h"
#include "rpc/messenger.h"
#include "rpc/observe/rpc_metrics.h"

namespace rrpc::rpc {

namespace {
// Reads per readable event before yielding to other connections (fairness).
constexpr int kMaxReadsPerEvent = 16;
// iovecs per writev: enough to batch many small responses in one syscall.
constexpr int kMaxIovecs = 64;
// Server side: a client that sends calls but does not read their responses would make the server
// buffer without bound. Above this many unsent response bytes the connection stops reading (no
// new calls from it) until the socket drains below the low mark.
constexpr size_t kPauseReadsAboveBytes = 8 << 20;
constexpr size_t kResumeReadsBelowBytes = 1 << 20;
}  // namespace

Connection::Connection(Reactor* reactor, Direction direction, Socket socket, const Sockaddr& remote)
    : reactor_(reactor),
      direction_(direction),
      remote_(remote),
      options_(reactor->options()),
      transport_(std::make_unique<TcpTransport>(std::move(socket))),
      state_(direction == Direction::kClient ? State::kConnecting : State::kNegotiating),
      reader_(options_.max_message_size, options_.read_block_size),
      created_(MonoTime::Now()),
      last_activity_(created_) {
  MessengerMetrics* m = reactor_->metrics();
  if (m != nullptr) m->ConnectionOpened(/*accepted=*/direction == Direction::kServer);
}

Connection::~Connection() { DCHECK(state_ == State::kClosed) << "connection destroyed while open"; }

void Connection::Start() {
  DCHECK(reactor_->IsCurrentThread());
  ev_io_init(&read_watcher_, &Connection::OnReadable, transport_->fd(), EV_READ);
  read_watcher_.data = this;
  ev_io_init(&write_watcher_, &Connection::OnWritable, transport_->fd(), EV_WRITE);
  write_watcher_.data = this;
  ev_timer_init(&negotiation_timer_, &Connection::OnNegotiationTimeout,
                options_.negotiation_timeout.ToSeconds(), 0.0);
  negotiation_timer_.data = this;
  ev_timer_start(reactor_->loop(), &negotiation_timer_);
  if (direction_ == Direction::kClient) {
    // Writable means the connect finished (or failed).
    ArmWriteWatcher(true);
  } else {
    ev_io_start(reactor_->loop(), &read_watcher_);
  }
}

size_t Connection::calls_in_flight() const {
  if (direction_ == Direction::kClient) return awaiting_response_.size() + pending_calls_.size();
  return static_cast<size_t>(inbound_in_flight_.load(std::memory_order_relaxed));
}

bool Connection::IsIdle() {
  if (calls_in_flight() != 0) return false;
  std::lock_guard<std::mutex> lock(write_mu_);
  return write_queue_.empty();
}

bool Connection::IsWriteStalledSince(MonoTime since) {
  std::lock_guard<std::mutex> lock(write_mu_);
  return !write_queue_.empty() && last_write_progress_ < since;
}

// ---- Client side: calls out.

void Connection::QueueOutboundCall(scoped_refptr<OutboundCall> call) {
  DCHECK(reactor_->IsCurrentThread());
  DCHECK(direction_ == Direction::kClient);
  if (state_ == State::kClosed) {
    call->FinishWithError(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  call->StartTimer(reactor_->loop(), &Connection::OnCallTimeout, this);
  if (call->finished()) return;  // deadline already passed and the callback ran
  if (!sending_calls_) {
    pending_calls_.push_back(std::move(call));
    return;
  }
  OutboundCall* raw = call.get();
  awaiting_response_.emplace(raw->call_id(), std::move(call));
  raw->AddRef();  // the write queue's reference, dropped in TransferDone/TransferAborted
  QueueTransfer(raw);
}

void Connection::OnCallTimeout(OutboundCall* call, void* arg) {
  auto* conn = static_cast<Connection*>(arg);
  scoped_refptr<Connection> self(conn);
  if (conn->awaiting_response_.erase(call->call_id()) == 0) {
    auto it = std::find_if(conn->pending_calls_.begin(), conn->pending_calls_.end(),
                           [call](const auto& c) { return c.get() == call; });
    if (it != conn->pending_calls_.end()) conn->pending_calls_.erase(it);
  }
  // A half-written frame stays in the write queue until complete, but the caller is answered
  // at its deadline all the same: waiting for the frame to drain used to hang the call for as
  // long as a stalled peer kept its receive window shut.
  if (call->started() && !call->OutboundTransfer::finished()) call->DetachUnsentPayload();
  call->FinishTimedOut();
}

// ---- Server side: responses out.

void Connection::QueueResponse(InboundCall* call) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed) {
    call->TransferAborted(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  QueueTransfer(call);
}

void Connection::QueueTransfer(OutboundTransfer* transfer) {
  bool was_empty;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    was_empty = write_queue_.empty();
    if (was_empty) last_write_progress_ = last_activity_;  // a recent time, without a clock read
    write_queue_.push_back(transfer);
    unsent_bytes_.fetch_add(transfer->total_bytes() - transfer->bytes_written(),
                            std::memory_order_relaxed);
  }
  if (was_empty && !write_armed_) reactor_->ScheduleFlush(this);
  ApplyBackpressure();
}

bool Connection::TryWriteLoneResponse(InboundCall* call) {
  // Another call in flight means more responses are coming: let the reactor batch them.
  if (inbound_in_flight_.load(std::memory_order_relaxed) != 1) return false;
  // Until the call is written or queued, its reference keeps this connection alive; once queued,
  // the reactor may close the connection and delete the call at any moment.
  scoped_refptr<Connection> self(this);
  std::unique_lock<std::mutex> lock(write_mu_);
  if (write_closed_ || !write_queue_.empty()) return false;
  iovec iov[kMaxIovecs];
  const int n = call->FillIovecs(iov, kMaxIovecs);
  Result<size_t> written = transport_->Writev(iov, n);
  const size_t w = written.ok() ? *written : 0;
  if (w > 0) {
    bytes_sent_.fetch_add(w, std::memory_order_relaxed);
    if (MessengerMetrics* m = reactor_->metrics()) m->sent_bytes->IncrementBy(w);
    call->Advance(w);
  }
  if (call->finished()) {
    lock.unlock();
    call->TransferDone();  // deletes the call
    return true;
  }
  // The socket took part of it, or none, or failed: the reactor writes the rest (arming the
  // write watcher) or meets the error and closes the connection.
  VLOG(2) << "lone response to " << remote_.ToString() << ": " << w << " of " << call->total_bytes()
          << " bytes written by the worker, the reactor writes the rest";
  write_queue_.push_back(call);
  unsent_bytes_.fetch_add(call->total_bytes() - call->bytes_written(), std::memory_order_relaxed);
  last_write_progress_ = MonoTime::Now();
  lock.unlock();
  reactor_->RunOnReactor([self] { self->Flush(); });
  return true;
}

void Connection::ApplyBackpressure() {
  if (direction_ != Direction::kServer || state_ != State::kOpen) return;
  const size_t unsent = unsent_bytes_.load(std::memory_order_relaxed);
  if (!reads_paused_ && unsent > kPauseReadsAboveBytes) {
    reads_paused_ = true;
    ev_io_stop(reactor_->loop(), &read_watcher_);
    VLOG(1) << "pausing reads from " << remote_.ToString() << ": " << unsent
            << " response bytes unsent";
  } else if (reads_paused_ && unsent < kResumeReadsBelowBytes) {
    reads_paused_ = false;
    ev_io_start(reactor_->loop(), &read_watcher_);
  }
}

void Connection::Flush() {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed || state_ == State::kConnecting) return;
  scoped_refptr<Connection> self(this);
  // Transfers that left the queue, finished after unlocking: their callbacks may queue more.
  TransferQueue written, dropped;
  Status error;
  bool socket_full = false;
  {
    std::lock_guard<std::mutex> lock(write_mu_);
    iovec iov[kMaxIovecs];
    while (!write_queue_.empty()) {
      // Drop finished calls that never started out: nobody waits for them any more.
      OutboundTransfer* front = write_queue_.front();
      if (front->cancelled()) {
        write_queue_.pop_front();
        unsent_bytes_.fetch_sub(front->total_bytes(), std::memory_order_relaxed);
        dropped.push_back(front);
        continue;
      }
      // Gather consecutive transfers, stopping before any cancelled one.
      int n = 0;
      for (OutboundTransfer* t = write_queue_.front(); t != nullptr; t = TransferQueue::next(t)) {
        if (n == kMaxIovecs || t->cancelled()) break;
        n += t->FillIovecs(iov + n, kMaxIovecs - n);
      }
      Result<size_t> w = transport_->Writev(iov, n);
      if (!w.ok()) {
        error = w.status().CloneAndPrepend("write to " + remote_.ToString());
        break;
      }
      if (*w == 0) {
        socket_full = true;
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
  }
  while (!dropped.empty()) {
    dropped.pop_front()->TransferAborted(Status::Aborted("call finished before it was sent"));
  }
  while (!written.empty()) written.pop_front()->TransferDone();
  if (!error.ok()) {
    Shutdown(error);
    return;
  }
  ArmWriteWatcher(socket_full);
  ApplyBackpressure();
}

void Connection::ArmWriteWatcher(bool on) {
  if (on == write_armed_) return;
  write_armed_ = on;
  if (on) {
    ev_io_start(reactor_->loop(), &write_watcher_);
  } else {
    ev_io_stop(reactor_->loop(), &write_watcher_);
  }
}

// ---- Events.

void Connection::OnReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<Connection*>(w->data)->HandleReadable();
}

void Connection::OnWritable(struct ev_loop*, ev_io* w, int) {
  static_cast<Connection*>(w->data)->HandleWritable();
}

void Connection::OnNegotiationTimeout(struct ev_loop*, ev_timer* w, int) {
  auto* conn = static_cast<Connection*>(w->data);
  conn->Shutdown(Status::TimedOut(
      conn->state_ == State::kConnecting ? "connect timed out" : "negotiation timed out",
      conn->remote_.ToString()));
}

void Connection::HandleWritable() {
  scoped_refptr<Connection> self(this);
  if (state_ == State::kConnecting) {
    Status s = static_cast<TcpTransport*>(transport_.get())->socket()->GetSockError();
    if (!s.ok()) {
      Shutdown(s.CloneAndPrepend("connect to " + remote_.ToString()));
      return;
    }
    static_cast<TcpTransport*>(transport_.get())->socket()->SetNoDelay(true);
    state_ = State::kNegotiating;
    ArmWriteWatcher(false);
    ev_io_start(reactor_->loop(), &read_watcher_);
    SendNegotiationRequest();
    return;
  }
  ArmWriteWatcher(false);
  const uint64_t sent_before = bytes_sent();
  Flush();
  if (bytes_sent() != sent_before) {
    // Only here after a full socket: the clock read is rare.
    std::lock_guard<std::mutex> lock(write_mu_);
    last_write_progress_ = MonoTime::Now();
  }
}

void Connection::HandleReadable() {
  scoped_refptr<Connection> self(this);
  ReadIncoming();
}

bool Connection::ReadIncoming() {
  if (direction_ == Direction::kServer && preamble_received_ < kPreambleSize) {
    Status s = ReadPreamble();
    if (!s.ok()) {
      Shutdown(s);
      return false;
    }
    if (preamble_received_ < kPreambleSize) return true;
  }
  for (int i = 0; i < kMaxReadsPerEvent && state_ != State::kClosed && !reads_paused_; i++) {
    // writable_data() first: it makes the room (a block full up to a partial length prefix is
    // relocated there). Asked before it, writable_size() could be 0, and recv() of 0 bytes
    // returns 0, which reads as "peer closed" and dropped healthy connections.
    uint8_t* const buf = reader_.writable_data();
    const size_t room = reader_.writable_size();
    Result<size_t> got = transport_->Recv(buf, room);
    if (!got.ok()) {
      Status s = got.status();
      if (s.IsEndOfFile())
        s = Status::NetworkError("connection closed by peer", remote_.ToString());
      Shutdown(s);
      return false;
    }
    if (*got == 0) break;
    reader_.Commit(*got);
    bytes_received_ += *got;
    if (MessengerMetrics* m = reactor_->metrics()) m->received_bytes->IncrementBy(*got);
    last_activity_ = MonoTime::Now();
    BlockSlice frame;
    while (state_ != State::kClosed) {
      Result<bool> next = reader_.NextFrame(&frame);
      if (!next.ok()) {
        // Logged here (Shutdown only VLOGs): a peer breaking the protocol, e.g. a frame above
        // max_message_size, is the operator's only clue why the connection dropped.
        Status bad = next.status().CloneAndPrepend("bad frame from " + remote_.ToString());
        LOG(WARNING) << bad.ToString();
        Shutdown(bad);
        return false;
      }
      if (!*next) break;
      Status s = HandleFrame(std::move(frame));
      if (!s.ok()) {
        Status bad = s.CloneAndPrepend("bad frame from " + remote_.ToString());
        LOG(WARNING) << bad.ToString();
        Shutdown(bad);
        return false;
      }
    }
    if (*got < room) break;  // the socket is drained
  }
  return state_ != State::kClosed;
}

Status Connection::ReadPreamble() {
  Result<size_t> got =
      transport_->Recv(preamble_ + preamble_received_, kPreambleSize - preamble_received_);
  if (!got.ok()) {
    if (got.status().IsEndOfFile()) {
      return Status::NetworkError("connection closed during negotiation", remote_.ToString());
    }
    return got.status();
  }
  preamble_received_ += *got;
  bytes_received_ += *got;
  if (MessengerMetrics* m = reactor_->metrics()) m->received_bytes->IncrementBy(*got);
  if (preamble_received_ < kPreambleSize) return Status::OK();
  Status s = CheckPreamble(preamble_);
  if (!s.ok()) SendNegotiationResponse(s);
  return s;
}

Status Connection::HandleFrame(BlockSlice frame) {
  if (state_ == State::kNegotiating) return HandleNegotiationFrame(std::move(frame));
  if (direction_ == Direction::kServer) return HandleCallFrame(std::move(frame));
  return HandleResponseFrame(std::move(frame));
}

// ---- Negotiation.

void Connection::SendNegotiationRequest() {
  QueueTransfer(new BytesTransfer(BuildClientHello(reactor_->messenger()->name())));
  // Nothing the server can answer changes how frames are written on plain TCP, so the calls
  // follow the hello at once instead of a round trip later (the server reads frames in order:
  // the hello, then the calls). A refused negotiation closes the connection and fails them with
  // the server's reason, as it would have failed them waiting. A transport whose negotiation
  // changes the byte stream (TLS) must wait for the reply instead.
  SendPendingCalls();
}

void Connection::SendPendingCalls() {
  sending_calls_ = true;
  std::vector<scoped_refptr<OutboundCall>> pending;
  pending.swap(pending_calls_);
  for (auto& call : pending) {
    if (call->finished()) continue;
    OutboundCall* raw = call.get();
    awaiting_response_.emplace(raw->call_id(), std::move(call));
    raw->AddRef();  // the write queue's reference
    QueueTransfer(raw);
  }
}

void Connection::SendNegotiationResponse(const Status& error) {
  NegotiatePB empty;
  ErrorStatusPB::RpcErrorCodePB code = error.IsNotSupported()
                                           ? ErrorStatusPB::FATAL_VERSION_MISMATCH
                                           : ErrorStatusPB::FATAL_INVALID_FRAME;
  QueueTransfer(new BytesTransfer(BuildServerReply(empty, error, code)));
  Flush();
}

Status Connection::HandleNegotiationFrame(BlockSlice frame) {
  if (direction_ == Direction::kServer) {
    NegotiatePB request;
    Status s = ParseClientNegotiation(frame.slice, &request);
    if (!s.ok()) {
      SendNegotiationResponse(s);
      return s;
    }
    QueueTransfer(new BytesTransfer(BuildServerReply(request, Status::OK(), {})));
    MarkOpen();
    return Status::OK();
  }
  NegotiatePB reply;
  RRPC_RETURN_NOT_OK(ParseServerReply(frame.slice, &reply));
  MarkOpen();
  return Status::OK();
}

void Connection::MarkOpen() {
  state_ = State::kOpen;
  ev_timer_stop(reactor_->loop(), &negotiation_timer_);
  if (direction_ == Direction::kServer) {
    static_cast<TcpTransport*>(transport_.get())->socket()->SetNoDelay(true);
    return;
  }
  if (!sending_calls_) SendPendingCalls();
}

// ---- Calls and responses.

Status Connection::HandleCallFrame(BlockSlice frame) {
  auto call = std::make_unique<InboundCall>(scoped_refptr<Connection>(this));
  RRPC_RETURN_NOT_OK(call->ParseFrom(std::move(frame), last_activity_));
  if (call->call_id() < 0) {
    return Status::InvalidArgument("unexpected connection-level frame, call id " +
                                   std::to_string(call->call_id()));
  }
  inbound_in_flight_.fetch_add(1, std::memory_order_relaxed);
  reactor_->messenger()->QueueInboundCall(std::move(call));
  return Status::OK();
}

Status Connection::HandleResponseFrame(BlockSlice frame) {
  ResponseHeader header;
  Slice body, tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame.slice, &header, &body, &tail));
  auto it = awaiting_response_.find(header.call_id());
  if (it == awaiting_response_.end()) {
    // Usually a response that came after its call timed out.
    VLOG(1) << "response to unknown or finished call " << header.call_id() << " from "
            << remote_.ToString();
    return Status::OK();
  }
  scoped_refptr<OutboundCall> call = std::move(it->second);
  awaiting_response_.erase(it);
  call->FinishWithResponse(std::move(frame), header, body, tail, last_activity_);
  return Status::OK();
}

// ---- Teardown.

void Connection::Shutdown(const Status& reason) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed) return;
  scoped_refptr<Connection> self(this);
  VLOG(1) << (direction_ == Direction::kClient ? "client" : "server") << " connection to "
          << remote_.ToString() << " closing: " << reason.ToString();
  state_ = State::kClosed;
  struct ev_loop* loop = reactor_->loop();
  ev_io_stop(loop, &read_watcher_);
  ev_io_stop(loop, &write_watcher_);
  ev_timer_stop(loop, &negotiation_timer_);
  write_armed_ = false;
  TransferQueue unsent;
  {
    // After this no worker writes (TryWriteLoneResponse checks write_closed_ under the lock), so
    // the socket can close.
    std::lock_guard<std::mutex> lock(write_mu_);
    write_closed_ = true;
    unsent = write_queue_.TakeAll();
    unsent_bytes_.store(0, std::memory_order_relaxed);
  }
  transport_.reset(new TcpTransport(Socket()));  // closes the socket

  // Calls first (their callbacks see the failure), then the unsent bytes.
  std::vector<scoped_refptr<OutboundCall>> pending;
  pending.swap(pending_calls_);
  for (auto& call : pending) call->FinishWithError(reason);
  std::unordered_map<int32_t, scoped_refptr<OutboundCall>> awaiting;
  awaiting.swap(awaiting_response_);
  for (auto& [id, call] : awaiting) call->FinishWithError(reason);
  while (!unsent.empty()) unsent.pop_front()->TransferAborted(reason);
  if (MessengerMetrics* m = reactor_->metrics()) m->ConnectionClosed();
  reactor_->ConnectionClosed(this);
}

}  // namespace rrpc::rpc
