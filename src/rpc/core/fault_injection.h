// Fault injection, for tests and the soak run (build-support/soak.sh): a messenger built with an
// injector (MessengerInternals::SetFaultInjector, messenger_internals.h) delays and drops frames it
// reads, delays writes, cuts connections in the middle of a frame, fails accepts and connects, and
// slows handlers, each with a probability the test sets (and may change while the messenger
// runs). Off by default: without an injector nothing here is on any path; with one, the
// connections go through FaultyTransport, a decorator on the transport seam (transport.h), and
// the handlers of worker-run methods through a wrapper that calls BeforeHandler() first
// (SlowWorkerHandlers, at registration).
//
//   auto faults = std::make_shared<FaultInjector>();
//   MessengerBuilder builder(options);
//   MessengerInternals::SetFaultInjector(&builder, faults);
//   ...                                   // build the messenger, start calls
//   FaultSpec spec;
//   spec.cut_write = 0.01;                // 1% of writes stop mid-frame and cut the connection
//   faults->set_spec(spec);
//   ... faults->counts().cut_writes ...   // what was injected
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "rpc/transport/transport.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {

class ServiceIf;

// What to inject: each field is the probability (0..1) that one event meets the fault.
struct FaultSpec {
  // Per frame received: hold it, and the frames behind it, for `read_delay` (reading pauses).
  double delay_read = 0;
  MonoDelta read_delay = MonoDelta::FromMilliseconds(10);
  // Per frame received after the first (the negotiation): drop it, as if the message were lost.
  double drop_read = 0;
  // Per frame received: cut the connection instead of delivering it.
  double cut_read = 0;
  // Per write: take nothing now and report writable again after `write_delay`.
  double delay_write = 0;
  MonoDelta write_delay = MonoDelta::FromMilliseconds(10);
  // Per write: write part of the bytes (usually ending inside a frame), then cut the connection.
  double cut_write = 0;
  // Deterministic variant for tests: cut a connection once it has written this many bytes, in
  // the middle of whatever frame crosses the mark (0: never).
  uint64_t cut_after_bytes_written = 0;
  // Per accepted connection: close it at once (the client sees a close during negotiation).
  double fail_accept = 0;
  // Per connection opened: fail the connect with NetworkError.
  double fail_connect = 0;
  // Per call: its handler starts `handler_delay` late (on the worker, before the handler).
  double slow_handler = 0;
  MonoDelta handler_delay = MonoDelta::FromMilliseconds(20);
};

// What was injected so far.
struct FaultCounts {
  uint64_t delayed_reads = 0;
  uint64_t dropped_reads = 0;
  uint64_t cut_reads = 0;
  uint64_t delayed_writes = 0;
  uint64_t cut_writes = 0;
  uint64_t failed_accepts = 0;
  uint64_t failed_connects = 0;
  uint64_t slowed_handlers = 0;
  uint64_t total() const {
    return delayed_reads + dropped_reads + cut_reads + delayed_writes + cut_writes +
           failed_accepts + failed_connects + slowed_handlers;
  }
};

// The faults to inject and the count of those injected. Thread-safe; shared by the messengers
// (and their connections) that use it.
class FaultInjector {
 public:
  explicit FaultInjector(FaultSpec spec = {}, uint64_t seed = 1) : spec_(spec), rng_(seed) {}

  void set_spec(const FaultSpec& spec);
  FaultSpec spec() const;
  FaultCounts counts() const;

  // True with probability `p` (a shared, seeded generator: repeatable for one thread).
  bool Roll(double p);

  // Worker thread, before a handler: sleeps handler_delay when slow_handler rolls.
  void BeforeHandler();
  // Before `service` is registered (Messenger::RegisterService, when the messenger has an
  // injector): wraps each worker-run handler in one that calls BeforeHandler() first. Inline
  // handlers run on a reactor, which must not sleep: they stay as they are. The messenger keeps
  // this injector as long as its services.
  void SlowWorkerHandlers(ServiceIf* service);

  // Connections (their transports) made through this injector and not yet destroyed: a
  // connection's transport, buffers and calls go when the connection does, so a test sees here
  // that a dead peer's connection was freed.
  int64_t live_transports() const { return live_transports_.load(std::memory_order_relaxed); }
  void TransportCreated() { live_transports_.fetch_add(1, std::memory_order_relaxed); }
  void TransportDestroyed() { live_transports_.fetch_sub(1, std::memory_order_relaxed); }

  enum class Kind {
    kDelayedRead,
    kDroppedRead,
    kCutRead,
    kDelayedWrite,
    kCutWrite,
    kFailedAccept,
    kFailedConnect,
    kSlowedHandler,
    kCount
  };
  void Count(Kind kind) { counts_[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed); }

 private:
  mutable Mutex mu_;
  FaultSpec spec_ RRPC_GUARDED_BY(mu_);
  std::atomic<uint64_t> rng_;
  std::atomic<uint64_t> counts_[static_cast<int>(Kind::kCount)] = {};
  std::atomic<int64_t> live_transports_{0};
};

// Wraps another factory's transports in FaultyTransport, and fails connects. The messenger
// installs it when it has a fault injector (MessengerInternals::SetFaultInjector).
class FaultInjectingTransportFactory final : public TransportFactory {
 public:
  FaultInjectingTransportFactory(std::shared_ptr<TransportFactory> inner,
                                 std::shared_ptr<FaultInjector> faults)
      : inner_(std::move(inner)), faults_(std::move(faults)) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override;
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override;

 private:
  const std::shared_ptr<TransportFactory> inner_;
  const std::shared_ptr<FaultInjector> faults_;
};

}  // namespace rrpc::rpc
