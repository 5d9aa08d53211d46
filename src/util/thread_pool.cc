#include "util/thread_pool.h"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "util/thread.h"

namespace rrpc {

namespace {
// The pool the calling thread belongs to, if any: catches Wait/Shutdown from inside the pool,
// which would deadlock.
thread_local const ThreadPool* current_pool = nullptr;
}  // namespace

Result<std::unique_ptr<ThreadPool>> ThreadPool::Create(ThreadPoolOptions options) {
  if (options.num_threads <= 0) {
    return Status::InvalidArgument("thread pool needs at least one thread", options.name);
  }
  std::unique_ptr<ThreadPool> pool(new ThreadPool(std::move(options)));
  std::lock_guard<std::mutex> l(pool->shutdown_mu_);
  for (int i = 0; i < pool->options_.num_threads; i++) {
    Result<std::thread> t =
        StartThread(pool->options_.category, pool->options_.name + "-" + std::to_string(i),
                    [p = pool.get()] { p->WorkerLoop(); });
    if (!t.ok()) {
      {
        std::lock_guard<std::mutex> m(pool->mu_);
        pool->shutting_down_ = true;
      }
      pool->work_cv_.notify_all();
      for (std::thread& started : pool->threads_) started.join();
      pool->threads_.clear();
      return t.status();
    }
    pool->threads_.push_back(std::move(t).value());
  }
  return Result<std::unique_ptr<ThreadPool>>(std::move(pool));
}

ThreadPool::ThreadPool(ThreadPoolOptions options) : options_(std::move(options)) {}

ThreadPool::~ThreadPool() { Shutdown(); }

Status ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (shutting_down_) return Status::Aborted("thread pool is shut down", options_.name);
    if (queue_.size() >= options_.max_queued_tasks) {
      return Status::ServiceUnavailable("thread pool queue is full", options_.name);
    }
    queue_.push_back(std::move(task));
  }
  work_cv_.notify_one();
  return Status::OK();
}

void ThreadPool::Wait() {
  DCHECK(current_pool != this) << "ThreadPool::Wait from its own thread would never return";
  std::unique_lock<std::mutex> l(mu_);
  idle_cv_.wait(l, [this] { return IsIdleLocked(); });
}

bool ThreadPool::WaitFor(MonoDelta timeout) {
  DCHECK(current_pool != this) << "ThreadPool::WaitFor from its own thread cannot succeed";
  const MonoTime deadline = MonoTime::Now() + timeout;
  std::unique_lock<std::mutex> l(mu_);
  while (!IsIdleLocked()) {
    const MonoDelta remaining = deadline - MonoTime::Now();
    if (remaining.ToNanoseconds() <= 0) return false;
    // Slices of at most an hour keep long timeouts from overflowing std::chrono arithmetic.
    const MonoDelta slice = std::min(remaining, MonoDelta::FromSeconds(3600));
    idle_cv_.wait_for(l, std::chrono::nanoseconds(slice.ToNanoseconds()));
  }
  return true;
}

void ThreadPool::Shutdown() {
  DCHECK(current_pool != this) << "ThreadPool::Shutdown from its own thread would join itself";
  std::lock_guard<std::mutex> s(shutdown_mu_);
  {
    std::lock_guard<std::mutex> l(mu_);
    shutting_down_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

void ThreadPool::WorkerLoop() {
  current_pool = this;
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    // Drain the queue even after shutdown began: every accepted task runs exactly once.
    work_cv_.wait(l, [this] { return !queue_.empty() || shutting_down_; });
    if (queue_.empty()) break;  // Shutting down and nothing left.
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_++;
    l.unlock();
    task();
    // Destroy the closure (and whatever it captured) before counting the task as done, so
    // Wait() returning means the captures are released too.
    task = nullptr;
    l.lock();
    running_--;
    if (IsIdleLocked()) idle_cv_.notify_all();
  }
  current_pool = nullptr;
}

}  // namespace rrpc
