#include "rpc/rdma/rdma_transport.h"

#include <arpa/inet.h>
#include <glog/logging.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "rpc/transport/frame_format.h"
#include "util/metrics/counter.h"
#include "util/metrics/histogram_metric.h"

namespace rrpc::rdma {

RdmaTransport::RdmaTransport(std::unique_ptr<RdmaEndpoint> endpoint, Socket bootstrap_socket,
                             uint32_t peer_credits, uint32_t peer_buffer_size,
                             const RdmaTransportOptions& options, RdmaMetrics metrics,
                             std::shared_ptr<void> keep_alive, SrqBinding srq, bool peer_srq,
                             std::shared_ptr<SetupThread> setup)
    : setup_(std::move(setup)),
      ep_(std::move(endpoint)),
      socket_(std::move(bootstrap_socket)),
      options_(options),
      metrics_(metrics),
      keep_alive_(std::move(keep_alive)),
      max_payload_(std::min(ep_->options().buffer_size, peer_buffer_size) -
                   static_cast<uint32_t>(kMessageHeaderSize)),
      window_(peer_credits, srq.context ? srq.initial_grant : ep_->options().receive_buffers),
      reader_(options.max_frame_size, ep_->options().buffer_size),
      srq_(std::move(srq.context)),
      peer_credits_(srq.initial_grant),
      target_(srq.initial_grant),
      // What our bootstrap advertised.
      peer_holds_(srq_ ? 0 : ep_->options().receive_buffers),
      signal_interval_(srq_ ? 1 : std::max(1u, ep_->send_queue_depth() / 4)),
      max_send_sge_(static_cast<int>(
          std::min<uint32_t>(kMaxSendSge, std::max(1u, ep_->qp()->caps().max_send_sge)))),
      peer_srq_(peer_srq),
      peer_initial_credits_(peer_credits),
      request_reference_(peer_credits),
      last_receive_(MonoTime::Now()) {
  reader_.set_copy_side(options_.copy_side);
  if (setup_ != nullptr && !srq_) registrations_ = std::make_shared<Registrations>();
}

RdmaTransport::~RdmaTransport() { Close(); }

void RdmaTransport::Start(struct ev_loop* loop, rpc::TransportHost* host) {
  loop_ = loop;
  host_ = host;
  started_ = true;
  ev_io_init(&socket_watcher_, &RdmaTransport::OnSocketReadable, socket_.fd(), EV_READ);
  socket_watcher_.data = this;
  ev_io_start(loop_, &socket_watcher_);
  ev_idle_init(&idle_watcher_, &RdmaTransport::OnIdle);
  idle_watcher_.data = this;
  ev_init(&starved_timer_, &RdmaTransport::OnStarvedTimer);
  starved_timer_.data = this;
  // The verdict after the iteration's I/O: a reactor that ran late (descheduled, or held up by
  // another connection) reads the grants waiting in its completion queue before it judges.
  ev_set_priority(&starved_timer_, EV_MINPRI);
  if (srq_) {
    // Completions come from the reactor's context; the idle watcher only delivers held messages.
    srq_->Attach(ep_->qp()->qp_num(), this);
    attached_ = true;
    ev_idle_start(loop_, &idle_watcher_);  // one look at grants and writability, from the loop
    return;
  }
  // A fatal QP or device error reaches us as an async event, not always as a completion (a dead
  // device completes nothing): the connection then fails at once, its calls retriable.
  async_target_.ctx = ep_->context();
  async_target_.loop = loop_;
  async_target_.wake = &async_wake_;
  ev_async_init(&async_wake_, &RdmaTransport::OnAsyncWake);
  async_wake_.data = this;
  ev_async_start(loop_, &async_wake_);
  if (registrations_ != nullptr) {
    std::lock_guard<std::mutex> lock(registrations_->mu);
    registrations_->loop = loop_;
    registrations_->wake = &async_wake_;
  }
  // The device's watcher reads its events (one per device, async_events.h) and wakes us.
  AsyncEventRouter::Register(ep_.get(), &async_target_);
  ev_io_init(&channel_watcher_, &RdmaTransport::OnChannelReadable, ep_->channel()->fd(), EV_READ);
  channel_watcher_.data = this;
  ev_io_start(loop_, &channel_watcher_);
  if (options_.busy_poll) ev_idle_start(loop_, &idle_watcher_);
  // Messages may have arrived before the watcher: look at the CQ on the next loop iteration
  // (never from inside Start, which the connection calls in the middle of its own work).
  ev_feed_event(loop_, &channel_watcher_, EV_READ);
}

Status RdmaTransport::ExpectPreamble(size_t) {
  return Status::NotSupported("RDMA carries no connection preamble");
}

Result<rpc::DetachedStream> RdmaTransport::Detach() {
  return Status::NotSupported("an RDMA transport has no byte stream to hand over");
}

void RdmaTransport::OnChannelReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<RdmaTransport*>(w->data)->HandleCompletions();
}

