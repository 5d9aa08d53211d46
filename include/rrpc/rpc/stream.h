// Streams (docs/streams.md): one call that carries many messages each way, with flow control in
// bytes per stream. A stream method in a .proto (`stream` on its request, its response or both)
// gets typed handles from protoc-gen-rrpc: the proxy's method returns a ClientStream, the
// service's handler receives a ServerStream. Both wrap the untyped Stream below.
//
// Flow control: a side may send a message when the peer has granted room for it (its receive
// window), or when everything it sent before has been consumed; so a reader that stops reading
// stops its writer within one window, and a stalled stream holds at most its window plus one
// message. TryWrite() never waits: it queues the message or says kFull; OnWritable() tells when
// to try again. Write() is the blocking convenience on top. Reading is the same: TryRead() and
// OnReadable(), or the blocking Read().
//
// Threads: every method may be called from any thread. The blocking ones (Write, Read,
// ClientStream::Finish) refuse to run on a reactor thread (IllegalState): they would wait for the
// thread that must wake them. Callbacks (OnWritable, OnReadable) run once, on the reactor thread
// of the stream's connection (or at once on the caller's thread when already due): keep them
// short and never block in them. A handler that writes as it produces registers OnWritable and
// returns, so an open stream holds no worker thread.
//
//   // Server streaming: the handler writes rows as the client reads them.
//   void Scan(const ScanRequestPB* req, ServerStream<ScanRequestPB, RowPB> stream) override {
//     for (const RowPB& row : rows) RETURN_IF_ERROR(stream.Write(row));  // blocks on credit
//     stream.Finish(Status::OK());
//   }
//   // Client: read until the end, then the server's status.
//   ClientStream<ScanRequestPB, RowPB> s = proxy.Scan(req, options);
//   RowPB row;
//   while (*s.Read(&row)) Use(row);
//   Status end = s.Finish();
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "rrpc/rpc/compression.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class StreamState;  // internal (rpc/core/stream_state.h)
class StreamHandleOwner;

// How a method streams (from its .proto; RpcMethodInfo::stream).
enum class StreamKind : uint8_t {
  kNone,    // a unary call
  kServer,  // one request, many responses
  kClient,  // many requests, one response
  kBidi,    // many each way
};

// One message read from a stream: its serialized body and its sidecars, sharing the received
// frame's block (zero copy; kept alive by these slices).
struct StreamMessage {
  BlockSlice body;
  std::vector<BlockSlice> sidecars;
};

// TryWrite's outcome. kFull: no room in the peer's window now (OnWritable tells when to retry).
// kClosed: the stream ended or this side closed its writes; Stream::status() says why.
enum class StreamWrite { kQueued, kFull, kClosed };
// TryRead's outcome. kEnd: no message will come any more (the peer half-closed or the stream
// ended; the end status is the stream's status()).
enum class StreamRead { kMessage, kEmpty, kEnd };

// Client-side settings of one stream.
struct StreamOptions {
  // The whole stream's deadline, from the open; zero (the default): none.
  MonoDelta timeout;
  // Bytes of messages the server may send ahead of this client's reading; 0: the messenger's
  // MessengerOptions::stream_window.
  size_t receive_window = 0;
  // The codec both sides compress this stream's message bodies with (docs/compression.md);
  // unset: the method's (rrpc.compression) option, else the messenger's
  // CompressionOptions::codec. A body is compressed when it has at least
  // CompressionOptions::min_bytes and compressing shrinks it; sidecars go as they are.
  std::optional<Compression> compression;
  // The opening call's priority class on the server (RpcController::set_priority): where the
  // stream's handler queues in its pool. Unset: the method's.
  std::optional<CallPriority> priority;
};

// The untyped handle. Copies refer to one stream; when the last copy goes, an unfinished stream
// is ended (client: cancelled; server: finished with ERROR_APPLICATION "stream released").
class Stream {
 public:
  Stream() = default;

