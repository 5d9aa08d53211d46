#include "rpc/rdma/srq/srq_context.h"

#include <glog/logging.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/rdma_endpoint.h"

namespace rrpc::rdma {
namespace {

// A send's wr_id: its block with this bit set (the same convention as private-RQ mode).
constexpr uint64_t kSendBit = 1ull << 32;

// A device's async events come through one fd, which the device's watcher reads
// (DeliverAsyncEvent); an event for an SRQ or QP of ours (its context pointer is the SrqContext)
// goes to that context, found here (registered for the context's lifetime, so nothing is handed
// to a context being destroyed).
std::mutex registry_mu;
std::unordered_map<const void*, std::shared_ptr<SrqContext::Handoff>>& Registry() {
  static auto* contexts =
      new std::unordered_map<const void*, std::shared_ptr<SrqContext::Handoff>>();
  return *contexts;
}

}  // namespace

Result<std::unique_ptr<SrqContext>> SrqContext::Create(Context* ctx, ProtectionDomain* pd,
                                                       const SrqOptions& o, struct ev_loop* loop,
                                                       std::shared_ptr<void> keep_alive) {
  if (o.buffer_size < 256 || o.chunk_blocks == 0 || o.send_buffers < 2 || o.floor_credits < 3 ||
      o.initial_credits < o.floor_credits || o.max_credits < o.initial_credits) {
    return Status::InvalidArgument(
        "SRQ: buffer >= 256 B, chunk >= 1, send buffers >= 2, 3 <= floor credits <= initial "
        "credits <= max");
  }
  const uint64_t chunks = o.max_memory / (uint64_t{o.chunk_blocks} * o.buffer_size);
  if (chunks == 0) {
    return Status::InvalidArgument("SRQ: rdma_srq_max_memory below one chunk of receive blocks");
  }
  std::unique_ptr<SrqContext> c(new SrqContext(o));
  c->ctx_ = ctx;
  c->pd_ = pd;
  c->keep_alive_ = std::move(keep_alive);
  c->handoff_->device = ctx;
  c->max_blocks_ = static_cast<uint32_t>(std::min<uint64_t>(chunks * o.chunk_blocks, 1u << 24));
  RRPC_ASSIGN_OR_RETURN(c->channel_, ctx->CreateChannel());
  RRPC_ASSIGN_OR_RETURN(c->send_pool_,
                        RegisteredBlockPool::Create(pd, o.send_buffers, o.buffer_size));
  // A device refusing the depth (its max_srq_wr) gets asked for half, down to one chunk; the cap
  // shrinks with it.
  for (;;) {
    Result<std::unique_ptr<SharedReceiveQueue>> srq = pd->CreateSrq(c->max_blocks_, c.get());
    if (srq.ok()) {
      c->srq_ = std::move(srq).value();
      break;
    }
    if (c->max_blocks_ / 2 < o.chunk_blocks) return srq.status();
    c->max_blocks_ = c->max_blocks_ / 2 / o.chunk_blocks * o.chunk_blocks;
  }
  // Every completion fits: one per receive the SRQ can hold (its depth as granted, the cap),
  // one per send block in flight (every SRQ-mode send holds one of the reactor's).
  RRPC_ASSIGN_OR_RETURN(c->recv_cq_,
                        ctx->CreateCq(static_cast<int>(c->max_blocks_ + 1), c->channel_.get()));
  RRPC_ASSIGN_OR_RETURN(c->send_cq_,
                        ctx->CreateCq(static_cast<int>(o.send_buffers + 1), c->channel_.get()));
  if (!c->Grow()) return Status::RuntimeError("SRQ: the first receive blocks could not be posted");
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry()[c.get()] = c->handoff_;
  }
  RRPC_RETURN_NOT_OK(c->recv_cq_->RequestNotify());
  RRPC_RETURN_NOT_OK(c->send_cq_->RequestNotify());
  if (loop != nullptr) c->StartWatching(loop);
  return c;
}

SrqContext::Handoff::~Handoff() = default;

