// InboundCall: one request received by a server, from the frame's arrival until its response has
// been written. The reactor makes it (arrival time and deadline are fixed then, once), the service
// pool queues it and a worker runs it; Respond*() serializes the response on the calling thread
// and hands the call back to its connection's reactor, which writes it and then deletes it.
// One thread at a time owns it, as it moves along that path.
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "rpc/core/header_codec.h"
#include "rpc/core/result_tracker.h"
#include "rpc/observe/rpcz_store.h"
#include "rpc/transport/outbound_transfer.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/rpc/trace_context.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class Connection;
class StreamState;
struct MethodMetrics;
struct RpcMethodInfo;

class InboundCall final : public OutboundTransfer {
 public:
  // When the calling thread last responded to a call, if it read the clock to do so; the worker
  // uses it to end handler_time_us without reading the clock again. Per thread.
  static MonoTime& LastRespondTimeOnThisThread() { return last_respond_time_; }

  explicit InboundCall(scoped_refptr<Connection> connection);
  // The memory of calls comes from their reactor's HomePool (util/home_pool.h): made on the
  // reactor, freed mostly by the worker that wrote the response, reused by the reactor.
  static void* operator new(size_t size);
  static void operator delete(void* p);
  ~InboundCall() override;

  // Reactor thread. Parses the frame's header (core/header_codec.h) and finds the body and
  // sidecars (kept by reference into the frame's block). Fixes the deadline: arrival + the
  // header's timeout. The header's fields land in a struct reused by the thread, so a call
  // allocates nothing for them; what the call needs later is copied out. InvalidArgument when the
  // header names no method.
  Status ParseFrom(BlockSlice&& frame, MonoTime arrival);

  int32_t call_id() const { return call_id_; }
  // The names the caller sent, for the service pool to route the call: they point into the frame
  // (or, for a header in an unusual layout, into the reactor's reused header message, valid only
  // until the reactor parses its next frame; the service pool routes the call, or answers it,
  // before that).
  std::string_view requested_service_name() const { return requested_service_; }
  std::string_view requested_method_name() const { return requested_method_; }
  // The registered service's and method's own names, from set_method() on (empty before).
  const std::string& service_name() const { return *service_name_; }
  const std::string& method_name() const { return *method_name_; }
  Slice serialized_request() const { return body_; }
  // The request body came compressed (header fields 40-41): the worker decompresses it with
  // DecompressRequest() before parsing serialized_request().
  bool request_compressed() const { return request_compressed_; }
  // The thread running the call, once, before the body is parsed: replaces the body by its
  // decompressed bytes, held in this call's memory and counted in the connection's inbound
  // memory. InvalidArgument (before allocating) when the stated size exceeds max_message_size or
  // what the inbound memory limits leave, or the codec is unknown; Corruption when the data does
  // not decompress to the stated size. The caller answers ERROR_INVALID_REQUEST then.
  Status DecompressRequest();
  size_t num_inbound_sidecars() const { return inbound_sidecars_.size(); }
  Slice inbound_sidecar(size_t i) const { return inbound_sidecars_[i]; }
  // The same bytes, sharing the frame's block: keeps them alive without a copy (e.g. to echo
  // them back as a response sidecar, or to keep a value after the call).
  BlockSlice inbound_sidecar_block(size_t i) const {
    return BlockSlice{frame_block_, inbound_sidecars_[i]};
  }
  const Sockaddr& remote_address() const;
  Connection* connection() const { return connection_.get(); }

  MonoTime arrival_time() const { return arrival_; }
  // Computed once at arrival and cached: MonoTime::Max() when the client set no timeout.
  MonoTime deadline() const { return deadline_; }
  // The priority class the caller asked for (header field 50), overriding its method's: false
  // when it asked for none (or for a class this server does not know).
  bool requested_priority(CallPriority* priority) const {
    if (requested_priority_ == 0) return false;
    *priority = requested_priority_ == 2 ? CallPriority::kBackground : CallPriority::kForeground;
    return true;
  }
  // Set by its pool as it queues the call: it went into the background lane (the pool tells the
  // queue when it ends).
  void set_queued_background(bool background) { queued_background_ = background; }
  bool queued_background() const { return queued_background_; }