void RdmaTransport::OnIdle(struct ev_loop* loop, ev_idle* w, int) {
  auto* t = static_cast<RdmaTransport*>(w->data);
  if (t->srq_) {
    ev_idle_stop(loop, w);
    t->DeliverHeld();
    if (!t->closed_) t->AfterCompletions();
    return;
  }
  t->HandleCompletions();
}

void RdmaTransport::OnAsyncWake(struct ev_loop*, ev_async* w, int) {
  auto* t = static_cast<RdmaTransport*>(w->data);
  bool qp_failed, device_failed;
  {
    std::lock_guard<std::mutex> lock(t->async_target_.mu);
    qp_failed = t->async_target_.qp_failed;
    device_failed = t->async_target_.device_failed;
  }
  if (device_failed) return t->Fail(Status::NetworkError("RDMA device failed (async event)"));
  if (qp_failed) return t->Fail(Status::NetworkError("RDMA queue pair failed (async event)"));
  bool registered = false;
  if (t->registrations_ != nullptr) {
    std::lock_guard<std::mutex> lock(t->registrations_->mu);
    registered = std::exchange(t->registrations_->done, false);
  }
  // A Write that stopped for a registration left the host waiting to write. (One that ran after
  // the registration ended found it made.)
  if (registered && t->wants_writable_ && !t->closed_) t->host_->OnWritable();
}

void RdmaTransport::DeliverHeld() {
  // Messages held while reads were paused go first, in order.
  while (!closed_ && !reads_paused_ && !held_.empty()) {
    HeldMessage held = std::move(held_.front());
    held_.erase(held_.begin());  // a few at most (the peer's credits)
    const uint32_t index = held.index;
    if (held.copy != nullptr) {
      (void)Deliver(index, held.length, held.copy.get());  // its block went back long ago
      continue;
    }
    const bool lent = Deliver(index, held.length);
    if (closed_) {
      if (srq_) (void)srq_->Repost(index);
      return;
    }
    if (lent) continue;
    Status s = Repost(index);
    if (!s.ok()) return Fail(s);
  }
}

void RdmaTransport::OnSocketReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<RdmaTransport*>(w->data)->HandleSocket();
}

void RdmaTransport::HandleSocket() {
  char byte;
  ssize_t n = recv(socket_.fd(), &byte, 1, MSG_DONTWAIT);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n > 0) {
    host_->OnProtocolError(Status::Corruption("bytes on the TCP socket of an RDMA connection"));
  } else {
    host_->OnTransportFailed(Status::NetworkError("peer closed the RDMA connection"));
  }
}

void RdmaTransport::Fail(const Status& status) {
  if (!closed_) host_->OnTransportFailed(status);
}

