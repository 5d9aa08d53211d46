// OutboundCall: one client call from the proxy to its response. The caller's thread serializes
// the request (Serialize); the reactor queues it on a connection, tracks it by call id and
// finishes it exactly once: response, error, timeout or connection failure. Finishing fills the
// RpcController and runs the callback, on the reactor thread.
//
// Reference counted: the reactor holds one reference while the call awaits its response and the
// write queue another while its bytes are unsent, so a call that times out halfway through being
// written stays alive until its frame is complete on the wire.
#pragma once

#include <ev.h>
#include <google/protobuf/message.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "rpc/core/header_codec.h"
#include "rpc/core/remote_method.h"
#include "rpc/transport/outbound_transfer.h"
#include "rrpc/rpc/compression.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/response_callback.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rpc {

class Connection;
class OutboundCall;
class RpcController;
class Reactor;
class RequestTracker;
class StreamState;
struct ClientMethodMetrics;
class MessengerMetrics;

// Told when a call finishes, before its callback runs, on the thread that finishes it (a reactor,
// or the caller's for a call that failed before it was queued). The cluster channel's backends
// and attempts use it to count outstanding calls, latency and failures. Reference counted: the
// call holds its observer until it is destroyed.
class CallObserver : public RefCounted<CallObserver> {
 public:
  virtual ~CallObserver() = default;
  // `call` has finished; `status` and `error` are its outcome (as the controller now holds it).
  virtual void OnCallFinished(const OutboundCall& call, const Status& status,
                              const ErrorStatusPB* error) = 0;
};

class OutboundCall final : public RefCounted<OutboundCall>, public OutboundTransfer {
 public:
  // `method`: the proxy's record of the method called (address, name, encoded header part,
  // metrics).
  OutboundCall(scoped_refptr<RemoteMethod>&& method, google::protobuf::Message* response,
               RpcController* controller, ResponseCallback&& callback);
  ~OutboundCall() override;
  // From a per-thread stash of freed calls: a client reactor that issues calls from callbacks
  // makes and frees one per call.
  static void* operator new(size_t size);
  static void operator delete(void* p, size_t size);

  // Caller thread: builds the frame. `call_id` is unique per messenger. Fails when the request
  // exceeds `max_message_size`. `attempt_deadline`: this attempt ends by then even when the
  // call's deadline (the controller's, fixed here if only a timeout was set, and never changed)
  // is later: a retrying caller's per-attempt timeout. `tracker`: the messenger's, for a tracked
  // call (the controller holds its sequence number): the header carries the call's request id.
  Status Serialize(const google::protobuf::Message& request, int32_t call_id,
                   size_t max_message_size, MonoTime attempt_deadline = MonoTime::Max(),
                   const RequestTracker* tracker = nullptr);

  // Caller thread, before Serialize(): the call's request is to be compressed with `codec` (not
  // kNone) as `options` say (the messenger's; they outlive the call), counted in `metrics`
  // (nullptr: none). Serialize() compresses only once the method has seen a connection that
  // negotiated COMPRESSION (RemoteMethod::peer_reads_compression).
  void WantCompression(Compression codec, const CompressionOptions* options,
                       MessengerMetrics* metrics) {
    compression_ = codec;
    compression_options_ = options;
    compression_metrics_ = metrics;
  }
  // Whether Serialize() compressed the request body.
  bool request_compressed() const { return request_compressed_; }

  // A synchronous caller wants to know which connection the call went out on, to write its next
  // call itself (Connection::TrySendCallFromCaller). Caller thread, before the call is queued.
  void set_report_connection() { report_connection_ = true; }
  bool report_connection() const { return report_connection_; }
  // Reactor thread, when the call is queued on `conn` (only if report_connection()), or the
  // caller before it writes the call itself; read by the caller once the call has finished.
  void set_connection(Connection* conn);
  const scoped_refptr<Connection>& connection() const { return connection_; }

