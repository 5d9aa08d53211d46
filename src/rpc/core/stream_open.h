// OpenClientStream: the client's opening of a stream (docs/streams.md): makes the stream's
// state and its opening call, and queues the call. Used by Proxy::OpenStream (one address) and
// the cluster channel (the address it picked). Caller's thread; never blocks.
#pragma once

#include <google/protobuf/message.h>

#include "rpc/core/remote_method.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// `request`: a server stream's request (nullptr for client and bidirectional streams);
// `response_prototype`: the type of a client stream's one response (nullptr otherwise). A
// failure before the call leaves (the request too large, the messenger shut down) ends the
// returned stream with its reason.
Stream OpenClientStream(Messenger* messenger, scoped_refptr<RemoteMethod>&& method,
                        const google::protobuf::Message* request,
                        const google::protobuf::Message* response_prototype,
                        const StreamOptions& options);

// A stream that ended before it opened, with `status` (e.g. a channel with no server).
Stream FailedStream(const Status& status);

}  // namespace rrpc::rpc
