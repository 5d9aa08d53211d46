// StreamState: one open stream (docs/streams.md), client or server side: its send credit and
// queue of frames, its received messages, how it ended. The application reaches it through
// Stream (rrpc/rpc/stream.h); the connection through its StreamTable (core/stream_table.h).
//
// Threads: the application's methods run on any thread; the connection's on its reactor thread.
// mu_ guards the state; callbacks and the connection's methods run without it. Frames are
// serialized on the writer's thread and handed to the reactor in batches (one task per batch,
// Pump), at most kStageBytes of them in the connection's write queue at a time, so a call's
// response on the same connection waits behind at most that much of a stream.
//
// Ownership: shared by the application's handles (Stream), the connection's table while the
// stream is open there, and its frames in the write queue. Server side it owns the opening
// InboundCall until it answers it (the answer is the stream's end).
#pragma once

#include <google/protobuf/message.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "rpc/core/header_codec.h"
#include "rpc/observe/rpcz_store.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/status.h"
#include "util/ring_queue.h"

namespace rrpc::rpc {

class Connection;
class InboundCall;
class MessengerMetrics;
class OutboundTransfer;
class Reactor;
class RpcContext;
class StreamReopener;

class StreamState final : public std::enable_shared_from_this<StreamState>, public RpczStreamView {
 public:
  enum class Side : uint8_t { kClient, kServer };
  // Bytes each side may send before the peer granted any: the window every stream starts with.
  // A larger receive window is granted at the open (client: in the opening call's
  // stream_credit; server: in a credit frame as the stream starts).
  static constexpr uint32_t kInitialWindow = 64 * 1024;
  // Bytes of one stream's frames in its connection's write queue at a time (the last frame
  // staged may cross it): enough for one write system call to carry several large messages.
  static constexpr size_t kStageBytes = 256 * 1024;

  // `receive_window`: at least kInitialWindow. `max_message_size`: the frame limit.
  StreamState(Side side, size_t receive_window, size_t max_message_size);
  ~StreamState();
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  Side side() const { return side_; }
  int32_t call_id() const { return call_id_; }
  size_t receive_window() const { return receive_window_; }

  // ---- Compression (docs/compression.md), set before the stream is shared.
  // This side compresses its message bodies with `codec` (kNone: not at all) as `options` say
  // (min_bytes, zstd_level), counted in `metrics` (nullptr: not counted; it outlives the
  // stream's writes).
  void SetCompression(Compression codec, const CompressionOptions& options,
                      MessengerMetrics* metrics);
  Compression compression() const { return codec_; }
  // Whether the peer reads compressed frames (it negotiated COMPRESSION). Server: the
  // connection's, at the open. Client: what the proxy knew of the server, then the stream's
  // connection's once attached; a compressed frame that meets a connection whose peer does not
  // read them ends the stream (NotSupported). Any thread.
  void set_peer_reads_compression(bool reads) {
    peer_reads_compression_.store(reads, std::memory_order_relaxed);
  }

  // ---- The application (Stream), any thread.
  StreamWrite TryWrite(const google::protobuf::MessageLite& message,
                       std::vector<BlockSlice>&& sidecars) RRPC_EXCLUDES(mu_);
  Status Write(const google::protobuf::MessageLite& message, std::vector<BlockSlice>&& sidecars)
      RRPC_EXCLUDES(mu_);
  void OnWritable(std::function<void()> callback) RRPC_EXCLUDES(mu_);
  void CloseWrites() RRPC_EXCLUDES(mu_);
  StreamRead TryRead(StreamMessage* message) RRPC_EXCLUDES(mu_);
  Result<bool> Read(StreamMessage* message) RRPC_EXCLUDES(mu_);
  void OnReadable(std::function<void()> callback) RRPC_EXCLUDES(mu_);
  void Cancel() RRPC_EXCLUDES(mu_);
  Status AwaitEnd() RRPC_EXCLUDES(mu_);
  void Finish(const Status& status, const google::protobuf::MessageLite* response)
      RRPC_EXCLUDES(mu_);
  Status status() const RRPC_EXCLUDES(mu_);
  MonoTime deadline() const { return deadline_; }
  // The last application handle went: an unfinished stream ends (client: cancel; server:
  // finished with an error).
  void OnApplicationReleased() RRPC_EXCLUDES(mu_);
  // What the application's handles share (Stream): the existing one while any handle lives, so
  // every handle made of this stream counts in one place.
  std::shared_ptr<StreamHandleOwner> HandleOwner() RRPC_EXCLUDES(mu_);

