// RpcController: the client's handle on one call: its timeout, its outcome and its sidecars.
// Set it up before the call; read it after the callback (async) or the return (sync). One call at
// a time; Reset() before reuse. Not thread-safe: the caller owns it for the call's lifetime,
// except Cancel(), which any thread may call at any time while the controller exists.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/compression.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/rpc/trace_context.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class OutboundCall;
class RpcControllerInternal;

// How a call through a Proxy to one address (synchronous or asynchronous) retries when the server
// refuses it as too busy (ERROR_SERVER_TOO_BUSY): up to `max_attempts` attempts in all, waiting
// between them a backoff that starts at `initial_backoff`, grows by `multiplier` up to
// `max_backoff`, and is jittered (a uniformly random wait between half and all of it, so refused
// clients do not come back in step). Never past the caller's deadline: a wait that would end
// after it is not taken, and the call fails with the last refusal. Off by default (one attempt).
// A Proxy over a cluster channel retries by the channel's ChannelOptions instead: a call through
// a channel whose controller has a RetryPolicy fails at once with InvalidArgument.
struct RetryPolicy {
  int max_attempts = 1;
  MonoDelta initial_backoff = MonoDelta::FromMilliseconds(1);
  MonoDelta max_backoff = MonoDelta::FromMilliseconds(100);
  double multiplier = 2;
  // Calls of tracked methods only (docs/exactly-once.md): each attempt may take at most this
  // long (within the call's deadline), and an attempt whose outcome was lost (timed out, or its
  // connection failed) is retried like a refused one, with the same request id, as long as it
  // went over a connection whose server negotiated EXACTLY_ONCE. Max(): no per-attempt limit,
  // and lost outcomes are not retried.
  MonoDelta attempt_timeout = MonoDelta::Max();
};

// Whether a call's handler ran on a server, as far as the client can know; after the call, from
// every attempt it made (RpcController::handler_ran()).
enum class HandlerRan {
  // No attempt ran: each was refused (server too busy or draining, no such method, not
  // authorized, bad request), expired in the server's queue, or never left this process.
  kNo,
  // Outcome unknown: an attempt was sent and its answer lost (its connection failed after the
  // request left, it timed out, it was cancelled in flight), or the server no longer holds a
  // tracked call's result. A tracked method ran at most once; others may have run more often.
  kMaybe,
  // A handler ran: the call succeeded, or its handler failed it (RemoteError).
  kYes,
};
const char* HandlerRanName(HandlerRan ran);  // "did not run", "may have run", "ran"

class RpcController {
 public:
  RpcController();
  ~RpcController();
  RpcController(const RpcController&) = delete;
  RpcController& operator=(const RpcController&) = delete;

  // Time allowed for the call, counted from when it is sent: the call fixes its deadline then,
  // from the clock read that stamps its send time (no clock read here).
  void set_timeout(MonoDelta timeout) {
    timeout_ = timeout;
    deadline_ = MonoTime();  // fixed when the call is sent
  }
  // An absolute deadline (e.g. inherited from the server call being handled).
  void set_deadline(MonoTime deadline);
  MonoDelta timeout() const { return timeout_; }
  // When the call times out; before a call with only a timeout is sent, as if it were sent now.
  MonoTime deadline() const {
    return deadline_ != MonoTime() ? deadline_ : MonoTime::Now() + timeout_;
  }

  // Attaches bytes that travel after the request body without being copied. The bytes must stay
  // valid until the call finishes; a BlockSlice keeps its block alive itself. Returns the index.
  int AddOutboundSidecar(BlockSlice sidecar);
  int AddOutboundSidecar(Slice borrowed);

  // After the call: OK, or why it failed. RemoteError carries the server's ErrorStatusPB.
  const Status& status() const { return status_; }
  bool finished() const { return finished_; }
  // The server's error, when status() is a RemoteError (or a server-produced timeout / too busy).
  const ErrorStatusPB* error_response() const { return error_.get(); }
  // Whether the call's handler ran (kYes), may have run (kMaybe: outcome unknown) or did not run
  // on any attempt (kNo); for a failed call, whether a write may have been applied. kNo before
  // the call.
  HandlerRan handler_ran() const { return handler_ran_; }
  bool may_have_run() const { return handler_ran_ != HandlerRan::kNo; }
  // True when the failure is worth retrying elsewhere: server too busy or shutting down, or the
  // connection failed (NetworkError: reset, or the peer declared dead; the call may have run).
  bool IsRetriable() const;

