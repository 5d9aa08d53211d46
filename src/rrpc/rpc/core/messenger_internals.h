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
class OutboundCall;
class Reactor;
class ServicePool;

class MessengerInternals {
 public:
  // The services, their queue and workers. Any thread.
  static ServicePool* service_pool(const Messenger& m) { return m.service_pool_.get(); }
  // Reactor `i` (0 <= i < options().num_reactors). Any thread.
  static Reactor* reactor(const Messenger& m, int i) { return m.reactors_[i].get(); }

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
