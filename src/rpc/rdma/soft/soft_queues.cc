// The software device's queues: completion queues, completion channels and shared receive
// queues (soft_internal.h); every operation under the device's mutex, as the rest of it.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "rpc/rdma/soft/soft_internal.h"

namespace rrpc::rdma::soft {

uint64_t PostedRecv::capacity() const {
  uint64_t n = 0;
  for (int i = 0; i < num_sge; ++i) n += sge[i].length;
  return n;
}

// ---- Completion queues and channels.

SoftCq::SoftCq(SoftDeviceImpl* dev, int capacity, CompletionChannel* channel, int vector)
    : dev_(dev), capacity_(capacity), channel_(channel), vector_(vector) {}

SoftCq::~SoftCq() {
  {
    std::lock_guard<std::mutex> lock(dev_->mu);
    dev_->RemoveCq(this);
  }
  if (channel_ != nullptr) static_cast<SoftChannel*>(channel_)->Forget(this);
}

Result<int> SoftCq::Poll(WorkCompletion* wc, int max) {
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (overflowed_) return Status::IOError("completion queue overflowed");
  int n = 0;
  while (n < max && !entries_.empty()) {
    wc[n++] = entries_.front();
    entries_.pop_front();
  }
  return n;
}

Status SoftCq::RequestNotify() {
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (overflowed_) return Status::IOError("completion queue overflowed");
  armed_ = true;
  return Status::OK();
}

void SoftCq::Push(const WorkCompletion& wc) {
  if (overflowed_) return;
  if (dev_->stalled()) {
    stalled_.push_back(wc);
    return;
  }
  if (entries_.size() >= static_cast<size_t>(capacity_)) {
    // Hardware overruns the queue: the CQ is lost and the owner hears it as an async event.
    overflowed_ = true;
    entries_.clear();
    dev_->PostAsyncEvent({AsyncEventType::kCqError, 0, static_cast<CompletionQueue*>(this)});
    return;
  }
  entries_.push_back(wc);
  if (armed_ && channel_ != nullptr) {
    armed_ = false;
    static_cast<SoftChannel*>(channel_)->Notify(this);
  }
}

void SoftCq::Clean(uint32_t qpn) {
  auto of_qp = [qpn](const WorkCompletion& wc) { return wc.qp_num == qpn; };
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(), of_qp), entries_.end());
  stalled_.erase(std::remove_if(stalled_.begin(), stalled_.end(), of_qp), stalled_.end());
}

void SoftCq::ReleaseStalled() {
  std::deque<WorkCompletion> held;
  held.swap(stalled_);
  for (const WorkCompletion& wc : held) Push(wc);
}

SoftChannel::~SoftChannel() { close(fd_); }

Result<CompletionQueue*> SoftChannel::GetEvent() {
  std::lock_guard<std::mutex> lock(mu_);
  if (events_.empty()) {
    uint64_t v;
    (void)!read(fd_, &v, sizeof(v));  // clears a stale readiness
    return nullptr;
  }
  CompletionQueue* cq = events_.front();
  events_.pop_front();
  if (events_.empty()) {
    uint64_t v;
    (void)!read(fd_, &v, sizeof(v));
  }
  return cq;
}

void SoftChannel::Notify(CompletionQueue* cq) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(cq);
  uint64_t one = 1;
  (void)!write(fd_, &one, sizeof(one));
}

void SoftChannel::Forget(CompletionQueue* cq) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = events_.begin(); it != events_.end();) {
    it = *it == cq ? events_.erase(it) : it + 1;
  }
}

// ---- Shared receive queue.

Status SoftSrq::PostRecv(const RecvWr& wr) {
  if (wr.num_sge < 0 || wr.num_sge > PostedRecv::kMaxSge) {
    return Status::InvalidArgument("too many SGEs in a receive");
  }
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (posted_.size() >= max_wr_) return Status::IOError("shared receive queue full");
  PostedRecv r;
  r.wr_id = wr.wr_id;
  r.num_sge = wr.num_sge;
  for (int i = 0; i < wr.num_sge; ++i) r.sge[i] = wr.sg_list[i];
  posted_.push_back(r);
  return Status::OK();
}

Status SoftSrq::ArmLimit(uint32_t limit) {
  std::lock_guard<std::mutex> lock(dev_->mu);
  if (limit > max_wr_) return Status::InvalidArgument("SRQ limit above its depth");
  limit_ = limit;
  return Status::OK();
}

bool SoftSrq::Take(PostedRecv* out) {
  if (posted_.empty()) return false;
  *out = posted_.front();
  posted_.pop_front();
  if (limit_ != 0 && posted_.size() < limit_) {
    limit_ = 0;
    dev_->PostAsyncEvent({AsyncEventType::kSrqLimitReached, 0, context_});
  }
  return true;
}

}  // namespace rrpc::rdma::soft
