// KvOpenStreams: the streams kv's stream methods have open, so a server that shuts down can end
// them before its drain: a stalled reader would otherwise hold the drain for its whole timeout.
// Ended streams get `ServiceUnavailable` (retriable: a scan resumes after the last key it got).
//
// Thread-safety: all methods from any thread.
#pragma once

#include <cstdint>
#include <map>

#include "rrpc/rpc/stream.h"
#include "rrpc/util/mutex.h"

namespace rrpc::kv {

class KvOpenStreams {
 public:
  // Lists `stream` (server or client side) until Remove(id); 0 (not listed) once EndAll() ran:
  // the caller then refuses its work.
  uint64_t Add(rpc::Stream stream);
  void Remove(uint64_t id);
  // Ends every listed stream (a server side: finished with ServiceUnavailable after the
  // messages queued; a client side: cancelled) and refuses later Add()s.
  void EndAll();

 private:
  Mutex mu_;
  std::map<uint64_t, rpc::Stream> streams_ RRPC_GUARDED_BY(mu_);
  uint64_t next_id_ RRPC_GUARDED_BY(mu_) = 1;
  bool ended_ RRPC_GUARDED_BY(mu_) = false;
};

}  // namespace rrpc::kv
