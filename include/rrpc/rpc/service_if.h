// ServiceIf: what a service implementation looks like to the RPC server. Generated service bases
// (protoc-gen-rrpc) derive from it and fill its method table; users derive from the generated base
// and implement the typed methods. Handlers run on worker threads, except the methods marked to
// run inline: those run on the reactor thread that read the call (see RpcMethodInfo::run_inline).
#pragma once

#include <google/protobuf/message.h>

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/rpc/stream.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

class Authorizer;
class FaultInjector;
class RpcContext;
struct MethodAdmission;
struct MethodMetrics;

// One method of a service: how to make its messages and how to run it.
struct RpcMethodInfo {
  std::string method_name;
  // Default instances; the server calls New() on them to make a call's request and response.
  const google::protobuf::Message* request_prototype = nullptr;
  const google::protobuf::Message* response_prototype = nullptr;
  // Runs the method. It must finish the call through exactly one of context->Respond*(), now or
  // later from any thread.
  std::function<void(const google::protobuf::Message* request, google::protobuf::Message* response,
                     RpcContext* context)>
      handler;
  // Run the handler on the reactor thread that read the call instead of handing it to a worker:
  // no queue, no thread switch. Only for handlers that never block (no locks held for long, no
  // disk, no synchronous RPC): while one runs, every connection of that reactor waits. Inline
  // calls skip the service queue, so they are neither bounded by its length nor ordered by
  // deadline, and they are never refused as too busy (the reactor's own reading is the limit).
  bool run_inline = false;
  // The method may run more than once with the same effect (option (rrpc.idempotent)): clients
  // through a cluster channel retry and hedge it. Informational on the server.
  bool idempotent = false;
  // The method is not idempotent: its calls carry a request id, and a server with a result
  // tracker runs each id at most once (option (rrpc.tracked); docs/exactly-once.md).
  bool tracked = false;
  // A stream method (docs/streams.md): its calls open streams. The handler then answers
  // through the stream (Stream::Finish), never through context->Respond*(); it gets the stream
  // from context->stream(). Client and bidirectional streams take no request at the open: their
  // handler's `request` is an empty message.
  StreamKind stream = StreamKind::kNone;
  // Where the method's calls run (docs/isolation.md): the named pool ("" : the service's pool,
  // ServiceIf::SetPool, else the default one), the class of its calls within it (option
  // (rrpc.background)), and how many of its calls may be queued or running at once (0: no limit;
  // more are refused with ERROR_SERVER_TOO_BUSY).
  std::string pool;
  CallPriority priority = CallPriority::kForeground;
  int max_concurrency = 0;
  // Set by the service pool at registration when the method needs more than the default pool's
  // plain queue (a named pool, a priority, a limit); nullptr otherwise. Owned by the pool.
  MethodAdmission* admission = nullptr;
  // The method's server metrics (rpc/observe/rpc_metrics.h), owned by the messenger. Set by the
  // service pool at registration, before any call, so reading it on the call path needs no lock;
  // nullptr when metrics are disabled.
  MethodMetrics* metrics = nullptr;
};

class ServiceIf {
 public:
  virtual ~ServiceIf() = default;
  // Fully qualified protobuf name, e.g. "rrpc.rtest.EchoService".
  virtual const std::string& service_name() const = 0;
  // The service's protobuf descriptor, for reflection (generated bases return theirs); nullptr
  // when unknown. Thread-safe.
  virtual const google::protobuf::ServiceDescriptor* service_descriptor() const { return nullptr; }
  // nullptr when the service has no such method. Thread-safe (the table is immutable once built).
  const RpcMethodInfo* FindMethod(std::string_view method_name) const;
  // Before the service is registered: makes `method_name`'s handler run on the reactor thread
  // (RpcMethodInfo::run_inline). NotFound if the service has no such method.
  Status SetRunInline(std::string_view method_name, bool run_inline = true);
  // Before the service is registered (docs/isolation.md): runs every method of the service, or
  // one method, in the named pool (MessengerOptions::service_pools; registration fails if there
  // is none by that name); sets a method's priority class and its concurrency limit (0: none).
  // NotFound if the service has no such method.
  void SetPool(std::string pool) { pool_ = std::move(pool); }
  const std::string& pool() const { return pool_; }
  Status SetMethodPool(std::string_view method_name, std::string pool);
  Status SetPriority(std::string_view method_name, CallPriority priority);
  Status SetMaxConcurrency(std::string_view method_name, int max_concurrency);
  // Before the service is registered: every call of this service is checked by `authorizer`
  // (instead of the messenger's MessengerOptions::authorizer) before it is queued; a refused one
  // is answered ERROR_NOT_AUTHORIZED without running the handler.
  void SetAuthorizer(std::shared_ptr<const Authorizer> authorizer) {
    authorizer_ = std::move(authorizer);
  }
  // nullptr when the service has none. Thread-safe once registered.
  const Authorizer* authorizer() const { return authorizer_.get(); }

 protected:
  // Generated constructors call this once per method.
  void AddMethod(RpcMethodInfo info);

 private:
  friend class ServicePool;    // sets each method's `metrics` and `admission` at registration
  friend class FaultInjector;  // may wrap the handlers before registration, in tests

  std::unordered_map<std::string_view, std::unique_ptr<RpcMethodInfo>> methods_;
  std::shared_ptr<const Authorizer> authorizer_;
  std::string pool_;
};

}  // namespace rrpc::rpc
