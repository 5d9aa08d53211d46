// Proxy: the client side of one remote service, at one address or through a channel over many
// servers (ChannelIf; rpc/cluster/channel.h). Generated proxies (protoc-gen-rrpc) derive from it
// and add typed methods. Thread-safe: many threads may call through one proxy at once; calls
// share the messenger's connection to each remote.
//
//   auto proxy = rtest::EchoServiceProxy(messenger, Sockaddr::Loopback(port));
//   auto proxy = rtest::EchoServiceProxy(*Channel::Create(messenger, "list://h1:7000,h2:7000"));
//   RpcController ctl;
//   ctl.set_timeout(MonoDelta::FromSeconds(1));
//   Status s = proxy.Echo(request, &response, &ctl);
#pragma once

#include <google/protobuf/message.h>

#include <memory>
#include <string>

#include "rrpc/rpc/method_kind.h"
#include "rrpc/rpc/response_callback.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class ChannelIf;
class RemoteMethod;
class RemoteMethodCache;
class Messenger;
class OutboundCall;
class RpcController;

class Proxy {
 public:
  // How a generated proxy calls a method (rpc/method_kind.h); kept here too for callers that
  // name it through the proxy.
  using MethodKind = ::rrpc::rpc::MethodKind;

  Proxy(std::shared_ptr<Messenger> messenger, const Sockaddr& remote, std::string service_name);
  // Every call goes through `channel`, which picks the server (and may fail over, retry, hedge).
  Proxy(std::shared_ptr<ChannelIf> channel, std::string service_name);
  // A copy calls the same service through the same messenger (with a cache of its own).
  Proxy(const Proxy& other);
  Proxy& operator=(const Proxy& other);
  virtual ~Proxy();

  // Sends `request`; fills `response` and calls `callback` when the call finishes. `request` may
  // be destroyed when this returns (it is serialized here, or copied when retries are allowed);
  // `response` and `controller` must live until the callback. Retries a call refused as too
  // busy as controller->retry_policy() allows (none by default), within the controller's
  // deadline (the attempt engine, rpc/core/attempt_engine.h, decides): each waits its jittered
  // backoff on a reactor timer (Messenger::RunAfter), and
  // `callback` runs once, after the last attempt. Taken by rvalue reference: the generated
  // proxies pass theirs on. `kind` (rpc/method_kind.h, passed by the generated proxies): through
  // a channel, a kIdempotent call may also be retried after its request was sent, and hedged; to
  // one address, a kTracked call carries a request id and also retries an attempt whose outcome
  // was lost, as RetryPolicy allows.
  void AsyncRequest(const std::string& method, const google::protobuf::Message& request,
                    google::protobuf::Message* response, RpcController* controller,
                    ResponseCallback&& callback, MethodKind kind = MethodKind::kPlain) const;
  // Blocks until the call finishes; returns controller->status(). On a reactor thread (a callback
  // or an inline handler) it would wait for itself: it returns IllegalState at once instead.
  // Retries as AsyncRequest does (sleeping its backoffs on the calling thread).
  Status SyncRequest(const std::string& method, const google::protobuf::Message& request,
                     google::protobuf::Message* response, RpcController* controller,
                     MethodKind kind = MethodKind::kPlain) const;

  // Opens a stream of `method` (docs/streams.md, rrpc/rpc/stream.h); generated proxies wrap it
  // in a typed ClientStream. `request`: a server stream's request (nullptr for client and
  // bidirectional streams); `response_prototype`: the type of a client stream's one response
  // (nullptr otherwise). Never blocks: a failure (connect, refusal, deadline) ends the stream,
  // and its reads and Finish() say why. Through a channel the stream goes to one server; a
  // kIdempotent one may move to another while nothing was exchanged yet (ChannelIf).
  Stream OpenStream(const std::string& method, const google::protobuf::Message* request,
                    const google::protobuf::Message* response_prototype,
                    const StreamOptions& options, MethodKind kind = MethodKind::kPlain) const;

  // The address called; an unset Sockaddr for a proxy on a channel.
  const Sockaddr& remote() const { return remote_; }
  // The channel called through; nullptr for a proxy to one address.
  const std::shared_ptr<ChannelIf>& channel() const { return channel_; }
  const std::string& service_name() const { return service_name_; }

 private:
  struct AsyncRetry;
  // One attempt of an AsyncRequest that may be retried, and what follows it.
  static void AsyncAttempt(std::shared_ptr<AsyncRetry> retry);
  static void OnAsyncAttemptDone(const std::shared_ptr<AsyncRetry>& retry);
  // One attempt of SyncRequest, ending by `attempt_deadline` at the latest.
  Status SyncAttempt(const std::string& method, const google::protobuf::Message& request,
                     google::protobuf::Message* response, RpcController* controller,
                     MonoTime attempt_deadline) const;
  // The record of `method` at remote_ that each attempt (NewAttemptCall) is made for.
  scoped_refptr<RemoteMethod> Method(const std::string& method) const;

  // Blocks on a call through channel_.
  Status SyncRequestThroughChannel(const std::string& method,
                                   const google::protobuf::Message& request,
                                   google::protobuf::Message* response, RpcController* controller,
                                   MethodKind kind) const;

  std::shared_ptr<Messenger> messenger_;  // nullptr on a channel
  std::shared_ptr<ChannelIf> channel_;    // nullptr to one address
  Sockaddr remote_;
  std::string service_name_;
  // The methods called through this proxy (names, encoded header part, metrics), found without
  // a lock.
  std::unique_ptr<RemoteMethodCache> methods_;
};

}  // namespace rrpc::rpc
