#include "rpc/core/connection.h"

#include <algorithm>

#include "rpc/core/constants.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/messenger_security.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/reactor.h"
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
  ev_timer_init(&call_deadline_timer_, &Connection::OnCallDeadlineTimer, 0.0, 0.0);
  call_deadline_timer_.data = this;
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

Status Connection::UpgradeTransport(const TransportMaker& make) {
  DCHECK(reactor_->IsCurrentThread());
  Result<DetachedStream> stream = transport_->Detach();
  Result<std::unique_ptr<Transport>> next =
      stream.ok() ? make(std::move(stream).value()) : stream.status();
  if (!next.ok()) {
    Status s = next.status().CloneAndPrepend("transport upgrade");
    Shutdown(s);
    return s;
  }
  {
    MutexLock lock(write_mu_);
    // The detached transport may be on the stack (this runs from its callback): keep it.
    retired_transports_.push_back(std::move(transport_));
    transport_ = std::move(next).value();
    caps_ = transport_->capabilities();
  }
  write_armed_ = false;
  transport_->Start(reactor_->loop(), this);
  if (reads_paused_) transport_->PauseReading(true);
  Flush();  // what waited in the queue goes out over the new transport
  return Status::OK();
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
  if (calls_in_flight() != 0) return false;
  if (!staged_.empty()) return false;
  MutexLock lock(write_mu_);
  return write_queue_.empty() && caller_call_ == nullptr;
}

bool Connection::IsWriteStalledSince(MonoTime since) {
  MutexLock lock(write_mu_);
  return !write_queue_.empty() && last_write_progress_ < since;
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
  WatchDeadline(call.get());
  if (call->finished()) return;  // deadline already passed and the callback ran
  if (call->report_connection()) call->set_connection(this);
  if (!sending_calls_) {
    call->set_waited_for_connection();
    pending_calls_.push_back(std::move(call));
    return;
  }
  OutboundCall* raw = call.get();
  awaiting_response_.Insert(raw->call_id(), std::move(call));
  raw->AddRef();  // the write queue's reference, dropped in TransferDone/TransferAborted
  QueueTransfer(raw);
  EnsureReactorReads();  // its response is the reactor's to read
}

void Connection::OnCallTimeout(OutboundCall* call, void* arg) {
  auto* conn = static_cast<Connection*>(arg);
  DCHECK(conn->reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(conn);
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

void Connection::ApplyBackpressure() {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ != Direction::kServer || state_ == State::kClosed || fatal_error_sent_) return;
  // Called on every response queued and every flush: the common case is two comparisons. Memory
  // going over its limit is noticed where it grows, as bytes arrive (OnBytesReceived).
  const size_t unsent = unsent_bytes_.load(std::memory_order_relaxed);
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
      inbound_in_flight_.load(std::memory_order_relaxed) == 0 &&
      unsent_bytes_.load(std::memory_order_relaxed) == 0) {
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
          << unsent_bytes_.load(std::memory_order_relaxed) << " response bytes unsent, "
          << memory_.consumption() << " inbound bytes held";
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
    Flush();
  }
  Shutdown(reason);
}

// ---- Transport events (reactor thread).

void Connection::OnNegotiationTimeout(struct ev_loop*, ev_timer* w, int) {
  auto* conn = static_cast<Connection*>(w->data);
  conn->Shutdown(Status::TimedOut(
      conn->state_ == State::kConnecting ? "connect timed out" : "negotiation timed out",
      conn->remote_.ToString()));
}

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

void Connection::OnPreamble(Slice preamble) {
  DCHECK(reactor_->IsCurrentThread());
  DCHECK(negotiating_ != nullptr && negotiating_->server != nullptr);
  SyncPartialCharge();  // the preamble is consumed: it holds no memory
  Result<ServerNegotiation::Next> next = negotiating_->server->OnPreamble(preamble);
  if (!next.ok()) {
    FailNegotiation(next.status());
  } else if (*next == ServerNegotiation::Next::kStartTls) {
    StartServerTls(preamble);
  }
}

void Connection::StartServerTls(Slice hello_start) {
  scoped_refptr<Connection> self(this);
  // Copied now: the slice lives in the buffer the detach takes away.
  std::string replay(reinterpret_cast<const char*>(hello_start.data()), hello_start.size());
  const security::TlsContext& context =
      *MessengerInternals::security(*reactor_->messenger())->tls();
  StreamTransportOptions stream;
  stream.max_frame_size = options_.max_message_size;
  stream.read_block_size = options_.read_block_size;
  UpgradeTransport([&](DetachedStream detached) -> Result<std::unique_ptr<Transport>> {
    detached.unread.insert(0, replay);
    RRPC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> tls,
                          TlsTransport::NewServer(std::move(detached), context, stream));
    RRPC_RETURN_NOT_OK(tls->ExpectPreamble(kPreambleSize));  // the preamble again, inside TLS
    return tls;
  });
}

