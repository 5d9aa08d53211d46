#include "rpc/core/connection.h"

#include <algorithm>
#include <limits>

#include "rpc/core/compression.h"
#include "rpc/core/constants.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/messenger_security.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/reactor.h"
#include "rpc/core/stream_state.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/transport/tls_transport.h"
#include "rrpc/rpc/messenger.h"

namespace rrpc::rpc {

namespace {
// Server side: a client that sends calls but does not read their responses would make the server
// buffer without bound. Above this many unsent response bytes the connection stops reading (no
// new calls from it) until the transport drains below the low mark.
constexpr size_t kPauseReadsAboveBytes = 8 << 20;
constexpr size_t kResumeReadsBelowBytes = 1 << 20;
// A connection paused for inbound memory reads again once it and its messenger are below this
// fraction of their limits (not just below them, which would flap on every call finished).
constexpr double kResumeReadsBelowMemoryFraction = 0.75;
}  // namespace

Connection::Connection(Reactor* reactor, Direction direction, std::unique_ptr<Transport> transport,
                       const Sockaddr& remote)
    : reactor_(reactor),
      direction_(direction),
      state_(direction == Direction::kClient ? State::kConnecting : State::kNegotiating),
      remote_(remote),
      options_(reactor->options()),
      transport_(std::move(transport)),
      caps_(transport_->capabilities()),
      negotiating_(std::make_unique<Negotiating>()),
      memory_("connection",
              direction == Direction::kServer
                  ? static_cast<int64_t>(options_.inbound_memory_per_connection)
                  : 0,
              direction == Direction::kServer
                  ? MessengerInternals::inbound_memory(*reactor->messenger())
                  : nullptr),
      created_(MonoTime::Now()),
      last_activity_(created_) {
  if (direction == Direction::kServer) {
    negotiating_->server = std::make_unique<ServerNegotiation>(
        AsNegotiationHost(), MessengerInternals::security(*reactor->messenger()),
        options_.result_tracker.enabled);
  } else {
    negotiating_->client = std::make_unique<ClientNegotiation>(
        AsNegotiationHost(), reactor->messenger_name(),
        MessengerInternals::security(*reactor->messenger())->auth_token());
  }
  MessengerMetrics* m = reactor_->metrics();
  if (m != nullptr) m->ConnectionOpened(/*accepted=*/direction == Direction::kServer);
}

Connection::~Connection() { DCHECK(state_ == State::kClosed) << "connection destroyed while open"; }

void Connection::Start() {
  DCHECK(reactor_->IsCurrentThread());
  deadlines_.Start();
  ev_timer_init(&negotiating_->timer, &Connection::OnNegotiationTimeout,
                options_.negotiation_timeout.ToSeconds(), 0.0);
  negotiating_->timer.data = this;
  ev_timer_start(reactor_->loop(), &negotiating_->timer);
  if (direction_ == Direction::kServer) {
    // Cannot fail on a stream transport, which every connection starts on.
    RRPC_CHECK_OK(transport_->ExpectPreamble(kPreambleSize));
  }
  transport_->Start(reactor_->loop(), this);
}

void Connection::InboundCallDone() {
  inbound_in_flight_.fetch_sub(1, std::memory_order_relaxed);
  reactor_->InboundCallDone();
}

size_t Connection::calls_in_flight() const {
  if (direction_ == Direction::kClient) return awaiting_response_.size() + pending_calls_.size();
  return static_cast<size_t>(inbound_in_flight_.load(std::memory_order_relaxed));
}

bool Connection::IsIdle() {
  if (calls_in_flight() != 0 || !writer_.nothing_staged()) return false;
  return writer_.QueueEmpty() && !caller_reads_.HasCall();
}

// ---- Client side: calls out.

void Connection::QueueOutboundCall(scoped_refptr<OutboundCall>&& call) {
  DCHECK(reactor_->IsCurrentThread());
  DCHECK(direction_ == Direction::kClient);
  if (state_ == State::kClosed) {
    call->FinishWithError(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  if (call->cancel_requested()) {  // cancelled on its way here: never sent
    call->FinishCancelled();
    return;
  }
  call->set_owner(this);
  deadlines_.Watch(call.get());
  if (call->finished()) return;  // deadline already passed and the callback ran
  if (call->report_connection()) call->set_connection(this);
  if (call->stream() != nullptr) {
    streams_.AddClient(call->stream(), state_ == State::kOpen && peer_streams_);
  }
  if (!sending_calls_) {
    call->set_waited_for_connection();
    pending_calls_.push_back(std::move(call));
    return;
  }
  OutboundCall* raw = call.get();
  awaiting_response_.Insert(raw->call_id(), std::move(call));
  raw->AddRef();  // the write queue's reference, dropped in TransferDone/TransferAborted
  writer_.Stage(raw);
  caller_reads_.EnsureReactorReads();  // its response is the reactor's to read
}

void Connection::QueueStreamFrame(OutboundTransfer* frame) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed) {
    frame->TransferAborted(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  writer_.Stage(frame);
}

void Connection::QueueResponse(InboundCall* call) {
  DCHECK(reactor_->IsCurrentThread());
  if (call->stream() != nullptr) streams_.OnServerAnswer(call);  // the answer ends the stream
  if (state_ == State::kClosed) {
    call->TransferAborted(Status::NetworkError("connection closed", remote_.ToString()));
    return;
  }
  writer_.Stage(call);
}

void Connection::OnCallTimeout(OutboundCall* call, void* arg) {
  auto* conn = static_cast<Connection*>(arg);
  DCHECK(conn->reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(conn);
  if (call->stream() != nullptr) conn->streams_.Remove(call->call_id());
  if (!conn->awaiting_response_.Erase(call->call_id())) {
    auto it = std::find_if(conn->pending_calls_.begin(), conn->pending_calls_.end(),
                           [call](const auto& c) { return c.get() == call; });
    if (it != conn->pending_calls_.end()) conn->pending_calls_.erase(it);
  }
  // A half-written frame stays in the write queue until complete, but the caller is answered
  // at its deadline all the same: waiting for the frame to drain used to hang the call for as
  // long as a stalled peer kept its receive window shut.
  if (call->started() && !call->OutboundTransfer::finished()) call->DetachUnsentPayload();
  conn->SendCancelFrame(*call);  // the server stops work on it too
  call->FinishTimedOut();
}

OutboundCall* Connection::FindWaitingCall(int32_t call_id) {
  if (scoped_refptr<OutboundCall>* call = awaiting_response_.Find(call_id)) return call->get();
  for (const auto& call : pending_calls_) {  // only while connecting: a handful
    if (call->call_id() == call_id) return call.get();
  }
  return nullptr;
}

void Connection::ApplyBackpressure() {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ != Direction::kServer || state_ == State::kClosed || fatal_error_sent_) return;
  // Called on every response queued and every flush: the common case is two comparisons. Memory
  // going over its limit is noticed where it grows, as bytes arrive (OnBytesReceived).
  const size_t unsent = writer_.unsent_bytes();
  if (!reads_paused_) {
    if (unsent > kPauseReadsAboveBytes) SetReadsPaused(true);
    return;
  }
  if (unsent < kResumeReadsBelowBytes && memory_.AllBelow(kResumeReadsBelowMemoryFraction)) {
    SetReadsPaused(false);
  }
}

void Connection::ReconsiderReading() {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ != Direction::kServer || state_ == State::kClosed || fatal_error_sent_) return;
  if (memory_.OverLimit()) {
    OnInboundMemoryOverLimit();
  } else {
    ApplyBackpressure();
  }
}

void Connection::OnInboundMemoryOverLimit() {
  if (memory_.limit() > 0 && memory_.consumption() > memory_.limit() &&
      inbound_in_flight_.load(std::memory_order_relaxed) == 0 && writer_.unsent_bytes() == 0) {
    // All it holds is one partial frame, already above the connection's limit: reading on would
    // break the limit, pausing would wait forever. Refuse it.
    if (MessengerMetrics* m = reactor_->metrics()) m->frames_refused->Increment();
    Status s = Status::InvalidArgument("frame from " + remote_.ToString() +
                                       " exceeds the connection's inbound memory limit of " +
                                       std::to_string(memory_.limit()) + " bytes");
    reactor_->LogPeerError(s);
    CloseWithFatalError(ErrorStatusPB::FATAL_INVALID_FRAME, s);
    return;
  }
  if (reads_paused_) return;
  if (MessengerMetrics* m = reactor_->metrics()) m->reads_paused_for_memory->Increment();
  SetReadsPaused(true);
}

void Connection::SetReadsPaused(bool paused) {
  reads_paused_ = paused;
  transport_->PauseReading(paused);
  // Memory frees on other threads (workers) and other connections: the reactor looks at its
  // paused connections again shortly (ReconsiderReading).
  reactor_->WatchPausedConnection(this, paused);
  VLOG(1) << (paused ? "pausing" : "resuming") << " reads from " << remote_.ToString() << ": "
          << writer_.unsent_bytes() << " response bytes unsent, " << memory_.consumption()
          << " inbound bytes held";
}

void Connection::SyncPartialCharge() {
  const size_t buffered = transport_->buffered_bytes();
  if (buffered == partial_charged_) return;
  if (partial_charged_ == 0) frame_progress_at_ = last_activity_;  // a frame begins
  memory_.Consume(static_cast<int64_t>(buffered) - static_cast<int64_t>(partial_charged_));
  partial_charged_ = buffered;
}

void Connection::CloseWithFatalError(ErrorStatusPB::RpcErrorCodePB code, const Status& reason) {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ == State::kClosed || fatal_error_sent_) return;
  fatal_error_sent_ = true;
  scoped_refptr<Connection> self(this);
  if (direction_ == Direction::kServer) {
    // Behind any responses still queued: a peer that reads them reads this last.
    SendConnectionBytes(BuildServerReply(NegotiatePB(), reason, code));
    writer_.Flush();
  }
  Shutdown(reason);
}

// ---- Transport events (reactor thread).

void Connection::OnTransportConnected() {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  state_ = State::kNegotiating;
  // Where nothing the server can answer changes how frames travel (plain TCP), the calls follow
  // the hello at once instead of a round trip later (the server reads frames in order: the
  // hello, then the calls). A refused negotiation closes the connection and fails them with the
  // server's reason, as it would have failed them waiting. Otherwise they wait for the reply.
  if (negotiating_->client->Start()) SendPendingCalls();
}

void Connection::OnBytesReceived(size_t bytes, MonoTime now) {
  DCHECK(reactor_->IsCurrentThread());
  bytes_received_ += bytes;
  last_activity_ = now;
  reactor_->write_turns().NoteReceived(this, now);
  if (MessengerMetrics* m = reactor_->metrics()) m->received_bytes->IncrementBy(bytes);
  if (direction_ == Direction::kServer) {
    SyncPartialCharge();
    if (memory_.OverLimit()) OnInboundMemoryOverLimit();
  }
}

void Connection::OnTransportFailed(const Status& reason) {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  if (state_ == State::kConnecting) {
    Shutdown(reason.CloneAndPrepend("connect to " + remote_.ToString()));
  } else if (state_ == State::kNegotiating && reason.IsNetworkError()) {
    // The reason stays: a TLS handshake failure says why (e.g. certificate verification).
    Shutdown(Status::NetworkError("connection closed during negotiation",
                                  remote_.ToString() + ": " + reason.message()));
  } else if (reason.IsTimedOut()) {
    // ETIMEDOUT from the socket: TCP_USER_TIMEOUT or keepalive gave up on the peer. A network
    // error, so the calls it fails are retriable elsewhere (RpcController::IsRetriable).
    Shutdown(Status::NetworkError("peer declared dead, " + remote_.ToString(), reason.message()));
  } else {
    Shutdown(reason.CloneAndPrepend(remote_.ToString()));
  }
}

void Connection::OnProtocolError(const Status& reason) {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  // Logged here (Shutdown only VLOGs): a peer breaking the protocol, e.g. a frame above
  // max_message_size, is the operator's only clue why the connection dropped. Rate-limited: a
  // hostile peer could otherwise write one log line per connection it opens.
  Status bad = reason.CloneAndPrepend("bad frame from " + remote_.ToString());
  reactor_->LogPeerError(bad);
  CloseWithFatalError(ErrorStatusPB::FATAL_INVALID_FRAME, bad);
}

void Connection::OnFrame(BlockSlice&& frame) {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ == Direction::kClient && state_ != State::kNegotiating) {
    // A response, the client's common case: no memory accounting below applies to it.
    Status s = HandleResponseFrame(std::move(frame));
    if (!s.ok()) OnProtocolError(s);
    writer_.FlushEarlyIfLarge();  // the next call its callback made
    return;
  }
  // Server side: the frame's bytes, counted in memory_ as the transport's partial frame until
  // now, pass to the call made of it (HandleCallFrame takes them) without touching the tracker;
  // what no call takes is released below.
  size_t charged = 0;
  if (direction_ == Direction::kServer) {
    frame_progress_at_ = last_activity_;
    charged = std::min(kFrameLengthSize + frame.slice.size(), partial_charged_);
    partial_charged_ -= charged;
  }
  Status s;
  if (state_ == State::kNegotiating) {
    HandleNegotiationFrame(frame.slice);
  } else if (direction_ == Direction::kServer) {
    s = HandleCallFrame(std::move(frame), &charged);
  } else {
    s = HandleResponseFrame(std::move(frame));
  }
  if (charged != 0) memory_.Release(static_cast<int64_t>(charged));
  if (!s.ok()) OnProtocolError(s);
  writer_.FlushEarlyIfLarge();  // an inline handler's response
}

