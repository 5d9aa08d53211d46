// The RC rules of the software backend: what a queue pair does with the requests posted to it and
// the packets its peer sends. Every function runs under the device's mutex.
#include <algorithm>
#include <cstring>

#include "rpc/rdma/soft/soft_internal.h"

namespace rrpc::rdma::soft {
namespace {

// How long a sender waits after an RNR NAK before resending, from the IB min_rnr_timer code
// (hardware waits 0.01 to 655 ms; we keep the order of magnitude for small codes).
MonoDelta RnrDelay(uint8_t code) {
  return MonoDelta::FromMicroseconds(10LL << std::min<int>(code, 12));
}

bool PsnBefore(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

}  // namespace

SoftQp::SoftQp(SoftDeviceImpl* dev, const void* pd, const QpInitAttr& attr, uint32_t qpn,
               QpCaps caps)
    : dev_(dev),
      pd_(pd),
      send_cq_(static_cast<SoftCq*>(attr.send_cq)),
      recv_cq_(static_cast<SoftCq*>(attr.recv_cq)),
      srq_(static_cast<SoftSrq*>(attr.srq)),
      context_(attr.context),
      qpn_(qpn),
      caps_(caps),
      rq_(srq_ == nullptr ? std::make_unique<std::deque<PostedRecv>>() : nullptr) {}

SoftQp::~SoftQp() {
  std::lock_guard<std::mutex> lock(dev_->mu);
  dev_->RemoveQp(qpn_);
  // As mlx5's destroy: the QP's completions leave both CQs (a receive it took from an SRQ is
  // then lost to the SRQ's owner), and no event of it is delivered after.
  send_cq_->Clean(qpn_);
  recv_cq_->Clean(qpn_);
  dev_->ForgetAsyncEvents(qpn_);
}

QpState SoftQp::state() const {
  std::lock_guard<std::mutex> lock(dev_->mu);
  return state_;
}

Status SoftQp::ToInit(int port, uint16_t pkey_index) {
  dev_->ControlVerb();
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (state_ != QpState::kReset) {
    return Status::IllegalState(std::string("INIT from ") + QpStateName(state_));
  }
  // A RoCE port's P_Key table holds one entry, 0xFFFF (mlx5 refuses another index: EINVAL).
  if (pkey_index != 0) {
    return Status::InvalidArgument("modify QP to INIT: P_Key index " + std::to_string(pkey_index) +
                                   " beyond the port's table of 1");
  }
  state_ = QpState::kInit;
  return Status::OK();
}

Status SoftQp::Connect(const QpConnectParams& params) {
  dev_->ControlVerb();  // RTR
  dev_->RtrToward(params.remote.gid);
  dev_->ControlVerb();  // RTS
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (state_ != QpState::kInit) {
    return Status::IllegalState(std::string("RTR from ") + QpStateName(state_));
  }
  // A 4-bit field (ibv_modify_qp refuses more); on its RoCE port only 0..7 are priorities.
  const PortInfo port = dev_->port();
  RRPC_RETURN_NOT_OK(CheckServiceLevel(params.service_level, port.ethernet));
  RRPC_RETURN_NOT_OK(CheckFlowLabel(params.flow_label));
  RRPC_RETURN_NOT_OK(CheckAckTimeout(params.timeout));
  RRPC_ASSIGN_OR_RETURN(link_, dev_->OutboundLink(params.remote.gid));
  params_ = params;
  for (const GidEntry& e : port.gid_table) {
    if (e.index == params.gid_index) gid_type_ = e.type;
  }
  expected_psn_ = params.remote.psn;
  next_psn_ = params.local_psn;
  rnr_left_ = params.rnr_retry;
  retry_left_ = params.retry_cnt;
  state_ = QpState::kRts;
  return Status::OK();
}

Status SoftQp::ToError() {
  std::lock_guard<std::mutex> lock(dev_->mu);
  EnterError(WcStatus::kFlushed);
  return Status::OK();
}

Status SoftQp::CheckSges(const Sge* sge, int n) const {
  for (int i = 0; i < n; ++i) {
    auto it = dev_->mrs.find(sge[i].lkey);
    if (it == dev_->mrs.end() || it->second.pd != pd_) {
      return Status::InvalidArgument("lkey names no memory region of this protection domain");
    }
    const auto& mr = it->second;
    uint8_t* a = reinterpret_cast<uint8_t*>(sge[i].addr);
    if (a < mr.addr || a + sge[i].length > mr.addr + mr.length) {
      return Status::InvalidArgument("SGE outside its memory region");
    }
  }
  return Status::OK();
}

Status SoftQp::PostSend(const SendWr& wr) {
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (state_ != QpState::kRts && state_ != QpState::kError) {
    return Status::IllegalState(std::string("post send in ") + QpStateName(state_));
  }
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > caps_.max_send_sge) {
    return Status::InvalidArgument("too many SGEs in a send");
  }
  if (slots_used_ >= caps_.max_send_wr) {
    return Status::IOError("send queue full (" + std::to_string(caps_.max_send_wr) + " slots)");
  }
  uint64_t len = 0;
  for (int i = 0; i < wr.num_sge; ++i) len += wr.sg_list[i].length;
  if (wr.inline_data && len > caps_.max_inline_data) {
    return Status::InvalidArgument("inline send of " + std::to_string(len) +
                                   " bytes above the cap " + std::to_string(caps_.max_inline_data));
  }
  if (len > dev_->max_msg_size()) return Status::InvalidArgument("message too long");
  ++slots_used_;
  Outstanding s{wr.wr_id, next_psn_++, wr.signaled, false, wr.has_imm, wr.imm, {}, {}, 0};
  if (!wr.inline_data && wr.num_sge <= PostedRecv::kMaxSge) {
    s.num_sge = wr.num_sge;
    for (int i = 0; i < wr.num_sge; ++i) s.sge[i] = wr.sg_list[i];
  }
  if (state_ == QpState::kError) {
    CompleteSend(s, WcStatus::kFlushed);
    return Status::OK();
  }
  // The NIC reads the bytes now (inline: copied at post time; otherwise it would DMA them later,
  // which the caller must allow by keeping them until the completion).
  const bool corrupt = !wr.inline_data && wr.num_sge > 0 && dev_->corrupt_send_lkeys();
  if (corrupt || (!wr.inline_data && !CheckSges(wr.sg_list, wr.num_sge).ok())) {
    CompleteSend(s, WcStatus::kLocalProtectionError);
    EnterError(WcStatus::kFlushed);
    return Status::OK();
  }
  s.payload.reserve(len);
  for (int i = 0; i < wr.num_sge; ++i) {
    s.payload.append(reinterpret_cast<const char*>(wr.sg_list[i].addr), wr.sg_list[i].length);
  }
  unacked_.push_back(std::move(s));
  if (link_->dead) {
    EnterError(WcStatus::kRetryExceeded);
  } else if (rnr_deadline_.IsMax()) {
    Transmit(&unacked_.back());
  }
  return Status::OK();
}

Status SoftQp::PostRecv(const RecvWr& wr) {
  if (srq_ != nullptr) return Status::InvalidArgument("queue pair receives from its SRQ");
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (state_ == QpState::kReset) return Status::IllegalState("post receive in RESET");
  if (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > caps_.max_recv_sge) {
    return Status::InvalidArgument("too many SGEs in a receive");
  }
  if (rq_ == nullptr) return Status::InvalidArgument("post receive on a QP attached to an SRQ");
  if (rq_->size() >= caps_.max_recv_wr) {
    return Status::IOError("receive queue full (" + std::to_string(caps_.max_recv_wr) + ")");
  }
  if (state_ == QpState::kError) {
    CompleteRecv(wr.wr_id, WcStatus::kFlushed, 0, false, 0);
    return Status::OK();
  }
  if (!CheckSges(wr.sg_list, wr.num_sge).ok()) {
    CompleteRecv(wr.wr_id, WcStatus::kLocalProtectionError, 0, false, 0);
    EnterError(WcStatus::kFlushed);
    return Status::OK();
  }
  PostedRecv r;
  if (dev_->ConsumeReceiveDiscard()) return Status::OK();
  r.wr_id = wr.wr_id;
  r.num_sge = wr.num_sge;
  for (int i = 0; i < wr.num_sge; ++i) r.sge[i] = wr.sg_list[i];
  rq_->push_back(r);
  return Status::OK();
}

void SoftQp::Transmit(Outstanding* s) {
  // The message's largest packet: path-MTU-sized unless the whole message is smaller.
  const uint32_t largest_packet =
      static_cast<uint32_t>(std::min<size_t>(s->payload.size(), params_.path_mtu));
  if (dev_->dropping_packets() ||
      dev_->ecmp_drops(RoceUdpSourcePort(params_.flow_label, qpn_, params_.remote.qp_num)) ||
      dev_->drops_large(params_.remote.gid, largest_packet)) {
    // Lost on the path: no ACK, no NAK. The sender retries retry_cnt times, each after the
    // timeout, then gives up (the retransmissions are lost too, so none is modelled).
    s->sent = true;
    if (lost_deadline_.IsMax()) {
      const int64_t timeout_ns = (int64_t{4096} << std::min<int>(params_.timeout, 31));
      lost_deadline_ = MonoTime::Now() +
                       MonoDelta::FromNanoseconds(timeout_ns * (int64_t{params_.retry_cnt} + 1));
      dev_->lost_waiting.insert(this);
      dev_->Wake();
    }
    return;
  }
  PacketHeader h{static_cast<uint8_t>(PacketType::kData),
                 static_cast<uint8_t>(s->has_imm),
                 static_cast<uint8_t>(gid_type_),
                 static_cast<uint8_t>(s->signaled),
                 params_.remote.qp_num,
                 qpn_,
                 s->psn,
                 s->imm,
                 static_cast<uint32_t>(s->payload.size())};
  s->sent = true;
  dev_->SendPacket(link_, h, &s->payload);
}

void SoftQp::CompleteSend(const Outstanding& s, WcStatus status) {
  // Flushed and failed requests always complete; successful unsignaled ones do not, and keep
  // their send-queue slot until a signaled completion behind them (as on hardware).
  if (status == WcStatus::kSuccess && !s.signaled) {
    ++unsignaled_done_;
    return;
  }
  slots_used_ -= 1 + unsignaled_done_;
  unsignaled_done_ = 0;
  WorkCompletion wc;
  wc.wr_id = s.wr_id;
  wc.status = status;
  wc.opcode = WcOpcode::kSend;
  wc.qp_num = qpn_;
  send_cq_->Push(wc);
}

void SoftQp::CompleteRecv(uint64_t wr_id, WcStatus status, uint32_t len, bool has_imm,
                          uint32_t imm) {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.status = status;
  wc.opcode = WcOpcode::kRecv;
  wc.byte_len = len;
  wc.qp_num = qpn_;
  wc.has_imm = has_imm;
  wc.imm = imm;
  recv_cq_->Push(wc);
}

void SoftQp::EnterError(WcStatus first_status) {
  if (state_ == QpState::kError) return;
  state_ = QpState::kError;
  rnr_deadline_ = MonoTime::Max();
  bool first = true;
  while (!unacked_.empty()) {
    CompleteSend(unacked_.front(), first ? first_status : WcStatus::kFlushed);
    first = false;
    unacked_.pop_front();
  }
  slots_used_ = 0;
  unsignaled_done_ = 0;
  while (rq_ != nullptr && !rq_->empty()) {
    CompleteRecv(rq_->front().wr_id, WcStatus::kFlushed, 0, false, 0);
    rq_->pop_front();
  }
  // On an SRQ: every receive it took has completed (completions are pushed as packets land), so
  // the last WQE is reached now; the event comes behind those completions.
  if (srq_ != nullptr) {
    dev_->PostAsyncEventAfterCompletions({AsyncEventType::kQpLastWqeReached, qpn_, context_});
  }
}

// ---- Packets from the peer (NIC thread).

void SoftQp::OnData(Link* link, const PacketHeader& h, const uint8_t* payload) {
  auto reply = [&](PacketType type, WcStatus status) {
    PacketHeader r{static_cast<uint8_t>(type),
                   0,
                   static_cast<uint8_t>(status),
                   0,
                   h.src_qpn,
                   qpn_,
                   h.psn,
                   0,
                   0};
    dev_->SendPacket(link, r, nullptr);
  };
  if (state_ == QpState::kReset || state_ == QpState::kInit) {
    // Not connected yet (the peer moved to RTS first): the NIC drops it, the sender retries.
    reply(PacketType::kNotReady, WcStatus::kSuccess);
    return;
  }
  if ((state_ != QpState::kRtr && state_ != QpState::kRts) || h.src_qpn != params_.remote.qp_num) {
    reply(PacketType::kErrNak, WcStatus::kRetryExceeded);
    return;
  }
  if (static_cast<GidType>(h.status) != gid_type_) {
    // A frame of the other RoCE version (v1 is an Ethernet frame, v2 a UDP datagram): this
    // QP never sees it. The NIC drops it; the sender retransmits until its retries run out.
    reply(PacketType::kNotReady, WcStatus::kSuccess);
    return;
  }
  if (PsnBefore(h.psn, expected_psn_)) {  // a resend we already took
    reply(PacketType::kAck, WcStatus::kSuccess);
    return;
  }
  if (h.psn != expected_psn_) return;  // behind a NAKed packet: go-back-N drops it
  PostedRecv r;
  bool have = false;
  if (srq_ != nullptr) {
    have = srq_->Take(&r);
  } else if (!rq_->empty()) {
    r = rq_->front();
    rq_->pop_front();
    have = true;
  }
  if (!have) {
    reply(PacketType::kRnrNak, WcStatus::kSuccess);
    return;
  }
  if (h.length > r.capacity()) {
    CompleteRecv(r.wr_id, WcStatus::kLocalLengthError, 0, false, 0);
    EnterError(WcStatus::kFlushed);
    reply(PacketType::kErrNak, WcStatus::kRemoteInvalidRequest);
    return;
  }
  size_t off = 0;
  for (int i = 0; i < r.num_sge && off < h.length; ++i) {
    size_t n = std::min<size_t>(r.sge[i].length, h.length - off);
    memcpy(reinterpret_cast<void*>(r.sge[i].addr), payload + off, n);
    off += n;
  }
  ++expected_psn_;
  CompleteRecv(r.wr_id, WcStatus::kSuccess, h.length, h.has_imm != 0, h.imm);
  if (h.ack_req != 0) reply(PacketType::kAck, WcStatus::kSuccess);
}

bool SoftQp::CompleteAcked(const Outstanding& s) {
  bool intact = CheckSges(s.sge, s.num_sge).ok();
  if (intact && dev_->options().verify_send_memory) {
    size_t off = 0;
    for (int i = 0; i < s.num_sge && intact; ++i) {
      intact = memcmp(reinterpret_cast<const void*>(s.sge[i].addr), s.payload.data() + off,
                      s.sge[i].length) == 0;
      off += s.sge[i].length;
    }
  }
  if (!intact) {
    CompleteSend(s, WcStatus::kLocalProtectionError);
    EnterError(WcStatus::kFlushed);
    return false;
  }
  CompleteSend(s, WcStatus::kSuccess);
  return true;
}

void SoftQp::OnAck(uint32_t psn) {
  if (state_ == QpState::kError) return;
  rnr_left_ = params_.rnr_retry;
  while (!unacked_.empty() && !PsnBefore(psn, unacked_.front().psn)) {
    const Outstanding s = std::move(unacked_.front());
    unacked_.pop_front();
    if (!CompleteAcked(s)) return;
  }
}

void SoftQp::OnRnrNak(uint32_t psn) {
  if (state_ == QpState::kError) return;
  while (!unacked_.empty() && PsnBefore(unacked_.front().psn, psn)) {
    const Outstanding s = std::move(unacked_.front());  // implicitly acknowledged
    unacked_.pop_front();
    if (!CompleteAcked(s)) return;
  }
  if (unacked_.empty() || unacked_.front().psn != psn) return;
  if (params_.rnr_retry != 7) {
    if (rnr_left_ == 0) {
      EnterError(WcStatus::kRnrRetryExceeded);
      return;
    }
    --rnr_left_;
  }
  // Go back N: everything from the refused packet on goes again after the RNR delay.
  for (Outstanding& s : unacked_) s.sent = false;
  rnr_deadline_ = MonoTime::Now() + RnrDelay(params_.min_rnr_timer);
  dev_->rnr_waiting.insert(this);
}

void SoftQp::OnNotReady(uint32_t psn) {
  if (state_ == QpState::kError) return;
  while (!unacked_.empty() && PsnBefore(unacked_.front().psn, psn)) {
    const Outstanding s = std::move(unacked_.front());  // implicitly acknowledged
    unacked_.pop_front();
    if (!CompleteAcked(s)) return;
  }
  if (unacked_.empty() || unacked_.front().psn != psn) return;
  if (retry_left_ == 0) {
    EnterError(WcStatus::kRetryExceeded);
    return;
  }
  --retry_left_;
  // Go back N after the transport timeout (4.096 us x 2^timeout), as a lost packet would.
  for (Outstanding& s : unacked_) s.sent = false;
  rnr_deadline_ = MonoTime::Now() +
                  MonoDelta::FromNanoseconds(int64_t{4096} << std::min<int>(params_.timeout, 31));
  dev_->rnr_waiting.insert(this);
}

void SoftQp::OnErrNak(uint32_t psn, WcStatus status) {
  if (state_ == QpState::kError) return;
  while (!unacked_.empty() && PsnBefore(unacked_.front().psn, psn)) {
    const Outstanding s = std::move(unacked_.front());  // implicitly acknowledged
    unacked_.pop_front();
    if (!CompleteAcked(s)) return;
  }
  EnterError(status);
}

void SoftQp::OnLinkDead(Link* link) {
  if (link != link_ || state_ == QpState::kError) return;
  if (!unacked_.empty()) EnterError(WcStatus::kRetryExceeded);
}

void SoftQp::OnFatal() {
  EnterError(WcStatus::kFlushed);
  dev_->PostAsyncEventAfterCompletions({AsyncEventType::kQpFatal, qpn_, context_});
}

void SoftQp::OnLostTimeout(MonoTime now) {
  if (lost_deadline_ > now) return;
  lost_deadline_ = MonoTime::Max();
  if (state_ != QpState::kError && !unacked_.empty()) EnterError(WcStatus::kRetryExceeded);
}

void SoftQp::OnTimer(MonoTime now) {
  if (rnr_deadline_ > now) return;
  rnr_deadline_ = MonoTime::Max();
  for (Outstanding& s : unacked_) {
    if (!s.sent) Transmit(&s);
  }
}

}  // namespace rrpc::rdma::soft
