// SetupThread: runs the control-path verbs of RDMA connection setup (CQ and QP create, memory
// registration, modify-QP to INIT, RTR and RTS: tens to hundreds of microseconds each on a NIC,
// and a RoCE RTR up to ~1 s while the kernel resolves the peer's MAC) away from the reactor
// threads, so a reactor upgrading connections keeps serving its others (docs/rdma.md,
// "Control-path verbs"), and a Block's first registration for a send by reference. A small pool:
// one per RdmaTransportFactory (shared with its connections' transports), up to `max_threads`
// threads, each started when a job finds none idle. Jobs start in the order submitted; with more
// than one thread they run side by side, so one job stuck in a verb (an RTR toward a peer that
// does not answer) holds one thread, not every setup behind it. No job waits for another: a
// connection submits its setup (a client then, after the server's answer, its RTR/RTS and path
// probe), and only once it has run its registrations, one at a time.
// The queue is bounded: a job refused (queue full, or stopping) is the caller's to run or give
// up. Any thread may submit; the destructor (whoever lets go last, possibly a reactor) stops the
// threads after the jobs running, dropping those queued (their closures are destroyed on the
// destroying thread, so a job owns nothing that must die on a reactor).
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "rrpc/util/mutex.h"
#include "rrpc/util/thread_annotations.h"

namespace rrpc::rdma {

class SetupThread {
 public:
  // max_threads >= 1 (1: jobs run one after another, in order).
  SetupThread(size_t max_threads, size_t max_queued)
      : max_threads_(max_threads), max_queued_(max_queued) {}
  ~SetupThread();
  SetupThread(const SetupThread&) = delete;
  SetupThread& operator=(const SetupThread&) = delete;

  // Queues `job` to run on a setup thread; false (`job` untouched by the threads) when
  // max_queued jobs are waiting or the pool is stopping.
  bool Submit(std::function<void()> job) RRPC_EXCLUDES(mu_);

 private:
  void Run() RRPC_EXCLUDES(mu_);

  const size_t max_threads_;
  const size_t max_queued_;
  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> jobs_ RRPC_GUARDED_BY(mu_);
  bool stopping_ RRPC_GUARDED_BY(mu_) = false;
  size_t idle_ RRPC_GUARDED_BY(mu_) = 0;  // threads waiting for a job
  // Started under mu_ by Submit; joined by the destructor.
  std::vector<std::thread> threads_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rdma