  // Streams (docs/streams.md). stream_flags(): the header's StreamFrameFlag bits. A frame with
  // some but no remote method is a stream's frame, not a call: the connection hands its body and
  // sidecars to the stream and drops this object. One with STREAM_OPEN opens a stream: the
  // connection attaches the stream (set_stream) before the call goes to the service pool, and
  // the call's answer is the stream's end.
  uint32_t stream_flags() const { return stream_flags_; }
  uint32_t stream_credit() const { return stream_credit_; }
  bool is_stream_frame() const { return stream_flags_ != 0 && requested_method_.empty(); }
  bool opens_stream() const { return (stream_flags_ & STREAM_OPEN) != 0; }
  // A stream's opening frame: the codec the client asked the stream to compress its messages
  // with (header field 32, a Compression value as sent; 0: none).
  uint32_t stream_compression() const { return stream_compression_; }
  // A stream frame's body came compressed (header fields 40-41): the stream decompresses it.
  const CompressionFields* frame_compression() const {
    return request_compressed_ ? &request_compression_ : nullptr;
  }
  void set_stream(std::shared_ptr<StreamState> stream) { stream_ = std::move(stream); }
  const std::shared_ptr<StreamState>& stream() const { return stream_; }
  BlockRef frame_block() const { return frame_block_; }
  // A stream's opening call, about to be answered by its stream rather than through its
  // handler's context (the answering thread, after the handler returned): ends the context,
  // which returns its messages. Does nothing when no handler ran.
  void EndContextForStream() {
    if (!handler_started_ || context_ended_) return;
    context_ended_ = true;
    reinterpret_cast<RpcContext*>(context_storage_)->~RpcContext();
  }
  // A stream's opening call, its request parsed, as its handler starts (the owning thread): lets
  // go of the frame and its share of the connection's inbound memory, which the stream's long
  // life would otherwise hold.
  void ReleaseRequestFrame();
  const std::vector<Slice>& inbound_sidecars() const { return inbound_sidecars_; }

  // The method this call runs, set by the service pool when it resolves the names.
  void set_method(const std::string& service_name, const RpcMethodInfo* method);
  const RpcMethodInfo* method() const { return method_; }
  // The method's metrics (nullptr: none), set along with the method; Respond*() records there.
  void set_metrics(MethodMetrics* metrics) { metrics_ = metrics; }
  MethodMetrics* metrics() const { return metrics_; }
  // Bytes of the request frame, its length prefix included.
  size_t frame_bytes() const { return frame_bytes_; }
  // Holds `bytes` more of the connection's inbound memory (the request frame when the call is
  // made, the response once serialized), of which `already_counted` are counted in the tracker
  // already (a frame's bytes, counted while they were a partial frame); all of it is released
  // when the call is deleted. The owning thread only.
  void HoldMemory(size_t bytes, size_t already_counted = 0);

  // Timeline, for metrics and /rpcz.
  void RecordHandlingStarted() {
    handling_started_ = MonoTime::Now();
    rpcz_entry_.MarkStarted(handling_started_);
  }
  MonoTime handling_started() const { return handling_started_; }
  // The call's part of the /rpcz store (rpc/observe/rpcz_store.h).
  RpczCallEntry* rpcz_entry() { return &rpcz_entry_; }

