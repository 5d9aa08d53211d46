#include "rpc/rdma/setup_thread.h"

#include <utility>

namespace rrpc::rdma {

SetupThread::~SetupThread() {
  std::deque<std::function<void()>> dropped;
  std::vector<std::thread> threads;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    dropped.swap(jobs_);
    threads.swap(threads_);  // no thread starts once stopping
  }
  cv_.NotifyAll();
  dropped.clear();  // before the joins: a running job may wait for what these hold
  for (std::thread& t : threads) t.join();
}

bool SetupThread::Submit(std::function<void()> job) {
  {
    MutexLock lock(mu_);
    if (stopping_ || jobs_.size() >= max_queued_) return false;
    jobs_.push_back(std::move(job));
    // A thread idle but not yet woken takes one of the queued jobs: start one more only when
    // the queued outnumber the idle.
    if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { Run(); });
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
      while (!stopping_ && jobs_.empty()) {
        ++idle_;
        cv_.Wait(mu_);
        --idle_;
      }
      if (stopping_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();  // its closure goes here too, on this thread
  }
}

}  // namespace rrpc::rdma
