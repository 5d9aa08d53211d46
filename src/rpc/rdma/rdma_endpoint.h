// RdmaEndpoint: one connection's verbs resources in private-receive-queue mode: a completion
// channel and one CQ for sends and receives, an RC queue pair, and two registered block pools
// (receive blocks, all posted from the start: the peer's initial credits; send blocks). Made
// during the bootstrap (the QP's address goes into the bootstrap message), connected to the
// peer's QP once its message is in, then handed to the RdmaTransport. Member order is
// destruction order: the QP goes before the memory and the CQ it uses.
// One thread at a time: the connection's reactor, or a setup thread while the connection's
// upgrade lends it there (RdmaUpgrade: made, connected).
#pragma once

#include <memory>

#include "rpc/rdma/block_pool.h"
#include "rpc/rdma/srq/srq_context.h"
#include "rpc/rdma/verbs.h"
#include "rrpc/rpc/rdma.h"

namespace rrpc::rdma {

// Whether a QP on `local` reaches the peer whose GID is `remote` with a global route header:
// always on RoCE (Ethernet), on InfiniBand only when the peer is in another subnet (its GID's
// subnet prefix differs from ours; a zero GID is a peer that gave none).
bool NeedsGlobalRoute(const PortInfo& local, const Gid& remote);

class RdmaEndpoint {
 public:
  // The QP ends in INIT with every receive block posted (wr_id = block index).
  static Result<std::unique_ptr<RdmaEndpoint>> Create(Context* ctx, ProtectionDomain* pd,
                                                      const EndpointOptions& options);

  // SRQ mode: a QP whose receives come from `shared`'s SRQ and whose completions go to its CQs;
  // no memory of its own (the reactor's pools serve it). Ends in INIT.
  static Result<std::unique_ptr<RdmaEndpoint>> CreateShared(Context* ctx, ProtectionDomain* pd,
                                                            const EndpointOptions& options,
                                                            SrqContext* shared);

  // This side's address for the bootstrap message.
  const QpAddress& address() const { return address_; }
  // The port's GID entry the QP is addressed by: the port's default until UseGid, which the
  // bootstrap calls with the connection's own choice (gid_choice.h, ConnectionGid) before the
  // address goes out.
  const GidEntry& gid() const { return gid_; }
  void UseGid(const GidEntry& gid);
  // RTR/RTS, connected to `remote`.
  Status Connect(const QpAddress& remote, uint32_t path_mtu);
  // What Connect connects the QP with (the path: MTU, route, traffic class...), with `remote`'s
  // address; the path probe (path_probe.h) goes the same way.
  QpConnectParams ConnectParams(const QpAddress& remote, uint32_t path_mtu) const;

  const EndpointOptions& options() const { return options_; }
  PortInfo port() const { return ctx_->port(); }
  Context* context() const { return ctx_; }
  uint32_t inline_cap() const { return qp_->caps().max_inline_data; }
  uint32_t send_queue_depth() const { return qp_->caps().max_send_wr; }

  // nullptr in SRQ mode (the SrqContext's).
  CompletionChannel* channel() const { return channel_.get(); }
  CompletionQueue* cq() const { return cq_.get(); }
  // The protection domain the QP and the pools belong to (the device's; outlives the endpoint).
  ProtectionDomain* pd() const { return pd_; }
  QueuePair* qp() const { return qp_.get(); }
  RegisteredBlockPool* receive_pool() const { return receive_pool_.get(); }
  RegisteredBlockPool* send_pool() const { return send_pool_.get(); }
  // Posts receive block `index` again.
  Status PostReceive(uint32_t index);

 private:
  RdmaEndpoint(Context* ctx, ProtectionDomain* pd, const EndpointOptions& options)
      : ctx_(ctx), pd_(pd), options_(options) {}

  Context* const ctx_;
  ProtectionDomain* const pd_;
  void SetAddress();

  const EndpointOptions options_;
  QpAddress address_;
  GidEntry gid_;
  std::unique_ptr<CompletionChannel> channel_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<RegisteredBlockPool> receive_pool_;
  std::unique_ptr<RegisteredBlockPool> send_pool_;
  std::unique_ptr<QueuePair> qp_;
};

}  // namespace rrpc::rdma
