#include "rrpc/rpc/core/inbound_call.h"

#include "rrpc/rpc/core/connection.h"
#include "rrpc/rpc/core/constants.h"
#include "rrpc/rpc/core/reactor.h"
#include "rrpc/rpc/core/wire_codec.h"
#include "rrpc/rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/service_if.h"
#include "rrpc/util/copy_counter.h"
#include "rrpc/util/home_pool.h"

namespace rrpc::rpc {

namespace {
// The names of a call not yet routed. A namespace-scope object, not a function's static: its
// address needs no guard check per call (calls are made only once main() runs).
const std::string kNoName;
}  // namespace

InboundCall::InboundCall(scoped_refptr<Connection> connection)
    : connection_(std::move(connection)), service_name_(&kNoName), method_name_(&kNoName) {}

namespace {
struct InboundCallPoolTag {};
// Calls a reactor has in flight at once, mostly; a burst beyond goes back to the heap.
using InboundCallPool = HomePool<InboundCallPoolTag, 256>;
}  // namespace

void* InboundCall::operator new(size_t size) { return InboundCallPool::Allocate(size); }

void InboundCall::operator delete(void* p) { InboundCallPool::Free(p); }

InboundCall::~InboundCall() {
  if (held_bytes_ != 0) connection_->inbound_memory()->Release(held_bytes_);
}

void InboundCall::HoldMemory(size_t bytes, size_t already_counted) {
  held_bytes_ += static_cast<int64_t>(bytes);
  if (bytes != already_counted) {
    connection_->inbound_memory()->Consume(static_cast<int64_t>(bytes - already_counted));
  }
}

Status InboundCall::ParseFrom(BlockSlice&& frame, MonoTime arrival) {
  arrival_ = arrival;
  frame_bytes_ = kFrameLengthSize + frame.slice.size();
  thread_local RequestHeaderFields header;  // decoding clears it; its vectors keep capacity
  Slice tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame.slice, &header, &body_, &tail));
  if (!header.has_remote_method) {
    if (header.call_id == kControlCallId) {  // a control frame: the connection reads the body
      call_id_ = header.call_id;
      frame_block_ = std::move(frame.block);
      return Status::OK();
    }
    return Status::InvalidArgument("call frame without a remote method");
  }
  // Most calls carry no sidecars: nothing to split (and no call to make) then.
  if (!header.sidecar_offsets.empty() || !tail.empty()) {
    RRPC_RETURN_NOT_OK(SplitSidecars(tail, header.sidecar_offsets, &inbound_sidecars_));
  }
  for (uint32_t f : header.required_feature_flags) {
    // A server knows sidecars; TLS is a property of the connection, not of a call. Anything else,
    // including numbers RpcFeatureFlag does not list, is refused.
    if (f != SIDECARS) unsupported_features_.push_back(f);
  }
  frame_block_ = std::move(frame.block);
  call_id_ = header.call_id;
  requested_service_ =
      std::string_view(header.service_name.char_data(), header.service_name.size());
  requested_method_ = std::string_view(header.method_name.char_data(), header.method_name.size());
  if (header.timeout_millis > 0) {
    deadline_ = arrival + MonoDelta::FromMilliseconds(header.timeout_millis);
  }
  return Status::OK();
}

void InboundCall::Untrack() {
  cancel_tracked_ = false;
  connection_->UntrackForCancel(this);
}

void InboundCall::set_method(const std::string& service_name, const RpcMethodInfo* method) {
  service_name_ = &service_name;
  method_name_ = &method->method_name;
  method_ = method;
}

const Sockaddr& InboundCall::remote_address() const { return connection_->remote(); }

int InboundCall::AddOutboundSidecar(BlockSlice sidecar) {
  outbound_sidecars_.push_back(std::move(sidecar));
  return static_cast<int>(outbound_sidecars_.size()) - 1;
}

void InboundCall::RespondSuccess(const google::protobuf::MessageLite& response) {
  SerializeResponse(response, /*is_error=*/false);
  SendResponse();
}

void InboundCall::RespondFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  SerializeFailure(code, status);
  SendResponse();
}

void InboundCall::SerializeFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status) {
  ErrorStatusPB error;
  error.set_message(status.message());
  error.set_code(code);
  if (metrics_ != nullptr) metrics_->CountError(code);
  outbound_sidecars_.clear();
  SerializeResponse(error, /*is_error=*/true);
}

