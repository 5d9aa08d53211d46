#include "rpc/core/stream_state.h"

#include <glog/logging.h>

#include <algorithm>
#include <utility>

#include "rpc/core/compression.h"
#include "rpc/core/connection.h"
#include "rpc/core/header_codec.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/stream_open.h"
#include "rpc/core/wire_codec.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/transport/outbound_transfer.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {

// One frame of the stream in its outbox, then in the connection's write queue. Holds the stream
// only once staged (an outbox entry must not keep its own owner alive).
class StreamState::Frame final : public OutboundTransfer {
 public:
  // `message_bytes`: the message's bytes (body and sidecars); 0 for a frame without one.
  // `compressed`: its body is.
  Frame(BlockSlice head, std::vector<BlockSlice>&& sidecars, size_t message_bytes, bool compressed)
      : message_bytes_(message_bytes), compressed_(compressed) {
    if (sidecars.empty()) {
      SetPayload(std::move(head));
    } else {
      SetPayload(std::move(head), std::move(sidecars));
    }
  }
  void set_stream(std::shared_ptr<StreamState> stream) { stream_ = std::move(stream); }
  size_t message_bytes() const { return message_bytes_; }
  bool compressed() const { return compressed_; }

  void TransferDone() override { Done(); }
  void TransferAborted(const Status&) override { Done(); }

 private:
  void Done() {
    std::shared_ptr<StreamState> stream = std::move(stream_);
    const size_t bytes = total_bytes();
    delete this;
    if (stream != nullptr) stream->OnFrameWritten(bytes);
  }

  const size_t message_bytes_;
  const bool compressed_;
  std::shared_ptr<StreamState> stream_;
};

StreamState::StreamState(Side side, size_t receive_window, size_t max_message_size)
    : side_(side),
      receive_window_(std::max<size_t>(receive_window, kInitialWindow)),
      max_message_size_(max_message_size) {
  // The whole window is this side's to grant from the start: a client's opening call grants it
  // (stream_credit), a server's first frame does (AttachServer).
  window_ = static_cast<int64_t>(receive_window_);
}

StreamState::~StreamState() {
  // Every path that ends a server stream answers its call; a stream is destroyed only once its
  // connection's table and every handle let it go, after that.
  DCHECK(server_call_ == nullptr) << "server stream destroyed with its call unanswered";
}

void StreamState::SetCompression(Compression codec, const CompressionOptions& options,
                                 MessengerMetrics* metrics) {
  codec_ = codec;
  compression_options_ = options;
  compression_metrics_ = metrics;
}

std::optional<StreamState::PreparedBody> StreamState::PrepareBody(
    const google::protobuf::MessageLite& message, size_t body_bytes) {
  if (codec_ == Compression::kNone || body_bytes < compression_options_.min_bytes ||
      body_bytes > max_message_size_ || !peer_reads_compression_.load(std::memory_order_relaxed)) {
    return std::nullopt;
  }
  PreparedBody body;
  BlockRef plain = Block::Allocate(body_bytes);
  message.SerializeWithCachedSizesToArray(plain->data());
  body.bytes = BlockSlice{plain, Slice(plain->data(), body_bytes)};
  const MonoTime start = MonoTime::Now();
  Result<std::optional<BlockSlice>> compressed = Compress(
      body.bytes.slice, codec_, compression_options_.min_bytes, compression_options_.zstd_level);
  const bool skipped = !compressed.ok() || !compressed.value().has_value();
  if (compression_metrics_ != nullptr) {
    compression_metrics_->BodyCompressed(body_bytes,
                                         skipped ? body_bytes : compressed.value()->slice.size(),
                                         skipped, MonoTime::Now() - start);
  }
  if (skipped) return body;  // it did not shrink: it goes as it is, serialized once
  body.bytes = std::move(*compressed.value());
  body.compressed = true;
  body.fields.codec = static_cast<uint32_t>(codec_);
  body.fields.uncompressed_size = static_cast<uint32_t>(body_bytes);
  return body;
}