  // Cancellation (inbound_cancels.h). The reactor tracks the call before it leaves it, in
  // one of the connection's cancel slots or in its locked map; the call untracks itself as it
  // answers. Written by the reactor before the call leaves it, then by the thread that has it.
  enum class CancelTrack : uint8_t { kNone, kSlot, kMap };
  // `slot`: the connection's cancel slot holding this call (kSlot only).
  void set_cancel_track(CancelTrack where, std::atomic<InboundCall*>* slot = nullptr) {
    cancel_track_ = where;
    cancel_slot_ = slot;
  }
  CancelTrack cancel_track() const { return cancel_track_; }
  std::atomic<InboundCall*>* cancel_slot() const { return cancel_slot_; }
  bool cancel_tracked() const { return cancel_track_ != CancelTrack::kNone; }
  // The answering thread, first thing: a cancel no longer reaches the call (nor its callback,
  // which never runs after this returns). A call in a slot empties it here, unless the reactor
  // is flagging it right now (Untrack() waits that out).
  void StopCancellation() {
    if (cancel_track_ == CancelTrack::kNone) return;
    InboundCall* self = this;
    if (cancel_track_ == CancelTrack::kSlot &&
        cancel_slot_->compare_exchange_strong(self, nullptr, std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
      cancel_track_ = CancelTrack::kNone;
      return;
    }
    Untrack();
  }
  // Any thread: the client cancelled the call. (Not cancelled(): that is OutboundTransfer's.)
  bool client_cancelled() const {
    return (cancel_state_.load(std::memory_order_acquire) & kCancelled) != 0;
  }
  // The reactor, on a cancel frame: flags the call; true when its handler had started.
  bool MarkCancelled() {
    return (cancel_state_.fetch_or(kCancelled, std::memory_order_acq_rel) & kRunning) != 0;
  }
  // The worker, before the handler: false when the call was cancelled first (skip it).
  bool MarkRunning() {
    return (cancel_state_.fetch_or(kRunning, std::memory_order_acq_rel) & kCancelled) == 0;
  }
  // The handler's cancel callback; guarded by the connection's cancel_mu_.
  std::function<void()>& cancel_callback() { return on_cancel_; }

  // Features the header requires that this server lacks (required_feature_flags); the service
  // pool answers such a call ERROR_UNSUPPORTED_FEATURE without running it.
  const std::vector<uint32_t>& unsupported_features() const { return unsupported_features_; }
  // Any thread, once: answers ERROR_UNSUPPORTED_FEATURE naming unsupported_features().
  void RespondUnsupportedFeatures();

  int AddOutboundSidecar(BlockSlice sidecar);

  // The call's trace context (docs/tracing.md): the caller's trace id and flags with the server's
  // own new span id for this call; invalid (valid() false) when the caller sent none or an
  // invalid one. parent_span_id(): the caller's span (0 without a trace context).
  TraceContext trace_context() const {
    const RpczTraceIds& t = rpcz_entry_.info().trace;
    return TraceContext{t.trace_id_high, t.trace_id_low, t.span_id, t.flags};
  }
  uint64_t parent_span_id() const { return rpcz_entry_.info().trace.parent_span_id; }

  // The header's request id (exactly-once), if it had one: present() false otherwise.
  const TrackedRequestId& request_id() const { return request_id_; }
  // The result tracker admitted this call to run (ResultTracker::Admit): its answer is passed to
  // `tracker` when it responds (or, had its handler not run, the tracker is told so).
  void set_result_tracker(ResultTracker* tracker) { result_tracker_ = tracker; }
  // Any thread, once: answers with a stored answer (a replay), under this call's own call id.
  void RespondStored(const StoredResponse& stored);

  // The worker, once per call: makes the handler's RpcContext in this call's own memory (a
  // context per call cost an allocation and a free), taking the messages.
  RpcContext* MakeContext(std::unique_ptr<google::protobuf::Message>&& request,
                          std::unique_ptr<google::protobuf::Message>&& response) {
    handler_started_ = true;
    return new (context_storage_)
        RpcContext(this, method_, body_.size(), std::move(request), std::move(response));
  }

  // Any thread, once. Serialize the response (or error) and pass the call to the reactor, which
  // owns it from then on.
  void RespondSuccess(const google::protobuf::MessageLite& response);
  void RespondFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status);
  void RespondApplicationError(const Status& status);

  // The two halves of RespondSuccess(), for RpcContext, which ends itself in between (it lives
  // in this call, which may be deleted once sent): stops the call's cancellation (no cancel
  // callback runs after it returns), serializes the response (or, when it is too large, an
  // ERROR_APPLICATION error) and stamps it; then hands the call to its connection.
  void SerializeResponse(const google::protobuf::MessageLite& response) {
    SerializeResponse(response, /*is_error=*/false);
  }
  void SendResponse();

  // OutboundTransfer: the response has been written, or the connection is gone.
  void TransferDone() override;
  // TransferDone() for a response its responder wrote whole right after serializing it, on the
  // same thread (Connection::TryWriteLoneResponse): /rpcz takes the response's time for the
  // write's instead of reading the clock again.
  void TransferDoneRightAfterResponse();
  void TransferAborted(const Status& status) override;

