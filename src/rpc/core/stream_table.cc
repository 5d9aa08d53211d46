#include "rpc/core/stream_table.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "rpc/core/compression.h"
#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/stream_state.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "util/memory_tracker.h"

namespace rrpc::rpc {

StreamTable::Map& StreamTable::streams() {
  if (streams_ == nullptr) streams_ = std::make_unique<Map>();
  return *streams_;
}

void StreamTable::AddClient(const std::shared_ptr<StreamState>& stream, bool peer_ready) {
  streams()[stream->call_id()] = stream;
  stream->AttachClient(conn_, peer_ready);
}

void StreamTable::OnPeerReady(bool peer_streams) {
  if (streams_ == nullptr) return;
  for (auto& [id, stream] : *streams_) stream->OnPeerReady(peer_streams);
}

Result<bool> StreamTable::AddServer(InboundCall* call, uint32_t extra_credit) {
  const MessengerOptions& options = conn_->reactor()->options();
  Map& table = streams();
  if (table.count(call->call_id()) != 0) {
    return Status::Corruption("stream " + std::to_string(call->call_id()) + " opened twice");
  }
  MessengerMetrics* metrics = conn_->reactor()->metrics();
  if (metrics != nullptr) metrics->streams_opened->Increment();
  if (table.size() >= options.max_streams_per_connection) return false;
  if (metrics != nullptr) metrics->streams_open->Increment();
  // The window beyond the initial one comes from the connection's budget; a stream that finds
  // the budget spent keeps the initial window.
  size_t window = StreamState::kInitialWindow;
  if (options.stream_window > window) {
    const size_t extra = options.stream_window - window;
    if (server_windows_ + extra <= options.stream_window_budget_per_connection) {
      window = options.stream_window;
      server_windows_ += extra;
    }
  }
  auto stream =
      std::make_shared<StreamState>(StreamState::Side::kServer, window, options.max_message_size);
  // The client's codec (the connection refused an unknown one before this).
  const uint32_t codec = call->stream_compression();
  if (codec != 0 && IsKnownCompression(codec)) {
    stream->SetCompression(static_cast<Compression>(codec), options.compression, metrics);
    stream->set_peer_reads_compression(conn_->peer_reads_compression());
  }
  table[call->call_id()] = stream;
  call->set_stream(stream);
  stream->AttachServer(conn_, call, extra_credit);
  return true;
}

Status StreamTable::OnFrame(int32_t call_id, uint32_t flags, uint32_t credit, const BlockRef& block,
                            Slice body, const std::vector<Slice>& sidecars,
                            const CompressionFields* compression) {
  if (streams_ == nullptr) return Status::OK();
  auto it = streams_->find(call_id);
  if (it == streams_->end()) return Status::OK();  // ended here first: late frames are dropped
  std::shared_ptr<StreamState> stream = it->second;
  if (credit != 0) stream->OnCredit(credit);
  if ((flags & STREAM_MESSAGE) != 0) {
    BlockSlice message_body{block, body};
    if (compression != nullptr) {
      Result<BlockSlice> plain = DecompressMessage(stream.get(), body, sidecars, *compression);
      RRPC_RETURN_NOT_OK(plain.status());
      message_body = std::move(plain).value();
    }
    if (MessengerMetrics* m = conn_->reactor()->metrics()) {
      size_t bytes = message_body.slice.size();
      for (const Slice& s : sidecars) bytes += s.size();
      m->stream_messages_received->Increment();
      m->stream_bytes_received->IncrementBy(bytes);
    }
    RRPC_RETURN_NOT_OK(stream->OnMessage(std::move(message_body), block, sidecars));
  }
  if ((flags & STREAM_HALF_CLOSE) != 0) stream->OnPeerHalfClose();
  return Status::OK();
}

Result<BlockSlice> StreamTable::DecompressMessage(StreamState* stream, Slice body,
                                                  const std::vector<Slice>& sidecars,
                                                  const CompressionFields& compression) {
  MessengerMetrics* metrics = conn_->reactor()->metrics();
  const size_t limit = conn_->reactor()->options().max_message_size;
  size_t bytes = compression.uncompressed_size;
  for (const Slice& s : sidecars) bytes += s.size();
  // Before anything is allocated: a known codec, and a stated size within the frame limit and
  // the stream's window. Each is a protocol error: the peer compresses only with the stream's
  // codec and within the credit it was granted.
  // A client connection keeps no inbound memory account: the frame limit alone bounds it.
  const MemoryTracker* memory = conn_->inbound_memory();
  const int64_t headroom = memory != nullptr ? memory->Headroom() : INT64_MAX;
  Status s;
  if (!IsKnownCompression(compression.codec)) {
    s = Status::Corruption("stream " + std::to_string(stream->call_id()) +
                               ": message compressed with an unknown codec",
                           std::to_string(compression.codec));
  } else if (compression.uncompressed_size > limit ||
             static_cast<int64_t>(compression.uncompressed_size) > headroom) {
    // Within what a plain frame of that size could take: the frame limit and the inbound memory
    // limits' headroom.
    s = Status::Corruption("stream " + std::to_string(stream->call_id()) + ": message states " +
                           std::to_string(compression.uncompressed_size) +
                           " bytes uncompressed, more than max_message_size or the inbound "
                           "memory limits leave");
  } else {
    s = stream->CheckMessageFits(bytes);
  }
  if (!s.ok()) {
    if (metrics != nullptr) metrics->BodyDecompressed(body.size(), 0, false, MonoDelta());
    return s;
  }
  const MonoTime start = MonoTime::Now();
  Result<BlockSlice> plain = Decompress(body, static_cast<Compression>(compression.codec),
                                        compression.uncompressed_size, limit);
  if (metrics != nullptr) {
    metrics->BodyDecompressed(body.size(), compression.uncompressed_size, plain.ok(),
                              MonoTime::Now() - start);
  }
  if (!plain.ok()) {
    return Status::Corruption("stream " + std::to_string(stream->call_id()) +
                              ": compressed message refused: " + plain.status().ToString());
  }
  return plain;
}

void StreamTable::OnServerAnswer(InboundCall* call) {
  if (streams_ == nullptr) return;
  auto it = streams_->find(call->call_id());
  if (it == streams_->end() || it->second != call->stream()) return;
  std::shared_ptr<StreamState> stream = std::move(it->second);
  streams_->erase(it);
  if (MessengerMetrics* m = conn_->reactor()->metrics()) m->streams_open->Decrement();
  if (stream->receive_window() > StreamState::kInitialWindow) {
    server_windows_ -=
        std::min(server_windows_, stream->receive_window() - StreamState::kInitialWindow);
  }
  stream->OnServerCallAnswered(Status::Aborted("the server ended the stream before it started"));
}

void StreamTable::CloseAll(const Status& reason) {
  if (streams_ == nullptr) return;
  Map streams;
  streams.swap(*streams_);
  server_windows_ = 0;
  MessengerMetrics* m = conn_->reactor()->metrics();
  for (auto& [id, stream] : streams) {
    if (stream->side() != StreamState::Side::kServer) continue;
    if (m != nullptr) m->streams_open->Decrement();
    stream->OnConnectionClosed(reason);
  }
  // Client streams end as their opening calls fail (Connection::Shutdown fails them).
}

}  // namespace rrpc::rpc
