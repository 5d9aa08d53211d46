#include "rpc/core/stream_table.h"

#include <algorithm>
#include <utility>

#include "rpc/core/connection.h"
#include "rpc/core/inbound_call.h"
#include "rpc/core/reactor.h"
#include "rpc/core/stream_state.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/rpc_header.pb.h"

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
  table[call->call_id()] = stream;
  call->set_stream(stream);
  stream->AttachServer(conn_, call, extra_credit);
  return true;
}

Status StreamTable::OnFrame(int32_t call_id, uint32_t flags, uint32_t credit, const BlockRef& block,
                            Slice body, const std::vector<Slice>& sidecars) {
  if (streams_ == nullptr) return Status::OK();
  auto it = streams_->find(call_id);
  if (it == streams_->end()) return Status::OK();  // ended here first: late frames are dropped
  std::shared_ptr<StreamState> stream = it->second;
  if (credit != 0) stream->OnCredit(credit);
  if ((flags & STREAM_MESSAGE) != 0) {
    if (MessengerMetrics* m = conn_->reactor()->metrics()) {
      size_t bytes = body.size();
      for (const Slice& s : sidecars) bytes += s.size();
      m->stream_messages_received->Increment();
      m->stream_bytes_received->IncrementBy(bytes);
    }
  }
  if ((flags & STREAM_MESSAGE) != 0) RRPC_RETURN_NOT_OK(stream->OnMessage(block, body, sidecars));
  if ((flags & STREAM_HALF_CLOSE) != 0) stream->OnPeerHalfClose();
  return Status::OK();
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
