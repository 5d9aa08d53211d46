#include "rrpc/rpc/rpc_context.h"

#include <cstdint>

#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/message_cache.h"
#include "rpc/core/stream_state.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/rpc/service_if.h"

namespace rrpc::rpc {

RpcContext::~RpcContext() {
  // A response that was never serialized may hold anything: only a sent one has a known size.
  const size_t response_bytes =
      response_serialized_ ? static_cast<size_t>(response_->GetCachedSize()) : SIZE_MAX;
  MessageCache::Give(*method_->request_prototype, *method_->response_prototype,
                     {std::move(request_), std::move(response_)}, request_bytes_, response_bytes);
}

// Each Respond*() ends this context before the response leaves: the call it lives in may be
// written and deleted (by this thread or the reactor) as soon as it is sent.
void RpcContext::RespondSuccess() {
  InboundCall* const call = call_;
  // Stops the call's cancellation first, before this context ends: a cancel callback may use it.
  call->SerializeResponse(*response_);
  response_serialized_ = true;  // its cached size is now its serialized size
  this->~RpcContext();
  call->SendResponse();
}

void RpcContext::RespondFailure(const Status& status) {
  InboundCall* const call = call_;
  call->StopCancellation();  // before this context ends: a cancel callback may use it
  this->~RpcContext();
  call->RespondApplicationError(status);
}

void RpcContext::RespondRpcFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  InboundCall* const call = call_;
  call->StopCancellation();  // before this context ends: a cancel callback may use it
  this->~RpcContext();
  call->RespondFailure(code, status);
}

int RpcContext::AddOutboundSidecar(BlockSlice sidecar) {
  return call_->AddOutboundSidecar(std::move(sidecar));
}
size_t RpcContext::num_inbound_sidecars() const { return call_->num_inbound_sidecars(); }
Slice RpcContext::inbound_sidecar(size_t i) const { return call_->inbound_sidecar(i); }
BlockSlice RpcContext::inbound_sidecar_block(size_t i) const {
  return call_->inbound_sidecar_block(i);
}
MonoTime RpcContext::deadline() const { return call_->deadline(); }
void RpcContext::InheritDeadline(RpcController* controller) const {
  controller->set_deadline(call_->deadline());
}
TraceContext RpcContext::trace_context() const { return call_->trace_context(); }
uint64_t RpcContext::parent_span_id() const { return call_->parent_span_id(); }
void RpcContext::InheritTraceContext(RpcController* controller) const {
  const TraceContext trace = call_->trace_context();
  if (trace.valid()) controller->set_trace_context(trace);
}
bool RpcContext::cancelled() const { return call_->client_cancelled(); }
void RpcContext::OnCancel(std::function<void()> callback) {
  call_->connection()->SetCancelCallback(call_, std::move(callback));
}
const Sockaddr& RpcContext::remote_address() const { return call_->remote_address(); }
const std::string& RpcContext::service_name() const { return call_->service_name(); }
const std::string& RpcContext::method_name() const { return call_->method_name(); }

}  // namespace rrpc::rpc

namespace rrpc::rpc {
const CallerIdentity& RpcContext::caller() const { return call_->connection()->identity(); }
Stream RpcContext::stream() const {
  if (call_->stream() == nullptr) return Stream();
  return Stream(call_->stream());
}

}  // namespace rrpc::rpc
