// Channel: a client's view of one cluster target: the servers a resolver names
// (discovery/resolver.h), a balancer that picks one per call, and the failover, retries, hedging
// and health that keep calls succeeding while servers come, go, drain and die. Generated proxies
// take a channel where they take an address:
//
//   auto channel = Channel::Create(messenger, "list://10.0.0.1:7000,10.0.0.2:7000");
//   if (!channel.ok()) return channel.status();   // malformed target
//   rtest::EchoServiceProxy proxy(*channel);
//   RpcController ctl;
//   ctl.set_timeout(MonoDelta::FromSeconds(1));
//   Status s = proxy.Echo(req, &resp, &ctl);
//
// Per call: one read of the current backend set (an immutable snapshot swapped atomically when
// the resolver reports a change; no lock), a pick, and the call. With one server the call goes
// straight out, its backend told of the outcome; with more, a ChannelCall (channel_call.h) keeps
// what a retry or a hedge needs. See docs/cluster.md for policies and failure behaviour.
//
// Thread-safe. The resolver's listener runs on the resolver's thread. A channel holds its
// messenger; calls in flight over several servers hold the channel. Its backends' metrics are
// entities ("backend", "<name>/<address>") in the messenger's registry: two channels of one
// messenger with one name share them, so name such channels apart (ChannelOptions::name).
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/channel_if.h"
#include "rrpc/rpc/cluster/channel_options.h"
#include "rrpc/rpc/cluster/latency_window.h"
#include "rrpc/rpc/cluster/retry_budget.h"
#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc {
class Counter;
class Gauge;
class MetricEntity;
}  // namespace rrpc

namespace rrpc::rpc {

class Backend;
class Balancer;
class CallObserver;
class Messenger;
struct BackendSet;

// One backend as the web UI and tests see it.
struct BackendInfo {
  Sockaddr addr;
  const char* health = "";  // "healthy", "ejected", "probe due"
  int outstanding = 0;
  int64_t ewma_latency_us = 0;
  int64_t ejections = 0;
  int64_t calls = 0;  // attempts sent to it (backend_calls_total)
};

class Channel final : public ChannelIf, public std::enable_shared_from_this<Channel> {
 public:
  // A channel over `target`'s servers; InvalidArgument when the target is malformed. The first
  // set is in place when this returns if the resolver knows it at once (list://); until a set
  // arrives, calls fail at once with ServiceUnavailable naming the target.
  static Result<std::shared_ptr<Channel>> Create(std::shared_ptr<Messenger> messenger,
                                                 const std::string& target,
                                                 ChannelOptions options = {});
  // Over a resolver the caller made (e.g. one a test controls).
  static Result<std::shared_ptr<Channel>> Create(std::shared_ptr<Messenger> messenger,
                                                 std::unique_ptr<Resolver> resolver,
                                                 ChannelOptions options = {});
  ~Channel() override;

  // ChannelIf.
  void AsyncRequest(const std::string& service, const std::string& method,
                    const google::protobuf::Message& request, google::protobuf::Message* response,
                    RpcController* controller, ResponseCallback&& callback,
                    MethodKind kind) override;
  const std::string& target() const override { return target_; }

  const std::string& name() const { return options_.name; }
  const ChannelOptions& options() const { return options_; }
  // A stream (docs/streams.md) goes to one server, picked by the balancer as a call's first
  // attempt is. A kIdempotent stream whose opening call fails retriably before any message went
  // either way moves to a server it has not tried, as a call's retry would (max_attempts,
  // backoff, retry budget; the stream's deadline); once a message went, it is pinned there and
  // a failure ends it (open it again to try another server). Not counted among the server's
  // outstanding calls.
  Stream OpenStream(const std::string& service, const std::string& method,
                    const google::protobuf::Message* request,
                    const google::protobuf::Message* response_prototype,
                    const StreamOptions& options, MethodKind kind) override;
  const std::shared_ptr<Messenger>& messenger() const { return messenger_; }
  // The current backends.
  std::vector<BackendInfo> Backends() const;
  // Every channel of this process still alive (for the web UI's /channels). Thread-safe.
  static std::vector<std::shared_ptr<Channel>> All();
  // The resolver's last error (OK when its last update was a set).
  Status resolver_status() const;
  // Waits until the resolver has answered once (a set or an error) or `deadline` passes: OK
  // when the channel then has servers, otherwise the ServiceUnavailable a call would get. For
  // tools that call at once through a target whose resolver answers later (file, dns, etcd).
  // Any thread but a reactor's.
  Status WaitForServers(MonoTime deadline) const;
  // Extra attempts the budgets refused.
  int64_t retries_refused() const { return retry_budget_.refused(); }
  int64_t hedges_refused() const { return hedge_budget_.refused(); }

 private:
  friend class ChannelCall;
  friend class ChannelStreamMover;

  Channel(std::shared_ptr<Messenger> messenger, std::unique_ptr<Resolver> resolver,
          ChannelOptions options);
  void OnResolverUpdate(const Result<std::vector<Sockaddr>>& update);
  // Sends one attempt of a call to `backend` through the attempt engine (NewAttemptCall), ending
  // by `attempt_deadline` at the latest; `observer` hears of its end (the backend itself, or an
  // attempt that tells it).
  void SendAttempt(Backend* backend, CallObserver* observer, const std::string& service,
                   const std::string& method, const google::protobuf::Message& request,
                   google::protobuf::Message* response, RpcController* controller,
                   MonoTime attempt_deadline, ResponseCallback&& callback);
  // Why a call finds no server: no set yet, an empty set, or the resolver's error.
  Status NoServerStatus() const;
  // The hedge delay for a call with `controller` (MonoDelta() for none).
  MonoDelta HedgeDelay(const RpcController& controller) const;
  // An answer that took `latency`, received at `at` (for the p95 hedge delay).
  void RecordLatency(MonoDelta latency, MonoTime at);

  const std::shared_ptr<Messenger> messenger_;
  const std::unique_ptr<Resolver> resolver_;
  const std::string target_;
  const ChannelOptions options_;
  const std::unique_ptr<Balancer> balancer_;
  RetryBudget retry_budget_;
  RetryBudget hedge_budget_;

  // The current set, read by every call without a lock. Replaced sets are kept (retired_) for a
  // grace period longer than any pick, then freed by a later update.
  std::atomic<const BackendSet*> current_{nullptr};
  mutable Mutex mu_;
  std::unique_ptr<const BackendSet> owned_current_ RRPC_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<const BackendSet>> retired_ RRPC_GUARDED_BY(mu_);
  Status resolver_status_ RRPC_GUARDED_BY(mu_);
  bool has_set_ RRPC_GUARDED_BY(mu_) = false;
  bool answered_ RRPC_GUARDED_BY(mu_) = false;  // the resolver reported once
  mutable CondVar answered_cv_;

  // ("channel", name) in the messenger's registry; null when it keeps no metrics.
  scoped_refptr<MetricEntity> entity_;
  Counter* resolver_errors_ = nullptr;
  Gauge* backends_gauge_ = nullptr;
  Gauge* resolver_failing_ = nullptr;

  // Recent answer times, for the p95 hedge delay.
  LatencyWindow latency_;
};

}  // namespace rrpc::rpc