// ---- Calls and responses.

inline void Connection::TakeInboundCall(InboundCall* call, size_t* charged) {
  if (peer_cancels_) cancels_.Track(call);
  call->HoldMemory(call->frame_bytes(), *charged);
  *charged = 0;
  inbound_in_flight_.fetch_add(1, std::memory_order_relaxed);
}

Status Connection::HandleCallFrame(BlockSlice&& frame, size_t* charged) {
  DCHECK(reactor_->IsCurrentThread());
  auto call = std::make_unique<InboundCall>(scoped_refptr<Connection>(this));
  RRPC_RETURN_NOT_OK(call->ParseFrom(std::move(frame), last_activity_));
  if (call->call_id() < 0) {
    // A control frame names no method (InboundCall::ParseFrom read no names for it).
    if (call->call_id() == kControlCallId && call->requested_method_name().empty()) {
      return HandleControlFrame(call->serialized_request());
    }
    return Status::InvalidArgument("unexpected connection-level frame, call id " +
                                   std::to_string(call->call_id()));
  }
  if (call->stream_flags() != 0) {  // a stream's frame, or a call that may open a stream
    if (call->is_stream_frame()) return HandleStreamFrame(*call);
    if (call->opens_stream()) return HandleStreamOpen(std::move(call), charged);
  }
  TakeInboundCall(call.get(), charged);
  reactor_->RouteInboundCall(std::move(call));
  return Status::OK();
}

