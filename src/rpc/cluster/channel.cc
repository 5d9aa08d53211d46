#include "rrpc/rpc/cluster/channel.h"

#include <glog/logging.h>

#include <algorithm>
#include <map>
#include <utility>

#include "rpc/cluster/backend.h"
#include "rpc/cluster/balancer.h"
#include "rpc/cluster/channel_call.h"
#include "rpc/cluster/channel_stream_mover.h"
#include "rpc/core/attempt_call.h"
#include "rpc/core/attempt_engine.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/outbound_call.h"
#include "rpc/core/rpc_controller_internal.h"
#include "rpc/core/stream_open.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {

namespace {

inline constexpr MetricPrototype METRIC_channel_backends = MetricPrototype::Gauge(
    "channel_backends", "Servers", MetricUnit::kUnits,
    "Servers in the channel's current set, as its resolver last reported it.");
inline constexpr MetricPrototype METRIC_channel_resolver_errors_total = MetricPrototype::Counter(
    "channel_resolver_errors_total", "Resolver errors", MetricUnit::kUnits,
    "Times the resolver could not refresh the set (the channel kept its last known servers).");
inline constexpr MetricPrototype METRIC_channel_resolver_failing = MetricPrototype::Gauge(
    "channel_resolver_failing", "Resolver failing", MetricUnit::kUnits,
    "1 while the resolver's last update was an error (the servers in use may be stale).");

// A replaced set may still be read by a pick that loaded it just before: picks take
// microseconds and never block, so a set is freed only this long after it was replaced.
constexpr MonoDelta kRetiredSetGrace = MonoDelta::FromSeconds(10);

// The p95 hedge delay is used once this many answers are known (ChannelOptions).
constexpr int64_t kP95MinAnswers = 100;

// The process's channels, for All(): weak, so a listing never keeps one alive.
struct ChannelList {
  Mutex mu;
  std::vector<std::weak_ptr<Channel>> channels RRPC_GUARDED_BY(mu);
};
ChannelList* Channels() {
  static auto* list = new ChannelList;  // never destroyed: channels may outlive main's statics
  return list;
}
}  // namespace

std::vector<std::shared_ptr<Channel>> Channel::All() {
  std::vector<std::shared_ptr<Channel>> out;
  ChannelList* list = Channels();
  MutexLock l(list->mu);
  for (const auto& weak : list->channels) {
    if (auto channel = weak.lock()) out.push_back(std::move(channel));
  }
  return out;
}

Result<std::shared_ptr<Channel>> Channel::Create(std::shared_ptr<Messenger> messenger,
                                                 const std::string& target,
                                                 ChannelOptions options) {
  auto resolver = NewResolver(target);
  if (!resolver.ok()) {
    return Status::InvalidArgument("channel target " + target, resolver.status().ToString());
  }
  return Create(std::move(messenger), std::move(*resolver), std::move(options));
}

Result<std::shared_ptr<Channel>> Channel::Create(std::shared_ptr<Messenger> messenger,
                                                 std::unique_ptr<Resolver> resolver,
                                                 ChannelOptions options) {
  if (options.max_attempts < 1 || options.max_attempts > TriedBackends::kMax) {
    return Status::InvalidArgument("max_attempts must be in [1, " +
                                   std::to_string(TriedBackends::kMax) + "]");
  }
  if (options.ring_vnodes < 1) return Status::InvalidArgument("ring_vnodes must be >= 1");
  std::shared_ptr<Channel> channel(
      new Channel(std::move(messenger), std::move(resolver), std::move(options)));
  // The listener runs until Stop(), which the destructor calls first: a raw pointer is safe.
  Channel* raw = channel.get();
  Status s = channel->resolver_->Start(
      [raw](const Result<std::vector<Sockaddr>>& update) { raw->OnResolverUpdate(update); });
  if (!s.ok()) return s;
  ChannelList* list = Channels();
  MutexLock l(list->mu);
  auto& all = list->channels;
  all.erase(std::remove_if(all.begin(), all.end(), [](const auto& w) { return w.expired(); }),
            all.end());
  all.push_back(channel);
  return channel;
}

