// ResultTrackerOptions: the limits of a server messenger's result tracker, which runs each call
// of a tracked method at most once and answers its retries with the first answer
// (docs/exactly-once.md). Part of MessengerOptions; plain data, set before the messenger starts.
#pragma once

#include <cstddef>

#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

struct ResultTrackerOptions {
  // False: the server neither offers EXACTLY_ONCE nor keeps results; tracked methods run every
  // call they receive (as an old server does).
  bool enabled = true;
  // Hard cap on the memory of all kept results and their bookkeeping. When a new tracked call
  // would pass it, the call is refused with retriable ERROR_SERVER_TOO_BUSY (the handler does
  // not run); a result that would pass it is not kept (its retries get ERROR_REQUEST_STALE).
  size_t max_bytes = 64 << 20;
  // Cap per client id. Past it, the client's oldest finished results are evicted first (a retry
  // of one then gets ERROR_REQUEST_STALE: it never runs twice); when only running calls remain,
  // the new call is refused with ERROR_SERVER_TOO_BUSY.
  size_t max_bytes_per_client = 4 << 20;
  // A client with no call in progress that has sent nothing for this long is forgotten. Must
  // exceed the longest time a client keeps retrying one call (its deadlines), or a late retry
  // of a forgotten call runs again.
  MonoDelta client_idle_timeout = MonoDelta::FromSeconds(300);
  // Duplicates of one running call that may wait for its answer; more are refused as too busy.
  size_t max_waiters_per_call = 16;
};

}  // namespace rrpc::rpc
