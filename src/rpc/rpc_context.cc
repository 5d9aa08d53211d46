#include "rpc/rpc_context.h"

#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/message_cache.h"
#include "rpc/rpc_controller.h"
#include "rpc/service_if.h"
#include "util/stash_allocator.h"

namespace rrpc::rpc {

void* RpcContext::operator new(size_t size) {
  if (size != sizeof(RpcContext)) return ::operator new(size);
  return StashAllocator<RpcContext>().allocate(1);
}

void RpcContext::operator delete(void* p, size_t size) {
  if (size != sizeof(RpcContext)) return ::operator delete(p);
  StashAllocator<RpcContext>().deallocate(static_cast<RpcContext*>(p), 1);
}

RpcContext::RpcContext(std::unique_ptr<InboundCall> call,
                       std::unique_ptr<google::protobuf::Message> request,
                       std::unique_ptr<google::protobuf::Message> response)
    : call_(std::move(call)),
      method_(call_->method()),
      request_bytes_(call_->serialized_request().size()),
      request_(std::move(request)),
      response_(std::move(response)) {}

RpcContext::~RpcContext() {
  MessageCache::Give(*method_->request_prototype, std::move(request_), request_bytes_);
  // A response that was never serialized may hold anything: only a sent one has a known size.
  if (response_serialized_) {
    const size_t bytes = static_cast<size_t>(response_->GetCachedSize());
    MessageCache::Give(*method_->response_prototype, std::move(response_), bytes);
  }
}

void RpcContext::RespondSuccess() {
  call_.release()->RespondSuccess(*response_);
  response_serialized_ = true;  // its cached size is now its serialized size
  delete this;
}

void RpcContext::RespondFailure(const Status& status) {
  call_.release()->RespondApplicationError(status);
  delete this;
}

void RpcContext::RespondRpcFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  call_.release()->RespondFailure(code, status);
  delete this;
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
const Sockaddr& RpcContext::remote_address() const { return call_->remote_address(); }
const std::string& RpcContext::service_name() const { return call_->service_name(); }
const std::string& RpcContext::method_name() const { return call_->method_name(); }

}  // namespace rrpc::rpc

namespace rrpc::rpc {
const CallerIdentity& RpcContext::caller() const { return call_->connection()->identity(); }
}  // namespace rrpc::rpc
