// RpcContext: a handler's view of one server-side call: the request, the response to fill, the
// caller's deadline and sidecars, and the Respond*() calls that finish it. The service pool makes
// one per call (in the call's own memory: no allocation) and passes it to the handler; exactly
// one Respond*() must follow, from any thread, and it ends the context (so the handler must not
// touch it, nor the request or response, afterwards). Not thread-safe: one thread at a time uses
// it.
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <string>

#include "rrpc/rpc/authorization.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/rpc/trace_context.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class InboundCall;
class RpcController;
struct RpcMethodInfo;

class RpcContext {
 public:
  RpcContext(const RpcContext&) = delete;
  RpcContext& operator=(const RpcContext&) = delete;

  const google::protobuf::Message* request() const { return request_.get(); }
  google::protobuf::Message* response() { return response_.get(); }

  // Sends response() to the caller.
  void RespondSuccess();
  // Fails the call with the handler's own error: the client sees a RemoteError whose
  // ErrorStatusPB has code ERROR_APPLICATION, this message and this status code.
  void RespondFailure(const Status& status);
  // Fails the call with an RPC-level error code (e.g. ERROR_INVALID_REQUEST).
  void RespondRpcFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status);

  // Bytes sent after the response body without copying; kept alive until written.
  int AddOutboundSidecar(BlockSlice sidecar);
  size_t num_inbound_sidecars() const;
  Slice inbound_sidecar(size_t i) const;
  // The sidecar's bytes with a reference to their block: zero copy beyond the call's life.
  BlockSlice inbound_sidecar_block(size_t i) const;

  // When the caller stops waiting (arrival + its timeout); MonoTime::Max() if it set none.
  MonoTime deadline() const;
  // Makes a downstream call made while handling this one share its deadline.
  void InheritDeadline(RpcController* controller) const;
  // The call's trace context (docs/tracing.md): the caller's trace id and flags, and span_id this
  // server's own span for the call (a new id per call); valid() false when the caller sent none.
  TraceContext trace_context() const;
  // The caller's span, the parent of trace_context()'s; 0 without a trace context.
  uint64_t parent_span_id() const;
  // Makes a downstream call made while handling this one part of the same trace, as a child of
  // this call's span (does nothing to `controller` when this call has no trace context).
  void InheritTraceContext(RpcController* controller) const;
  // True once the client cancelled the call (RpcController::Cancel, or its deadline passed on
  // the client). Any thread. Stays false for a client that cannot cancel (one that did not
  // negotiate CANCELLATION).
  bool cancelled() const;
  // Runs `callback` once when the client cancels the call: on the reactor thread that read the
  // cancel (keep it short, never block), or at once on this thread when already cancelled.
  // Never after this context answered; the context stays valid while it runs, and it may answer
  // the call (e.g. RespondFailure). One callback per call; a second replaces the first.
  void OnCancel(std::function<void()> callback);
  // A stream method's call (RpcMethodInfo::stream): its stream, which the handler answers
  // through (generated service bases pass it to the handler typed). Invalid for other calls.
  Stream stream() const;
  const Sockaddr& remote_address() const;
  const std::string& service_name() const;
  const std::string& method_name() const;
  // Who called: the authenticated user (empty when not authenticated), how it authenticated
  // (client certificate or token) and whether the connection is encrypted (docs/security.md).
  const CallerIdentity& caller() const;
  const std::string& user() const { return caller().user; }
  AuthMethod auth_method() const { return caller().method; }

 private:
  friend class InboundCall;  // makes it in its own memory (InboundCall::MakeContext)
  // Takes the messages; `call` is the call this context lives in, which runs `method` on a
  // request of `request_bytes`. Inline: the worker makes one per call.
  RpcContext(InboundCall* call, const RpcMethodInfo* method, size_t request_bytes,
             std::unique_ptr<google::protobuf::Message>&& request,
             std::unique_ptr<google::protobuf::Message>&& response)
      : call_(call),
        method_(method),
        request_bytes_(request_bytes),
        request_(std::move(request)),
        response_(std::move(response)) {}
  // Run by Respond*(), never by a delete: the memory is the call's.
  ~RpcContext();

  InboundCall* const call_;
  // The call's method (its message prototypes) and the request's size: when the context goes,
  // small messages go back to the thread's MessageCache.
  const RpcMethodInfo* const method_;
  const size_t request_bytes_;
  bool response_serialized_ = false;
  std::unique_ptr<google::protobuf::Message> request_;
  std::unique_ptr<google::protobuf::Message> response_;
};

}  // namespace rrpc::rpc