void InboundCall::RespondUnsupportedFeatures() {
  ErrorStatusPB error;
  std::string names;
  for (uint32_t f : unsupported_features_) {
    error.add_unsupported_feature_flags(f);
    names += (names.empty() ? "" : ", ") + std::to_string(f);
  }
  error.set_message("the call requires features this server does not support: " + names);
  error.set_code(ErrorStatusPB::ERROR_UNSUPPORTED_FEATURE);
  if (metrics_ != nullptr) metrics_->CountError(ErrorStatusPB::ERROR_UNSUPPORTED_FEATURE);
  outbound_sidecars_.clear();
  SerializeResponse(error, /*is_error=*/true);
  SendResponse();
}

void InboundCall::RespondApplicationError(const Status& status) {
  ErrorStatusPB error;
  error.set_message(status.message());
  error.set_code(ErrorStatusPB::ERROR_APPLICATION);
  error.set_app_status_code(static_cast<int32_t>(status.code()));
  if (metrics_ != nullptr) metrics_->CountError(ErrorStatusPB::ERROR_APPLICATION);
  outbound_sidecars_.clear();
  SerializeResponse(error, /*is_error=*/true);
  SendResponse();
}

namespace {
ResponseHeaderFields& ResponseHeaderWithSidecars() {
  thread_local ResponseHeaderFields header;
  return header;
}
}  // namespace

void InboundCall::SerializeResponse(const google::protobuf::MessageLite& body, bool is_error) {
  StopCancellation();
  // A response with sidecars lists their offsets in a per-thread header, whose vector keeps its
  // capacity; the common one without needs none (an empty vector costs nothing to make, and the
  // per-thread one is not even looked up: a thread_local's guard check per call).
  ResponseHeaderFields without_sidecars;
  ResponseHeaderFields& header =
      outbound_sidecars_.empty() ? without_sidecars : ResponseHeaderWithSidecars();
  header.call_id = call_id_;
  header.is_error = is_error;
  header.sidecar_offsets.clear();
  uint32_t offset = 0;
  for (const auto& sidecar : outbound_sidecars_) {
    header.sidecar_offsets.push_back(offset);
    offset += static_cast<uint32_t>(sidecar.slice.size());
  }
  // The client enforces its own maximum; a response too large for ours becomes an error.
  const size_t max_size = connection_->reactor()->options().max_message_size;
  Result<BlockSlice> head =
      SerializeFrameHead(header, body, offset, max_size, response_head_, sizeof(response_head_));
  if (!head.ok()) {
    CHECK(!is_error) << "error response too large: " << head.status().ToString();
    SerializeFailure(ErrorStatusPB::ERROR_APPLICATION,
                     head.status().CloneAndPrepend("response not sent"));
    return;
  }
  if (!is_error) CountCopy(CopySide::kServer, CopyKind::kBody, body.GetCachedSize());
  if (outbound_sidecars_.empty()) {
    SetPayload(std::move(head).value());  // inline: no vector to move, no sizes to add up
  } else {
    SetPayload(std::move(head).value(), std::move(outbound_sidecars_));
  }
  if (metrics_ != nullptr || rpcz_entry_.tracked()) {
    const MonoTime now = MonoTime::Now();  // one clock read serves both, and the worker
    LastRespondTimeOnThisThread() = now;
    if (metrics_ != nullptr) metrics_->ResponseQueued(arrival_, now, total_bytes());
    // An error's body is the ErrorStatusPB that SerializeFailure/RespondApplicationError made.
    rpcz_entry_.MarkResponded(now, is_error ? static_cast<const ErrorStatusPB*>(&body) : nullptr);
  }
}

void InboundCall::SendResponse() {
  // From here the connection (or its reactor) owns this call.
  Connection* conn = connection_.get();
  Reactor* reactor = conn->reactor();
  if (!reactor->IsCurrentThread() && conn->TryWriteLoneResponse(this)) return;
  // Held until written: a client that does not read holds it. (A response the worker wrote
  // whole above was never held: counting it costs two updates of the connection's and the
  // messenger's trackers per call, for memory held a few microseconds.)
  HoldMemory(total_bytes());
  reactor->QueueResponse(this);
}

void InboundCall::TransferDone() {
  rpcz_entry_.Finish(/*sent=*/true);
  connection_->InboundCallDone();
  delete this;
}

void InboundCall::TransferDoneRightAfterResponse() {
  rpcz_entry_.FinishSentAtResponse();
  connection_->InboundCallDone();
  delete this;
}

void InboundCall::TransferAborted(const Status& status) {
  VLOG(1) << "response to call " << call_id() << " from " << remote_address().ToString()
          << " not sent: " << status.ToString();
  rpcz_entry_.Finish(/*sent=*/false);
  connection_->InboundCallDone();
  delete this;
}

}  // namespace rrpc::rpc
