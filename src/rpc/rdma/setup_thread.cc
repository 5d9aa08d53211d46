#include "rpc/rdma/setup_thread.h"

#include <utility>

namespace rrpc::rdma {

SetupThread::~SetupThread() {
  std::deque<std::function<void()>> dropped;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    dropped.swap(jobs_);
  }
  cv_.NotifyAll();
  dropped.clear();  // before the join: the running job may wait for what these hold
  if (thread_.joinable()) thread_.join();
}

bool SetupThread::Submit(std::function<void()> job) {
  {
    MutexLock lock(mu_);
    if (stopping_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(job));
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] { Run(); });
    }
  }
  cv_.NotifyOne();
  return true;
}

void SetupThread::Run() {
  for (;;) {
    std::function<void()> job;
    {
      MutexLock lock(mu_);
      while (!stopping_ && jobs_.empty()) cv_.Wait(mu_);
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // its closure goes here too, on this thread
  }
}

}  // namespace rrpc::rdma