  // ---- Client side set-up, on the opening thread before the call is queued.
  // The controller and response of the opening call (the stream owns them).
  RpcController* controller() { return &controller_; }
  google::protobuf::Message* final_response() { return final_response_.get(); }
  const google::protobuf::Message* final_response() const { return final_response_.get(); }
  // `response`: a new message of the method's response type (client streams), else nullptr
  // (the final answer then carries an empty body).
  void SetClientCall(int32_t call_id, std::unique_ptr<google::protobuf::Message> response);
  // The opening call's deadline, once it is serialized.
  void SetDeadline(MonoTime deadline) { deadline_ = deadline; }
  // Ends a stream that never opened (no call made) with `status`.
  void FailBeforeOpen(const Status& status) RRPC_EXCLUDES(mu_);
  // The opening call finished (its callback, on a reactor or the opening thread): the stream
  // ends with the call's status, unless it may move (below) and its reopener takes it.
  void OnCallFinished() RRPC_EXCLUDES(mu_);

  // ---- Moving a client stream to another server (a cluster channel's idempotent streams).
  // The stream may move while nothing but its opening call was exchanged: when that call fails
  // retriably (RpcController::IsRetriable) before the server sent a message and before this
  // side wrote one, OnCallFinished asks `reopener` instead of ending the stream; from then
  // until ReopenAs or EndMove, writes wait (TryWrite says kFull) and a half-close is held for
  // the next server. The stream owns the reopener; set before the stream is shared.
  void SetReopener(std::unique_ptr<StreamReopener> reopener);
  // The reopener's thread, once it has the stream: the next opening call, `call_id`, is about
  // to be queued; the stream forgets its last connection and lets writes go (they wait for the
  // new connection, as at the first open). The deadline stays the first open's (the
  // controller's, which a retry keeps).
  void ReopenAs(int32_t call_id) RRPC_EXCLUDES(mu_);
  // The reopener's thread: no server is left to move to; the stream ends with `status`.
  void EndMove(const Status& status) RRPC_EXCLUDES(mu_);

  // ---- The connection, reactor thread.
  // Client: the opening call was queued on `conn`; `peer_ready`: the server negotiated STREAMS
  // (else the frames wait for OnPeerReady).
  void AttachClient(Connection* conn, bool peer_ready) RRPC_EXCLUDES(mu_);
  // Client: the connection's negotiation ended; `streams`: the server takes stream frames.
  void OnPeerReady(bool streams) RRPC_EXCLUDES(mu_);
  // Server: the opening call arrived on `conn`; the stream answers `call` when it ends.
  // `extra_credit`: the opening call's stream_credit.
  void AttachServer(Connection* conn, InboundCall* call, uint32_t extra_credit) RRPC_EXCLUDES(mu_);
  // A message frame of the peer: `body` (in the frame's block, or decompressed into its own),
  // then `sidecars` in `frame_block`. Corruption when the peer sent past its credit (a protocol
  // error: the connection closes).
  Status OnMessage(BlockSlice body, const BlockRef& frame_block, const std::vector<Slice>& sidecars)
      RRPC_EXCLUDES(mu_);
  // Before a compressed body is decompressed: OK when a message of `bytes` (its stated
  // uncompressed size and its sidecars) fits what this side granted, the test OnMessage makes;
  // Corruption otherwise, so a peer's stated size never makes this side allocate past its window.
  Status CheckMessageFits(size_t bytes) RRPC_EXCLUDES(mu_);
  void OnCredit(uint32_t bytes) RRPC_EXCLUDES(mu_);
  // Server: the client half-closed.
  void OnPeerHalfClose() RRPC_EXCLUDES(mu_);
  // Server: the opening call is being answered (by this stream's Finish, or by the server before
  // the handler ran, e.g. too busy): the stream is over. `status`: what the client is told.
  void OnServerCallAnswered(const Status& status) RRPC_EXCLUDES(mu_);
  // Server: `held` (its pool's admission slot) is released when the stream ends (at once if it
  // has). Any thread.
  void HoldUntilEnd(std::shared_ptr<void> held) RRPC_EXCLUDES(mu_);
  // Server, the worker: the stream's handler returns. Until then the opening call is not
  // answered (its request and context stay valid for the handler), whatever ends the stream.
  void OnHandlerReturned() RRPC_EXCLUDES(mu_);
  // Server: the client cancelled (its cancel frame reached the running handler's call).
  void OnPeerCancelled() RRPC_EXCLUDES(mu_);
  // Server: the connection closed: ends the stream with `reason` and answers its call (the
  // answer goes nowhere).
  void OnConnectionClosed(const Status& reason) RRPC_EXCLUDES(mu_);
  // A frame of this stream left the write queue (`bytes` of it staged).
  void OnFrameWritten(size_t bytes) RRPC_EXCLUDES(mu_);