Status Connection::HandleStreamOpen(std::unique_ptr<InboundCall> call, size_t* charged) {
  bool refuse_stream = false;
  const bool unknown_codec =
      call->stream_compression() != 0 && !IsKnownCompression(call->stream_compression());
  if (!unknown_codec) {
    Result<bool> added = streams_.AddServer(call.get(), call->stream_credit());
    RRPC_RETURN_NOT_OK(added.status());
    refuse_stream = !*added;
  }
  TakeInboundCall(call.get(), charged);
  if (refuse_stream) {
    call.release()->RespondFailure(
        ErrorStatusPB::ERROR_SERVER_TOO_BUSY,
        Status::ServiceUnavailable("too many open streams on this connection",
                                   "max_streams_per_connection"));
    return Status::OK();
  }
  if (unknown_codec) {
    const std::string codec = std::to_string(call->stream_compression());
    call.release()->RespondFailure(
        ErrorStatusPB::ERROR_INVALID_REQUEST,
        Status::InvalidArgument("stream compression codec unknown to this server", codec));
    return Status::OK();
  }
  reactor_->RouteInboundCall(std::move(call));
  return Status::OK();
}

Status Connection::HandleStreamFrame(const InboundCall& frame) {
  return streams_.OnFrame(frame.call_id(), frame.stream_flags(), frame.stream_credit(),
                          frame.frame_block(), frame.serialized_request(), frame.inbound_sidecars(),
                          frame.frame_compression());
}