  // Caller thread, before Serialize(): the call opens `stream` (docs/streams.md): its header
  // says so and requires STREAMS, and the connection that carries it carries the stream's frames.
  void set_stream(std::shared_ptr<StreamState> stream) { stream_ = std::move(stream); }
  const std::shared_ptr<StreamState>& stream() const { return stream_; }
  // Whether the call goes to its remote over the bulk connection (MessengerOptions::
  // bulk_connection_bytes): a large request, or a stream's opening call, since the stream's
  // frames follow it and a small call's answer must not wait behind its window in the TCP
  // stream. After Serialize().
  bool IsBulk(const MessengerOptions& options) const {
    return options.bulk_connection_bytes > 0 &&
           (stream_ != nullptr || options.IsBulk(total_bytes()));
  }

  // Caller thread, before the call is queued: who hears of its end (see CallObserver).
  void set_observer(scoped_refptr<CallObserver>&& observer) { observer_ = std::move(observer); }
  // Whether any byte of the request reached the transport (after that, the server may run it).
  bool request_started() const { return started(); }
  // When the response was read; MonoTime() when none came.
  MonoTime received_at() const { return received_at_; }
  // Whether the call waited for its connection to open (connect and negotiation) before it could
  // be sent: then received_at() - sent_at() includes the connection's set-up. Set on the reactor
  // thread as the call is queued; read by its observer as it finishes.
  bool waited_for_connection() const { return waited_for_connection_; }
  void set_waited_for_connection() { waited_for_connection_ = true; }

  int32_t call_id() const { return call_id_; }
  const Sockaddr& remote() const { return method_->remote(); }
  const RemoteMethod* remote_method() const { return method_.get(); }
  const std::string& method_name() const { return method_->method_name(); }
  // When the call times out: the controller's deadline, or the attempt's if earlier. Fixed by
  // Serialize().
  MonoTime deadline() const { return deadline_; }
  // When the call was serialized (Serialize()): about when it was queued for sending.
  MonoTime sent_at() const { return sent_at_; }
  bool finished() const { return state_ == State::kFinished; }

  // Reactor thread. Starts the timeout timer on `reactor`'s loop. `on_timeout` runs on the
  // reactor when the deadline passes first; it must untrack the call and then call
  // FinishTimedOut().
  void StartTimer(struct ev_loop* loop, void (*on_timeout)(OutboundCall* call, void* arg),
                  void* arg);
  // Reactor thread. Each finishes the call (if not finished yet) and runs the callback.
  // `received_at`: when the reactor read the response (saves a clock read). Takes `frame`'s block
  // when the call keeps its sidecars.
  void FinishWithResponse(BlockSlice&& frame, const ResponseHeaderFields& header, Slice body,
                          Slice tail, MonoTime received_at);
  void FinishWithError(const Status& status);
  void FinishTimedOut();
  // Caller thread, before the call reached any reactor (e.g. messenger shut down).
  void FailBeforeSend(const Status& status);
  // Reactor thread: finishes the call as cancelled (RpcController::Cancel).
  void FinishCancelled();

  // Cancellation (RpcController::Cancel). Any thread: flags the call and, once it has a
  // reactor, hands the cancel to it (Connection::CancelCall); a call not yet on a connection is
  // failed there as it arrives (Connection::QueueOutboundCall checks cancel_requested()).
  void Cancel();
  bool cancel_requested() const { return cancel_requested_.load(std::memory_order_seq_cst); }
  // Any thread, before the call may be cancelled on it: the reactor that will carry the call.
  void set_reactor(Reactor* reactor) { reactor_.store(reactor, std::memory_order_seq_cst); }
  // The connection the call waits on (reactor thread; the caller thread for a call it writes
  // itself, before the reactor may see it), for the cancel. Valid while the call is unfinished:
  // a connection finishes its calls as it shuts down.
  void set_owner(Connection* conn) { owner_ = conn; }

  // OutboundTransfer.
  void TransferDone() override;
  void TransferAborted(const Status& status) override;