void Connection::OnFrame(BlockSlice&& frame) {
  DCHECK(reactor_->IsCurrentThread());
  if (direction_ == Direction::kClient && state_ != State::kNegotiating) {
    // A response, the client's common case: no memory accounting below applies to it.
    Status s = HandleResponseFrame(std::move(frame));
    if (!s.ok()) OnProtocolError(s);
    FlushEarlyIfLarge();  // the next call its callback made
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
  FlushEarlyIfLarge();  // an inline handler's response
}

void Connection::FlushEarly() {
  // Writes wait for the end of the loop iteration, to go out together, but a large one gains
  // nothing from company and loses the time its peer could spend on it while this loop reads
  // on: a read loop of large frames answered inline sent each answer only after its last read
  // (64 KiB sidecar echo: the peers took turns instead of working at once). On transports whose
  // writes may overlap their reads (TCP); a frame whose callbacks closed the connection flushes
  // nothing.
  if (write_armed_ || !caps_.concurrent_write) return;
  Flush();
}

// ---- Negotiation (negotiation.h does the talking).

void Connection::SendConnectionBytes(BlockSlice bytes) {
  DCHECK(reactor_->IsCurrentThread());
  QueueTransferNow(new BytesTransfer(std::move(bytes)));
}

void Connection::HandleNegotiationFrame(Slice frame) {
  DCHECK(reactor_->IsCurrentThread());
  DCHECK(negotiating_ != nullptr);
  Negotiating& n = *negotiating_;
  AfterNegotiationStep(n.server ? n.server->OnFrame(frame) : n.client->OnFrame(frame));
}

void Connection::AfterNegotiationStep(Result<bool> done) {
  Negotiating& n = *negotiating_;
  if (!done.ok()) {
    FailNegotiation(done.status());
    return;
  }
  if (!*done) return;
  std::unique_ptr<TransportUpgrade> upgrade =
      n.server ? std::move(n.server->peer().upgrade) : std::move(n.client->peer().upgrade);
  MarkOpen(std::move(upgrade));
}

std::unique_ptr<TransportUpgrade> Connection::NewTransportUpgrade() {
  // RDMA carries bytes in the clear: a connection that negotiated TLS stays on it, so an upgrade
  // can never strip the encryption the peers agreed on.
  if (transport_->security().encrypted) return nullptr;
  return reactor_->transport_factory()->NewUpgrade(direction_ == Direction::kServer, remote_,
                                                   transport_->LocalAddress());
}

void Connection::FailNegotiation(const Status& reason) {
  scoped_refptr<Connection> self(this);
  Status s = reason.CloneAndPrepend("negotiation with " + remote_.ToString());
  // A client refused by its server (e.g. at its connection limit) is no protocol error.
  reactor_->LogPeerError(s, /*count=*/direction_ == Direction::kServer);
  Flush();  // a server's refusal goes out before the close
  Shutdown(s);
}

void Connection::SendPendingCalls() {
  DCHECK(reactor_->IsCurrentThread());
  sending_calls_ = true;
  {
    MutexLock lock(write_mu_);
    callers_may_write_ = true;
  }
  std::vector<scoped_refptr<OutboundCall>> pending;
  pending.swap(pending_calls_);
  for (auto& call : pending) {
    if (call->finished()) continue;
    OutboundCall* raw = call.get();
    awaiting_response_.Insert(raw->call_id(), std::move(call));
    raw->AddRef();  // the write queue's reference
    QueueTransfer(raw);
  }
}

void Connection::MarkOpen(std::unique_ptr<TransportUpgrade> upgrade) {
  DCHECK(reactor_->IsCurrentThread());
  scoped_refptr<Connection> self(this);
  state_ = State::kOpen;
  DisarmResumer();
  ev_timer_stop(reactor_->loop(), &negotiating_->timer);
  const NegotiatedPeer& peer =
      negotiating_->server ? negotiating_->server->peer() : negotiating_->client->peer();
  identity_ = peer.identity;
  peer_cancels_ =
      std::find(peer.features.begin(), peer.features.end(), CANCELLATION) != peer.features.end();
  peer_tracks_results_.store(
      std::find(peer.features.begin(), peer.features.end(), EXACTLY_ONCE) != peer.features.end(),
      std::memory_order_release);
  negotiating_.reset();
  if (upgrade != nullptr) {
    // The negotiation bytes (a server's reply and bootstrap answer) leave over the old transport
    // first; they are a few hundred bytes on a fresh socket, so they always go at once. Were they
    // ever to stay queued, the connection closes rather than send them over the new transport.
    Flush();
    bool drained;
    {
      MutexLock lock(write_mu_);
      drained = write_queue_.empty();
    }
    if (state_ == State::kClosed) return;
    if (!drained) {
      Shutdown(Status::NetworkError("transport upgrade: negotiation bytes not yet written",
                                    remote_.ToString()));
      return;
    }
    TransportUpgrade* u = upgrade.get();
    if (!UpgradeTransport([u](DetachedStream stream) {
           return u->Upgrade(std::move(stream));
         }).ok()) {
      return;  // shut down with the reason
    }
  }
  if (direction_ == Direction::kClient && !sending_calls_) SendPendingCalls();
  if (!held_cancels_.empty()) SendHeldCancels();
}

// ---- Calls and responses.

namespace {
// Reactor thread: puts `call` in the first free slot of `slots` among `probes` places from its
// id. Only this thread fills a slot: one seen empty stays empty until it does.
template <typename Slots>
bool PlaceInCancelSlot(Slots* slots, int probes, InboundCall* call) {
  const int32_t id = call->call_id();
  for (int p = 0; p < probes; p++) {
    const int i = Slots::Index(id, p);
    std::atomic<InboundCall*>& slot = slots->call[i];
    if (slot.load(std::memory_order_relaxed) != nullptr) continue;
    slots->call_id[i] = id;
    slot.store(call, std::memory_order_release);
    call->set_cancel_track(InboundCall::CancelTrack::kSlot, &slot);
    return true;
  }
  return false;
}

template <typename Slots>
std::atomic<InboundCall*>* FindInCancelSlots(Slots* slots, int probes, int32_t id) {
  if (slots == nullptr) return nullptr;
  for (int p = 0; p < probes; p++) {
    const int i = Slots::Index(id, p);
    if (slots->call_id[i] == id && slots->call[i].load(std::memory_order_acquire) != nullptr) {
      return &slots->call[i];
    }
  }
  return nullptr;
}
}  // namespace

bool Connection::TrackForCancelInSlot(InboundCall* call) {
  if (cancel_slots_ == nullptr) return false;  // made with the first call (TrackForCancelInMap)
  if (PlaceInCancelSlot(cancel_slots_.get(), 1, call)) return true;
  if (wide_cancel_slots_ == nullptr) {
    wide_cancel_slots_ = std::make_unique<CancelSlots<kWideCancelSlots>>();
  }
  return PlaceInCancelSlot(wide_cancel_slots_.get(), kCancelProbes, call);
}

std::atomic<InboundCall*>* Connection::FindCancelSlot(int32_t call_id) {
  std::atomic<InboundCall*>* slot = FindInCancelSlots(cancel_slots_.get(), 1, call_id);
  if (slot != nullptr) return slot;
  return FindInCancelSlots(wide_cancel_slots_.get(), kCancelProbes, call_id);
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
  if (peer_cancels_) TrackForCancel(call.get());
  call->HoldMemory(call->frame_bytes(), *charged);
  *charged = 0;
  inbound_in_flight_.fetch_add(1, std::memory_order_relaxed);
  reactor_->RouteInboundCall(std::move(call));
  return Status::OK();
}

Status Connection::HandleResponseFrame(BlockSlice&& frame) {
  DCHECK(reactor_->IsCurrentThread());
  thread_local ResponseHeaderFields header;  // decoding clears it; its vector keeps capacity
  Slice body, tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame.slice, &header, &body, &tail));
  scoped_refptr<OutboundCall> call;
  if (!awaiting_response_.Erase(header.call_id, &call)) {
    scoped_refptr<OutboundCall> caller_call;
    {
      MutexLock lock(write_mu_);
      if (caller_call_ != nullptr && caller_call_->call_id() == header.call_id) {
        caller_call = std::move(caller_call_);
        caller_call_ = nullptr;
        MaybeParkReads();  // its next call's response: read by its caller
      }
    }
    if (caller_call != nullptr) {
      caller_call->FinishWithResponse(std::move(frame), header, body, tail, last_activity_);
      return Status::OK();
    }
    // Usually a response that came after its call timed out.
    VLOG(1) << "response to unknown or finished call " << header.call_id << " from "
            << remote_.ToString();
    return Status::OK();
  }
  ForgetAnsweredDeadlines(header.call_id);
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
  DisarmResumer();
  // Kept (not reset) while negotiating: Shutdown may run inside the negotiation's timer or calls.
  if (negotiating_ != nullptr) ev_timer_stop(reactor_->loop(), &negotiating_->timer);
  ev_timer_stop(reactor_->loop(), &call_deadline_timer_);
  call_deadlines_.clear();  // every call waiting is failed below
  write_armed_ = false;
  TransferQueue unsent;
  scoped_refptr<OutboundCall> caller_call;
  bool caller_reading;
  {
    // After this no worker writes (TryWriteLoneResponse checks write_closed_ under the lock), so
    // the transport can close.
    MutexLock lock(write_mu_);
    write_closed_ = true;
    unsent = write_queue_.TakeAll();
    unsent.Append(staged_.TakeAll());
    caller_call = std::move(caller_call_);
    caller_call_ = nullptr;
    unsent_bytes_.store(0, std::memory_order_relaxed);
    caller_reading = read_owner_.load(std::memory_order_relaxed) == ReadOwner::kCaller;
  }
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
  while (!unsent.empty()) unsent.pop_front()->TransferAborted(reason);
  if (MessengerMetrics* m = reactor_->metrics()) m->ConnectionClosed();
  reactor_->ConnectionClosed(this);
}

}  // namespace rrpc::rpc