Result<std::unique_ptr<StreamState::Frame>> StreamState::MakeFrame(
    uint32_t flags, uint32_t credit, const google::protobuf::MessageLite& body,
    std::vector<BlockSlice>&& sidecars, size_t bytes, const PreparedBody* prepared) {
  size_t body_bytes;
  if (prepared == nullptr) {
    body_bytes = body.ByteSizeLong();
  } else {
    body_bytes =
        prepared->compressed ? prepared->fields.uncompressed_size : prepared->bytes.slice.size();
  }
  const uint32_t sidecar_bytes = static_cast<uint32_t>(bytes - std::min(bytes, body_bytes));
  // The client's frames carry a RequestHeader, the server's a ResponseHeader; the same fields.
  auto fill = [&](auto* h) {
    h->call_id = call_id_;
    h->stream_flags = flags;
    h->stream_credit = credit;
    uint32_t offset = 0;
    for (const BlockSlice& s : sidecars) {
      h->sidecar_offsets.push_back(offset);
      offset += static_cast<uint32_t>(s.slice.size());
    }
  };
  RequestHeaderFields request;
  ResponseHeaderFields response;
  if (side_ == Side::kClient) {
    fill(&request);
  } else {
    fill(&response);
  }
  auto serialize = [&]() -> Result<BlockSlice> {
    if (prepared == nullptr) {
      return side_ == Side::kClient
                 ? SerializeFrameHead(request, body, sidecar_bytes, max_message_size_)
                 : SerializeFrameHead(response, body, sidecar_bytes, max_message_size_);
    }
    const size_t size = prepared->bytes.slice.size();
    if (side_ == Side::kClient) {
      std::string no_method;
      RequestHeaderOptionalParts optional;
      const RequestHeaderParts parts = PartsOf(request, &no_method, &optional);
      if (prepared->compressed) optional.compression = &prepared->fields;
      return SerializeFrameHeadBeforeBody(parts, size, sidecar_bytes, max_message_size_);
    }
    if (prepared->compressed) {
      response.has_compression = true;
      response.compression = prepared->fields;
    }
    return SerializeFrameHeadBeforeBody(response, size, sidecar_bytes, max_message_size_);
  };
  Result<BlockSlice> head = serialize();
  RRPC_RETURN_NOT_OK(head.status());
  // A prepared body goes right after the head (the offsets above are past it), then the sidecars.
  if (prepared != nullptr) sidecars.insert(sidecars.begin(), prepared->bytes);
  return std::make_unique<Frame>(std::move(head).value(), std::move(sidecars),
                                 (flags & STREAM_MESSAGE) != 0 ? bytes : 0,
                                 prepared != nullptr && prepared->compressed);
}

// ---- Writing.

bool StreamState::WritableLocked() const {
  // Room for the message the last refused write wanted (the credit covers it, or nothing is
  // outstanding: a message larger than the window then goes alone), the same test TryWrite makes.
  if (ended_ || writes_closed_) return true;
  return !moving_ && (credit_ >= wanted_bytes_ || outstanding_ == 0);
}

std::optional<StreamWrite> StreamState::RefuseWriteLocked(size_t bytes) {
  if (ended_ || writes_closed_) return StreamWrite::kClosed;
  if (!moving_ && FitsCreditLocked(static_cast<int64_t>(bytes))) return std::nullopt;
  if (blocked_since_ == MonoTime()) blocked_since_ = MonoTime::Now();
  wanted_bytes_ = static_cast<int64_t>(bytes);
  return StreamWrite::kFull;
}

StreamWrite StreamState::TryWrite(const google::protobuf::MessageLite& message,
                                  std::vector<BlockSlice>&& sidecars) {
  return TryWriteFrom(message, &sidecars);
}

