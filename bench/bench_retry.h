// What rpc-bench does with a call the server refused as too busy (ERROR_SERVER_TOO_BUSY): what a
// real client does. It waits a jittered, growing backoff and sends the call again, as long as the
// call's own deadline allows; the run fails only on real errors (or a call that stays refused
// until its deadline). Kudu's published command (24 threads x 100 calls against a 1,024-call
// queue) keeps the server's queue overflowing, so this is its steady state, not an exception.
//
// RetryTimer runs the re-issues on a thread of its own: a completion callback runs on a client
// reactor and must not sleep.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

// True when the call failed only because the server's queue was full (retriable).
bool IsServerTooBusy(const rpc::RpcController& controller);

// The wait before retry number `attempt` (1, 2, ...): 100 us doubled per attempt up to 20 ms,
// then a uniform draw from [half, all] of it, so refused calls do not come back in lockstep.
// `rng` is the caller's xorshift state (any non-zero value; advanced). Pure: any thread.
MonoDelta RetryBackoff(int attempt, uint64_t* rng);

// RetryTimer: runs callbacks at their time, on its own thread, in time order. Thread-safe.
class RetryTimer {
 public:
  RetryTimer() = default;
  ~RetryTimer();  // Stop()s
  RetryTimer(const RetryTimer&) = delete;
  RetryTimer& operator=(const RetryTimer&) = delete;

  Status Start();
  // Any thread: runs `fn` on the timer thread at `when` (or at Stop(), whichever is first).
  void Schedule(MonoTime when, std::function<void()> fn);
  // Runs every pending callback now (each sees the run stopping and gives its slot up), then
  // joins the thread. Idempotent.
  void Stop();

 private:
  struct Entry {
    MonoTime when;
    uint64_t order;  // FIFO among equal times
    std::function<void()> fn;
    bool operator>(const Entry& o) const {
      return when != o.when ? when > o.when : order > o.order;
    }
  };
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  // RRPC_GUARDED_BY(mu_):
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> pending_;
  uint64_t next_order_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // started and joined by the owner's thread
};

}  // namespace rrpc::bench