  // Any thread, any time: gives up on the call. A call not finished yet fails at once with
  // Status::Aborted ("cancelled") and its callback runs (on a reactor thread; a synchronous call
  // returns); a server that negotiated CANCELLATION is told, so it never runs a call still
  // queued and tells a running handler (RpcContext::cancelled()). Before the call starts: the
  // call fails as it starts (so does every retry). After it finished: nothing. Idempotent;
  // Reset() clears it.
  void Cancel();
  bool cancel_requested() const { return cancel_requested_.load(std::memory_order_acquire); }

  // Opt-in retries of calls refused as too busy (RetryPolicy); used by a Proxy to one address,
  // synchronous and asynchronous calls alike (a cluster channel retries by its ChannelOptions).
  // Through a cluster channel the call fails with InvalidArgument instead (the channel retries
  // by its ChannelOptions).
  void set_retry_policy(const RetryPolicy& policy) {
    retry_policy_ = policy;
    has_retry_policy_ = true;
  }
  const RetryPolicy& retry_policy() const { return retry_policy_; }
  bool has_retry_policy() const { return has_retry_policy_; }
  // Attempts the last call made (1 without retries).
  int attempts() const { return attempts_; }
  // A call of a tracked method: its sequence number with the messenger's request tracker (the
  // same for all its attempts); 0 for other calls.
  uint64_t request_seq_no() const { return request_seq_no_; }
  // The last attempt went over a connection whose server keeps results (EXACTLY_ONCE): a
  // retry of a tracked call cannot run it twice.
  bool server_tracks_results() const { return server_tracks_results_; }
  // False when the last attempt failed before any of its bytes were written: the server cannot
  // have run it.
  bool request_left() const { return request_left_; }

  // Calls through a cluster channel (rpc/cluster/channel.h) whose balancer hashes: the key that
  // picks the server, so calls with one key go to one server while the set is unchanged. Ignored
  // by other balancers and by a Proxy to one address.
  void set_hash_key(const std::string& key);
  bool has_hash_key() const { return has_hash_key_; }
  uint64_t hash_key_code() const { return hash_key_code_; }
  // Calls through a cluster channel to an idempotent method: send a second attempt to another
  // server when no answer came within `delay` (the first answer wins). MonoDelta() (the default)
  // leaves it to the channel's options; MonoDelta::Max() turns hedging off for this call.
  void set_hedge_after(MonoDelta delay) { hedge_after_ = delay; }
  MonoDelta hedge_after() const { return hedge_after_; }

  // The trace context the call carries (docs/tracing.md): its trace id, the caller's span (the
  // server's span's parent) and flags. Set from a traceparent (TraceContext::FromTraceparent),
  // a new trace (TraceContext::NewRoot) or the call being handled
  // (RpcContext::InheritTraceContext). An invalid one clears it (the default: the call carries
  // none). Kept by PrepareRetry (every attempt carries it); Reset() clears it.
  void set_trace_context(const TraceContext& trace) {
    trace_ = trace.valid() ? trace : TraceContext();
  }
  const TraceContext& trace_context() const { return trace_; }

  // The codec of this call's request body (docs/compression.md); the server answers a compressed
  // request with the same codec. Unset (the default), a generated proxy sets the method's
  // (rrpc.compression) option, else the messenger's CompressionOptions::codec applies. The body
  // is compressed only when the server accepted COMPRESSION, it has at least
  // CompressionOptions::min_bytes and compressing shrinks it. Kept by retries; Reset() unsets it.
  void set_compression(Compression codec) {
    compression_ = codec;
    has_compression_ = true;
  }
  bool has_compression() const { return has_compression_; }
  Compression compression() const { return compression_; }