StreamWrite StreamState::TryWriteFrom(const google::protobuf::MessageLite& message,
                                      std::vector<BlockSlice>* sidecars) {
  const size_t body_bytes = message.ByteSizeLong();
  size_t bytes = body_bytes;
  for (const BlockSlice& s : *sidecars) bytes += s.slice.size();
  std::vector<std::function<void()>> callbacks;
  StreamWrite result;
  // A body to compress is compressed before the lock is taken (the reactor takes it too), once
  // the write looks likely to go: a full window is said without compressing.
  std::optional<PreparedBody> prepared;
  if (codec_ != Compression::kNone) {
    {
      MutexLock lock(mu_);
      if (std::optional<StreamWrite> refused = RefuseWriteLocked(bytes)) return *refused;
    }
    prepared = PrepareBody(message, body_bytes);
  }
  {
    MutexLock lock(mu_);
    if (std::optional<StreamWrite> refused = RefuseWriteLocked(bytes)) return *refused;
    blocked_since_ = MonoTime();
    wanted_bytes_ = 1;
    Result<std::unique_ptr<Frame>> frame =
        MakeFrame(STREAM_MESSAGE, 0, message, std::move(*sidecars), bytes,
                  prepared.has_value() ? &*prepared : nullptr);
    if (!frame.ok()) {
      EndLocked(frame.status().CloneAndPrepend("stream message not sent"), &callbacks);
      result = StreamWrite::kClosed;
    } else {
      credit_ -= static_cast<int64_t>(bytes);
      outstanding_ += static_cast<int64_t>(bytes);
      messages_sent_++;
      bytes_sent_ += bytes;
      outbox_.push_back(std::move(frame).value());
      SchedulePumpLocked();
      result = StreamWrite::kQueued;
    }
  }
  Run(&callbacks);
  return result;
}

Status StreamState::Write(const google::protobuf::MessageLite& message,
                          std::vector<BlockSlice>&& sidecars) {
  if (Reactor::Current() != nullptr) {
    return Status::IllegalState("Stream::Write on a reactor thread would wait for itself");
  }
  size_t bytes = message.ByteSizeLong();
  for (const BlockSlice& s : sidecars) bytes += s.slice.size();
  while (true) {
    switch (TryWriteFrom(message, &sidecars)) {
      case StreamWrite::kQueued:
        return Status::OK();
      case StreamWrite::kClosed: {
        Status s = status();
        return s.ok() ? Status::IllegalState("stream closed for writing") : s;
      }
      case StreamWrite::kFull: {  // wait for room, then try again (another writer may win it)
        MutexLock lock(mu_);
        while (!ended_ && !writes_closed_ &&
               (moving_ || !FitsCreditLocked(static_cast<int64_t>(bytes)))) {
          changed_.Wait(mu_);
        }
        break;
      }
    }
  }
}

void StreamState::OnWritable(std::function<void()> callback) {
  std::function<void()> replaced;  // destroyed after the lock: it may hold the last handle
  {
    MutexLock lock(mu_);
    if (!WritableLocked()) {
      replaced = std::move(on_writable_);
      on_writable_ = std::move(callback);
      return;
    }
  }
  callback();
}

void StreamState::CloseWrites() {
  MutexLock lock(mu_);
  if (side_ != Side::kClient || ended_ || writes_closed_) return;
  writes_closed_ = true;
  if (moving_) return;  // ReopenAs sends it, with the next opening call's id
  Result<std::unique_ptr<Frame>> frame =
      MakeFrame(STREAM_HALF_CLOSE, 0, StreamEmptyPB::default_instance(), {}, 0);
  if (frame.ok()) outbox_.push_back(std::move(frame).value());
  SchedulePumpLocked();
  changed_.NotifyAll();
}

void StreamState::SchedulePumpLocked() {
  if (pump_scheduled_ || reactor_ == nullptr || !peer_ready_) return;
  pump_scheduled_ = true;
  reactor_->RunOnReactor([self = shared_from_this()] { self->Pump(); });
}

