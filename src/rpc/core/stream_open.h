// OpenClientStream: the client's opening of a stream (docs/streams.md): makes the stream's
// state and its opening call, and queues the call. Used by Proxy::OpenStream (one address) and
// the cluster channel (the address it picked), which may give a StreamReopener to move the
// stream to another server while nothing but the opening call was exchanged
// (ReopenClientStream). Caller's thread; never blocks.
#pragma once

#include <google/protobuf/message.h>

#include <memory>

#include "rpc/core/remote_method.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class RpcController;
class StreamState;

// A cluster channel's part in a client stream (StreamState::SetReopener): it learns how each
// opening call ended (its server's health), and, for an idempotent method, may move a stream
// whose opening call failed retriably before any message went either way. Owned by the stream.
class StreamReopener {
 public:
  virtual ~StreamReopener() = default;
  // The thread that finished `stream`'s opening call (a reactor, or the opening thread when it
  // failed before it was queued), without the stream's lock; the failed call's outcome is in
  // the stream's controller. True: the reopener took the stream and will call, later and on a
  // thread of its own, ReopenClientStream or StreamState::EndMove. False: the stream ends with
  // the controller's status (which the reopener may have rewritten, e.g. FinalStatus).
  virtual bool OnOpenFailed(const std::shared_ptr<StreamState>& stream) = 0;
  // The same thread, each time an opening call of the stream ends (before OnOpenFailed is
  // asked, if it is), with that call's controller: how its server did (a channel's health).
  virtual void OnOpeningCallEnded(const RpcController& controller) = 0;
};

// `request`: a server stream's request (nullptr for client and bidirectional streams);
// `response_prototype`: the type of a client stream's one response (nullptr otherwise). A
// failure before the call leaves (the request too large, the messenger shut down) ends the
// returned stream with its reason.
Stream OpenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const google::protobuf::Message* request,
                        const google::protobuf::Message* response_prototype,
                        const StreamOptions& options,
                        std::unique_ptr<StreamReopener> reopener = nullptr);

// The reopener's: sends `stream`'s opening call again, to `method` (another server's), with
// `request` (as OpenClientStream's). The stream's controller was prepared for the retry
// (RpcControllerInternal::PrepareRetry); a failure before the call leaves ends the stream, or
// moves it again, as the opening call's end does.
void ReopenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const std::shared_ptr<StreamState>& stream,
                        const google::protobuf::Message* request);

// A stream that ended before it opened, with `status` (e.g. a channel with no server).
Stream FailedStream(const Status& status);

}  // namespace rrpc::rpc