SrqContext::~SrqContext() {
  std::vector<std::pair<std::unique_ptr<RdmaEndpoint>, uint32_t>> discard;
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->open = false;  // a growth thread still running drops its chunk
    discard.swap(handoff_->discard);
  }
  discard.clear();  // QPs handed back and never taken go before the SRQ and CQs, as qps_ do
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    Registry().erase(this);
  }
  LeaveLoop();
  qps_.clear();  // the QPs first
}

bool SrqContext::RoomForAnotherChunk() const {
  // A chunk a growth thread is making counts already: without it, set-up growth on the reactor
  // and a background growth could both pass this check and take the pool past its cap.
  const size_t chunks = chunks_.size() + (growing_ ? 1 : 0);
  return (chunks + 1) * options_.chunk_blocks <= max_blocks_;
}

bool SrqContext::Grow() {
  if (!RoomForAnotherChunk()) return false;
  Result<std::unique_ptr<RegisteredBlockPool>> chunk =
      RegisteredBlockPool::Create(pd_, options_.chunk_blocks, options_.buffer_size);
  if (!chunk.ok()) return false;
  return AddChunk(std::move(chunk).value());
}

bool SrqContext::GrowSoon() {
  // Off the reactor only while it watches (the chunk comes back through its loop) and with the
  // device kept alive for the thread.
  if (!options_.grow_off_reactor || loop_ == nullptr || keep_alive_ == nullptr) return Grow();
  if (growing_) return false;  // one at a time; its arrival serves the waiters
  if (!RoomForAnotherChunk()) return false;
  growing_ = true;
  // Allocating, registering (pinning, on hardware) and faulting in a chunk can take a while:
  // a thread does it while the reactor goes on; the reactor posts the blocks on OnHandoff.
  std::thread([handoff = handoff_, keep_alive = keep_alive_, pd = pd_,
               blocks = options_.chunk_blocks, size = options_.buffer_size] {
    Result<std::unique_ptr<RegisteredBlockPool>> chunk =
        RegisteredBlockPool::Create(pd, blocks, size);
    std::lock_guard<std::mutex> lock(handoff->mu);
    if (!handoff->open) return;  // the context is gone: the chunk deregisters here (pd alive)
    if (chunk.ok()) {
      handoff->chunk = std::move(chunk).value();
    } else {
      handoff->failed = true;
    }
    handoff->Wake();
  }).detach();
  return true;
}

void SrqContext::Handoff::Wake() {
  if (loop != nullptr) ev_async_send(loop, ready_watcher);
}

void SrqContext::OnHandoff(struct ev_loop*, ev_async* w, int) {
  auto* self = static_cast<SrqContext*>(w->data);
  std::unique_ptr<RegisteredBlockPool> chunk;
  bool grown = false, events = false;
  {
    std::lock_guard<std::mutex> lock(self->handoff_->mu);
    grown = self->handoff_->chunk != nullptr || self->handoff_->failed;
    chunk = std::move(self->handoff_->chunk);
    self->handoff_->failed = false;
    events = self->handoff_->limit_hit || !self->handoff_->last_wqe.empty() ||
             !self->handoff_->qp_failed.empty() || self->handoff_->device_failed ||
             !self->handoff_->discard.empty();
  }
  if (grown) {
    self->growing_ = false;
    if (chunk != nullptr && self->AddChunk(std::move(chunk))) {
      self->stats_->background_growths.fetch_add(1, std::memory_order_relaxed);
    } else {
      // No chunk (its registration was refused) or not all of it posted: AddChunk's re-arm did
      // not happen, and the limit event that asked for this growth disarmed the limit. Re-arm,
      // or the pool never grows on a limit event again.
      self->stats_->failed_growths.fetch_add(1, std::memory_order_relaxed);
      self->ArmLimit();
    }
  }
  if (events) {
    self->HandleCompletions();  // takes the events, then polls (and serves the waiters)
  } else if (grown) {
    self->ServeWaiters();
  }
}