Channel::Channel(std::shared_ptr<Messenger> messenger, std::unique_ptr<Resolver> resolver,
                 ChannelOptions options)
    : messenger_(std::move(messenger)),
      resolver_(std::move(resolver)),
      target_(resolver_->target()),
      options_([&] {
        if (options.name.empty()) options.name = resolver_->target();
        return std::move(options);
      }()),
      balancer_(std::make_unique<Balancer>(options_.balancer)),
      retry_budget_(options_.retry_budget),
      hedge_budget_(options_.hedge_budget),
      latency_(options_.hedge_p95_window, kP95MinAnswers, MonoTime::Now()) {
  MetricRegistry* registry = messenger_->metric_registry();
  if (registry == nullptr) return;
  entity_ = registry->FindOrCreateEntity("channel", options_.name, {{"target", target_}});
  resolver_errors_ = entity_->FindOrCreateCounter(&METRIC_channel_resolver_errors_total);
  backends_gauge_ = entity_->FindOrCreateGauge(&METRIC_channel_backends);
  resolver_failing_ = entity_->FindOrCreateGauge(&METRIC_channel_resolver_failing);
}

Channel::~Channel() {
  resolver_->Stop();
  current_.store(nullptr, std::memory_order_release);
}

void Channel::OnResolverUpdate(const Result<std::vector<Sockaddr>>& update) {
  MutexLock l(mu_);
  answered_ = true;
  answered_cv_.NotifyAll();  // the waiters run once mu_ is released, with the set in place
  if (resolver_failing_ != nullptr) resolver_failing_->Set(update.ok() ? 0 : 1);
  if (!update.ok()) {
    if (resolver_errors_ != nullptr) resolver_errors_->Increment();
    resolver_status_ = update.status();
    LOG(WARNING) << "channel " << options_.name << ": resolver failed, keeping "
                 << (owned_current_ ? owned_current_->backends.size() : 0)
                 << " known servers: " << update.status().ToString();
    return;
  }
  resolver_status_ = Status::OK();
  has_set_ = true;
  // Backends that stay keep their state (latency, health, connection records).
  std::map<std::string, scoped_refptr<Backend>> old;
  if (owned_current_) {
    for (const auto& b : owned_current_->backends) old[b->addr().ToString()] = b;
  }
  auto set = std::make_unique<BackendSet>();
  for (const Sockaddr& addr : *update) {
    bool duplicate = false;
    for (const auto& b : set->backends) duplicate |= b->addr() == addr;
    if (duplicate) continue;
    auto it = old.find(addr.ToString());
    set->backends.push_back(it != old.end() ? it->second
                                            : scoped_refptr<Backend>(new Backend(
                                                  addr, options_.name,
                                                  messenger_->metric_registry(), options_.health)));
  }
  if (options_.balancer == BalancerPolicy::kHash) BuildHashRing(set.get(), options_.ring_vnodes);
  if (owned_current_ && owned_current_->backends.size() == set->backends.size()) {
    bool same = true;
    for (size_t i = 0; i < set->backends.size(); i++) {
      same &= owned_current_->backends[i].get() == set->backends[i].get();
    }
    if (same) return;  // nothing changed: keep the published set
  }
  LOG(INFO) << "channel " << options_.name << ": servers now " << set->backends.size();
  if (backends_gauge_ != nullptr) backends_gauge_->Set(static_cast<int64_t>(set->backends.size()));
  const MonoTime now = MonoTime::Now();
  current_.store(set.get(), std::memory_order_release);
  if (owned_current_) {
    auto* retiring = const_cast<BackendSet*>(owned_current_.get());
    retiring->retired_at = now;
    retired_.push_back(std::move(owned_current_));
  }
  owned_current_ = std::move(set);
  while (!retired_.empty() && now - retired_.front()->retired_at > kRetiredSetGrace) {
    retired_.pop_front();
  }
}

Status Channel::WaitForServers(MonoTime deadline) const {
  {
    MutexLock l(mu_);
    while (!answered_ && answered_cv_.WaitUntil(mu_, deadline)) {
    }
    if (owned_current_ && !owned_current_->backends.empty()) return Status::OK();
  }
  return NoServerStatus();
}

Status Channel::NoServerStatus() const {
  MutexLock l(mu_);
  if (!resolver_status_.ok()) {
    return Status::ServiceUnavailable("channel " + options_.name + ": no servers known",
                                      resolver_status_.ToString());
  }
  return Status::ServiceUnavailable(
      "channel " + options_.name + ": no servers",
      has_set_ ? "the target names an empty set" : "the resolver has not answered yet");
}