 private:
  void SerializeResponse(const google::protobuf::MessageLite& body, bool is_error);
  // SerializeResponse() for a success answering a compressed request: the frame head with the
  // body compressed by the request's codec, or, when that does not pay, as it is. Leaves
  // header->has_compression false, as it found it.
  Result<BlockSlice> SerializeCompressedResponse(ResponseHeaderFields* header,
                                                 const google::protobuf::MessageLite& body,
                                                 uint32_t sidecar_bytes, size_t max_size);
  // Hands the answer just serialized (`head` ends with its body of `body_bytes`) to the result
  // tracker that admitted this call.
  void RecordTrackedResult(const BlockSlice& head, size_t body_bytes, bool is_error);
  // Serializes an error response.
  void SerializeFailure(ErrorStatusPB::RpcErrorCodePB code, const Status& status);
  void Untrack();
  // ParseFrom, for a header that may have fields after required_feature_flags: takes those the
  // call keeps (compression, request id, trace context, stream fields, priority).
  void TakeOptionalFields(const RequestHeaderFields& header);
  // ParseFrom, for a header with trace fields: keeps a valid context, with a new span id.
  void SetTrace(const TraceFields& trace);

  static inline thread_local MonoTime last_respond_time_;  // LastRespondTimeOnThisThread()

  scoped_refptr<Connection> connection_;
  const std::string* service_name_;  // set_method() sets both; an empty string before
  const std::string* method_name_;
  MonoTime deadline_ = MonoTime::Max();
  // The members below start zero, side by side: a call is made with few stores.
  int32_t call_id_ = 0;
  static constexpr uint8_t kCancelled = 1;
  static constexpr uint8_t kRunning = 2;
  CancelTrack cancel_track_ = CancelTrack::kNone;
  std::atomic<uint8_t> cancel_state_{0};
  bool handler_started_ = false;  // MakeContext() ran: the handler was called
  bool context_ended_ = false;    // EndContextForStream() ran
  uint32_t stream_flags_ = 0;
  uint32_t stream_credit_ = 0;
  uint32_t stream_compression_ = 0;
  uint8_t requested_priority_ = 0;  // header field 50 when 1 or 2; else 0
  bool queued_background_ = false;
  std::shared_ptr<StreamState> stream_;  // a stream's opening call: the stream it answers
  std::string_view requested_service_;
  std::string_view requested_method_;
  BlockRef frame_block_;  // keeps body_ and inbound_sidecars_ alive
  Slice body_;
  std::vector<Slice> inbound_sidecars_;
  std::vector<uint32_t> unsupported_features_;
  // The request's compression fields (request_compressed_ set when present), and its body once
  // decompressed (DecompressRequest()).
  bool request_compressed_ = false;
  CompressionFields request_compression_;
  BlockRef plain_request_;
  std::vector<BlockSlice> outbound_sidecars_;
  MonoTime arrival_;
  MonoTime handling_started_;
  const RpcMethodInfo* method_ = nullptr;
  MethodMetrics* metrics_ = nullptr;
  size_t frame_bytes_ = 0;
  int64_t held_bytes_ = 0;                            // counted in connection_->inbound_memory()
  std::atomic<InboundCall*>* cancel_slot_ = nullptr;  // set_cancel_track()
  ResultTracker* result_tracker_ = nullptr;           // set_result_tracker(); cleared once told
  std::function<void()> on_cancel_;
  TrackedRequestId request_id_;
  // A small response's frame head (length prefix, header, body) is written here rather than
  // into a block of its own (no block allocation and release per call). The bytes stay put until
  // the call is deleted, after its transfer ended; transports copy bytes without a block (RDMA) or
  // write them before Write returns.
  static constexpr size_t kInlineResponseHeadBytes = 192;
  uint8_t response_head_[kInlineResponseHeadBytes];
  // The handler's RpcContext (MakeContext), ended by its Respond*() before the call is sent.
  alignas(RpcContext) unsigned char context_storage_[sizeof(RpcContext)];
  // Last member: destroyed first, so /rpcz never sees a call whose header is gone.
  RpczCallEntry rpcz_entry_;
};

}  // namespace rrpc::rpc