void StreamState::Pump() {
  std::vector<Frame*> staged;
  std::vector<std::function<void()>> pending_callbacks;
  bool cancel_call = false;
  InboundCall* answer = nullptr;
  Status answer_status;
  std::unique_ptr<google::protobuf::MessageLite> answer_response;
  scoped_refptr<Connection> conn;
  {
    MutexLock lock(mu_);
    pump_scheduled_ = false;
    if (conn_ == nullptr || !peer_ready_) return;
    if (reactor_ != Reactor::Current()) {
      // Asked for on the connection the stream had before it moved (ReopenAs): the request
      // goes on to the current one's reactor.
      SchedulePumpLocked();
      return;
    }
    conn = conn_;
    if (grant_pending_ > 0 && !ended_) {
      // Credit goes ahead of the stream's own messages: it lets the peer's flow on.
      Result<std::unique_ptr<Frame>> frame =
          MakeFrame(STREAM_CREDIT, grant_pending_, StreamEmptyPB::default_instance(), {}, 0);
      if (frame.ok()) {
        Frame* f = frame.value().release();
        f->set_stream(shared_from_this());
        staged_bytes_ += f->total_bytes();
        staged.push_back(f);
      }
      grant_pending_ = 0;
    }
    while (!outbox_.empty() && staged_bytes_ < kStageBytes) {
      if (outbox_.front()->compressed() && !conn_->peer_reads_compression()) {
        // Compressed on what the proxy knew of the server; this connection's peer cannot read
        // it. Rare (a server replaced by one without COMPRESSION): the stream ends, and its
        // opening call is cancelled (only a client learns its peer late).
        EndLocked(Status::NotSupported("the server does not read compressed stream messages",
                                       "open the stream without compression"),
                  &pending_callbacks);
        cancel_call = side_ == Side::kClient;
        break;
      }
      Frame* f = outbox_.front().release();
      outbox_.pop_front();
      f->set_stream(shared_from_this());
      staged_bytes_ += f->total_bytes();
      staged.push_back(f);
    }
    answer = TakeCallToAnswerLocked(&answer_status, &answer_response);
  }
  MessengerMetrics* metrics = conn->reactor()->metrics();
  for (Frame* f : staged) {
    if (metrics != nullptr && f->message_bytes() > 0) {
      metrics->stream_messages_sent->Increment();
      metrics->stream_bytes_sent->IncrementBy(f->message_bytes());
    }
    conn->QueueStreamFrame(f);
  }
  Run(&pending_callbacks);
  if (cancel_call) controller_.Cancel();
  if (answer != nullptr) AnswerServerCall(answer, answer_status, answer_response.get());
}

InboundCall* StreamState::TakeCallToAnswerLocked(
    Status* status, std::unique_ptr<google::protobuf::MessageLite>* response) {
  // A call still queued for its handler is the service pool's to answer (or to run).
  if (server_call_ == nullptr || !handler_started_ || handler_running_) return nullptr;
  if (finish_requested_ && !ended_) {
    if (!outbox_.empty()) return nullptr;  // the answer follows every message
    *status = finish_status_;
    *response = std::move(finish_response_);
  } else if (ended_) {
    *status = status_;
  } else {
    return nullptr;
  }
  InboundCall* call = server_call_;
  server_call_ = nullptr;
  return call;
}

void StreamState::HoldUntilEnd(std::shared_ptr<void> held) {
  MutexLock lock(mu_);
  if (!ended_) held_until_end_ = std::move(held);
  // Else `held` goes as this returns, after the lock.
}

void StreamState::OnHandlerReturned() {
  InboundCall* answer = nullptr;
  Status status;
  std::unique_ptr<google::protobuf::MessageLite> response;
  {
    MutexLock lock(mu_);
    handler_running_ = false;
    if (ended_) {
      answer = TakeCallToAnswerLocked(&status, &response);  // goes nowhere: answer it here
    } else if (finish_requested_ && server_call_ != nullptr && !pump_scheduled_ &&
               reactor_ != nullptr) {
      pump_scheduled_ = true;  // the answer follows the frames: the reactor sends it
      reactor_->RunOnReactor([self = shared_from_this()] { self->Pump(); });
    }
  }
  if (answer != nullptr) AnswerServerCall(answer, status, response.get());
}

void StreamState::OnFrameWritten(size_t bytes) {
  MutexLock lock(mu_);
  staged_bytes_ -= std::min(staged_bytes_, bytes);
  if (!outbox_.empty() || (finish_requested_ && server_call_ != nullptr)) SchedulePumpLocked();
}