  // RpczStreamView: the figures /rpcz shows (any thread).
  RpczStreamStats StreamStats(MonoTime now) const override RRPC_EXCLUDES(mu_);

 private:
  class Frame;
  // TryWrite; `*sidecars` are taken only when the message is queued (a writer that waits and
  // tries again still has them).
  StreamWrite TryWriteFrom(const google::protobuf::MessageLite& message,
                           std::vector<BlockSlice>* sidecars) RRPC_EXCLUDES(mu_);
  // A message body serialized on the writer's thread before it takes the lock, to be
  // compressed: compressed (and `fields` say how), or as it was when it did not shrink.
  struct PreparedBody {
    BlockSlice bytes;
    bool compressed = false;
    CompressionFields fields;
  };
  // Serializes one frame of this stream: `flags`, `credit`, then `body` and `sidecars`; or, when
  // `prepared` is set, that body's bytes (sent after the head, not copied into it) instead.
  // `bytes`: the message's bytes uncompressed (body and sidecars), what flow control counts.
  Result<std::unique_ptr<Frame>> MakeFrame(uint32_t flags, uint32_t credit,
                                           const google::protobuf::MessageLite& body,
                                           std::vector<BlockSlice>&& sidecars, size_t bytes,
                                           const PreparedBody* prepared = nullptr);
  // The writer's thread, without the lock: `message` serialized and compressed with this
  // stream's codec (kept plain when it did not shrink); nothing when it is not to be compressed
  // (no codec, too small, the peer does not read compressed frames). `body_bytes`: its size.
  std::optional<PreparedBody> PrepareBody(const google::protobuf::MessageLite& message,
                                          size_t body_bytes);
  // Why a write of `bytes` cannot go now: kClosed, or kFull (the wait recorded for OnWritable
  // and /rpcz); nothing when it may go.
  std::optional<StreamWrite> RefuseWriteLocked(size_t bytes) RRPC_REQUIRES(mu_);
  // OnCallFinished: whether the failed opening call may be followed by another (see
  // SetReopener).
  bool MovableLocked() const RRPC_REQUIRES(mu_);
  // Whether a message of `bytes` may go now (the credit covers it, or nothing is outstanding).
  bool FitsCreditLocked(int64_t bytes) const RRPC_REQUIRES(mu_) {
    return bytes <= credit_ || outstanding_ == 0;
  }
  // Asks the reactor to run Pump, unless a request is on its way.
  void SchedulePumpLocked() RRPC_REQUIRES(mu_);
  // Reactor thread: stages what may go to the connection's write queue; a server stream whose
  // Finish came and whose frames all went answers its call here.
  void Pump() RRPC_EXCLUDES(mu_);
  // Ends the stream (first reason wins): fails writers and readers, runs the callbacks.
  void EndLocked(const Status& status, std::vector<std::function<void()>>* callbacks)
      RRPC_REQUIRES(mu_);
  bool WritableLocked() const RRPC_REQUIRES(mu_);
  bool ReadableLocked() const RRPC_REQUIRES(mu_);
  void TakeCallbacksLocked(std::vector<std::function<void()>>* callbacks) RRPC_REQUIRES(mu_);
  static void Run(std::vector<std::function<void()>>* callbacks);
  // Server: takes the opening call to answer when nothing holds its answer back any more (the
  // handler returned; the stream ended, or finished and sent all its frames); nullptr otherwise.
  // `*status`, `*response`: the answer.
  InboundCall* TakeCallToAnswerLocked(Status* status,
                                      std::unique_ptr<google::protobuf::MessageLite>* response)
      RRPC_REQUIRES(mu_);
  // Answers the server's call (taken by TakeCallToAnswerLocked); any thread.
  void AnswerServerCall(InboundCall* call, const Status& status,
                        const google::protobuf::MessageLite* response);

  const Side side_;
  const size_t receive_window_;
  const size_t max_message_size_;
  Compression codec_ = Compression::kNone;  // SetCompression
  CompressionOptions compression_options_;
  MessengerMetrics* compression_metrics_ = nullptr;
  std::atomic<bool> peer_reads_compression_{false};
  // Set before the stream is shared with a connection (ReopenAs: before the next one).
  int32_t call_id_ = 0;
  MonoTime deadline_ = MonoTime::Max();