  // The priority class this call asks for on the server (docs/isolation.md), overriding its
  // method's (option (rrpc.background), ServiceIf::SetPriority): e.g. a batch job's reads
  // sent as background so they yield to interactive ones. The server honours it the way it
  // honours the call's deadline: a caller is trusted with both. Servers from before it ignore it.
  // Kept by retries; Reset() unsets it.
  void set_priority(CallPriority priority) {
    priority_ = priority == CallPriority::kBackground ? 2 : 1;
  }
  bool has_priority() const { return priority_ != 0; }
  CallPriority priority() const {
    return priority_ == 2 ? CallPriority::kBackground : CallPriority::kForeground;
  }
  // As on the wire (RequestHeader field 50): 0 unset, 1 foreground, 2 background.
  uint8_t wire_priority() const { return priority_; }

  // The response's sidecars, valid until Reset() or destruction.
  size_t num_inbound_sidecars() const { return inbound_sidecars_.size(); }
  Slice inbound_sidecar(size_t i) const { return inbound_sidecars_[i]; }

  void Reset();

 private:
  // The library's writer of the fields below (rpc/core/rpc_controller_internal.h).
  friend class RpcControllerInternal;
  // The caller's thread, once per attempt: `call` is now the one Cancel() reaches. False when
  // Cancel() came first (the caller then fails the call, which detaches it).
  bool AttachCall(OutboundCall* call) {
    call_.store(call, std::memory_order_seq_cst);
    // Cancel() stores its flag and then reads call_: it sees this call, or this sees its flag.
    return !cancel_requested_.load(std::memory_order_seq_cst);
  }
  // The thread finishing `call`, before its callback: Cancel() no longer reaches it, and no
  // Cancel() still holds it without a reference (waits out one that is taking its reference).
  void DetachCall(OutboundCall* call) {
    OutboundCall* expected = call;
    if (!call_.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
      DetachCallSlow(call, expected);
    }
  }
  void DetachCallSlow(OutboundCall* call, OutboundCall* seen);
  // Before a retry: forgets the last attempt's outcome, keeps the deadline, sidecars and policy.
  void PrepareRetry();

  // Fixes the deadline of a call sent at `sent_at` (OutboundCall, when it serializes the call).
  MonoTime FixDeadline(MonoTime sent_at) {
    if (deadline_ == MonoTime()) deadline_ = sent_at + timeout_;
    return deadline_;
  }

  MonoDelta timeout_ = MonoDelta::Max();
  // MonoTime() while set_timeout()'s timeout waits for the call's send time.
  MonoTime deadline_ = MonoTime::Max();
  std::vector<BlockSlice> outbound_sidecars_;
  Status status_;
  std::unique_ptr<ErrorStatusPB> error_;
  BlockRef response_block_;  // keeps the inbound sidecars' bytes alive
  std::vector<Slice> inbound_sidecars_;
  RetryPolicy retry_policy_;
  // The fields Reset() zeroes, side by side.
  int attempts_ = 0;
  // Set by OutboundCall when the call finishes (before the callback runs).
  bool finished_ = false;
  bool has_hash_key_ = false;
  bool has_retry_policy_ = false;
  // The most any attempt ran, over the call's attempts (kept by PrepareRetry).
  HandlerRan handler_ran_ = HandlerRan::kNo;
  bool server_tracks_results_ = false;  // set by OutboundCall when the call finishes
  bool request_left_ = false;           // set by OutboundCall when the call finishes
  bool has_compression_ = false;
  Compression compression_ = Compression::kNone;
  uint8_t priority_ = 0;  // wire_priority()
  uint64_t hash_key_code_ = 0;
  MonoDelta hedge_after_;
  uint64_t request_seq_no_ = 0;  // set by the attempt engine for tracked calls
  TraceContext trace_;
  // Cancel() may come from any thread while the owner's call runs.
  std::atomic<bool> cancel_requested_{false};
  // The attached unfinished call (alive: its reactor or caller holds it), nullptr, or
  // kCancelling while a Cancel() takes a reference to the call it replaced. AttachCall stores
  // the call, DetachCall swaps it back to nullptr (waiting while kCancelling), Cancel() swaps it
  // to kCancelling, takes its reference and puts it back. The flag and call_ are written and
  // then the other read, both seq_cst: of an attach and a concurrent Cancel() at least one
  // sees the other.
  std::atomic<OutboundCall*> call_{nullptr};
};

}  // namespace rrpc::rpc