void StreamState::OnCredit(uint32_t bytes) {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    credit_ += bytes;
    outstanding_ = std::max<int64_t>(0, outstanding_ - bytes);
    if (WritableLocked()) {
      if (on_writable_) callbacks.push_back(std::move(on_writable_));
      on_writable_ = nullptr;
      changed_.NotifyAll();
    }
  }
  Run(&callbacks);
}

// ---- Reading.

bool StreamState::ReadableLocked() const { return !inbox_.empty() || peer_done_ || ended_; }

StreamRead StreamState::TryRead(StreamMessage* message) {
  MutexLock lock(mu_);
  if (inbox_.empty()) return (peer_done_ || ended_) ? StreamRead::kEnd : StreamRead::kEmpty;
  *message = std::move(inbox_.front().first);
  const size_t bytes = inbox_.front().second;
  inbox_.pop_front();
  inbox_bytes_ -= bytes;
  if (ended_) return StreamRead::kMessage;
  // Grant what was consumed back: at once when half the window is consumed or nothing is left
  // to read (the writer may wait for exactly this); Pump sends one credit frame for all the
  // reads before it runs.
  grant_pending_ += static_cast<uint32_t>(bytes);
  ungranted_ -= static_cast<int64_t>(bytes);
  if (grant_pending_ >= window_ / 2 || inbox_.empty()) SchedulePumpLocked();
  return StreamRead::kMessage;
}

Result<bool> StreamState::Read(StreamMessage* message) {
  if (Reactor::Current() != nullptr) {
    return Status::IllegalState("Stream::Read on a reactor thread would wait for itself");
  }
  {
    MutexLock lock(mu_);
    while (!ReadableLocked()) changed_.Wait(mu_);
  }
  switch (TryRead(message)) {
    case StreamRead::kMessage:
      return true;
    case StreamRead::kEmpty:  // another reader took it: read again
      return Read(message);
    case StreamRead::kEnd:
      break;
  }
  return false;
}

void StreamState::OnReadable(std::function<void()> callback) {
  std::function<void()> replaced;  // destroyed after the lock: it may hold the last handle
  {
    MutexLock lock(mu_);
    if (!ReadableLocked()) {
      replaced = std::move(on_readable_);
      on_readable_ = std::move(callback);
      return;
    }
  }
  callback();
}

Status StreamState::CheckMessageFits(size_t bytes) {
  MutexLock lock(mu_);
  if (ended_ || peer_done_) return Status::OK();  // OnMessage says what it means
  if (ungranted_ + static_cast<int64_t>(bytes) > window_ && ungranted_ != 0) {
    return Status::Corruption("stream " + std::to_string(call_id_) + ": the peer sent " +
                              std::to_string(bytes) + " bytes past its credit");
  }
  return Status::OK();
}

Status StreamState::OnMessage(BlockSlice body, const BlockRef& frame_block,
                              const std::vector<Slice>& sidecars) {
  size_t bytes = body.slice.size();
  for (const Slice& s : sidecars) bytes += s.size();
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    if (ended_) return Status::OK();  // late: the stream ended here first
    if (peer_done_) {
      return Status::Corruption("stream " + std::to_string(call_id_) +
                                ": message after the peer's half-close");
    }
    if (ungranted_ + static_cast<int64_t>(bytes) > window_ && ungranted_ != 0) {
      return Status::Corruption("stream " + std::to_string(call_id_) + ": the peer sent " +
                                std::to_string(bytes) + " bytes past its credit");
    }
    ungranted_ += static_cast<int64_t>(bytes);
    StreamMessage m;
    m.body = std::move(body);
    m.sidecars.reserve(sidecars.size());
    for (const Slice& s : sidecars) m.sidecars.push_back(BlockSlice{frame_block, s});
    inbox_.push_back({std::move(m), bytes});
    inbox_bytes_ += bytes;
    messages_received_++;
    bytes_received_ += bytes;
    if (on_readable_) callbacks.push_back(std::move(on_readable_));
    on_readable_ = nullptr;
    changed_.NotifyAll();
  }
  Run(&callbacks);
  return Status::OK();
}