  bool valid() const { return state_ != nullptr; }

  // Writing: `message` is serialized here; `sidecars` go after it without copying.
  StreamWrite TryWrite(const google::protobuf::MessageLite& message,
                       std::vector<BlockSlice> sidecars = {});
  // Waits for room, then queues the message. Fails with the stream's status once it ended.
  Status Write(const google::protobuf::MessageLite& message, std::vector<BlockSlice> sidecars = {});
  // Runs `callback` once, when a TryWrite may succeed (room came, or the stream ended).
  void OnWritable(std::function<void()> callback);
  // Client: sends no more messages (half-close); the server's reads then end.
  void CloseWrites();

  // Reading.
  StreamRead TryRead(StreamMessage* message);
  // Waits for a message: true with one, false when no more will come: the peer half-closed,
  // or the stream ended (client: Finish() then tells how; server: status() is not OK when the
  // stream failed). An error only for a misuse (on a reactor thread).
  Result<bool> Read(StreamMessage* message);
  // Runs `callback` once, when a TryRead has something to return (a message or the end).
  void OnReadable(std::function<void()> callback);

  // Either side: ends the stream now. The client's cancel reaches the server (its writes fail and
  // its callbacks run); a server's cancel ends the stream with ERROR_CANCELLED for the client.
  void Cancel();
  // Client: waits until the server's final answer and returns the stream's end status.
  Status AwaitEnd();
  // Server: ends the stream after the messages already queued: OK, or `status` for the client
  // (a handler's error: ERROR_APPLICATION). `response`: the final message of a client stream.
  void Finish(const Status& status, const google::protobuf::MessageLite* response = nullptr);

  // OK while the stream is open (or ended well); the reason once it failed.
  Status status() const;
  // The stream's deadline (the client's timeout from the open); MonoTime::Max() when none.
  MonoTime deadline() const;

  // For Proxy and the service base (generated code): wraps the internal state.
  explicit Stream(std::shared_ptr<StreamState> state);
  // Client streams: the server's final response (the typed ClientStream parses it). Valid after
  // AwaitEnd() returned OK.
  const google::protobuf::Message* final_response() const;

 private:
  std::shared_ptr<StreamHandleOwner> owner_;  // counts the handles of the application
  StreamState* state_ = nullptr;              // owned through owner_
};

// Typed client side of a stream method. `Req` is what this side writes, `Resp` what it reads.
template <typename Req, typename Resp>
class ClientStream {
 public:
  ClientStream() = default;
  explicit ClientStream(Stream stream) : stream_(std::move(stream)) {}

  StreamWrite TryWrite(const Req& message, std::vector<BlockSlice> sidecars = {}) {
    return stream_.TryWrite(message, std::move(sidecars));
  }
  Status Write(const Req& message, std::vector<BlockSlice> sidecars = {}) {
    return stream_.Write(message, std::move(sidecars));
  }
  void OnWritable(std::function<void()> callback) { stream_.OnWritable(std::move(callback)); }
  void CloseWrites() { stream_.CloseWrites(); }

  // True with a message in `*message` (its sidecars in `*sidecars` when given); false at the
  // end of the server's messages (then Finish() tells how the stream ended).
  Result<bool> Read(Resp* message, std::vector<BlockSlice>* sidecars = nullptr) {
    StreamMessage m;
    Result<bool> got = stream_.Read(&m);
    if (!got.ok() || !*got) return got;
    RRPC_RETURN_NOT_OK(Parse(&m, message, sidecars));
    return true;
  }
  Result<StreamRead> TryRead(Resp* message, std::vector<BlockSlice>* sidecars = nullptr) {
    StreamMessage m;
    const StreamRead r = stream_.TryRead(&m);
    if (r == StreamRead::kMessage) RRPC_RETURN_NOT_OK(Parse(&m, message, sidecars));
    return r;
  }
  void OnReadable(std::function<void()> callback) { stream_.OnReadable(std::move(callback)); }