bool SrqContext::AddChunk(std::unique_ptr<RegisteredBlockPool> chunk) {
  const uint32_t base = static_cast<uint32_t>(chunks_.size()) * options_.chunk_blocks;
  chunks_.push_back(std::move(chunk));
  for (uint32_t i = 0; i < options_.chunk_blocks; ++i) {
    if (!Repost(base + i).ok()) return false;
  }
  stats_->pool_bytes.store(uint64_t{chunks_.size()} * options_.chunk_blocks * options_.buffer_size,
                           std::memory_order_relaxed);
  if (chunks_.size() > 1) stats_->pool_growths.fetch_add(1, std::memory_order_relaxed);
  ArmLimit();  // a quarter of the new total
  return true;
}

Status SrqContext::Repost(uint32_t index) {
  RegisteredBlockPool* chunk = chunks_[index / options_.chunk_blocks].get();
  Sge sge = chunk->sge(index % options_.chunk_blocks, options_.buffer_size);
  RRPC_RETURN_NOT_OK(srq_->PostRecv(RecvWr{index, &sge, 1}));
  ++posted_;
  Publish();
  return Status::OK();
}

void SrqContext::Publish() {
  stats_->posted_receives.store(posted_, std::memory_order_relaxed);
  stats_->grants_outstanding.store(granted_, std::memory_order_relaxed);
}

uint32_t SrqContext::Reserve(uint32_t n) {
  const uint32_t got = static_cast<uint32_t>(std::clamp<int64_t>(Free(), 0, n));
  granted_ += got;
  Publish();
  return got;
}

bool SrqContext::ReserveInitial(uint32_t n) {
  while (Free() < n) {
    if (!Grow()) return false;
  }
  return Reserve(n) == n;
}

void SrqContext::Release(uint32_t n) {
  granted_ -= std::min<uint64_t>(n, granted_);
  Publish();
}

void SrqContext::WaitForCredits(SrqClient* client) {
  if (std::find(waiters_.begin(), waiters_.end(), client) != waiters_.end()) return;
  waiters_.push_back(client);
  stats_->credit_waits.fetch_add(1, std::memory_order_relaxed);
}

void SrqContext::CancelWait(SrqClient* client) {
  waiters_.erase(std::remove(waiters_.begin(), waiters_.end(), client), waiters_.end());
}

void SrqContext::ServeWaiters() {
  // Grow while peers wait and the cap allows: a chunk made off the reactor (served again when
  // it is posted), or here between batches.
  while (!waiters_.empty() && Free() <= 0 && GrowSoon() && !growing_) {
  }
  while (!waiters_.empty() && Free() > 0) {
    SrqClient* c = waiters_.front();
    waiters_.pop_front();
    c->OnSrqCreditsAvailable();  // may wait again (at the back)
  }
}

void SrqContext::Attach(uint32_t qp_num, SrqClient* client) {
  DCHECK(loop_ != nullptr) << "a connection attached to an SRQ context that watches no loop";
  Entry& e = qps_[qp_num];
  e.client = client;
  if (!e.early.empty()) early_ready_.push_back(qp_num);
  live_.insert(client);
  ++attached_;
  stats_->connections.store(attached_, std::memory_order_relaxed);
  // Completions may have arrived before the connection attached.
  if (loop_ != nullptr) ev_feed_event(loop_, &watcher_, EV_READ);
}

void SrqContext::Forget(uint32_t qp_num) {
  // Only for a QP that never left INIT: nothing of it can be in the CQs.
  auto it = qps_.find(qp_num);
  if (it == qps_.end() || it->second.client != nullptr) return;
  for (const WorkCompletion& wc : it->second.early) {
    if (wc.wr_id & kSendBit) {
      send_pool_->Return(static_cast<uint32_t>(wc.wr_id));
    } else {
      (void)Repost(static_cast<uint32_t>(wc.wr_id));
    }
  }
  qps_.erase(it);
}

void SrqContext::Discard(std::unique_ptr<RdmaEndpoint> endpoint, uint32_t share) {
  QueuePair* qp = endpoint->qp();
  const QpState state = qp->state();
  if (state == QpState::kReset || state == QpState::kInit) {
    Forget(qp->qp_num());  // never connected: nothing of it in the CQs
    Release(share);
    return;
  }
  (void)qp->ToError();
  Retire(qp->qp_num(), std::move(endpoint), 0, share);
}

