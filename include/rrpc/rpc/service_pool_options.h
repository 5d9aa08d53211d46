// Service pools and admission: how a messenger's handlers share worker threads, and when it
// refuses calls early. Every service runs in the messenger's default pool (one bounded
// earliest-deadline-first queue and MessengerOptions::num_workers workers) unless it, or one of
// its methods, is put in a named pool (ServiceIf::SetPool / SetMethodPool) with a queue and
// workers of its own. Within a pool, background calls get a bounded share of the workers while
// foreground calls wait, and all of them otherwise. A pool may have an adaptive concurrency limit
// and a method a static one; calls beyond either are refused at once with retriable
// ERROR_SERVER_TOO_BUSY. See docs/isolation.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

// A call's class within its pool. Set per method by option (rrpc.background) in .proto or by
// ServiceIf::SetPriority; a caller may ask for another per call (RpcController::set_priority).
enum class CallPriority : uint8_t { kForeground = 0, kBackground = 1 };

// An adaptive limit on the calls a pool holds at once (queued and running), driven by how long
// calls wait in its queue: each `window` in which calls waited `target_queue_time` or longer on
// average cuts the limit by `decrease` (multiplicative); each window in which they waited less
// and the limit was reached raises it by `increase` (additive). Calls beyond the limit are
// refused as too busy instead of queueing until their deadline.
struct AdaptiveLimitOptions {
  bool enabled = false;
  MonoDelta target_queue_time = MonoDelta::FromMilliseconds(2);
  MonoDelta window = MonoDelta::FromMilliseconds(50);
  // The limit stays within [min_limit, max_limit]; 0 means the pool's worker count (min) and its
  // workers plus queue length (max). It starts at the maximum.
  int min_limit = 0;
  int max_limit = 0;
  double decrease = 0.8;
  int increase = 1;
};

// One pool's queue, workers and admission.
struct ServicePoolConfig {
  // Names a pool for ServiceIf::SetPool; "" is the default pool (MessengerOptions configures it).
  std::string name;
  int num_workers = 2;
  // Calls waiting for a worker, per priority class; more are refused with ERROR_SERVER_TOO_BUSY
  // (the one with the latest deadline).
  size_t queue_length = 64;
  // The share of the workers background calls may hold while foreground calls wait, rounded up
  // to at least one worker: background keeps progressing under a foreground flood, and
  // foreground gets the rest under a background flood.
  double background_share = 0.25;
  AdaptiveLimitOptions adaptive_limit;
};

// What one pool looks like now (Messenger::service_pools(), the web UI's /pools page).
struct ServicePoolInfo {
  std::string name;  // "default" for the default pool
  int num_workers = 0;
  size_t queue_length = 0;
  size_t queued_foreground = 0;
  size_t queued_background = 0;
  size_t background_running = 0;
  size_t background_cap = 0;  // background calls running at most while foreground waits
  int in_flight = 0;          // calls holding an admission slot (queued or running)
  int limit = 0;              // the adaptive limit now; 0: none
  int64_t limit_refusals = 0;
  int64_t method_refusals = 0;  // by the methods' static limits
  int64_t overflows = 0;        // refused (or evicted) by a full queue
  // The pool's methods that take admission (a named pool, a priority or a limit).
  struct Method {
    std::string name;  // "<service>.<method>"
    CallPriority priority = CallPriority::kForeground;
    int max_concurrency = 0;
    int in_flight = 0;
    int64_t refusals = 0;
  };
  std::vector<Method> methods;
};

}  // namespace rrpc::rpc