Status Connection::HandleResponseFrame(BlockSlice&& frame) {
  DCHECK(reactor_->IsCurrentThread());
  thread_local ResponseHeaderFields header;  // decoding clears it; its vector keeps capacity
  Slice body, tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame.slice, &header, &body, &tail));
  if (header.stream_flags != 0) {  // a stream's frame; its final answer has none
    thread_local std::vector<Slice> sidecars;
    sidecars.clear();
    if (!header.sidecar_offsets.empty() || !tail.empty()) {
      RRPC_RETURN_NOT_OK(SplitSidecars(tail, header.sidecar_offsets, &sidecars));
    }
    return streams_.OnFrame(header.call_id, header.stream_flags, header.stream_credit, frame.block,
                            body, sidecars, header.has_compression ? &header.compression : nullptr);
  }
  if (!streams_.empty()) streams_.Remove(header.call_id);
  scoped_refptr<OutboundCall> call;
  if (!awaiting_response_.Erase(header.call_id, &call)) {
    // A synchronous caller's call written by the caller itself (CallerReads).
    scoped_refptr<OutboundCall> caller_call = caller_reads_.TakeAnswered(header.call_id);
    if (caller_call != nullptr) {
      caller_call->FinishWithResponse(std::move(frame), header, body, tail, last_activity_);
      return Status::OK();
    }
    // Usually a response that came after its call timed out.
    VLOG(1) << "response to unknown or finished call " << header.call_id << " from "
            << remote_.ToString();
    return Status::OK();
  }
  deadlines_.ForgetAnswered(header.call_id);
  call->FinishWithResponse(std::move(frame), header, body, tail, last_activity_);
  return Status::OK();
}

