#include "rrpc/rpc/rdma/srq_context.h"

#include <glog/logging.h>

#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "rrpc/rpc/rdma/rdma_endpoint.h"

namespace rrpc::rdma {
namespace {

// A send's wr_id: its block with this bit set (the same convention as private-RQ mode).
constexpr uint64_t kSendBit = 1ull << 32;

// A device's async events come through one fd that every reactor's context watches; whichever
// reads an SRQ limit event flags the context owning that SRQ, found here (registered for the
// context's lifetime, so the flag is never set on a context being destroyed).
std::mutex registry_mu;
std::unordered_map<const void*, std::atomic<bool>*>& LimitFlags() {
  static auto* flags = new std::unordered_map<const void*, std::atomic<bool>*>();
  return *flags;
}

}  // namespace

Result<std::unique_ptr<SrqContext>> SrqContext::Create(Context* ctx, ProtectionDomain* pd,
                                                       const SrqOptions& o,
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
  c->max_blocks_ = static_cast<uint32_t>(std::min<uint64_t>(chunks * o.chunk_blocks, 1u << 24));
  RRPC_ASSIGN_OR_RETURN(c->channel_, ctx->CreateChannel());
  // Every completion fits: one per posted receive, one per send block in flight.
  RRPC_ASSIGN_OR_RETURN(c->recv_cq_,
                        ctx->CreateCq(static_cast<int>(c->max_blocks_ + 1), c->channel_.get()));
  RRPC_ASSIGN_OR_RETURN(c->send_cq_,
                        ctx->CreateCq(static_cast<int>(o.send_buffers + 1), c->channel_.get()));
  RRPC_ASSIGN_OR_RETURN(c->send_pool_,
                        RegisteredBlockPool::Create(pd, o.send_buffers, o.buffer_size));
  // A device refusing the depth (its max_srq_wr) gets asked for half, down to one chunk; the cap
  // shrinks with it.
  for (;;) {
    Result<std::unique_ptr<SharedReceiveQueue>> srq = pd->CreateSrq(c->max_blocks_);
    if (srq.ok()) {
      c->srq_ = std::move(srq).value();
      break;
    }
    if (c->max_blocks_ / 2 < o.chunk_blocks) return srq.status();
    c->max_blocks_ = c->max_blocks_ / 2 / o.chunk_blocks * o.chunk_blocks;
  }
  if (!c->Grow()) return Status::RuntimeError("SRQ: the first receive blocks could not be posted");
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    LimitFlags()[c->srq_.get()] = &c->limit_hit_;
  }
  RRPC_RETURN_NOT_OK(c->recv_cq_->RequestNotify());
  RRPC_RETURN_NOT_OK(c->send_cq_->RequestNotify());
  return c;
}

SrqContext::~SrqContext() {
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->open = false;  // a growth thread still running drops its chunk
  }
  if (srq_ != nullptr) {
    std::lock_guard<std::mutex> lock(registry_mu);
    LimitFlags().erase(srq_.get());
  }
  StopWatching();
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
  if (!options_.grow_off_reactor || !watching_ || keep_alive_ == nullptr) return Grow();
  if (growing_) return false;  // one at a time; its arrival serves the waiters
  if (!RoomForAnotherChunk()) return false;
  growing_ = true;
  // Allocating, registering (pinning, on hardware) and faulting in a chunk can take a while:
  // a thread does it while the reactor goes on; the reactor posts the blocks on OnGrowthReady.
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
    if (handoff->loop != nullptr) ev_async_send(handoff->loop, handoff->ready_watcher);
  }).detach();
  return true;
}

