// MessengerInternals: the parts of a Messenger that only rrpc itself uses: the RPC core (proxies,
// channels, reactors), the server's reflection and web pages, the benchmarks, and tests. Not
// installed: messenger.h carries only the user API, and this header reaches the rest through a
// friend. Each function is as thread-safe as the Messenger member it forwards to (stated below).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>

#include "rrpc/rpc/messenger.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc::rpc {

class FaultInjector;
class MessengerMetrics;
class MessengerSecurity;
class OutboundCall;
class Reactor;
class RequestTracker;
class ResultTracker;
class RpczStore;
class ServicePool;
class TransportFactory;

class MessengerInternals {
 public:
  // The services, their queue and workers. Any thread.
  static ServicePool* service_pool(const Messenger& m) { return m.service_pool_.get(); }
  // The /rpcz store, writable (its slow threshold; Messenger::rpcz_store() is the read-only
  // view). Any thread.
  static RpczStore* rpcz_store(const Messenger& m);
  // Reactor `i` (0 <= i < options().num_reactors). Any thread.
  static Reactor* reactor(const Messenger& m, int i) { return m.reactors_[i].get(); }

  // The pointers below are fixed at Build() and live as long as the messenger. Any thread.
  // The cached metric pointers of the call path (rpc/observe/rpc_metrics.h); nullptr when
  // metrics are disabled (users read metrics through Messenger::metric_registry()).
  static MessengerMetrics* metrics(const Messenger& m) { return m.metrics_.get(); }
  // Client side of exactly-once: this messenger's client id and its tracked calls' numbers.
  static RequestTracker* request_tracker(const Messenger& m) { return m.request_tracker_.get(); }
  // Server side of exactly-once: the results of tracked calls; nullptr when
  // options().result_tracker.enabled is false.
  static ResultTracker* result_tracker(const Messenger& m) { return m.result_tracker_.get(); }
  // Makes the transports of the messenger's connections (options().transport_factory, or TCP).
  static TransportFactory* transport_factory(const Messenger& m) {
    return m.transport_factory_.get();
  }
  // Bytes held for inbound calls over all server connections (each connection's tracker is a
  // child of this one); limit options().inbound_memory_limit.
  static MemoryTracker* inbound_memory(const Messenger& m) { return m.inbound_memory_.get(); }
  // TLS, tokens and policies as the messenger applies them; never nullptr after Build().
  static const MessengerSecurity* security(const Messenger& m) { return m.security_.get(); }

  // Any thread: hands a serialized call to the reactor owning its remote's connection. Takes the
  // caller's reference through every level down to the connection.
  static void QueueOutboundCall(Messenger* m, scoped_refptr<OutboundCall>&& call) {
    m->QueueOutboundCall(std::move(call));
  }
  // Unique per messenger; never negative. Any thread.
  static int32_t NextCallId(Messenger* m) { return m->NextCallId(); }

  // Reactor threads: counts an accepted connection against options().max_connections; false
  // (counting nothing) when the messenger is at its limit.
  static bool TryAddServerConnection(Messenger* m) { return m->TryAddServerConnection(); }
  // Reactor threads: an accepted connection closed.
  static void RemoveServerConnection(Messenger* m) { m->RemoveServerConnection(); }

  // Tests and soak tools: the messenger `builder` builds injects `faults` (fault_injection.h)
  // into its connections and handlers; nullptr (the default): none, and nothing of it runs.
  static void SetFaultInjector(MessengerBuilder* builder, std::shared_ptr<FaultInjector> faults) {
    builder->fault_injector_ = std::move(faults);
  }
};

}  // namespace rrpc::rpc