  mutable Mutex mu_;
  CondVar changed_;  // writers wait for credit, readers for messages, AwaitEnd for the end
  scoped_refptr<Connection> conn_ RRPC_GUARDED_BY(mu_);  // while attached and open
  Reactor* reactor_ RRPC_GUARDED_BY(mu_) = nullptr;
  bool peer_ready_ RRPC_GUARDED_BY(mu_) = false;
  bool pump_scheduled_ RRPC_GUARDED_BY(mu_) = false;

  // Sending.
  int64_t credit_ RRPC_GUARDED_BY(mu_) = kInitialWindow;  // one message may take it below 0
  int64_t outstanding_ RRPC_GUARDED_BY(mu_) = 0;          // sent, not granted back yet
  bool writes_closed_ RRPC_GUARDED_BY(mu_) = false;
  RingQueue<std::unique_ptr<Frame>> outbox_ RRPC_GUARDED_BY(mu_);
  size_t staged_bytes_ RRPC_GUARDED_BY(mu_) = 0;
  std::function<void()> on_writable_ RRPC_GUARDED_BY(mu_);
  MonoTime blocked_since_ RRPC_GUARDED_BY(mu_);    // a write found no credit; MonoTime() if none
  int64_t wanted_bytes_ RRPC_GUARDED_BY(mu_) = 1;  // what the last refused write needed

  // Receiving.
  RingQueue<std::pair<StreamMessage, size_t>> inbox_ RRPC_GUARDED_BY(mu_);  // with its bytes
  size_t inbox_bytes_ RRPC_GUARDED_BY(mu_) = 0;
  int64_t window_ RRPC_GUARDED_BY(mu_) = 0;     // receive_window_: what the peer may have unread
  int64_t ungranted_ RRPC_GUARDED_BY(mu_) = 0;  // received and not granted back
  uint32_t grant_pending_ RRPC_GUARDED_BY(mu_) = 0;  // consumed, for Pump to grant
  bool peer_done_ RRPC_GUARDED_BY(mu_) = false;      // the peer sends no more messages
  std::function<void()> on_readable_ RRPC_GUARDED_BY(mu_);

  // The end.
  bool ended_ RRPC_GUARDED_BY(mu_) = false;
  Status status_ RRPC_GUARDED_BY(mu_);

  // Server side.
  InboundCall* server_call_ RRPC_GUARDED_BY(mu_) = nullptr;
  std::shared_ptr<void> held_until_end_ RRPC_GUARDED_BY(mu_);  // HoldUntilEnd
  bool handler_started_ RRPC_GUARDED_BY(mu_) = false;          // the call left the service queue
  bool handler_running_ RRPC_GUARDED_BY(mu_) = false;
  bool finish_requested_ RRPC_GUARDED_BY(mu_) = false;
  Status finish_status_ RRPC_GUARDED_BY(mu_);
  std::unique_ptr<google::protobuf::MessageLite> finish_response_ RRPC_GUARDED_BY(mu_);

  // Client side.
  RpcController controller_;
  std::unique_ptr<google::protobuf::Message> final_response_;
  bool call_finished_ RRPC_GUARDED_BY(mu_) = false;
  // The reopener has the stream (between OnCallFinished and ReopenAs or EndMove).
  bool moving_ RRPC_GUARDED_BY(mu_) = false;
  // Set before the stream is shared; then used only by OnCallFinished and the reopener's own
  // tasks, one after another (each follows the opening call it reopened), so without mu_. Kept
  // until the stream goes: a reopener may end the stream from inside its own method.
  std::unique_ptr<StreamReopener> reopener_;

  std::weak_ptr<StreamHandleOwner> handle_owner_ RRPC_GUARDED_BY(mu_);

  friend void StartServerStream(InboundCall* call, RpcContext* context);

  // Counts (Snapshot).
  uint64_t messages_sent_ RRPC_GUARDED_BY(mu_) = 0;
  uint64_t messages_received_ RRPC_GUARDED_BY(mu_) = 0;
  uint64_t bytes_sent_ RRPC_GUARDED_BY(mu_) = 0;
  uint64_t bytes_received_ RRPC_GUARDED_BY(mu_) = 0;
};

// Server side, the worker about to run a stream method's handler for `call`: lets go of the
// opening frame (the request is parsed), hooks the client's cancel to the stream and holds the
// call's answer until the handler returns (StreamState::OnHandlerReturned).
void StartServerStream(InboundCall* call, RpcContext* context);

}  // namespace rrpc::rpc