  // Waits for the server's final answer: the stream's end status; for a client stream, fills
  // `response` with the server's one response.
  Status Finish(Resp* response = nullptr) {
    Status s = stream_.AwaitEnd();
    if (s.ok() && response != nullptr && stream_.final_response() != nullptr) {
      response->CopyFrom(*stream_.final_response());
    }
    return s;
  }
  void Cancel() { stream_.Cancel(); }
  Status status() const { return stream_.status(); }
  Stream& untyped() { return stream_; }

 private:
  Status Parse(StreamMessage* m, Resp* message, std::vector<BlockSlice>* sidecars) {
    if (!message->ParseFromArray(m->body.slice.data(), static_cast<int>(m->body.slice.size()))) {
      stream_.Cancel();
      return Status::Corruption("stream message does not parse as " + message->GetTypeName());
    }
    if (sidecars != nullptr) *sidecars = std::move(m->sidecars);
    return Status::OK();
  }

  Stream stream_;
};

// Typed server side of a stream method: reads `Req`, writes `Resp`.
template <typename Req, typename Resp>
class ServerStream {
 public:
  ServerStream() = default;
  explicit ServerStream(Stream stream) : stream_(std::move(stream)) {}

  StreamWrite TryWrite(const Resp& message, std::vector<BlockSlice> sidecars = {}) {
    return stream_.TryWrite(message, std::move(sidecars));
  }
  Status Write(const Resp& message, std::vector<BlockSlice> sidecars = {}) {
    return stream_.Write(message, std::move(sidecars));
  }
  void OnWritable(std::function<void()> callback) { stream_.OnWritable(std::move(callback)); }

  // True with the client's next message; false once the client half-closed (status() OK) or the
  // stream ended (status() says why).
  Result<bool> Read(Req* message, std::vector<BlockSlice>* sidecars = nullptr) {
    StreamMessage m;
    Result<bool> got = stream_.Read(&m);
    if (!got.ok() || !*got) return got;
    RRPC_RETURN_NOT_OK(Parse(&m, message, sidecars));
    return true;
  }
  Result<StreamRead> TryRead(Req* message, std::vector<BlockSlice>* sidecars = nullptr) {
    StreamMessage m;
    const StreamRead r = stream_.TryRead(&m);
    if (r == StreamRead::kMessage) RRPC_RETURN_NOT_OK(Parse(&m, message, sidecars));
    return r;
  }
  void OnReadable(std::function<void()> callback) { stream_.OnReadable(std::move(callback)); }

  // Ends the stream after the messages queued: `status` reaches the client (OK, or the
  // handler's error as ERROR_APPLICATION).
  void Finish(const Status& status = Status::OK()) { stream_.Finish(status); }
  // Client streams: ends the stream with the one response.
  void Finish(const Resp& response) { stream_.Finish(Status::OK(), &response); }
  void Cancel() { stream_.Cancel(); }
  // OK while open; once the client cancelled, its deadline passed or its connection closed, the
  // reason (writes then fail with it).
  Status status() const { return stream_.status(); }
  bool cancelled() const { return !stream_.status().ok(); }
  MonoTime deadline() const { return stream_.deadline(); }
  Stream& untyped() { return stream_; }

 private:
  Status Parse(StreamMessage* m, Req* message, std::vector<BlockSlice>* sidecars) {
    if (!message->ParseFromArray(m->body.slice.data(), static_cast<int>(m->body.slice.size()))) {
      Finish(Status::InvalidArgument("stream message does not parse as " + message->GetTypeName()));
      return Status::Corruption("stream message does not parse as " + message->GetTypeName());
    }
    if (sidecars != nullptr) *sidecars = std::move(m->sidecars);
    return Status::OK();
  }

  Stream stream_;
};

}  // namespace rrpc::rpc
