// Connection's negotiation (connection.h; negotiation.h does the talking): the connection as the
// negotiation's host (NegotiationHost), its timeout, a server's switch to TLS, the upgrade of the
// transport both sides agreed on, and the opening of the connection. Reactor thread, but for the
// way back from an upgrade prepared on another thread (ResumeSlot below).
#include <algorithm>

#include "rpc/core/connection.h"
#include "rpc/core/constants.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/messenger_security.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/reactor.h"
#include "rpc/transport/tls_transport.h"
#include "rrpc/rpc/messenger.h"

namespace rrpc::rpc {

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
    MutexLock lock(writer_.mu());
    // The detached transport may be on the stack (this runs from its callback): keep it.
    retired_transports_.push_back(std::move(transport_));
    transport_ = std::move(next).value();
    caps_ = transport_->capabilities();
  }
  writer_.OnTransportReplaced();
  transport_->Start(reactor_->loop(), this);
  if (reads_paused_) transport_->PauseReading(true);
  writer_.Flush();  // what waited in the queue goes out over the new transport
  return Status::OK();
}

void Connection::OnNegotiationTimeout(struct ev_loop*, ev_timer* w, int) {
  auto* conn = static_cast<Connection*>(w->data);
  conn->Shutdown(Status::TimedOut(
      conn->state_ == State::kConnecting ? "connect timed out" : "negotiation timed out",
      conn->remote_.ToString()));
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

void Connection::SendConnectionBytes(BlockSlice bytes) {
  DCHECK(reactor_->IsCurrentThread());
  writer_.QueueNow(new BytesTransfer(std::move(bytes)));
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
  caller_reads_.AllowWrites();
  std::vector<scoped_refptr<OutboundCall>> pending;
  pending.swap(pending_calls_);
  for (auto& call : pending) {
    if (call->finished()) continue;
    OutboundCall* raw = call.get();
    awaiting_response_.Insert(raw->call_id(), std::move(call));
    raw->AddRef();  // the write queue's reference
    writer_.Stage(raw);
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
  peer_streams_ =
      std::find(peer.features.begin(), peer.features.end(), STREAMS) != peer.features.end();
  peer_tracks_results_.store(
      std::find(peer.features.begin(), peer.features.end(), EXACTLY_ONCE) != peer.features.end(),
      std::memory_order_release);
  peer_reads_compression_.store(
      std::find(peer.features.begin(), peer.features.end(), COMPRESSION) != peer.features.end(),
      std::memory_order_release);
  negotiating_.reset();
  if (upgrade != nullptr) {
    // The negotiation bytes (a server's reply and bootstrap answer) leave over the old transport
    // first; they are a few hundred bytes on a fresh socket, so they always go at once. Were they
    // ever to stay queued, the connection closes rather than send them over the new transport.
    Flush();
    const bool drained = writer_.QueueEmpty();
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
  if (direction_ == Direction::kClient && !streams_.empty()) streams_.OnPeerReady(peer_streams_);
}

// ---- A transport upgrade prepared off the reactor thread (TransportUpgrade::Prepare, and on the
// client PrepareAccept).
// Its `ready` comes on the upgrade's thread and brings the negotiation back to the connection's
// reactor. Ownership: the negotiation keeps the upgrade while it prepares; the upgrade's own thread
// shares only what it makes (RDMA: rdma_upgrade.h). The way back holds no reference to the
// connection: the ResumeSlot names it until the reactor thread disarms it (negotiation over, or
// Shutdown, which every connection passes before it is destroyed and before its reactor stops), so
// a late `ready` finds nothing and posts nothing.

struct Connection::ResumeSlot {
  Mutex mu;
  Connection* connection RRPC_GUARDED_BY(mu) = nullptr;
};

std::function<void()> Connection::NegotiationResumer() {
  DCHECK(reactor_->IsCurrentThread());
  if (resume_slot_ == nullptr) {
    resume_slot_ = std::make_shared<ResumeSlot>();
    MutexLock lock(resume_slot_->mu);
    resume_slot_->connection = this;
  }
  return [slot = resume_slot_] {
    // Posted under the slot's lock: the reactor disarms the slot (under it) before it stops, so
    // the reactor named here is alive.
    MutexLock lock(slot->mu);
    if (slot->connection == nullptr) return;
    slot->connection->reactor()->RunOnReactor([slot] {
      Connection* c;
      {
        MutexLock lock(slot->mu);
        c = slot->connection;  // disarmed only on this thread: valid for this task
      }
      if (c != nullptr) c->ResumeNegotiation();
    });
  };
}

void Connection::DisarmResumer() {
  if (resume_slot_ == nullptr) return;
  MutexLock lock(resume_slot_->mu);
  resume_slot_->connection = nullptr;
}

void Connection::ResumeNegotiation() {
  DCHECK(reactor_->IsCurrentThread());
  if (state_ != State::kNegotiating || negotiating_ == nullptr) return;
  scoped_refptr<Connection> self(this);
  Negotiating& n = *negotiating_;
  AfterNegotiationStep(n.server ? n.server->Resume() : n.client->Resume());
}

}  // namespace rrpc::rpc