void RdmaTransport::HandleCompletions() {
  if (closed_) return;
  // The event first, then re-arm, then poll empty: a completion after the poll signals again.
  // One GetEvent: the channel serves only our CQ, armed once, so at most one event waits (asking
  // again would cost one more read of the channel's fd per wakeup); if another did, the fd stays
  // readable and the loop calls us again.
  // Busy polling never arms the CQ, so no event ever waits: no read of the fd every iteration.
  if (!options_.busy_poll) {
    Result<CompletionQueue*> ev = ep_->channel()->GetEvent();
    if (!ev.ok()) return Fail(ev.status());
    Status armed = ep_->cq()->RequestNotify();
    if (!armed.ok()) return Fail(armed);
  }
  DeliverHeld();
  if (closed_) return;
  WorkCompletion wc[32];
  for (;;) {
    Result<int> n = ep_->cq()->Poll(wc, 32);
    if (!n.ok()) return Fail(n.status().CloneAndPrepend("RDMA completion queue"));
    for (int i = 0; i < *n; ++i) {
      const bool is_send = (wc[i].wr_id & kSendWrIdBit) != 0;
      const uint32_t index = static_cast<uint32_t>(wc[i].wr_id);
      if (wc[i].status != WcStatus::kSuccess) {
        return Fail(
            Status::NetworkError(std::string("RDMA ") + (is_send ? "send" : "receive") + " failed",
                                 WcStatusName(wc[i].status)));
      }
      if (is_send) {
        MutexLock lock(send_mu_);
        ReapSends();
      } else {
        HandleReceive(index, wc[i].byte_len);
        if (closed_) return;
      }
    }
    if (*n < 32) break;
  }
  AfterCompletions();
}

void RdmaTransport::AfterCompletions() {
  SendGrantIfDue();
  if (closed_ || !wants_writable_) return;
  bool starved;
  {
    MutexLock lock(send_mu_);
    starved = !window_.CanSendData();  // grants come with a received message
    if (!starved) {
      if (send_pool()->free_blocks() <= 1) {
        // SRQ mode: the reactor's send blocks went to other connections; ask again.
        if (srq_) srq_->WaitForSendBlock(this);
        return;
      }
      if (in_flight_sends_ + 1 >= ep_->send_queue_depth()) return;  // our completions come
    }
  }
  // A wait that began on our own limits (send blocks, queue slots) may have become one for
  // credits: watched from here too.
  if (starved) return WatchCreditStarvation();
  wants_writable_ = false;
  host_->OnWritable();
}

void RdmaTransport::NotifyWhenWritable(bool on) {
  wants_writable_ = on;
  if (on) WatchCreditStarvation();
}

void RdmaTransport::WatchCreditStarvation() {
  if (closed_ || !started_ || ev_is_active(&starved_timer_) ||
      options_.credit_starved_timeout == MonoDelta::Max()) {
    return;
  }
  {
    MutexLock lock(send_mu_);
    if (window_.CanSendData()) return;  // held back by our own limits, not by the peer
    starved_grant_receipts_ = grant_receipts_;
  }
  ev_timer_set(&starved_timer_, options_.credit_starved_timeout.ToSeconds(), 0);
  ev_timer_start(loop_, &starved_timer_);
}

void RdmaTransport::OnStarvedTimer(struct ev_loop*, ev_timer* w, int) {
  static_cast<RdmaTransport*>(w->data)->CheckCreditStarvation();
}

void RdmaTransport::CheckCreditStarvation() {
  if (closed_ || !wants_writable_) return;
  bool starved, granted_since;
  {
    MutexLock lock(send_mu_);
    starved = !window_.CanSendData();
    granted_since = grant_receipts_ != starved_grant_receipts_;
  }
  if (!starved) return;
  if (granted_since) {  // the peer lives; a new wait from now
    if (metrics_.slow_grants) metrics_.slow_grants->Increment();
    return WatchCreditStarvation();
  }
  Fail(Status::NetworkError("RDMA peer declared dead",
                            "no credits granted for " + options_.credit_starved_timeout.ToString() +
                                " while messages waited for one"));
}

