#include "rpc/rdma/rdma_endpoint.h"

#include <algorithm>
#include <cstring>
#include <random>

namespace rrpc::rdma {

Result<std::unique_ptr<RdmaEndpoint>> RdmaEndpoint::Create(Context* ctx, ProtectionDomain* pd,
                                                           const EndpointOptions& o) {
  if (o.receive_buffers < 4 || o.send_buffers < 2 || o.buffer_size < 64) {
    return Status::InvalidArgument("RDMA endpoint needs >= 4 receive and >= 2 send buffers");
  }
  std::unique_ptr<RdmaEndpoint> ep(new RdmaEndpoint(ctx, pd, o));
  RRPC_ASSIGN_OR_RETURN(ep->channel_, ctx->CreateChannel());
  RRPC_ASSIGN_OR_RETURN(
      ep->receive_pool_,
      RegisteredBlockPool::Create(pd, o.receive_buffers + o.spare_receive_buffers, o.buffer_size));
  RRPC_ASSIGN_OR_RETURN(ep->send_pool_,
                        RegisteredBlockPool::Create(pd, o.send_buffers, o.buffer_size));
  QpInitAttr attr;
  attr.caps.max_send_wr = o.send_buffers;  // one send in flight per send block
  attr.caps.max_recv_wr = o.receive_buffers;
  attr.caps.max_send_sge = std::max(1u, o.max_send_sge);
  attr.caps.max_inline_data = o.max_inline;
  // Every completion must fit: one per posted receive and one per send the QP lets us post (the
  // transport fills the send queue the device granted, which may be deeper than asked: mlx5
  // rounds up). The CQ is sized for the request first; if the grant is deeper, made again.
  // Its async events (a fatal or access error) go to the connection (async_events.h).
  attr.context = ep.get();
  auto entries = [&o](const QpCaps& granted) {
    return static_cast<int>(o.receive_buffers + granted.max_send_wr + 1);
  };
  RRPC_ASSIGN_OR_RETURN(ep->cq_, ctx->CreateCq(entries(attr.caps), ep->channel_.get()));
  attr.send_cq = attr.recv_cq = ep->cq_.get();
  RRPC_ASSIGN_OR_RETURN(ep->qp_, pd->CreateQp(attr));
  if (ep->cq_->capacity() < entries(ep->qp_->caps())) {
    const int needed = entries(ep->qp_->caps());
    ep->qp_.reset();  // before its CQ
    RRPC_ASSIGN_OR_RETURN(ep->cq_, ctx->CreateCq(needed, ep->channel_.get()));
    attr.send_cq = attr.recv_cq = ep->cq_.get();
    RRPC_ASSIGN_OR_RETURN(ep->qp_, pd->CreateQp(attr));
    if (ep->cq_->capacity() < entries(ep->qp_->caps())) {
      return Status::RuntimeError("RDMA: the device grants a deeper send queue on every try");
    }
  }
  RRPC_RETURN_NOT_OK(ep->qp_->ToInit(ctx->port().port, ctx->port().pkey_index));
  for (uint32_t i = 0; i < o.receive_buffers; ++i) {
    uint32_t index;
    ep->receive_pool_->Take(&index);
    RRPC_RETURN_NOT_OK(ep->PostReceive(index));
  }
  ep->SetAddress();
  return ep;
}

Result<std::unique_ptr<RdmaEndpoint>> RdmaEndpoint::CreateShared(Context* ctx, ProtectionDomain* pd,
                                                                 const EndpointOptions& o,
                                                                 SrqContext* shared) {
  std::unique_ptr<RdmaEndpoint> ep(new RdmaEndpoint(ctx, pd, o));
  QpInitAttr attr;
  attr.send_cq = shared->send_cq();
  attr.recv_cq = shared->recv_cq();
  attr.srq = shared->srq();
  attr.caps.max_send_wr = o.send_buffers;  // this connection's sends in flight, at most
  attr.caps.max_recv_wr = 0;
  attr.caps.max_inline_data = o.max_inline;
  attr.context = shared;  // its async events (last WQE reached) go to the context
  RRPC_ASSIGN_OR_RETURN(ep->qp_, pd->CreateQp(attr));
  RRPC_RETURN_NOT_OK(ep->qp_->ToInit(ctx->port().port, ctx->port().pkey_index));
  ep->SetAddress();
  return ep;
}

void RdmaEndpoint::SetAddress() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  address_.qp_num = qp_->qp_num();
  const PortInfo port = ctx_->port();  // as last read: a LID or GID change reaches new QPs
  address_.lid = port.lid;
  gid_ = {port.gid_index, port.gid, port.gid_type};
  address_.gid = gid_.gid;
  address_.psn = rng() & 0xFFFFFF;
}

void RdmaEndpoint::UseGid(const GidEntry& gid) {
  gid_ = gid;
  address_.gid = gid.gid;
}

Status RdmaEndpoint::PostReceive(uint32_t index) {
  Sge sge = receive_pool_->sge(index, receive_pool_->block_size());
  return qp_->PostRecv(RecvWr{index, &sge, 1});
}

bool NeedsGlobalRoute(const PortInfo& local, const Gid& remote) {
  if (local.ethernet) return true;
  static const Gid kZero{};
  if (remote == kZero) return false;
  return memcmp(local.gid.data(), remote.data(), 8) != 0;  // the subnet prefix
}

Status RdmaEndpoint::Connect(const QpAddress& remote, uint32_t path_mtu) {
  return qp_->Connect(ConnectParams(remote, path_mtu));
}

QpConnectParams RdmaEndpoint::ConnectParams(const QpAddress& remote, uint32_t path_mtu) const {
  QpConnectParams p;
  p.remote = remote;
  p.local_psn = address_.psn;
  const PortInfo port = ctx_->port();
  p.path_mtu = std::min(path_mtu, port.active_mtu);
  p.rnr_retry = options_.rnr_retry;
  p.timeout = options_.ack_timeout;
  p.port = port.port;
  p.gid_index = gid_.index;
  p.global = NeedsGlobalRoute(port, remote.gid);
  p.traffic_class = options_.traffic_class;
  p.flow_label = ConnectionFlowLabel(address_.qp_num, remote.qp_num);
  p.service_level = options_.service_level;
  return p;
}

}  // namespace rrpc::rdma
