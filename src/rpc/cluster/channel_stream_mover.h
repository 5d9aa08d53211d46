// ChannelStreamMover: moves a stream opened through a cluster channel to another server when its
// opening call fails retriably (RpcController::IsRetriable: the connection failed, the server
// was too busy or going away) before any message went either way, for a method marked
// (rrpc.idempotent) (docs/streams.md "Through a cluster channel"). The next server is picked as
// a call's retry picks one: never a server this stream tried, after the channel's backoff,
// within its max_attempts, the stream's deadline and the channel's retry budget. Once a message
// went either way the stream stays where it is (StreamState decides that, not this class).
//
// Every stream through a channel has one, which tells the server's Backend how each opening call
// ended (Backend::RecordStreamEnd); only an idempotent method's moves.
//
// Owned by its stream (StreamState::SetReopener). Its methods run one after another, never at
// once: the first pick on the opening thread, then each failed opening call's end (a reactor)
// and the reopen that follows it (a messenger timer, on a reactor). Holds the channel weakly: a
// stream that outlives its channel is not moved.
#pragma once

#include <google/protobuf/message.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/cluster/backend.h"
#include "rpc/cluster/balancer.h"
#include "rpc/core/attempt_engine.h"
#include "rpc/core/stream_open.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

class Channel;

class ChannelStreamMover final : public StreamReopener {
 public:
  // A stream of `service`.`method` through `channel`, whose first opening call goes to `first`.
  // `may_move`: the method is idempotent. `request`: a server stream's request (copied when the
  // stream may move: every server gets it), else nullptr.
  ChannelStreamMover(const std::shared_ptr<Channel>& channel, const std::string& service,
                     const std::string& method, bool may_move,
                     const google::protobuf::Message* request, Backend* first);
  ~ChannelStreamMover() override;

  // StreamReopener.
  bool OnOpenFailed(const std::shared_ptr<StreamState>& stream) override;
  void OnOpeningCallEnded(const RpcController& controller) override;

 private:
  // After the backoff: the opening call again, on a server the stream has not tried; the
  // stream ends with its last failure when none is left (or the channel is gone).
  void Reopen(const std::shared_ptr<StreamState>& stream);

  const std::weak_ptr<Channel> channel_;
  const std::string service_;
  const std::string method_;
  const bool may_move_;
  const std::unique_ptr<google::protobuf::Message> request_;  // nullptr: none, or may not move
  const RetryRules rules_;
  // Made at the first failure, from the stream's controller (whose deadline is fixed by then).
  std::unique_ptr<AttemptSeries> series_;
  TriedBackends tried_;
  std::vector<scoped_refptr<Backend>> tried_refs_;  // keeps tried_'s pointers unique
  Backend* current_;  // where the latest opening call went (held by tried_refs_)
};

}  // namespace rrpc::rpc