// ---- Control frames (docs/wire-format.md, "Control frames").

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
  // A synchronous caller's own write: whoever takes it finishes it.
  if (!found) found = caller_reads_.Take(call);
  if (!found) return;  // finished meanwhile by whoever held it
  if (call->stream() != nullptr) streams_.Remove(call->call_id());
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
  if (peer_cancels_) QueueControlFrame(ControlPB::CANCEL, call.call_id());
}

void Connection::SendHeldCancels() {
  std::vector<int32_t> held;
  held.swap(held_cancels_);
  if (!peer_cancels_) return;
  for (int32_t id : held) QueueControlFrame(ControlPB::CANCEL, id);
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

void Connection::QueueControlFrame(int kind, int32_t call_id) {
  RequestHeader header;
  header.set_call_id(kControlCallId);
  ControlPB control;
  control.set_kind(static_cast<ControlPB::Kind>(kind));
  if (call_id >= 0) control.add_call_ids(call_id);
  Result<BlockSlice> frame =
      SerializeFrameHead(header, control, 0, std::numeric_limits<uint32_t>::max());
  if (!frame.ok()) return;  // a few bytes: cannot exceed any limit
  writer_.Stage(new BytesTransfer(std::move(frame).value()));
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
  for (int32_t id : control.call_ids()) cancels_.Cancel(id, reactor_->metrics());
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
  DisarmResumer();
  // Kept (not reset) while negotiating: Shutdown may run inside the negotiation's timer or calls.
  if (negotiating_ != nullptr) ev_timer_stop(reactor_->loop(), &negotiating_->timer);
  deadlines_.Stop();  // every call waiting is failed below
  // After this no worker or caller writes (they find the writer closed under its lock), so the
  // transport can close.
  TransferQueue unsent = writer_.Close();
  bool caller_reading;
  scoped_refptr<OutboundCall> caller_call = caller_reads_.TakeOnClose(&caller_reading);
  // A caller reading the socket (ReadResponseAsCaller) is woken by the stream's end; the
  // descriptor stays until the connection goes, so it never reads a reused one.
  if (caller_reading) {
    transport_->CloseUnderCaller();
  } else {
    transport_->Close();
  }
  if (direction_ == Direction::kServer) {
    memory_.Release(static_cast<int64_t>(partial_charged_));  // the transport dropped it
    partial_charged_ = 0;
  }

  // Calls first (their callbacks see the failure), then the unsent bytes.
  std::vector<scoped_refptr<OutboundCall>> pending;
  pending.swap(pending_calls_);
  for (auto& call : pending) call->FinishWithError(reason);
  AwaitingMap awaiting;
  awaiting.swap(awaiting_response_);
  awaiting.ForEach(
      [&reason](int32_t, scoped_refptr<OutboundCall>& call) { call->FinishWithError(reason); });
  if (caller_call != nullptr) caller_call->FinishWithError(reason);
  streams_.CloseAll(reason);
  while (!unsent.empty()) unsent.pop_front()->TransferAborted(reason);
  if (MessengerMetrics* m = reactor_->metrics()) m->ConnectionClosed();
  reactor_->ConnectionClosed(this);
}

}  // namespace rrpc::rpc