void SrqContext::DiscardSoon(std::unique_ptr<RdmaEndpoint> endpoint, uint32_t share) {
  std::lock_guard<std::mutex> lock(handoff_->mu);
  handoff_->discard.emplace_back(std::move(endpoint), share);
  handoff_->has_events.store(true, std::memory_order_release);
  handoff_->Wake();
}

void SrqContext::Retire(uint32_t qp_num, std::unique_ptr<RdmaEndpoint> endpoint, uint32_t in_flight,
                        uint32_t share) {
  auto it = qps_.find(qp_num);
  if (it != qps_.end()) {
    // Early completions never handed over: their blocks go back.
    std::vector<WorkCompletion> early = std::move(it->second.early);
    it->second.early.clear();
    for (const WorkCompletion& wc : early) {
      if (wc.wr_id & kSendBit) {
        send_pool_->Return(static_cast<uint32_t>(wc.wr_id));
        if (in_flight > 0) --in_flight;
      } else {
        (void)Repost(static_cast<uint32_t>(wc.wr_id));
      }
    }
  }
  if (it != qps_.end() && it->second.client != nullptr) {
    CancelWait(it->second.client);
    live_.erase(it->second.client);
    send_waiters_.erase(it->second.client);
    it->second.client = nullptr;
    --attached_;
    stats_->connections.store(attached_, std::memory_order_relaxed);
  }
  granted_ -= std::min<uint64_t>(share, granted_);
  if (it == qps_.end()) {
    // Never expected: none of its completions can be told apart from a stranger's anyway.
    Publish();
    return;
  }
  // Kept until drained (DestroyDrained): its share stays out of the ledger until then (a
  // message it received before the QP died may still be in the receive CQ).
  quarantined_ += share;
  Entry& e = it->second;
  e.share = share;
  e.in_flight = in_flight;
  e.retired = std::move(endpoint);
  ++retiring_;
  stats_->retiring.store(retiring_, std::memory_order_relaxed);
  Publish();
  if (loop_ != nullptr) ev_feed_event(loop_, &watcher_, EV_READ);
}

void SrqContext::TakeEvents(std::vector<SrqClient*>* failed, bool* device_failed) {
  *device_failed = false;
  if (!handoff_->has_events.load(std::memory_order_acquire)) return;
  bool limit_hit;
  std::vector<uint32_t> last_wqe, qp_failed;
  std::vector<std::pair<std::unique_ptr<RdmaEndpoint>, uint32_t>> discard;
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->has_events.store(false, std::memory_order_relaxed);
    limit_hit = handoff_->limit_hit;
    handoff_->limit_hit = false;
    last_wqe.swap(handoff_->last_wqe);
    qp_failed.swap(handoff_->qp_failed);
    *device_failed = handoff_->device_failed;
    handoff_->device_failed = false;
    discard.swap(handoff_->discard);
  }
  for (auto& [endpoint, share] : discard) Discard(std::move(endpoint), share);
  for (uint32_t qp : last_wqe) {
    auto it = qps_.find(qp);
    if (it != qps_.end()) it->second.last_wqe = true;  // may come before the QP is retired
  }
  if (*device_failed) {
    failed->assign(live_.begin(), live_.end());
  } else {
    for (uint32_t qp : qp_failed) {
      auto it = qps_.find(qp);
      if (it != qps_.end() && it->second.client != nullptr) failed->push_back(it->second.client);
    }
  }
  if (limit_hit) HandleLimitEvent();
}

void SrqContext::DestroyDrained() {
  if (retiring_ == 0) return;
  for (auto it = qps_.begin(); it != qps_.end();) {
    Entry& e = it->second;
    if (e.retired != nullptr && e.last_wqe && e.in_flight == 0) {
      quarantined_ -= std::min<uint64_t>(e.share, quarantined_);
      --retiring_;
      stats_->retiring.store(retiring_, std::memory_order_relaxed);
      it = qps_.erase(it);  // destroys the QP: nothing of it is left in the CQs
    } else {
      ++it;
    }
  }
}