void SrqContext::OnGrowthReady(struct ev_loop*, ev_async* w, int) {
  auto* self = static_cast<SrqContext*>(w->data);
  std::unique_ptr<RegisteredBlockPool> chunk;
  {
    std::lock_guard<std::mutex> lock(self->handoff_->mu);
    if (self->handoff_->chunk == nullptr && !self->handoff_->failed) return;
    chunk = std::move(self->handoff_->chunk);
    self->handoff_->failed = false;
  }
  self->growing_ = false;
  if (chunk != nullptr && self->AddChunk(std::move(chunk))) {
    self->stats_->background_growths.fetch_add(1, std::memory_order_relaxed);
  }
  self->ServeWaiters();
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

void SrqContext::Attach(struct ev_loop* loop, uint32_t qp_num, SrqClient* client) {
  Entry& e = qps_[qp_num];
  e.client = client;
  if (!e.early.empty()) early_ready_.push_back(qp_num);
  live_.insert(client);
  ++attached_;
  stats_->connections.store(attached_, std::memory_order_relaxed);
  if (!watching_) StartWatching(loop);
  // Completions may have arrived before the connection attached.
  ev_feed_event(loop_, &watcher_, EV_READ);
}

void SrqContext::Forget(uint32_t qp_num) {
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
  quarantined_ += share;
  Publish();
  if (in_flight > 0 && it != qps_.end()) {
    it->second.retired = std::move(endpoint);
    it->second.in_flight = in_flight;
  } else if (it != qps_.end()) {
    qps_.erase(it);
  }
  endpoint.reset();
  if (watching_) {
    if (attached_ == 0) {
      // The last connection of the reactor: stop watching now (the loop may stop running after
      // this). What is left in the CQs is polled, and the quarantine ends, after the next
      // Attach's first batch.
      StopWatching();
    } else {
      ev_feed_event(loop_, &watcher_, EV_READ);  // the quarantine ends after the next poll
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
      if (--e.in_flight == 0) qps_.erase(it);
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
  if (limit_hit_.exchange(false, std::memory_order_acq_rel)) HandleLimitEvent();
  const uint64_t quarantine_before = quarantined_;
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
  quarantined_ -= std::min(quarantined_, quarantine_before);
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
  if (attached_ == 0 && watching_) StopWatching();
}

void SrqContext::StartWatching(struct ev_loop* loop) {
  loop_ = loop;
  ev_io_init(&watcher_, &SrqContext::OnChannelReadable, channel_->fd(), EV_READ);
  watcher_.data = this;
  ev_io_start(loop_, &watcher_);
  ev_async_init(&growth_ready_, &SrqContext::OnGrowthReady);
  growth_ready_.data = this;
  ev_async_start(loop_, &growth_ready_);
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->loop = loop_;
    handoff_->ready_watcher = &growth_ready_;
    // A chunk made while nobody watched: take it on the first turn.
    if (handoff_->chunk != nullptr || handoff_->failed)
      ev_feed_event(loop_, &growth_ready_, EV_ASYNC);
  }
  ev_io_init(&async_watcher_, &SrqContext::OnAsyncReadable, ctx_->async_fd(), EV_READ);
  async_watcher_.data = this;
  ev_io_start(loop_, &async_watcher_);
  if (options_.reclaim_after > MonoDelta()) {
    const double period = std::max(0.01, options_.reclaim_after.ToSeconds() / 2);
    ev_timer_init(&idle_timer_, &SrqContext::OnIdleTimer, period, period);
    idle_timer_.data = this;
    ev_timer_start(loop_, &idle_timer_);
  }
  watching_ = true;
}

void SrqContext::StopWatching() {
  if (!watching_) return;
  {
    std::lock_guard<std::mutex> lock(handoff_->mu);
    handoff_->loop = nullptr;  // the thread leaves its chunk for the next StartWatching
  }
  ev_async_stop(loop_, &growth_ready_);
  ev_clear_pending(loop_, &growth_ready_);
  ev_io_stop(loop_, &watcher_);
  ev_clear_pending(loop_, &watcher_);
  ev_io_stop(loop_, &async_watcher_);
  ev_clear_pending(loop_, &async_watcher_);
  if (options_.reclaim_after > MonoDelta()) {
    ev_timer_stop(loop_, &idle_timer_);
    ev_clear_pending(loop_, &idle_timer_);
  }
  watching_ = false;
}

void SrqContext::OnAsyncReadable(struct ev_loop*, ev_io* w, int) {
  auto* self = static_cast<SrqContext*>(w->data);
  // Every reactor's context watches the device's one async fd: whichever reads an SRQ limit
  // event flags the context owning that SRQ, which handles it now (ours) or on its next batch of
  // completions (the limit fires as receives are consumed, so one comes). Other events (port,
  // QP fatal) are not used: a broken QP shows in its completions.
  AsyncEvent event;
  while (self->ctx_->NextAsyncEvent(&event)) {
    if (event.type != AsyncEventType::kSrqLimitReached) continue;
    std::lock_guard<std::mutex> lock(registry_mu);
    auto it = LimitFlags().find(event.object);
    if (it != LimitFlags().end()) it->second->store(true, std::memory_order_release);
  }
  if (self->limit_hit_.exchange(false, std::memory_order_acq_rel)) {
    self->HandleLimitEvent();
    self->ServeWaiters();
  }
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