void StreamState::OnPeerHalfClose() {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    peer_done_ = true;
    if (on_readable_) callbacks.push_back(std::move(on_readable_));
    on_readable_ = nullptr;
    changed_.NotifyAll();
  }
  Run(&callbacks);
}

// ---- The end.

void StreamState::TakeCallbacksLocked(std::vector<std::function<void()>>* callbacks) {
  if (on_writable_) callbacks->push_back(std::move(on_writable_));
  if (on_readable_) callbacks->push_back(std::move(on_readable_));
  on_writable_ = nullptr;
  on_readable_ = nullptr;
}

void StreamState::EndLocked(const Status& status, std::vector<std::function<void()>>* callbacks) {
  if (ended_) return;
  ended_ = true;
  status_ = status;
  peer_done_ = true;
  writes_closed_ = true;
  outbox_.clear();  // frames not staged need not go: the stream is over
  conn_ = nullptr;
  if (held_until_end_ != nullptr) {  // released after the lock, with the callbacks
    callbacks->push_back([held = std::move(held_until_end_)] {});
  }
  TakeCallbacksLocked(callbacks);
  changed_.NotifyAll();
}

void StreamState::Run(std::vector<std::function<void()>>* callbacks) {
  for (auto& cb : *callbacks) cb();
  callbacks->clear();
}

Status StreamState::status() const {
  MutexLock lock(mu_);
  return status_;
}

void StreamState::Cancel() {
  if (side_ == Side::kClient) {
    controller_.Cancel();  // the call finishes Aborted (OnCallFinished) and tells the server
    return;
  }
  Finish(Status::Aborted("the server cancelled the stream"), nullptr);
}

Status StreamState::AwaitEnd() {
  if (Reactor::Current() != nullptr) {
    return Status::IllegalState("Stream::AwaitEnd on a reactor thread would wait for itself");
  }
  MutexLock lock(mu_);
  while (!call_finished_) changed_.Wait(mu_);
  return status_;
}

void StreamState::Finish(const Status& status, const google::protobuf::MessageLite* response) {
  MutexLock lock(mu_);
  if (side_ != Side::kServer || ended_ || finish_requested_) return;
  finish_requested_ = true;
  writes_closed_ = true;
  finish_status_ = status;
  if (response != nullptr) {
    finish_response_.reset(response->New());
    finish_response_->CheckTypeAndMergeFrom(*response);
  }
  if (reactor_ != nullptr) {
    // Unlike SchedulePumpLocked, also when the stream is idle: the answer itself must go.
    if (!pump_scheduled_) {
      pump_scheduled_ = true;
      reactor_->RunOnReactor([self = shared_from_this()] { self->Pump(); });
    }
  }
  changed_.NotifyAll();
}

void StreamState::OnApplicationReleased() {
  if (side_ == Side::kClient) {
    bool finished;
    {
      MutexLock lock(mu_);
      finished = call_finished_;
    }
    if (!finished) controller_.Cancel();
    return;
  }
  Finish(Status::Aborted("the handler released its stream without finishing it"), nullptr);
}

void StreamState::AnswerServerCall(InboundCall* call, const Status& status,
                                   const google::protobuf::MessageLite* response) {
  // The answer goes through the connection's QueueResponse (SendResponse: a stream's call is
  // never written by another thread), which ends the stream (OnServerCallAnswered). The
  // handler's context ends first: the stream, not the context, answers.
  call->EndContextForStream();
  if (!status.ok()) {
    if (status.IsAborted()) {
      call->RespondFailure(ErrorStatusPB::ERROR_CANCELLED, status);
    } else {
      call->RespondApplicationError(status);
    }
  } else {
    call->RespondSuccess(response != nullptr ? *response : StreamEmptyPB::default_instance());
  }
}

// ---- Client side.

void StreamState::SetClientCall(int32_t call_id,
                                std::unique_ptr<google::protobuf::Message> response) {
  call_id_ = call_id;
  final_response_ = std::move(response);
}