void SrqContext::Dispatch(const WorkCompletion& wc, std::vector<SrqClient*>* touched) {
  const uint32_t block = static_cast<uint32_t>(wc.wr_id);
  const bool is_send = (wc.wr_id & kSendBit) != 0;
  auto it = qps_.find(wc.qp_num);
  if (it == qps_.end()) {
    // A connection long gone (or never ours): the block goes back.
    if (is_send) {
      send_pool_->Return(block);
    } else {
      (void)Repost(block);
    }
    return;
  }
  Entry& e = it->second;
  if (e.client == nullptr && e.retired == nullptr) {
    e.early.push_back(wc);  // the connection is on its way
    return;
  }
  if (e.client == nullptr) {
    // Retired: its grants were returned; its sends are counted down until the QP can go.
    if (is_send) {
      send_pool_->Return(block);
      if (e.in_flight > 0) --e.in_flight;
    } else {
      (void)Repost(block);
    }
    return;
  }
  SrqClient* client = e.client;  // the entry may be gone after the call (the connection closed)
  if (is_send) {
    client->OnSrqSendDone(block, wc.status);
  } else {
    client->OnSrqReceive(block, wc.byte_len, wc.status);
  }
  touched->push_back(client);
}

void SrqContext::OnChannelReadable(struct ev_loop*, ev_io* w, int) {
  static_cast<SrqContext*>(w->data)->HandleCompletions();
}

void SrqContext::HandleCompletions() {
  for (;;) {
    Result<CompletionQueue*> ev = channel_->GetEvent();
    if (!ev.ok() || *ev == nullptr) break;
  }
  // Re-arm, then poll empty: a completion after the poll signals again.
  (void)recv_cq_->RequestNotify();
  (void)send_cq_->RequestNotify();
  std::vector<SrqClient*> failed;
  bool device_failed = false;
  TakeEvents(&failed, &device_failed);
  const Status why = Status::NetworkError(device_failed ? "RDMA device failed (async event)"
                                                        : "RDMA queue pair failed (async event)");
  for (SrqClient* c : failed) {
    if (live_.count(c) != 0) c->OnSrqQpFailed(why);  // may close it (Retire)
  }
  std::vector<SrqClient*> touched;
  // Completions that came before their connection attached go first, in order.
  std::vector<uint32_t> ready = std::move(early_ready_);
  early_ready_.clear();
  for (uint32_t qp : ready) {
    auto it = qps_.find(qp);
    if (it == qps_.end() || it->second.client == nullptr) continue;
    std::vector<WorkCompletion> early = std::move(it->second.early);
    it->second.early.clear();
    for (const WorkCompletion& wc : early) Dispatch(wc, &touched);
  }
  WorkCompletion wc[32];
  for (CompletionQueue* cq : {send_cq_.get(), recv_cq_.get()}) {
    for (;;) {
      Result<int> n = cq->Poll(wc, 32);
      if (!n.ok()) {
        // A lost CQ breaks every connection of the reactor: they fail on their next send.
        LOG(ERROR) << "SRQ completion queue lost: " << n.status().ToString();
        break;
      }
      for (int i = 0; i < *n; ++i) {
        if ((wc[i].wr_id & kSendBit) == 0) --posted_;
        Dispatch(wc[i], &touched);
      }
      if (*n < 32) break;
    }
  }
  DestroyDrained();
  Publish();
  // Writers that waited for the shared send blocks get another go too.
  if (send_pool_->free_blocks() > 1) {
    touched.insert(touched.end(), send_waiters_.begin(), send_waiters_.end());
    send_waiters_.clear();
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (SrqClient* c : touched) {
    if (live_.count(c) != 0) c->OnSrqBatchDone();  // not closed during this batch
  }
  ServeWaiters();
}

void SrqContext::StartWatching(struct ev_loop* loop) {
  loop_ = loop;
  ev_io_init(&watcher_, &SrqContext::OnChannelReadable, channel_->fd(), EV_READ);
  watcher_.data = this;
  ev_io_start(loop_, &watcher_);
  ev_async_init(&growth_ready_, &SrqContext::OnHandoff);
  growth_ready_.data = this;
  ev_async_start(loop_, &growth_ready_);
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->loop = loop_;
    handoff_->ready_watcher = &growth_ready_;
  }
  if (options_.reclaim_after > MonoDelta()) {
    const double period = std::max(0.01, options_.reclaim_after.ToSeconds() / 2);
    ev_timer_init(&idle_timer_, &SrqContext::OnIdleTimer, period, period);
    idle_timer_.data = this;
    ev_timer_start(loop_, &idle_timer_);
  }
}

