// Messenger: the root object of rrpc. It owns the reactor threads (client and server
// connections), the listeners, the services and the worker pool that runs their handlers.
// Build one with MessengerBuilder; share it (shared_ptr) with every Proxy that uses it.
// Thread-safe unless noted.
//
//   RRPC_ASSIGN_OR_RETURN(auto messenger, MessengerBuilder("kv").set_num_reactors(4).Build());
//   RRPC_RETURN_NOT_OK(messenger->RegisterService(std::make_unique<MyService>()));
//   RRPC_RETURN_NOT_OK(messenger->Listen(Sockaddr::Loopback(0), &bound));
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "rrpc/rpc/connection_info.h"
#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc {
class MemoryTracker;
}  // namespace rrpc

namespace rrpc::rpc {

class FaultInjector;
class InboundCall;
class MessengerMetrics;
class MessengerSecurity;
class OutboundCall;
class Reactor;
class RequestTracker;
class ResultTracker;
class RpczStore;
class ServiceIf;
class ServicePool;
class TransportFactory;

class Messenger : public std::enable_shared_from_this<Messenger> {
 public:
  ~Messenger();

  // Listens on `addr` with one SO_REUSEPORT socket per reactor; `bound` gets the real address
  // (port 0 picks one). Once per messenger.
  Status Listen(const Sockaddr& addr, Sockaddr* bound);
  // Before Listen(); the worker pool starts with Listen().
  Status RegisterService(std::unique_ptr<ServiceIf> service);
  // Stops accepting and reading, answers nothing more, fails the calls still in flight (every
  // callback runs once), runs the RunAfter tasks still waiting (see RunAfter), stops the
  // workers. Idempotent; the destructor calls it. Not on one of this messenger's reactors.
  void Shutdown();

  // Graceful drain, in this order, before Shutdown():
  // Stops accepting connections: every reactor closes its listener; open connections stay.
  // Idempotent; not on a reactor thread.
  void StopAccepting();
  // Calls arriving from now on are refused with retriable ERROR_UNAVAILABLE; queued and running
  // calls go on (ServicePool::RefuseNewCalls).
  void RefuseNewCalls();
  // Inbound calls received and not yet answered and written (or dropped with their connection).
  size_t inbound_calls_in_flight() const;
  // Blocks until inbound_calls_in_flight() is zero (true) or `deadline` passes (false).
  bool WaitForInboundCallsDone(MonoTime deadline) const;

  // Reads the certificate, key, CA and token key files again (SecurityOptions): connections
  // made from now on use them, open ones go on with theirs. On error nothing changes. Any thread.
  Status ReloadSecurity();

  // Any thread: runs `task` on a reactor after `delay` (the calling reactor when called on one),
  // exactly once. Tasks still waiting at Shutdown() run then, early, on their reactor's thread
  // after its calls have failed; a task given after Shutdown() runs at once on the caller's
  // thread. Either way closing() is true by then and any call the task makes fails at once with
  // Aborted. Asynchronous retries and hedges wait their delay here. See Reactor::RunAfter.
  void RunAfter(MonoDelta delay, std::function<void()> task);

  const MessengerOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  bool closing() const { return closing_.load(std::memory_order_acquire); }
  std::vector<ConnectionInfo> DumpConnections();
  // The bound listen address (unset before Listen).
  Sockaddr listen_address() const;
  // Where this messenger's metrics are (options().metric_registry, or its own); nullptr when
  // metrics are disabled.
  MetricRegistry* metric_registry() const { return metric_registry_; }

  // The registered services (reflection, tools), in no particular order. They are registered
  // before Listen() and live as long as the messenger. Any thread once registration is done.
  std::vector<const ServiceIf*> services() const;
  // Every service pool now, the default first (docs/isolation.md). Thread-safe.
  std::vector<ServicePoolInfo> service_pools() const;
  // The registered service of that fully qualified name, or nullptr. Same rule as services().
  const ServiceIf* FindService(std::string_view name) const;
  // The calls in flight and the recent slow and failed ones, as /rpcz shows them; lives as long
  // as the messenger. Its type is rrpc's own (rpc/observe/rpcz_store.h, not installed): the
  // server's web UI and rrpc's tools read it, an embedder reads /rpcz. Any thread.
  const RpczStore* rpcz_store() const;

 private:
  friend class MessengerBuilder;
  friend class MessengerInternals;  // rpc/core/messenger_internals.h: rrpc's own uses
  explicit Messenger(MessengerOptions options);
  Status Init();

  // Reached through MessengerInternals (their contracts are stated there).
  void QueueOutboundCall(scoped_refptr<OutboundCall>&& call);
  int32_t NextCallId();
  bool TryAddServerConnection();
  void RemoveServerConnection() { server_connections_.fetch_sub(1, std::memory_order_relaxed); }

  const MessengerOptions options_;
  std::shared_ptr<FaultInjector> fault_injector_;  // MessengerInternals::SetFaultInjector
  // Declared before the reactors and the service pool, which use them: destroyed after them.
  std::unique_ptr<MetricRegistry> owned_registry_;  // when options_ named none
  MetricRegistry* metric_registry_ = nullptr;
  std::unique_ptr<MessengerMetrics> metrics_;
  std::unique_ptr<MessengerSecurity> security_;
  std::shared_ptr<TransportFactory> transport_factory_;
  // Before the reactors: their connections' trackers are its children.
  std::unique_ptr<MemoryTracker> inbound_memory_;
  std::unique_ptr<RequestTracker> request_tracker_;
  // Before the reactors and the service pool: calls they hold report to it until deleted.
  std::unique_ptr<ResultTracker> result_tracker_;
  std::vector<std::unique_ptr<Reactor>> reactors_;
  std::unique_ptr<ServicePool> service_pool_;
  mutable Mutex mu_;
  bool listening_ RRPC_GUARDED_BY(mu_) = false;
  Sockaddr listen_address_ RRPC_GUARDED_BY(mu_);
  std::atomic<bool> closing_{false};
  std::atomic<int32_t> next_call_id_{0};
  std::atomic<size_t> server_connections_{0};  // accepted and not yet closed
};

class MessengerBuilder {
 public:
  explicit MessengerBuilder(std::string name) { options_.name = std::move(name); }
  explicit MessengerBuilder(MessengerOptions options) : options_(std::move(options)) {}
  MessengerBuilder& set_num_reactors(int n) {
    options_.num_reactors = n;
    return *this;
  }
  MessengerBuilder& set_num_workers(int n) {
    options_.num_workers = n;
    return *this;
  }
  MessengerBuilder& set_service_queue_length(size_t n) {
    options_.service_queue_length = n;
    return *this;
  }
  MessengerBuilder& set_max_message_size(size_t n) {
    options_.max_message_size = n;
    return *this;
  }
  MessengerBuilder& set_negotiation_timeout(MonoDelta d) {
    options_.negotiation_timeout = d;
    return *this;
  }
  MessengerBuilder& set_idle_timeout(MonoDelta d) {
    options_.idle_timeout = d;
    return *this;
  }
  MessengerBuilder& set_idle_scan_period(MonoDelta d) {
    options_.idle_scan_period = d;
    return *this;
  }
  MessengerOptions* mutable_options() { return &options_; }
  Result<std::shared_ptr<Messenger>> Build();

 private:
  friend class MessengerInternals;
  MessengerOptions options_;
  std::shared_ptr<FaultInjector> fault_injector_;
};

}  // namespace rrpc::rpc
