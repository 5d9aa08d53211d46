// StreamTable: a connection's open streams by call id (docs/streams.md, "Wire"), and the routing
// of stream frames to them. A part of Connection (connection.h), reactor thread only.
//
// Client side: a stream enters when its opening call is queued on the connection and leaves
// when that call finishes (its final answer, timeout, cancel) or the connection closes. Server
// side: it enters when the opening call arrives and leaves when that call is answered or the
// connection closes.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "rpc/core/header_codec.h"
#include "rrpc/util/block.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class Connection;
class InboundCall;
class OutboundCall;
class StreamState;

class StreamTable {
 public:
  explicit StreamTable(Connection* conn) : conn_(conn) {}
  StreamTable(const StreamTable&) = delete;
  StreamTable& operator=(const StreamTable&) = delete;

  size_t size() const { return streams_ == nullptr ? 0 : streams_->size(); }
  bool empty() const { return streams_ == nullptr || streams_->empty(); }

  // Client: `call`, which opens `stream`, is queued here. `peer_ready`: the server negotiated
  // STREAMS already.
  void AddClient(const std::shared_ptr<StreamState>& stream, bool peer_ready);
  // Client: the negotiation ended (`peer_streams`: the server takes stream frames).
  void OnPeerReady(bool peer_streams);
  // Server: `call` opens a stream. False when the connection has max_streams_per_connection
  // open (the caller refuses the call as too busy); Corruption when its id is a stream already.
  Result<bool> AddServer(InboundCall* call, uint32_t extra_credit);
  // A stream frame (flags and credit from its header; the message's body and sidecars in
  // `block`; `compression`: the body's compression fields, nullptr when it is plain). A frame for
  // a stream no longer here is dropped. Corruption: a protocol error (past the credit, a
  // compressed body with an unknown codec, a stated size beyond the window or the frame limit,
  // or that does not decompress to it).
  Status OnFrame(int32_t call_id, uint32_t flags, uint32_t credit, const BlockRef& block,
                 Slice body, const std::vector<Slice>& sidecars,
                 const CompressionFields* compression);
  // The stream of `call_id` ended on this side.
  void Remove(int32_t call_id) {
    if (streams_ != nullptr) streams_->erase(call_id);
  }
  // Server: `call`, a stream's opening call, is being answered: its stream ends.
  void OnServerAnswer(InboundCall* call);
  // The connection closed: every stream ends with `reason`.
  void CloseAll(const Status& reason);

 private:
  using Map = std::unordered_map<int32_t, std::shared_ptr<StreamState>>;
  // The streams by call id; made with the connection's first stream (every connection holds a
  // table, most never open a stream).
  Map& streams();
  // A compressed message body decompressed into a block of its own, once its stated size was
  // checked against the frame limit and `stream`'s window (nothing is allocated before).
  Result<BlockSlice> DecompressMessage(StreamState* stream, Slice body,
                                       const std::vector<Slice>& sidecars,
                                       const CompressionFields& compression);

  Connection* const conn_;
  std::unique_ptr<Map> streams_;
  size_t server_windows_ = 0;  // server: receive windows granted beyond the initial ones
};

}  // namespace rrpc::rpc