void SrqContext::LeaveLoop() {
  if (loop_ == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->loop = nullptr;  // what other threads hand over from now on waits for ~SrqContext
  }
  ev_async_stop(loop_, &growth_ready_);
  ev_clear_pending(loop_, &growth_ready_);
  ev_io_stop(loop_, &watcher_);
  ev_clear_pending(loop_, &watcher_);
  if (options_.reclaim_after > MonoDelta()) {
    ev_timer_stop(loop_, &idle_timer_);
    ev_clear_pending(loop_, &idle_timer_);
  }
  loop_ = nullptr;
}

void SrqContext::DeliverAsyncEvent(const Context* ctx, const AsyncEvent& event) {
  // The device's watcher (async_events.h) reads each event once: one for an SRQ or QP of some
  // context (the context pointer it was created with) goes to that context's reactor, which
  // takes it before its next poll of the CQs. Port events are not used here: a QP that loses
  // its path fails on its own (retries run out).
  std::lock_guard<std::mutex> lock(registry_mu);
  if (event.type == AsyncEventType::kDeviceFatal) {
    // Every QP of the device is gone: every context of that device fails its connections
    // (contexts of another device, e.g. the one reopened after it, are not concerned).
    for (auto& [context, handoff] : Registry()) {
      if (handoff->device != ctx) continue;
      std::lock_guard<std::mutex> hlock(handoff->mu);
      handoff->device_failed = true;
      handoff->has_events.store(true, std::memory_order_release);
      handoff->Wake();
    }
    return;
  }
  if (event.type != AsyncEventType::kSrqLimitReached &&
      event.type != AsyncEventType::kQpLastWqeReached && event.type != AsyncEventType::kQpFatal) {
    return;
  }
  auto it = Registry().find(event.context);
  if (it == Registry().end() || it->second->device != ctx) return;  // not ours (or gone)
  Handoff* h = it->second.get();
  std::lock_guard<std::mutex> hlock(h->mu);
  if (event.type == AsyncEventType::kSrqLimitReached) {
    h->limit_hit = true;
  } else if (event.type == AsyncEventType::kQpLastWqeReached) {
    h->last_wqe.push_back(event.qp_num);
  } else {
    h->qp_failed.push_back(event.qp_num);
  }
  h->has_events.store(true, std::memory_order_release);
  h->Wake();
}

void SrqContext::OnIdleTimer(struct ev_loop*, ev_timer* w, int) {
  auto* self = static_cast<SrqContext*>(w->data);
  const MonoTime now = MonoTime::Now();
  // A look may close a connection (a failed send), which retires it from live_.
  std::vector<SrqClient*> clients(self->live_.begin(), self->live_.end());
  for (SrqClient* c : clients) {
    if (self->live_.count(c) != 0) c->OnSrqIdleCheck(now);
  }
}

void SrqContext::ArmLimit() {
  const uint64_t mark = std::max<uint64_t>(options_.reserve, posted_ / 4);
  (void)srq_->ArmLimit(static_cast<uint32_t>(std::min<uint64_t>(mark, max_blocks_)));
}

void SrqContext::HandleLimitEvent() {
  stats_->limit_events.fetch_add(1, std::memory_order_relaxed);
  // Growth re-arms; at the cap (false) the ledger still holds and grants just wait.
  if (!GrowSoon()) ArmLimit();
}

}  // namespace rrpc::rdma