void Channel::SendAttempt(Backend* backend, CallObserver* observer, const std::string& service,
                          const std::string& method, const google::protobuf::Message& request,
                          google::protobuf::Message* response, RpcController* controller,
                          MonoTime attempt_deadline, ResponseCallback&& callback) {
  backend->CallStarted();
  // The controller's Cancel() (the caller's, or a hedge loser's own) reaches this attempt.
  scoped_refptr<OutboundCall> call = NewAttemptCall(
      messenger_.get(),
      backend->Methods(service)->Get(MessengerInternals::metrics(*messenger_), backend->addr(),
                                     service, method),
      request, response, controller, std::move(callback), attempt_deadline, observer);
  if (call) MessengerInternals::QueueOutboundCall(messenger_.get(), std::move(call));
}

Stream Channel::OpenStream(const std::string& service, const std::string& method,
                           const google::protobuf::Message* request,
                           const google::protobuf::Message* response_prototype,
                           const StreamOptions& options, MethodKind kind) {
  const BackendSet* set = current_.load(std::memory_order_acquire);
  RpcController controller;
  TriedBackends tried;
  Backend* backend = set != nullptr ? balancer_->Pick(*set, controller, tried) : nullptr;
  if (backend == nullptr) return FailedStream(NoServerStatus());
  const bool may_move = kind == MethodKind::kIdempotent;
  // as a call does: a stream that may move earns a retry's share
  if (may_move) retry_budget_.Deposit();
  auto mover = std::make_unique<ChannelStreamMover>(shared_from_this(), service, method, may_move,
                                                    request, backend);
  return OpenClientStream(messenger_.get(),
                          backend->Methods(service)->Get(MessengerInternals::metrics(*messenger_),
                                                         backend->addr(), service, method),
                          request, response_prototype, options, std::move(mover));
}

void Channel::AsyncRequest(const std::string& service, const std::string& method,
                           const google::protobuf::Message& request,
                           google::protobuf::Message* response, RpcController* controller,
                           ResponseCallback&& callback, MethodKind kind) {
  CHECK(!controller->finished()) << "RpcController reused without Reset()";
  if (controller->has_retry_policy()) {
    // Not silently ignored: a channel retries by its ChannelOptions.
    ChannelCall::FailAtOnce(
        controller,
        Status::InvalidArgument("RpcController::set_retry_policy() applies to a Proxy to one "
                                "address; a call through channel " +
                                name() +
                                " retries by its ChannelOptions (max_attempts, "
                                "attempt_timeout, initial_backoff)"),
        std::move(callback));
    return;
  }
  const BackendSet* set = current_.load(std::memory_order_acquire);
  if (set != nullptr && set->backends.size() == 1 && kind != MethodKind::kTracked) {
    // One server: nothing to fail over to or hedge with. The call goes out as a Proxy's does,
    // and tells the backend how it ended.
    Backend* backend = set->backends[0].get();
    RpcControllerInternal::set_attempts(controller, 1);
    SendAttempt(backend, backend, service, method, request, response, controller, MonoTime::Max(),
                std::move(callback));
    return;
  }
  if (set == nullptr || set->backends.empty()) {
    ChannelCall::FailAtOnce(controller, NoServerStatus(), std::move(callback));
    return;
  }
  ChannelCall::Start(shared_from_this(), *set, service, method, request, response, controller,
                     std::move(callback), kind);
}

MonoDelta Channel::HedgeDelay(const RpcController& controller) const {
  const MonoDelta asked = controller.hedge_after();
  if (asked == MonoDelta::Max()) return MonoDelta();
  if (asked > MonoDelta()) return asked;
  if (options_.hedge_after_p95) {
    const MonoDelta p95 = latency_.Percentile(95);
    if (p95 > MonoDelta()) return p95;
  }
  return options_.hedge_after;
}

void Channel::RecordLatency(MonoDelta latency, MonoTime at) {
  if (options_.hedge_after_p95) latency_.Record(latency, at);
}

std::vector<BackendInfo> Channel::Backends() const {
  std::vector<BackendInfo> out;
  MutexLock l(mu_);
  if (!owned_current_) return out;
  for (const auto& b : owned_current_->backends) {
    out.push_back(BackendInfo{b->addr(), b->HealthName(), b->outstanding(),
                              b->ewma_latency_ns() / 1000, b->ejections(), b->calls()});
  }
  return out;
}

Status Channel::resolver_status() const {
  MutexLock l(mu_);
  return resolver_status_;
}

}  // namespace rrpc::rpc