void RdmaTransport::OnSrqSendDone(uint32_t block, WcStatus status) {
  {
    MutexLock lock(send_mu_);
    send_pool()->Return(block);
    if (in_flight_sends_ > 0) --in_flight_sends_;
  }
  if (status != WcStatus::kSuccess) {
    Fail(Status::NetworkError("RDMA send failed", WcStatusName(status)));
  }
}

void RdmaTransport::OnSrqReceive(uint32_t block, uint32_t length, WcStatus status) {
  if (closed_) return;
  if (status != WcStatus::kSuccess) {
    (void)srq_->Repost(block);
    return Fail(Status::NetworkError("RDMA receive failed", WcStatusName(status)));
  }
  // The message used one of the grants the peer held.
  if (peer_credits_ > 0) --peer_credits_;
  srq_->Release(1);
  last_receive_ = MonoTime::Now();
  reclaim_pending_ = false;  // an answer comes in order after this, or none was needed
  HandleReceive(block, length);
}

void RdmaTransport::TopUp() {
  if (closed_) return;
  MutexLock lock(send_mu_);
  const uint32_t have = peer_credits_ + window_.owed();
  if (have >= target_) return;
  const uint32_t got = srq_->Reserve(target_ - have);
  window_.Reposted(got);
  if (have + got < target_) srq_->WaitForCredits(this);
}

void RdmaTransport::OnSrqQpFailed(const Status& why) { Fail(why); }

void RdmaTransport::OnSrqIdleCheck(MonoTime now) {
  const SrqOptions& o = srq_->options();
  if (closed_ || now - last_receive_ < o.reclaim_after) return;
  if (target_ > o.floor_credits) target_ = o.floor_credits;
  {
    MutexLock lock(send_mu_);
    // Grants owed above the target are simply kept (the peer never knew of them).
    const uint32_t share = peer_credits_ + window_.owed();
    if (share > target_) {
      const uint32_t forgo = std::min(window_.owed(), share - target_);
      window_.Forgo(forgo);
      srq_->Release(forgo);
    }
    if (reclaim_pending_ || peer_credits_ <= target_) return;
    reclaim_due_ = true;
  }
  reclaim_pending_ = true;
  srq_->CountReclaim();
  SendGrantIfDue();
}

void RdmaTransport::HandleReturnsAndReclaim(uint8_t returned, uint8_t keep) {
  if (returned > 0 && srq_) {
    // Credits the peer stopped using: ours again (they were part of its share).
    const uint32_t n = std::min<uint32_t>(returned, peer_credits_);
    peer_credits_ -= n;
    srq_->Release(n);
    srq_->CountReclaimed(n);
  }
  // Never below 3, whatever the peer asks: with fewer, our deadlock-freedom argument fails.
  const uint32_t kept = keep > 0 ? std::max<uint32_t>(keep, 3) : 0;
  if (keep > 0 && window_.credits() > kept) {
    // The peer reclaims what we hold above the floor; the next message says how many went back.
    const uint32_t n = window_.credits() - kept;
    window_.Return(n);
    returning_ += n;
    credits_returned_ += n;
    request_reference_ = kept;
  }
}

void RdmaTransport::OnSrqCreditsAvailable() {
  TopUp();
  AfterCompletions();
}

