// A transport upgrade prepared off the reactor thread (TransportUpgrade::Prepare): its `ready`
// comes on the upgrade's thread and brings the negotiation back to the connection's reactor.
// Ownership: the negotiation keeps the upgrade while it prepares; the upgrade's own thread shares
// only what it makes (RDMA: rdma_upgrade.h). The way back holds no reference to the connection:
// the ResumeSlot names it until the reactor thread disarms it (negotiation over, or Shutdown,
// which every connection passes before it is destroyed and before its reactor stops), so a late
// `ready` finds nothing and posts nothing.
#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"

namespace rrpc::rpc {

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
