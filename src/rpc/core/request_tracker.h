// RequestTracker: the client half of exactly-once (docs/exactly-once.md). One per messenger: a
// random 16-byte client id, a sequence number per tracked call (taken once, kept by every retry
// of the call), and the lowest number still in flight, which each call carries so the server can
// forget results below it. Thread-safe: any thread that makes or ends a tracked call.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "rrpc/util/mutex.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/thread_annotations.h"

namespace rrpc::rpc {

class RequestTracker {
 public:
  static constexpr size_t kClientIdBytes = 16;

  // A fresh random client id (from the OS's random source).
  RequestTracker();
  RequestTracker(const RequestTracker&) = delete;
  RequestTracker& operator=(const RequestTracker&) = delete;

  Slice client_id() const { return Slice(client_id_); }
  // A new call: its number (from 1), in flight until Complete().
  uint64_t NewSequence() RRPC_EXCLUDES(mu_);
  // The call numbered `seq` is over: no retry of it will be sent.
  void Complete(uint64_t seq) RRPC_EXCLUDES(mu_);
  // The lowest number in flight; with none, the number the next call will get.
  uint64_t FirstIncomplete() const RRPC_EXCLUDES(mu_);

 private:
  std::string client_id_;
  mutable Mutex mu_;
  uint64_t next_seq_ RRPC_GUARDED_BY(mu_) = 1;
  std::set<uint64_t> in_flight_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