void RdmaTransport::HandleReceive(uint32_t index, uint32_t length) {
  if (length < kMessageHeaderSize) {
    if (srq_) (void)srq_->Repost(index);  // the reactor's block: back to the SRQ
    host_->OnProtocolError(Status::Corruption("RDMA message shorter than its header"));
    return;
  }
  if (metrics_.received_bytes) metrics_.received_bytes->IncrementBy(length);
  const uint8_t* p = receive_block(index);
  const uint32_t granted =
      (uint32_t{p[4]} << 24) | (uint32_t{p[5]} << 16) | (uint32_t{p[6]} << 8) | p[7];
  bool peer_out_of_credits;
  {
    MutexLock lock(send_mu_);
    // The message used one of the peer's credits (SRQ mode: counted in OnSrqReceive).
    if (!srq_ && peer_holds_ > 0) --peer_holds_;
    window_.Granted(granted);
    if (granted > 0) {
      request_pending_ = false;
      ++grant_receipts_;
    }
    // Grants raise the reference again (up to the initial credits) after a reclaim lowered it.
    request_reference_ =
        std::max(request_reference_, std::min(window_.credits(), peer_initial_credits_));
    HandleReturnsAndReclaim(p[2], p[3]);
    peer_out_of_credits = (srq_ ? peer_credits_ : peer_holds_) == 0;
  }
  if (p[0] != kKindData && p[0] != kKindGrant) {
    if (srq_) (void)srq_->Repost(index);
    host_->OnProtocolError(Status::Corruption("unknown RDMA message kind"));
    return;
  }
  if (srq_ && p[1] != 0) {
    // The peer asks for more: soft adds half the initial grant, hard doubles (to the cap).
    const uint32_t raised = p[1] == 2 ? target_ * 2 : target_ + std::max(1u, target_ / 2);
    target_ = std::min(raised, srq_->options().max_credits);
    TopUp();
  }
  if (p[0] == kKindData && !reads_paused_ && !held_.empty()) {
    // Reads resumed and the held messages not delivered yet (SRQ mode delivers them from the
    // idle watcher, after completions that may come first): they go first, in order.
    DeliverHeld();
    if (closed_) {
      if (srq_) (void)srq_->Repost(index);
      return;
    }
  }
  if (reads_paused_ && p[0] == kKindData) return Hold(index, length, peer_out_of_credits);
  const bool lent = Deliver(index, length);
  if (closed_) {
    if (srq_) (void)srq_->Repost(index);
    return;
  }
  if (lent) return;
  Status s = Repost(index);
  if (!s.ok()) Fail(s);
}

void RdmaTransport::Hold(uint32_t index, uint32_t length, bool peer_out_of_credits) {
  if (!peer_out_of_credits) {
    // Not reposted: the peer runs out of credits and stops, which is the backpressure.
    held_.push_back(HeldMessage{index, length, nullptr});
    return;
  }
  // The peer spent its last credit on this message (it only does so on a message that grants
  // us credits). Holding the block too would leave it no credit to send the grants it owes us
  // for our next messages: our responses would wait for its grants, and it for our credit,
  // while the responses unsent keep reads paused (a deadlock, docs/rdma.md "Paused reads and
  // credits"). So this one is copied out (one receive buffer, once per message we send it while
  // paused) and its block reposted: the grant goes with our next message, the peer's next
  // message carries grants again, and reads stay paused.
  auto copy = std::make_unique<uint8_t[]>(length);
  memcpy(copy.get(), receive_block(index), length);
  held_.push_back(HeldMessage{kNoBlock, length, std::move(copy)});
  ++held_copies_;
  VLOG(2) << "reads paused, the peer's last credit used: message copied out, block reposted ("
          << held_.size() << " held)";
  Status s = Repost(index);
  if (!s.ok()) Fail(s);
}

bool RdmaTransport::Deliver(uint32_t index, uint32_t length, const uint8_t* copy) {
  const uint8_t* p = copy != nullptr ? copy : receive_block(index);
  if (p[0] != kKindData) return false;
  host_->OnBytesReceived(length, MonoTime::Now());
  const uint8_t* data = p + kMessageHeaderSize;
  const size_t bytes = length - kMessageHeaderSize;
  if (!srq_ && copy == nullptr && bytes >= options_.lend_min_bytes && reader_.buffered() == 0) {
    // The whole frames at the front go by reference; a bad length ends them, and the reader
    // reports it below.
    size_t whole = 0;
    while (bytes - whole >= rpc::kFrameLengthSize) {
      const size_t frame = rpc::DecodeBigEndian32(data + whole);
      if (frame == 0 || frame > options_.max_frame_size ||
          frame > bytes - whole - rpc::kFrameLengthSize) {
        break;
      }
      whole += rpc::kFrameLengthSize + frame;
    }
    if (whole > 0 && LendFrames(index, data, whole)) {
      if (!closed_) CopyIntoReader(data + whole, bytes - whole);
      return true;
    }
  }
  CopyIntoReader(data, bytes);
  return false;
}