  // A finished call whose frame has not started out need not be sent.
  bool cancelled() const override { return state_ == State::kFinished && !started(); }
  // Reactor thread: the deadline passed while the frame was half written. The rest of the frame
  // must still go out (the stream would be corrupt otherwise), but the caller must not wait for
  // a peer that may never read it: the unsent borrowed sidecars are copied, so the call can
  // finish (timed out) now and the caller may free them.
  void DetachUnsentPayload() { CopyUnsentBorrowedSidecars(); }

 private:
  // Serialize()'s encoding for a call whose header carries a request id (`tracker` set) or a
  // trace context, or that wants compression: what most calls lack, done here so that those
  // calls skip it.
  Result<BlockSlice> SerializeWithOptionalParts(RequestHeaderParts* header,
                                                const google::protobuf::Message& request,
                                                uint32_t sidecar_bytes, size_t max_message_size,
                                                const RequestTracker* tracker);
  // The frame head of a call whose serialized body `body` is compressed (the header's other
  // parts filled, `optional` being its optional ones), or nullopt when it does not shrink (the
  // plain frame is sent then).
  Result<std::optional<BlockSlice>> SerializeCompressed(RequestHeaderParts* header,
                                                        RequestHeaderOptionalParts* optional,
                                                        Slice body, uint32_t sidecar_bytes,
                                                        size_t max_message_size);
  // FinishWithResponse() for a compressed response body: decompresses it (held to the
  // messenger's max_message_size) and parses it.
  Status ParseCompressedResponse(const ResponseHeaderFields& header, Slice body);
  enum class State { kCreated, kSerialized, kFinished };
  void Finish(Status status, std::unique_ptr<ErrorStatusPB> error);
  static void OnTimerFired(struct ev_loop* loop, ev_timer* timer, int revents);

  // Grouped by kind, the zero-initialized ones together, so that making a call sets them in a
  // few wide stores.
  const scoped_refptr<RemoteMethod> method_;
  google::protobuf::Message* response_;
  RpcController* controller_;
  ResponseCallback callback_;
  ClientMethodMetrics* const metrics_;  // the method's: owned by the messenger, or nullptr
  // WantCompression(): the codec (kNone: the call is not compressed), the messenger's options
  // and metrics.
  Compression compression_ = Compression::kNone;
  bool request_compressed_ = false;
  const CompressionOptions* compression_options_ = nullptr;
  MessengerMetrics* compression_metrics_ = nullptr;
  int32_t call_id_ = 0;
  State state_ = State::kCreated;
  bool report_connection_ = false;
  bool waited_for_connection_ = false;
  std::atomic<bool> cancel_requested_{false};
  // Some of the frame was written (the transfer ended or aborted after starting): the server may
  // have the call. Sticky: the payload, and with it started(), is cleared when the transfer ends.
  std::atomic<bool> wrote_any_{false};
  bool timer_active_ = false;  // reactor thread only, like the other timer state below
  MonoTime sent_at_;
  MonoTime deadline_;     // fixed by Serialize(): the controller's or the attempt's, if earlier
  MonoTime received_at_;  // unset unless a response arrived
  scoped_refptr<Connection> connection_;  // see set_connection()
  scoped_refptr<CallObserver> observer_;  // see set_observer(); usually none
  std::shared_ptr<StreamState> stream_;   // see set_stream(); usually none
  std::atomic<Reactor*> reactor_{nullptr};
  Connection* owner_ = nullptr;  // see set_owner()

  // Timer state: reactor thread only.
  struct ev_loop* loop_ = nullptr;
  void (*on_timeout_)(OutboundCall*, void*) = nullptr;
  void* on_timeout_arg_ = nullptr;
  ev_timer timer_;

  // A small call's frame head (length prefix, header, body) is written here rather than into a
  // block of its own (no block allocation and release per call). The bytes stay put until the call
  // is deleted, after its transfer ended (the write queue holds a reference until then); transports
  // copy bytes without a block (RDMA) or write them before Write returns.
  static constexpr size_t kInlineHeadBytes = 192;
  uint8_t head_buffer_[kInlineHeadBytes];
};

}  // namespace rrpc::rpc
