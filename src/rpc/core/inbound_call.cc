#include "rpc/core/inbound_call.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "rpc/core/compression.h"
#include "rpc/core/connection.h"
#include "rpc/core/constants.h"
#include "rpc/core/reactor.h"
#include "rpc/core/stream_state.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/transport/frame_format.h"
#include "rrpc/rpc/service_if.h"
#include "rrpc/util/copy_counter.h"
#include "util/home_pool.h"

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
  // Never answered (e.g. torn down with its messenger): no cancel may reach it any more, and the
  // tracker must not wait for it.
  StopCancellation();
  if (result_tracker_ != nullptr) result_tracker_->Finish(request_id_, nullptr);
  // A stream's opening call lets go of its stream however it went: answered through the
  // connection (which told the stream already), or dropped on the way (its connection or
  // messenger gone first). The stream must not point at it any more.
  if (stream_ != nullptr) {
    stream_->OnServerCallAnswered(Status::Aborted("the stream's call ended with its connection"));
  }
  if (held_bytes_ != 0) connection_->inbound_memory()->Release(held_bytes_);
}

void InboundCall::HoldMemory(size_t bytes, size_t already_counted) {
  held_bytes_ += static_cast<int64_t>(bytes);
  if (bytes != already_counted) {
    connection_->inbound_memory()->Consume(static_cast<int64_t>(bytes - already_counted));
  }
}