bool RdmaTransport::LendFrames(uint32_t index, const uint8_t* data, size_t whole) {
  RegisteredBlockPool* pool = ep_->receive_pool();
  uint32_t spare;
  if (!pool->Take(&spare)) {
    ++copied_no_spare_;
    if (metrics_.copied_no_spare) metrics_.copied_no_spare->Increment();
    return false;
  }
  // The spare takes the lent block's place before any call sees the frames (a callback may
  // close the connection); the peer gets its grant as for a repost.
  Status s = ep_->PostReceive(spare);
  if (!s.ok()) {
    pool->Return(spare);
    Fail(s);
    return true;  // the connection is failing: nothing to repost
  }
  {
    MutexLock lock(send_mu_);
    window_.Reposted();
  }
  ++lent_messages_;
  if (metrics_.lent_messages) metrics_.lent_messages->Increment();
  BlockRef block = pool->Lend(index);
  size_t off = 0;
  while (off < whole) {
    const uint32_t frame = rpc::DecodeBigEndian32(data + off);
    host_->OnFrame(BlockSlice{block, Slice(data + off + rpc::kFrameLengthSize, frame)});
    if (closed_) return true;
    off += rpc::kFrameLengthSize + frame;
  }
  return true;
}

void RdmaTransport::CopyIntoReader(const uint8_t* data, size_t left) {
  if (left > 0) CountCopy(options_.copy_side, CopyKind::kStream, left);
  while (left > 0) {
    uint8_t* room = reader_.writable_data();
    size_t n = std::min(left, reader_.writable_size());
    memcpy(room, data, n);
    reader_.Commit(n);
    data += n;
    left -= n;
    for (;;) {
      BlockSlice frame;
      Result<bool> got = reader_.NextFrame(&frame);
      if (!got.ok()) {
        host_->OnProtocolError(got.status());
        return;
      }
      if (!*got) break;
      host_->OnFrame(std::move(frame));
      if (closed_) return;
    }
  }
}

Status RdmaTransport::Repost(uint32_t index) {
  if (!srq_) {
    RRPC_RETURN_NOT_OK(ep_->PostReceive(index));
    MutexLock lock(send_mu_);
    window_.Reposted();
    return Status::OK();
  }
  // The buffer goes back to the pool; the peer gets it back one-for-one below its target.
  RRPC_RETURN_NOT_OK(srq_->Repost(index));
  TopUp();
  return Status::OK();
}

void RdmaTransport::PauseReading(bool paused) {
  if (paused == reads_paused_) return;
  reads_paused_ = paused;
  // Held messages are delivered from the loop, not from inside the connection's call.
  if (!paused && started_ && !closed_) {
    if (srq_) {
      ev_idle_start(loop_, &idle_watcher_);
    } else {
      ev_feed_event(loop_, &channel_watcher_, EV_READ);
    }
  }
}

