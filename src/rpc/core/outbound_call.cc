#include "rpc/core/outbound_call.h"

#include <algorithm>
#include <vector>

#include "rpc/core/attempt_engine.h"
#include "rpc/core/compression.h"
#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"
#include "rpc/core/request_tracker.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_state.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/copy_counter.h"
#include "util/home_pool.h"

namespace rrpc::rpc {

namespace {

// The client-side Status for a server's error response: a distinct code per error kind.
Status StatusFromError(const ErrorStatusPB& error) {
  const std::string& msg = error.message();
  switch (error.code()) {
    case ErrorStatusPB::ERROR_APPLICATION:
      return Status::RemoteError(msg);
    // The server's message already names what is missing ("no such method: S.M").
    case ErrorStatusPB::ERROR_NO_SUCH_SERVICE:
      return Status::NotFound(msg);
    case ErrorStatusPB::ERROR_NO_SUCH_METHOD:
      return Status::NotSupported(msg);
    case ErrorStatusPB::ERROR_SERVER_TOO_BUSY:
      return Status::ServiceUnavailable(msg);
    case ErrorStatusPB::ERROR_INVALID_REQUEST:
      return Status::InvalidArgument(msg);
    case ErrorStatusPB::ERROR_TIMED_OUT:
      return Status::TimedOut(msg);
    case ErrorStatusPB::ERROR_UNAVAILABLE:
      return Status::Aborted(msg);
    case ErrorStatusPB::ERROR_UNSUPPORTED_FEATURE:
      return Status::NotSupported(msg);
    case ErrorStatusPB::ERROR_CANCELLED:
      return Status::Aborted(msg);
    default:
      return Status::RemoteError(msg);
  }
}

}  // namespace

OutboundCall::OutboundCall(scoped_refptr<RemoteMethod>&& method,
                           google::protobuf::Message* response, RpcController* controller,
                           ResponseCallback&& callback)
    : method_(std::move(method)),
      response_(response),
      controller_(controller),
      callback_(std::move(callback)),
      metrics_(method_->metrics()) {}

OutboundCall::~OutboundCall() { DCHECK(!timer_active_); }

namespace {
// Calls are made on the caller's thread and freed where their last reference goes (the reactor
// after the callback, or the caller): the memory returns to the maker's thread (util/home_pool.h).
struct OutboundCallPoolTag {};
using OutboundCallPool = HomePool<OutboundCallPoolTag, 32>;
}  // namespace

void* OutboundCall::operator new(size_t size) { return OutboundCallPool::Allocate(size); }

void OutboundCall::operator delete(void* p, size_t) { OutboundCallPool::Free(p); }

void OutboundCall::set_connection(Connection* conn) { connection_ = conn; }

Status OutboundCall::Serialize(const google::protobuf::Message& request, int32_t call_id,
                               size_t max_message_size, MonoTime attempt_deadline,
                               const RequestTracker* tracker) {
  call_id_ = call_id;
  // The names go into the frame as the proxy encoded them once (core/remote_method.h).
  RequestHeaderParts header;
  header.call_id = call_id;
  header.remote_method = method_->encoded();
  sent_at_ = MonoTime::Now();
  deadline_ = std::min(attempt_deadline, RpcControllerInternal::FixDeadline(controller_, sent_at_));
  const MonoTime deadline = deadline_;
  if (!deadline.IsMax()) {
    // At least 1 ms: 0 would mean "no deadline" to the server.
    const int64_t ms = std::max<int64_t>(1, (deadline - sent_at_).ToMilliseconds());
    header.has_timeout_millis = true;
    header.timeout_millis = static_cast<uint32_t>(std::min<int64_t>(ms, UINT32_MAX));
  }
  const std::vector<BlockSlice>& sidecars = RpcControllerInternal::outbound_sidecars(*controller_);
  uint32_t offset = 0;
  if (!sidecars.empty()) {
    // Per thread, cleared and refilled: keeps its capacity.
    thread_local std::vector<uint32_t> sidecar_offsets;
    sidecar_offsets.clear();
    for (const auto& sidecar : sidecars) {
      sidecar_offsets.push_back(offset);
      offset += static_cast<uint32_t>(sidecar.slice.size());
    }
    header.sidecar_offsets = sidecar_offsets.data();
    header.num_sidecar_offsets = sidecar_offsets.size();
  }
  // The span id first: zero for the calls that carry no context, one test for them.
  Result<BlockSlice> head =
      tracker == nullptr && controller_->trace_context().span_id == 0 && stream_ == nullptr &&
              compression_ == Compression::kNone && controller_->wire_priority() == 0
          ? SerializeFrameHead(header, request, offset, max_message_size, head_buffer_,
                               kInlineHeadBytes)
          : SerializeWithOptionalParts(&header, request, offset, max_message_size, tracker);
  RRPC_RETURN_NOT_OK(head.status());
  CountCopy(CopySide::kClient, CopyKind::kBody, static_cast<size_t>(request.GetCachedSize()));
  if (sidecars.empty()) {
    SetPayload(std::move(head).value());
  } else {
    SetPayload(std::move(head).value(), sidecars);
  }
  state_ = State::kSerialized;
  return Status::OK();
}

Result<BlockSlice> OutboundCall::SerializeWithOptionalParts(
    RequestHeaderParts* header, const google::protobuf::Message& request, uint32_t sidecar_bytes,
    size_t max_message_size, const RequestTracker* tracker) {
  RequestHeaderOptionalParts optional;
  header->optional = &optional;
  RequestIdFields request_id;
  if (tracker != nullptr) {
    request_id.client_id = tracker->client_id();
    request_id.seq_no = controller_->request_seq_no();
    request_id.first_incomplete_seq_no = tracker->FirstIncomplete();
    request_id.attempt_no = static_cast<uint32_t>(controller_->attempts());
    optional.request_id = &request_id;
  }
  TraceFields trace;
  const TraceContext& tc = controller_->trace_context();
  if (tc.span_id != 0 && tc.valid()) {
    trace.trace_id_high = tc.trace_id_high;
    trace.trace_id_low = tc.trace_id_low;
    trace.parent_span_id = tc.span_id;
    trace.trace_flags = tc.flags;
    optional.trace = &trace;
  }
  optional.priority = controller_->wire_priority();
  static constexpr uint32_t kStreamFeature = STREAMS;
  if (stream_ != nullptr) {
    // A server without streams refuses the call (ERROR_UNSUPPORTED_FEATURE) rather than run it.
    header->required_feature_flags = &kStreamFeature;
    header->num_required_feature_flags = 1;
    optional.stream_flags = STREAM_OPEN;
    optional.stream_credit =
        static_cast<uint32_t>(stream_->receive_window() - StreamState::kInitialWindow);
    optional.stream_compression = static_cast<uint32_t>(stream_->compression());
  }
  // The plain frame first (the receiver holds the uncompressed body to the same limit): a body
  // that does not shrink goes in it at the cost of the attempt alone.
  Result<BlockSlice> plain = SerializeFrameHead(*header, request, sidecar_bytes, max_message_size,
                                                head_buffer_, kInlineHeadBytes);
  // A stream's opening call goes plain (its header requires STREAMS, not COMPRESSION).
  if (!plain.ok() || compression_ == Compression::kNone || stream_ != nullptr ||
      !method_->peer_reads_compression()) {
    return plain;
  }
  const size_t body_size = static_cast<size_t>(request.GetCachedSize());
  if (body_size < compression_options_->min_bytes) return plain;
  const Slice body(plain.value().slice.data() + plain.value().slice.size() - body_size, body_size);
  Result<std::optional<BlockSlice>> compressed =
      SerializeCompressed(header, &optional, body, sidecar_bytes, max_message_size);
  RRPC_RETURN_NOT_OK(compressed.status());
  if (!compressed.value().has_value()) return plain;
  return std::move(*compressed.value());
}

Result<std::optional<BlockSlice>> OutboundCall::SerializeCompressed(
    RequestHeaderParts* header, RequestHeaderOptionalParts* optional, Slice body,
    uint32_t sidecar_bytes, size_t max_message_size) {
  const CompressionOptions& options = *compression_options_;
  const size_t body_size = body.size();
  const MonoTime start = MonoTime::Now();
  Result<std::optional<BlockSlice>> compressed =
      Compress(body, compression_, options.min_bytes, options.zstd_level);
  RRPC_RETURN_NOT_OK(compressed.status());
  const bool skipped = !compressed.value().has_value();
  if (compression_metrics_ != nullptr) {
    compression_metrics_->BodyCompressed(body_size,
                                         skipped ? body_size : compressed.value()->slice.size(),
                                         skipped, MonoTime::Now() - start);
  }
  if (skipped) return std::optional<BlockSlice>();
  static const uint32_t kRequiresCompression[] = {COMPRESSION};
  CompressionFields fields;
  fields.codec = static_cast<uint32_t>(compression_);
  fields.uncompressed_size = static_cast<uint32_t>(body_size);
  optional->compression = &fields;
  header->required_feature_flags = kRequiresCompression;
  header->num_required_feature_flags = 1;
  // Not into head_buffer_: the plain frame may be there (a compressed head is small only when
  // the body is, and those go plain).
  Result<BlockSlice> head =
      SerializeFrameHead(*header, compressed.value()->slice, sidecar_bytes, max_message_size);
  optional->compression = nullptr;
  RRPC_RETURN_NOT_OK(head.status());
  request_compressed_ = true;
  return std::optional<BlockSlice>(std::move(head).value());
}

void OutboundCall::StartTimer(struct ev_loop* loop,
                              void (*on_timeout)(OutboundCall* call, void* arg), void* arg) {
  const MonoTime deadline = deadline_;
  if (deadline.IsMax() || finished()) return;
  loop_ = loop;
  on_timeout_ = on_timeout;
  on_timeout_arg_ = arg;
  // Counted from the serialization time, a few microseconds ago: saves a clock read per call and
  // errs on the late side by those microseconds.
  const double after = std::max(0.0, (deadline - sent_at_).ToSeconds());
  ev_timer_init(&timer_, &OutboundCall::OnTimerFired, after, 0.0);
  timer_.data = this;
  ev_timer_start(loop, &timer_);
  timer_active_ = true;
}

void OutboundCall::OnTimerFired(struct ev_loop* /*loop*/, ev_timer* timer, int /*revents*/) {
  auto* call = static_cast<OutboundCall*>(timer->data);
  call->timer_active_ = false;
  // The tracker drops its reference inside on_timeout_; keep the call alive until we return.
  scoped_refptr<OutboundCall> self(call);
  call->on_timeout_(call, call->on_timeout_arg_);
}

void OutboundCall::FinishWithResponse(BlockSlice&& frame, const ResponseHeaderFields& header,
                                      Slice body, Slice tail, MonoTime received_at) {
  if (finished()) return;
  received_at_ = received_at;
  if (header.is_error) {
    auto error = std::make_unique<ErrorStatusPB>();
    if (!ParseMessageQuietly(body, error.get())) {
      Finish(Status::Corruption("error response does not parse"), nullptr);
      return;
    }
    Status status = StatusFromError(*error);
    Finish(std::move(status), std::move(error));
    return;
  }
  CountCopy(CopySide::kClient, CopyKind::kBody, body.size());
  if (header.has_compression) {
    Status s = ParseCompressedResponse(header, body);
    if (!s.ok()) {
      Finish(std::move(s), nullptr);
      return;
    }
  } else if (!ParseMessageQuietly(body, response_)) {
    Finish(Status::Corruption("response does not parse", response_->InitializationErrorString()),
           nullptr);
    return;
  }
  std::vector<Slice>* sidecars = RpcControllerInternal::inbound_sidecars(controller_);
  sidecars->clear();
  // Most responses carry no sidecars: nothing to split, and no block to keep for them.
  if (!header.sidecar_offsets.empty() || !tail.empty()) {
    Status s = SplitSidecars(tail, header.sidecar_offsets, sidecars);
    if (!s.ok()) {
      Finish(std::move(s), nullptr);
      return;
    }
    RpcControllerInternal::KeepResponseBlock(controller_, std::move(frame.block));
  }
  Finish(Status::OK(), nullptr);
}

Status OutboundCall::ParseCompressedResponse(const ResponseHeaderFields& header, Slice body) {
  const size_t limit =
      owner_ != nullptr ? owner_->reactor()->options().max_message_size : size_t{64} << 20;
  const MonoTime start = MonoTime::Now();
  Result<BlockSlice> plain =
      IsKnownCompression(header.compression.codec)
          ? Decompress(body, static_cast<Compression>(header.compression.codec),
                       header.compression.uncompressed_size, limit)
          : Result<BlockSlice>(Status::NotSupported("response compressed with an unknown codec",
                                                    std::to_string(header.compression.codec)));
  if (compression_metrics_ != nullptr) {
    compression_metrics_->BodyDecompressed(body.size(), header.compression.uncompressed_size,
                                           plain.ok(), MonoTime::Now() - start);
  }
  if (!plain.ok()) return plain.status().CloneAndPrepend("compressed response refused");
  if (!ParseMessageQuietly(plain.value().slice, response_)) {
    return Status::Corruption("response does not parse", response_->InitializationErrorString());
  }
  return Status::OK();
}

void OutboundCall::FinishWithError(const Status& status) { Finish(status, nullptr); }

void OutboundCall::FinishTimedOut() {
  const MonoTime now = MonoTime::Now();
  std::string msg = "call " + method_name() + " to " + remote().ToString();
  const MonoTime call_deadline = controller_->deadline();
  if (deadline_ < call_deadline) {
    // The attempt's own timeout (a retrying caller's), not the call's deadline.
    msg += ": attempt " + std::to_string(controller_->attempts()) + " timed out after " +
           (now - sent_at_).ToString() + " (its attempt timeout; the call's deadline is " +
           (call_deadline - now).ToString() + " away)";
  } else {
    msg += " timed out after " + (now - sent_at_).ToString();
  }
  Finish(Status::TimedOut(msg), nullptr);
}

void OutboundCall::FailBeforeSend(const Status& status) { Finish(status, nullptr); }

void OutboundCall::FinishCancelled() {
  Finish(Status::Aborted("call " + method_name() + " to " + remote().ToString() + " cancelled"),
         nullptr);
}

void OutboundCall::Cancel() {
  cancel_requested_.store(true, std::memory_order_seq_cst);
  // Read after the flag is set: a reactor set after this read finds the flag when it queues the
  // call; one set before gets the task. Both may act: the call finishes once.
  Reactor* reactor = reactor_.load(std::memory_order_seq_cst);
  if (reactor == nullptr) return;
  scoped_refptr<OutboundCall> self(this);
  reactor->RunOnReactor([self] {
    if (self->finished() || self->owner_ == nullptr) return;  // done, or not on a connection yet
    self->owner_->CancelCall(self.get());
  });
}

void OutboundCall::Finish(Status status, std::unique_ptr<ErrorStatusPB> error) {
  if (finished()) return;
  state_ = State::kFinished;
  if (compression_ != Compression::kNone && owner_ != nullptr) {
    method_->LearnPeerReadsCompression(owner_->peer_reads_compression());
  }
  RpcControllerInternal::DetachCall(controller_, this);
  if (timer_active_) {
    ev_timer_stop(loop_, &timer_);
    timer_active_ = false;
  }
  if (metrics_ != nullptr) {
    metrics_->CallFinished(status, sent_at_,
                           received_at_ == MonoTime() ? MonoTime::Now() : received_at_);
  }
  const bool request_left = started() || wrote_any_.load(std::memory_order_relaxed);
  const HandlerRan ran = AttemptRan(status, error.get(), received_at_ != MonoTime(), request_left);
  RpcControllerInternal::Finish(controller_, std::move(status), std::move(error),
                                connection_ != nullptr && connection_->peer_tracks_results(),
                                request_left, ran);
  if (observer_) {
    observer_->OnCallFinished(*this, controller_->status(), controller_->error_response());
  }
  // Taken out first: the callback runs once, and what it captured goes when it returns.
  ResponseCallback callback;
  callback.swap(callback_);
  callback();
}

void OutboundCall::TransferDone() {
  wrote_any_.store(true, std::memory_order_relaxed);
  ClearPayload();
  Release();
}

void OutboundCall::TransferAborted(const Status& status) {
  if (started()) wrote_any_.store(true, std::memory_order_relaxed);
  ClearPayload();
  Finish(status, nullptr);
  Release();
}

}  // namespace rrpc::rpc
