#include "rpc/rdma/bootstrap/path_probe.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "rpc/rdma/bootstrap/probe_responder.h"

namespace rrpc::rdma {

Result<std::unique_ptr<PathProbe>> PathProbe::Create(Context* ctx, ProtectionDomain* pd,
                                                     ProbeResponder* responder) {
  std::unique_ptr<PathProbe> p(new PathProbe());
  p->buffer_.assign(2 * kMaxBytes, 0);
  RRPC_ASSIGN_OR_RETURN(p->mr_, pd->RegisterMemory(p->buffer_.data(), p->buffer_.size()));
  // One send and one receive, a completion each.
  RRPC_ASSIGN_OR_RETURN(p->cq_,
                        ctx->CreateCq(2, responder != nullptr ? responder->channel() : nullptr));
  p->responder_ = responder;
  QpInitAttr attr;
  attr.send_cq = attr.recv_cq = p->cq_.get();
  attr.caps.max_send_wr = 1;
  attr.caps.max_recv_wr = 1;
  attr.caps.max_send_sge = 1;
  attr.caps.max_recv_sge = 1;
  attr.caps.max_inline_data = 0;
  RRPC_ASSIGN_OR_RETURN(p->qp_, pd->CreateQp(attr));
  RRPC_RETURN_NOT_OK(p->qp_->ToInit(ctx->port().port, ctx->port().pkey_index));
  Sge sge{reinterpret_cast<uint64_t>(p->buffer_.data()), kMaxBytes, p->mr_->lkey()};
  RRPC_RETURN_NOT_OK(p->qp_->PostRecv(RecvWr{0, &sge, 1}));
  return p;
}

PathProbe::~PathProbe() {
  if (watched_) {
    responder_->Unwatch(cq_.get(), [this] {
      qp_.reset();
      cq_.reset();
    });
  }
}

Status PathProbe::Connect(QpConnectParams params, uint32_t remote_qp_num) {
  params.remote.qp_num = remote_qp_num;
  RRPC_RETURN_NOT_OK(qp_->Connect(params));
  if (responder_ != nullptr) {
    // Watched before armed: the first event finds this probe. Its receive can't complete
    // before the client has our answer, which goes after this returns.
    responder_->Watch(cq_.get(), this);
    watched_ = true;
    RRPC_RETURN_NOT_OK(cq_->RequestNotify());
  }
  return Status::OK();
}

void PathProbe::Answer() {
  while (!answered_) {
    WorkCompletion wc[2];
    Result<int> n = cq_->Poll(wc, 2);
    if (!n.ok()) return;
    if (*n == 0) {
      // Re-armed, then polled again: a completion between the poll and the arming is not lost.
      if (!cq_->RequestNotify().ok()) return;
      n = cq_->Poll(wc, 2);
      if (!n.ok() || *n == 0) return;
    }
    for (int i = 0; i < *n; ++i) {
      if (wc[i].opcode != WcOpcode::kRecv) continue;
      answered_ = true;
      if (wc[i].status != WcStatus::kSuccess) return;  // flushed: the QP went to ERR
      Sge sge{reinterpret_cast<uint64_t>(send_bytes()), std::min(wc[i].byte_len, kMaxBytes),
              mr_->lkey()};
      SendWr wr;
      wr.wr_id = 1;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      (void)qp_->PostSend(wr);  // a failure shows on the client: no answer, it stays on TCP
    }
  }
}

Status PathProbe::RoundTrip(uint32_t bytes, MonoDelta timeout, bool await_answer) {
  bytes = std::min(bytes, kMaxBytes);
  Sge sge{reinterpret_cast<uint64_t>(send_bytes()), bytes, mr_->lkey()};
  SendWr wr;
  wr.wr_id = 1;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  RRPC_RETURN_NOT_OK(qp_->PostSend(wr));
  // The acknowledgement of one message (and the answer: another message back): a round trip or
  // two, microseconds on a working fabric. Polled (the probe has no channel); after the first
  // 100 us, every 100 us.
  bool acknowledged = false;
  bool answered = !await_answer;
  const MonoTime start = MonoTime::Now();
  const MonoTime deadline = start + timeout;
  for (;;) {
    WorkCompletion wc[2];
    RRPC_ASSIGN_OR_RETURN(int n, cq_->Poll(wc, 2));
    for (int i = 0; i < n; ++i) {
      const bool recv = wc[i].opcode == WcOpcode::kRecv;
      if (wc[i].status != WcStatus::kSuccess) {
        return Status::NetworkError(
            recv ? "RDMA path probe: the server's answer failed" : "RDMA path probe failed",
            WcStatusName(wc[i].status));
      }
      if (!recv) {
        acknowledged = true;
      } else if (wc[i].byte_len == bytes) {
        answered = true;
      } else {
        return Status::NetworkError("RDMA path probe: the server answered " +
                                    std::to_string(wc[i].byte_len) + " bytes to " +
                                    std::to_string(bytes));
      }
    }
    if (acknowledged && answered) return Status::OK();
    const MonoTime now = MonoTime::Now();
    if (now >= deadline) {
      (void)qp_->ToError();
      return Status::NetworkError(
          std::string(acknowledged ? "RDMA path probe: no answer of " + std::to_string(bytes) +
                                         " bytes from the server within "
                                   : "RDMA path probe: no acknowledgement within ") +
          timeout.ToString());
    }
    if (now - start > MonoDelta::FromMicroseconds(100)) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

}  // namespace rrpc::rdma
