// SetupThread: runs the control-path verbs of RDMA connection setup (CQ and QP create, memory
// registration, modify-QP to INIT: tens to hundreds of microseconds each on a NIC) away from the
// reactor threads, so a reactor upgrading connections keeps serving its others
// (docs/rdma.md, "Control-path verbs"), and a Block's first registration for a send by
// reference. One thread per RdmaTransportFactory (shared with its connections' transports),
// started on the first job; jobs run in order. The queue is bounded: a job refused (queue full,
// or stopping) is the caller's to run or give up. Any thread may submit; the destructor (whoever
// lets go last, possibly a reactor) stops the thread after the job running, dropping those
// queued (their closures are destroyed on the destroying thread, so a job owns nothing that must
// die on a reactor).
#pragma once

#include <deque>
#include <functional>
#include <thread>

#include "rrpc/util/mutex.h"
#include "rrpc/util/thread_annotations.h"

namespace rrpc::rdma {

class SetupThread {
 public:
  explicit SetupThread(size_t max_queued) : max_queued_(max_queued) {}
  ~SetupThread();
  SetupThread(const SetupThread&) = delete;
  SetupThread& operator=(const SetupThread&) = delete;

  // Queues `job` to run on the setup thread; false (`job` untouched by the thread) when
  // max_queued jobs are waiting or the thread is stopping.
  bool Submit(std::function<void()> job) RRPC_EXCLUDES(mu_);

 private:
  void Run() RRPC_EXCLUDES(mu_);

  const size_t max_queued_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> jobs_ RRPC_GUARDED_BY(mu_);
  bool stopping_ RRPC_GUARDED_BY(mu_) = false;
  bool started_ RRPC_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started under mu_ by the first Submit; joined by the destructor
};

}  // namespace rrpc::rdma