void StreamState::FailBeforeOpen(const Status& status) {
  std::vector<std::function<void()>> callbacks;
  MutexLock lock(mu_);
  call_finished_ = true;
  EndLocked(status, &callbacks);
}

void StreamState::AttachClient(Connection* conn, bool peer_ready) {
  MutexLock lock(mu_);
  if (ended_) return;
  conn_ = scoped_refptr<Connection>(conn);
  reactor_ = conn->reactor();
  peer_ready_ = peer_ready;
  if (peer_ready) set_peer_reads_compression(conn->peer_reads_compression());
  if (!outbox_.empty() || grant_pending_ > 0) SchedulePumpLocked();
}

void StreamState::OnPeerReady(bool streams) {
  MutexLock lock(mu_);
  // Without STREAMS the server refuses the opening call (ERROR_UNSUPPORTED_FEATURE), which ends
  // the stream; its frames never go.
  if (!streams || ended_) return;
  peer_ready_ = true;
  if (conn_ != nullptr) set_peer_reads_compression(conn_->peer_reads_compression());
  if (!outbox_.empty() || grant_pending_ > 0) SchedulePumpLocked();
}

bool StreamState::MovableLocked() const {
  return reopener_ != nullptr && !ended_ && !peer_done_ && messages_received_ == 0 &&
         messages_sent_ == 0 && !controller_.cancel_requested() && controller_.IsRetriable();
}

void StreamState::OnCallFinished() {
  if (reopener_ != nullptr) reopener_->OnOpeningCallEnded(controller_);
  bool move;
  {
    MutexLock lock(mu_);
    move = MovableLocked();
    moving_ = move;
  }
  if (move && reopener_->OnOpenFailed(shared_from_this())) return;
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    moving_ = false;
    call_finished_ = true;
    EndLocked(controller_.status(), &callbacks);
    changed_.NotifyAll();
  }
  Run(&callbacks);
}

void StreamState::SetReopener(std::unique_ptr<StreamReopener> reopener) {
  DCHECK(side_ == Side::kClient);
  reopener_ = std::move(reopener);
}

void StreamState::ReopenAs(int32_t call_id) {
  std::vector<std::function<void()>> callbacks;
  scoped_refptr<Connection> last;  // released after the lock
  {
    MutexLock lock(mu_);
    DCHECK(moving_);
    moving_ = false;
    call_id_ = call_id;
    last = std::move(conn_);
    reactor_ = nullptr;
    peer_ready_ = false;
    // The last server's grants are not the next one's.
    credit_ = kInitialWindow;
    outstanding_ = 0;
    outbox_.clear();
    if (writes_closed_) {
      // Nothing was written, so the outbox held at most the half-close: it goes to the next
      // server under the new call id.
      Result<std::unique_ptr<Frame>> frame =
          MakeFrame(STREAM_HALF_CLOSE, 0, StreamEmptyPB::default_instance(), {}, 0);
      if (frame.ok()) outbox_.push_back(std::move(frame).value());
    }
    if (on_writable_) callbacks.push_back(std::move(on_writable_));
    on_writable_ = nullptr;
    changed_.NotifyAll();  // writers waiting for the move try again
  }
  Run(&callbacks);
}

void StreamState::EndMove(const Status& status) {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    moving_ = false;
    call_finished_ = true;
    EndLocked(status, &callbacks);
  }
  Run(&callbacks);
}

// ---- Server side.

void StreamState::AttachServer(Connection* conn, InboundCall* call, uint32_t extra_credit) {
  MutexLock lock(mu_);
  call_id_ = call->call_id();
  deadline_ = call->deadline();
  conn_ = scoped_refptr<Connection>(conn);
  reactor_ = conn->reactor();
  peer_ready_ = true;
  server_call_ = call;
  credit_ += extra_credit;
  if (receive_window_ > kInitialWindow) {
    grant_pending_ += static_cast<uint32_t>(receive_window_ - kInitialWindow);
    SchedulePumpLocked();
  }
}

void StreamState::OnServerCallAnswered(const Status& status) {
  std::vector<std::function<void()>> callbacks;
  {
    MutexLock lock(mu_);
    server_call_ = nullptr;  // answered by the server before the handler took the stream
    EndLocked(finish_requested_ ? finish_status_ : status, &callbacks);
  }
  Run(&callbacks);
}

