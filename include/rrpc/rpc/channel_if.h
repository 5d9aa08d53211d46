// ChannelIf: what a Proxy calls through when it is bound to a set of servers rather than one
// address. The cluster channel (rpc/cluster/channel.h) implements it: it picks a server per call,
// fails over, retries and hedges. Proxies made on a channel hand every call to it; the interface
// lives here so that the RPC library does not depend on the cluster library. Thread-safe: any
// thread may call through one channel at once.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "rrpc/rpc/method_kind.h"
#include "rrpc/rpc/response_callback.h"
#include "rrpc/rpc/stream.h"

namespace rrpc::rpc {

class RpcController;

class ChannelIf {
 public:
  virtual ~ChannelIf() = default;

  // As Proxy::AsyncRequest: `service` and `method` name the remote method (the strings stay
  // valid until this returns; a caller passing the same string objects each time finds its
  // per-server records without a lookup by name). `kind` (rpc/method_kind.h): a kIdempotent
  // method may run twice (option (rrpc.idempotent)), so it may be retried after its request was
  // sent, and hedged; kPlain and kTracked calls are retried only when they surely never ran.
  virtual void AsyncRequest(const std::string& service, const std::string& method,
                            const google::protobuf::Message& request,
                            google::protobuf::Message* response, RpcController* controller,
                            ResponseCallback&& callback, MethodKind kind) = 0;

  // As Proxy::OpenStream: opens a stream on one of the channel's servers. `kind` as for a
  // call: a kIdempotent stream may be reopened on another server after a retriable failure
  // before any message went either way. The default (a channel that does not carry streams)
  // returns a stream ended with NotSupported.
  virtual Stream OpenStream(const std::string& service, const std::string& method,
                            const google::protobuf::Message* request,
                            const google::protobuf::Message* response_prototype,
                            const StreamOptions& options, MethodKind kind);

  // The target the channel serves (e.g. "list://10.0.0.1:7000,10.0.0.2:7000").
  virtual const std::string& target() const = 0;
};

}  // namespace rrpc::rpc