void RdmaTransport::Close() {
  if (closed_) return;
  closed_ = true;
  if (started_) {
    ev_io_stop(loop_, &socket_watcher_);
    ev_idle_stop(loop_, &idle_watcher_);
    ev_timer_stop(loop_, &starved_timer_);
    if (registrations_ != nullptr) {
      std::lock_guard<std::mutex> lock(registrations_->mu);
      registrations_->wake = nullptr;  // a registration ending later wakes nothing
    }
    if (!srq_) {
      AsyncEventRouter::Unregister(ep_.get());  // no wake-up is sent after this
      ev_async_stop(loop_, &async_wake_);
      ev_clear_pending(loop_, &async_wake_);
      ev_io_stop(loop_, &channel_watcher_);
      // A fed event still pending for the watcher must not fire after it is gone.
      ev_clear_pending(loop_, &channel_watcher_);
    }
  }
  if (srq_) {
    // Held blocks go back to the SRQ; the QP flushes its sends into the shared CQ and stays
    // with the context until they are in; the peer's grants return to the pool.
    for (const HeldMessage& h : held_) {
      if (h.copy == nullptr) (void)srq_->Repost(h.index);
    }
    held_.clear();
    (void)ep_->qp()->ToError();
    const uint32_t qp_num = ep_->qp()->qp_num();
    uint32_t in_flight, owed;
    {
      MutexLock lock(send_mu_);
      in_flight = in_flight_sends_;
      owed = window_.owed();
    }
    srq_->Retire(qp_num, std::move(ep_), in_flight, peer_credits_ + owed);
    socket_.Close();
    return;
  }
  // The queue pair goes first (in-flight requests die with it), then the memory and the CQ;
  // only then the blocks unfinished sends read by reference (each exactly once: the queue is
  // emptied here, and nothing is added once closed_ is set).
  ep_.reset();
  {
    MutexLock lock(send_mu_);
    sends_.clear();
    in_flight_sends_ = 0;
  }
  socket_.Close();
}

void RdmaTransport::Describe(std::vector<std::pair<std::string, std::string>>* out) const {
  out->emplace_back("rdma backend", options_.backend);
  if (ep_ == nullptr) return;
  MutexLock lock(send_mu_);
  out->emplace_back("credits", std::to_string(window_.credits()));
  out->emplace_back("grants owed", std::to_string(window_.owed()));
  if (!srq_) out->emplace_back("peer credits", std::to_string(peer_holds_));
  out->emplace_back("messages held (reads paused)", std::to_string(held_.size()));
  out->emplace_back("held messages copied out", std::to_string(held_copies_));
  if (srq_) {
    out->emplace_back("receive mode", "srq");
    out->emplace_back("peer credits / target",
                      std::to_string(peer_credits_) + " / " + std::to_string(target_));
  } else {
    out->emplace_back("receive buffers", std::to_string(ep_->options().receive_buffers) + " x " +
                                             std::to_string(ep_->options().buffer_size) + " B");
    out->emplace_back("receive blocks lent now", std::to_string(ep_->receive_pool()->lent()));
    out->emplace_back("messages by reference", std::to_string(lent_messages_));
    out->emplace_back("copied out, no spare", std::to_string(copied_no_spare_));
  }
  if (peer_srq_) out->emplace_back("credit requests sent", std::to_string(credit_requests_));
  if (credits_returned_ > 0) {
    out->emplace_back("credits given back", std::to_string(credits_returned_));
  }
  char gid[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, ep_->gid().gid.data(), gid, sizeof(gid));
  out->emplace_back("gid", std::string(gid) + " (index " + std::to_string(ep_->gid().index) + ", " +
                               GidTypeName(ep_->gid().type) + ")");
  out->emplace_back("inline cap", std::to_string(ep_->inline_cap()));
  out->emplace_back("inline sends", std::to_string(inline_sends_));
  out->emplace_back("posted sends", std::to_string(posted_sends_));
  out->emplace_back("grant messages", std::to_string(grant_messages_));
  out->emplace_back("bytes sent by reference", std::to_string(zero_copy_sent_bytes_));
  out->emplace_back("bytes sent copied", std::to_string(copied_sent_bytes_));
  uint64_t registrations_made = 0;
  if (registrations_ != nullptr) {
    std::lock_guard<std::mutex> lock(registrations_->mu);
    registrations_made = registrations_->made;
  }
  out->emplace_back("blocks registered to send",
                    std::to_string(send_registrations_ + registrations_made));
}

}  // namespace rrpc::rdma