void StreamState::OnPeerCancelled() {
  OnConnectionClosed(Status::Aborted("the client cancelled the stream"));
}

void StreamState::OnConnectionClosed(const Status& reason) {
  std::vector<std::function<void()>> callbacks;
  InboundCall* answer;
  Status status;
  std::unique_ptr<google::protobuf::MessageLite> response;
  {
    MutexLock lock(mu_);
    EndLocked(reason, &callbacks);
    answer = TakeCallToAnswerLocked(&status, &response);  // or once the handler returns
  }
  Run(&callbacks);
  if (answer != nullptr) AnswerServerCall(answer, status, response.get());
}

RpczStreamStats StreamState::StreamStats(MonoTime now) const {
  MutexLock lock(mu_);
  RpczStreamStats s;
  s.messages_sent = messages_sent_;
  s.messages_received = messages_received_;
  s.bytes_sent = bytes_sent_;
  s.bytes_received = bytes_received_;
  s.send_credit = credit_;
  s.unread_bytes = inbox_bytes_;
  if (blocked_since_ != MonoTime() && now > blocked_since_) s.stalled = now - blocked_since_;
  return s;
}

void StartServerStream(InboundCall* call, RpcContext* context) {
  call->ReleaseRequestFrame();
  const std::shared_ptr<StreamState>& stream = call->stream();
  {
    MutexLock lock(stream->mu_);
    stream->handler_started_ = true;
    stream->handler_running_ = true;
  }
  std::weak_ptr<StreamState> weak = stream;
  context->OnCancel([weak] {
    if (std::shared_ptr<StreamState> s = weak.lock()) s->OnPeerCancelled();
  });
}

// ---- Stream: the application's handle.

// Counts the application's handles: the last one's release ends an unfinished stream.
class StreamHandleOwner {
 public:
  explicit StreamHandleOwner(std::shared_ptr<StreamState> state) : state_(std::move(state)) {}
  ~StreamHandleOwner() { state_->OnApplicationReleased(); }
  StreamState* get() const { return state_.get(); }

 private:
  std::shared_ptr<StreamState> state_;
};

std::shared_ptr<StreamHandleOwner> StreamState::HandleOwner() {
  MutexLock lock(mu_);
  std::shared_ptr<StreamHandleOwner> owner = handle_owner_.lock();
  if (owner == nullptr) {
    owner = std::make_shared<StreamHandleOwner>(shared_from_this());
    handle_owner_ = owner;
  }
  return owner;
}

Stream::Stream(std::shared_ptr<StreamState> state)
    : owner_(state->HandleOwner()), state_(state.get()) {}

StreamWrite Stream::TryWrite(const google::protobuf::MessageLite& message,
                             std::vector<BlockSlice> sidecars) {
  return state_->TryWrite(message, std::move(sidecars));
}
Status Stream::Write(const google::protobuf::MessageLite& message,
                     std::vector<BlockSlice> sidecars) {
  return state_->Write(message, std::move(sidecars));
}
void Stream::OnWritable(std::function<void()> callback) { state_->OnWritable(std::move(callback)); }
void Stream::CloseWrites() { state_->CloseWrites(); }
StreamRead Stream::TryRead(StreamMessage* message) { return state_->TryRead(message); }
Result<bool> Stream::Read(StreamMessage* message) { return state_->Read(message); }
void Stream::OnReadable(std::function<void()> callback) { state_->OnReadable(std::move(callback)); }
void Stream::Cancel() { state_->Cancel(); }
Status Stream::AwaitEnd() { return state_->AwaitEnd(); }
void Stream::Finish(const Status& status, const google::protobuf::MessageLite* response) {
  state_->Finish(status, response);
}
Status Stream::status() const { return state_->status(); }
MonoTime Stream::deadline() const { return state_->deadline(); }
const google::protobuf::Message* Stream::final_response() const { return state_->final_response(); }

}  // namespace rrpc::rpc
