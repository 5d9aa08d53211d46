// RpcControllerInternal: the one way the library writes an RpcController's private state. The
// controller's public API is what its caller reads and sets; the call machinery (OutboundCall
// filling in an outcome, the attempt engine counting attempts and keeping a tracked call's request
// id, a cluster channel moving a hedge winner's outcome) goes through these static functions, so
// the controller has a single friend. Same threads and rules as the fields they touch
// (rrpc/rpc/rpc_controller.h): the call's owner before it is sent and between attempts, the
// thread finishing an attempt before its callback.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::rpc {

class RpcControllerInternal {
 public:
  // --- Sending an attempt (the attempt engine, OutboundCall) ---

  // Makes `call` the one the controller's Cancel() reaches; false when Cancel() came first.
  static bool AttachCall(RpcController* c, OutboundCall* call) { return c->AttachCall(call); }
  // The thread finishing `call`, before its callback (see RpcController::DetachCall).
  static void DetachCall(RpcController* c, OutboundCall* call) { c->DetachCall(call); }
  // The call's deadline, fixed from `sent_at` if only a timeout was set (no clock read).
  static MonoTime FixDeadline(RpcController* c, MonoTime sent_at) {
    return c->FixDeadline(sent_at);
  }
  static const std::vector<BlockSlice>& outbound_sidecars(const RpcController& c) {
    return c.outbound_sidecars_;
  }

  // --- An attempt's end (OutboundCall, on the thread finishing it) ---

  // Where a response's sidecars are split to; `block` keeps their bytes alive.
  static std::vector<Slice>* inbound_sidecars(RpcController* c) { return &c->inbound_sidecars_; }
  static void KeepResponseBlock(RpcController* c, BlockRef&& block) {
    c->response_block_ = std::move(block);
  }
  // The attempt's outcome; `request_left`: some of its bytes were written; `server_tracks_results`:
  // its connection's server negotiated EXACTLY_ONCE; `ran`: whether its handler ran
  // (AttemptRan, core/attempt_engine.h), folded into the call's over its attempts.
  static void Finish(RpcController* c, Status status, std::unique_ptr<ErrorStatusPB> error,
                     bool server_tracks_results, bool request_left, HandlerRan ran) {
    NoteHandlerRan(c, ran);
    c->status_ = std::move(status);
    c->error_ = std::move(error);
    c->server_tracks_results_ = server_tracks_results;
    c->request_left_ = request_left;
    c->finished_ = true;
  }

  // --- Over a call's attempts (the attempt engine, ChannelCall) ---

  // An attempt of the call ran (or may have): the call's handler_ran() is the most of them.
  static void NoteHandlerRan(RpcController* c, HandlerRan ran) {
    if (static_cast<int>(ran) > static_cast<int>(c->handler_ran_)) c->handler_ran_ = ran;
  }

  static void set_attempts(RpcController* c, int attempts) { c->attempts_ = attempts; }
  static void set_request_seq_no(RpcController* c, uint64_t seq) { c->request_seq_no_ = seq; }
  // Before a retry: forgets the last attempt's outcome, keeps the deadline, sidecars and policy.
  static void PrepareRetry(RpcController* c) { c->PrepareRetry(); }
  // Ends a call that never had an attempt (or whose outcome is decided here) with `status`.
  static void FailCall(RpcController* c, Status status) {
    c->status_ = std::move(status);
    c->error_.reset();
    c->finished_ = true;
  }
  // A hedged call: the winning attempt's own controller's outcome becomes the caller's.
  static void MoveOutcome(RpcController* from, RpcController* to) {
    to->status_ = std::move(from->status_);
    to->error_ = std::move(from->error_);
    to->response_block_ = std::move(from->response_block_);
    to->inbound_sidecars_ = std::move(from->inbound_sidecars_);
    NoteHandlerRan(to, from->handler_ran_);
    to->finished_ = true;
  }
  // Replaces a finished call's status (a hedge winner's answer that does not parse as the
  // caller's type).
  static void set_status(RpcController* c, Status status) { c->status_ = std::move(status); }
};

}  // namespace rrpc::rpc
