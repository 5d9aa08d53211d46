#include "rpc/rdma/bootstrap/path_probe.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace rrpc::rdma {

Result<std::unique_ptr<PathProbe>> PathProbe::Create(Context* ctx, ProtectionDomain* pd,
                                                     bool receiver) {
  std::unique_ptr<PathProbe> p(new PathProbe());
  p->buffer_.assign(kMaxBytes, 0);
  RRPC_ASSIGN_OR_RETURN(p->mr_, pd->RegisterMemory(p->buffer_.data(), p->buffer_.size()));
  // One send or one receive, one completion (a CQ deeper than asked is fine).
  RRPC_ASSIGN_OR_RETURN(p->cq_, ctx->CreateCq(2, nullptr));
  QpInitAttr attr;
  attr.send_cq = attr.recv_cq = p->cq_.get();
  attr.caps.max_send_wr = 1;
  attr.caps.max_recv_wr = 1;
  attr.caps.max_send_sge = 1;
  attr.caps.max_recv_sge = 1;
  attr.caps.max_inline_data = 0;
  RRPC_ASSIGN_OR_RETURN(p->qp_, pd->CreateQp(attr));
  RRPC_RETURN_NOT_OK(p->qp_->ToInit(ctx->port().port, ctx->port().pkey_index));
  if (receiver) {
    Sge sge{reinterpret_cast<uint64_t>(p->buffer_.data()), kMaxBytes, p->mr_->lkey()};
    RRPC_RETURN_NOT_OK(p->qp_->PostRecv(RecvWr{0, &sge, 1}));
  }
  return p;
}

PathProbe::~PathProbe() = default;

Status PathProbe::Connect(QpConnectParams params, uint32_t remote_qp_num) {
  params.remote.qp_num = remote_qp_num;
  return qp_->Connect(params);
}

Status PathProbe::RoundTrip(uint32_t bytes, MonoDelta timeout) {
  bytes = std::min(bytes, kMaxBytes);
  Sge sge{reinterpret_cast<uint64_t>(buffer_.data()), bytes, mr_->lkey()};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  RRPC_RETURN_NOT_OK(qp_->PostSend(wr));
  // The acknowledgement of one message: a round trip, microseconds on a working fabric. Polled
  // (the probe has no channel); after the first 100 us, every 100 us.
  const MonoTime start = MonoTime::Now();
  const MonoTime deadline = start + timeout;
  for (;;) {
    WorkCompletion wc;
    RRPC_ASSIGN_OR_RETURN(int n, cq_->Poll(&wc, 1));
    if (n == 1) {
      if (wc.status == WcStatus::kSuccess) return Status::OK();
      return Status::NetworkError("RDMA path probe failed", WcStatusName(wc.status));
    }
    const MonoTime now = MonoTime::Now();
    if (now >= deadline) {
      (void)qp_->ToError();
      return Status::NetworkError("RDMA path probe: no acknowledgement within " +
                                  timeout.ToString());
    }
    if (now - start > MonoDelta::FromMicroseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace rrpc::rdma
