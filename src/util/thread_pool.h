// ThreadPool: a fixed set of named threads running submitted closures in FIFO order, for work
// that must leave a latency-sensitive thread (e.g. a reactor handing off a slow callback).
// Thread-safe: Submit, Wait and Shutdown may be called from any thread, except that Wait and
// Shutdown must not be called from one of the pool's own threads (they would wait for
// themselves). Every task accepted by Submit runs exactly once, even across Shutdown.
//
//   ThreadPoolOptions opts;
//   opts.name = "fs-io";
//   opts.num_threads = 4;
//   RRPC_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> pool, ThreadPool::Create(opts));
//   RRPC_RETURN_NOT_OK(pool->Submit([] { ... }));
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "util/monotime.h"
#include "util/status.h"

namespace rrpc {

struct ThreadPoolOptions {
  // Threads are named "<name>-0", "<name>-1", ... (the OS keeps the first 15 bytes).
  std::string name = "pool";
  // Their ThreadRegistry category.
  std::string category = "worker";
  int num_threads = 1;
  // Submit fails with ServiceUnavailable when this many tasks wait (running ones not counted).
  size_t max_queued_tasks = std::numeric_limits<size_t>::max();
};

class ThreadPool {
 public:
  // Starts the threads. Fails if a thread cannot be started (none is left running then).
  static Result<std::unique_ptr<ThreadPool>> Create(ThreadPoolOptions options);

  // Shuts down (see Shutdown) if not done yet.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task` to run on one of the threads. Fails with Aborted once Shutdown has begun, or
  // with ServiceUnavailable when max_queued_tasks are waiting; the task is then dropped unrun.
  Status Submit(std::function<void()> task);

  // Blocks until no task is queued or running. Tasks submitted meanwhile are waited for too.
  void Wait();
  // As Wait, but gives up after `timeout`: true if the pool went idle.
  bool WaitFor(MonoDelta timeout);

  // Refuses new tasks, lets the threads finish every task already queued, and joins them.
  // Idempotent.
  void Shutdown();

  int num_threads() const { return options_.num_threads; }
  const std::string& name() const { return options_.name; }

 private:
  explicit ThreadPool(ThreadPoolOptions options);
  void WorkerLoop();
  bool IsIdleLocked() const { return queue_.empty() && running_ == 0; }  // REQUIRES: mu_ held.

  const ThreadPoolOptions options_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;          // Workers wait here for a task or shutdown.
  std::condition_variable idle_cv_;          // Wait() waits here for the pool to go idle.
  std::deque<std::function<void()>> queue_;  // Guarded by mu_.
  int running_ = 0;                          // Tasks being run now. Guarded by mu_.
  bool shutting_down_ = false;               // Guarded by mu_.

  // Serializes Shutdown() calls so a second caller returns only after the threads are joined.
  std::mutex shutdown_mu_;
  std::vector<std::thread> threads_;  // Guarded by shutdown_mu_ (written only by Create).
};

}  // namespace rrpc