void InboundCall::ReleaseRequestFrame() {
  frame_block_.reset();
  body_ = Slice();
  inbound_sidecars_.clear();
  inbound_sidecars_.shrink_to_fit();
  if (held_bytes_ != 0) {
    connection_->inbound_memory()->Release(held_bytes_);
    held_bytes_ = 0;
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
    if (header.call_id >= 0 && header.stream_flags != 0) {  // a stream's frame
      call_id_ = header.call_id;
      stream_flags_ = header.stream_flags;
      stream_credit_ = header.stream_credit;
      if (!header.sidecar_offsets.empty() || !tail.empty()) {
        RRPC_RETURN_NOT_OK(SplitSidecars(tail, header.sidecar_offsets, &inbound_sidecars_));
      }
      if (header.has_compression) {
        request_compressed_ = true;
        request_compression_ = header.compression;
      }
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
    if (f != SIDECARS && f != STREAMS && f != COMPRESSION) unsupported_features_.push_back(f);
  }
  if (header.may_have_optional) [[unlikely]] {
    TakeOptionalFields(header);
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

void InboundCall::TakeOptionalFields(const RequestHeaderFields& header) {
  if (header.has_compression) {
    request_compressed_ = true;
    request_compression_ = header.compression;
  }
  if (header.has_request_id) {
    const RequestIdFields& id = header.request_id;
    request_id_.present = true;
    // A longer id is kept as invalid (length 0): a tracked method refuses it, others ignore it.
    request_id_.client_id_len = 0;
    if (id.client_id.size() <= TrackedRequestId::kMaxClientIdBytes) {
      request_id_.client_id_len = static_cast<uint8_t>(id.client_id.size());
      memcpy(request_id_.client_id, id.client_id.data(), id.client_id.size());
    }
    request_id_.seq_no = id.seq_no;
    request_id_.first_incomplete_seq_no = id.first_incomplete_seq_no;
    request_id_.attempt_no = id.attempt_no;
  }
  if (header.has_trace) SetTrace(header.trace);
  if (header.stream_flags != 0) {  // a call that opens a stream: its credit and codec matter
    stream_flags_ = header.stream_flags;
    stream_credit_ = header.stream_credit;
    stream_compression_ = header.stream_compression;
  }
  if (header.priority == 1 || header.priority == 2) {
    requested_priority_ = static_cast<uint8_t>(header.priority);
  }
}

Status InboundCall::DecompressRequest() {
  const CompressionFields c = request_compression_;
  MessengerMetrics* const metrics = metrics_ != nullptr ? metrics_->messenger : nullptr;
  if (!IsKnownCompression(c.codec)) {
    if (metrics != nullptr) metrics->BodyDecompressed(body_.size(), 0, false, MonoDelta());
    return Status::InvalidArgument("request compressed with an unknown codec",
                                   std::to_string(c.codec));
  }
  const size_t max_size = connection_->reactor()->options().max_message_size;
  const int64_t headroom = connection_->inbound_memory()->Headroom();
  if (c.uncompressed_size <= max_size && static_cast<int64_t>(c.uncompressed_size) > headroom) {
    if (metrics != nullptr) metrics->BodyDecompressed(body_.size(), 0, false, MonoDelta());
    return Status::InvalidArgument("compressed request states " +
                                   std::to_string(c.uncompressed_size) +
                                   " bytes uncompressed, more than the server's inbound memory "
                                   "limit leaves (" +
                                   std::to_string(headroom) + " bytes)");
  }
  const MonoTime start = MonoTime::Now();
  Result<BlockSlice> plain =
      Decompress(body_, static_cast<Compression>(c.codec), c.uncompressed_size, max_size);
  if (metrics != nullptr) {
    metrics->BodyDecompressed(body_.size(), c.uncompressed_size, plain.ok(),
                              MonoTime::Now() - start);
  }
  if (!plain.ok()) return plain.status().CloneAndPrepend("compressed request refused");
  HoldMemory(plain.value().slice.size());
  body_ = plain.value().slice;
  plain_request_ = std::move(plain.value().block);
  return Status::OK();
}

void InboundCall::SetTrace(const TraceFields& trace) {
  // An invalid context (zero trace id or span id, or a partial one) is ignored, as W3C asks of a
  // malformed traceparent: the call runs untraced.
  if ((trace.trace_id_high | trace.trace_id_low) == 0 || trace.parent_span_id == 0) return;
  RpczTraceIds& ids = rpcz_entry_.mutable_info()->trace;
  ids.trace_id_high = trace.trace_id_high;
  ids.trace_id_low = trace.trace_id_low;
  ids.parent_span_id = trace.parent_span_id;
  ids.flags = static_cast<uint8_t>(trace.trace_flags);
  ids.span_id = NewSpanId();
}

void InboundCall::Untrack() {
  connection_->UntrackForCancel(this);
  cancel_track_ = CancelTrack::kNone;
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
  // A compressed request gets a compressed answer (a tracked call's is stored for replays as
  // it is: it goes uncompressed).
  Result<BlockSlice> head = request_compressed_ && !is_error && result_tracker_ == nullptr
                                ? SerializeCompressedResponse(&header, body, offset, max_size)
                                : SerializeFrameHead(header, body, offset, max_size, response_head_,
                                                     sizeof(response_head_));
  if (!head.ok()) {
    CHECK(!is_error) << "error response too large: " << head.status().ToString();
    SerializeFailure(ErrorStatusPB::ERROR_APPLICATION,
                     head.status().CloneAndPrepend("response not sent"));
    return;
  }
  if (!is_error) CountCopy(CopySide::kServer, CopyKind::kBody, body.GetCachedSize());
  if (result_tracker_ != nullptr) {
    RecordTrackedResult(head.value(), static_cast<size_t>(body.GetCachedSize()), is_error);
  }
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

Result<BlockSlice> InboundCall::SerializeCompressedResponse(
    ResponseHeaderFields* header, const google::protobuf::MessageLite& body, uint32_t sidecar_bytes,
    size_t max_size) {
  const CompressionOptions& options = connection_->reactor()->options().compression;
  // The plain frame first: a body that does not shrink goes in it at the cost of the attempt.
  Result<BlockSlice> plain = SerializeFrameHead(*header, body, sidecar_bytes, max_size,
                                                response_head_, sizeof(response_head_));
  const size_t body_size = static_cast<size_t>(body.GetCachedSize());
  if (!plain.ok() || body_size < options.min_bytes ||
      !IsKnownCompression(request_compression_.codec)) {
    return plain;
  }
  const Slice raw_body(plain.value().slice.data() + plain.value().slice.size() - body_size,
                       body_size);
  const Compression codec = static_cast<Compression>(request_compression_.codec);
  const MonoTime start = MonoTime::Now();
  Result<std::optional<BlockSlice>> compressed =
      Compress(raw_body, codec, options.min_bytes, options.zstd_level);
  const bool skipped = !compressed.ok() || !compressed.value().has_value();
  if (metrics_ != nullptr) {
    metrics_->messenger->BodyCompressed(body_size,
                                        skipped ? body_size : compressed.value()->slice.size(),
                                        skipped, MonoTime::Now() - start);
  }
  if (skipped) return plain;
  header->has_compression = true;
  header->compression.codec = request_compression_.codec;
  header->compression.uncompressed_size = static_cast<uint32_t>(body_size);
  // Not into response_head_: the plain frame may be there.
  Result<BlockSlice> head =
      SerializeFrameHead(*header, compressed.value()->slice, sidecar_bytes, max_size);
  header->has_compression = false;  // the header may be this thread's, reused by its next answer
  return head;
}

void InboundCall::RecordTrackedResult(const BlockSlice& head, size_t body_bytes, bool is_error) {
  ResultTracker* const tracker = result_tracker_;
  result_tracker_ = nullptr;
  if (!handler_started_) {  // answered before its handler ran: a retry may run it
    tracker->Finish(request_id_, nullptr);
    return;
  }
  // The answer is copied once, body and sidecars into one block, so a replay holds none of
  // this call's memory.
  auto stored = std::make_shared<StoredResponse>();
  stored->is_error = is_error;
  stored->body_bytes = static_cast<uint32_t>(body_bytes);
  size_t total = body_bytes;
  for (const auto& sidecar : outbound_sidecars_) {
    stored->sidecar_offsets.push_back(static_cast<uint32_t>(total - body_bytes));
    total += sidecar.slice.size();
  }
  stored->bytes = Block::Allocate(std::max<size_t>(total, 1));
  stored->size = total;
  uint8_t* p = stored->bytes->data();
  memcpy(p, head.slice.data() + head.slice.size() - body_bytes, body_bytes);
  p += body_bytes;
  for (const auto& sidecar : outbound_sidecars_) {
    memcpy(p, sidecar.slice.data(), sidecar.slice.size());
    p += sidecar.slice.size();
  }
  tracker->Finish(request_id_, std::move(stored));
}

void InboundCall::RespondStored(const StoredResponse& stored) {
  StopCancellation();
  ResponseHeaderFields& header = ResponseHeaderWithSidecars();
  header.call_id = call_id_;
  header.is_error = stored.is_error;
  header.sidecar_offsets = stored.sidecar_offsets;
  using google::protobuf::io::CodedOutputStream;
  const size_t header_bytes = EncodedSize(header);
  const size_t head_bytes = kFrameLengthSize +
                            CodedOutputStream::VarintSize32(static_cast<uint32_t>(header_bytes)) +
                            header_bytes + CodedOutputStream::VarintSize32(stored.body_bytes);
  // A head with many sidecar offsets may not fit the call's inline buffer: a block then.
  BlockRef block;
  uint8_t* const start = head_bytes <= sizeof(response_head_)
                             ? response_head_
                             : (block = Block::Allocate(head_bytes))->data();
  uint8_t* p = start;
  EncodeBigEndian32(p, static_cast<uint32_t>(head_bytes - kFrameLengthSize + stored.size));
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(header_bytes),
                                              p + kFrameLengthSize);
  p = EncodeTo(header, p);
  p = CodedOutputStream::WriteVarint32ToArray(stored.body_bytes, p);
  DCHECK_EQ(p, start + head_bytes);
  std::vector<BlockSlice> rest;
  if (stored.size > 0) {
    rest.push_back(BlockSlice{stored.bytes, Slice(stored.bytes->data(), stored.size)});
  }
  SetPayload(BlockSlice{std::move(block), Slice(start, head_bytes)}, std::move(rest));
  if (metrics_ != nullptr || rpcz_entry_.tracked()) {
    const MonoTime now = MonoTime::Now();
    if (metrics_ != nullptr) metrics_->ResponseQueued(arrival_, now, total_bytes());
    rpcz_entry_.MarkResponded(now, nullptr);
  }
  SendResponse();
}

void InboundCall::SendResponse() {
  // From here the connection (or its reactor) owns this call.
  Connection* conn = connection_.get();
  Reactor* reactor = conn->reactor();
  // A stream's answer always passes the reactor (Connection::QueueResponse ends the stream).
  if (stream_ == nullptr && !reactor->IsCurrentThread() && conn->TryWriteLoneResponse(this)) {
    return;
  }
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
