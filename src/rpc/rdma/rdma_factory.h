// RdmaTransportFactory: connections start on TCP and, right after the rrpc negotiation, upgrade
// to RDMA when both sides can (the bootstrap, bootstrap.h; the path probe, path_probe.h);
// otherwise they stay on TCP with the reason logged and counted in
// rrpc_rdma_fallbacks_total{entity="rdma_fallback",id=<reason>}. Embedders make it with
// NewRdmaTransportFactory (rrpc/rpc/rdma.h, the installed header, which also has RdmaOptions);
// this header is the class itself, for rrpc's tests and tools (its device, metrics and the soft
// backend's fault hooks). The device is opened on first use and shared by the messenger's
// connections.
// Thread-safe (reactor threads call it).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/bootstrap/bootstrap.h"
#include "rpc/rdma/bootstrap/probe_responder.h"
#include "rpc/rdma/ibv/verbs_ibv.h"
#include "rpc/rdma/rdma_endpoint.h"
#include "rpc/rdma/rdma_transport.h"
#include "rpc/rdma/setup_thread.h"
#include "rpc/rdma/soft/soft_device.h"
#include "rpc/rdma/srq/srq_context.h"
#include "rpc/transport/tcp_transport.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"

namespace rrpc {
class Counter;
class MetricEntity;
class MetricRegistry;
}  // namespace rrpc

namespace rrpc::rdma {

// The opened device and its protection domain, shared by the connections (each holds it).
// The locked-memory warning for a process using `options` under `limit` (memlock.h): what one
// connection pins (private receive queue: its receive, spare and send blocks) or one reactor
// (SRQ mode: its receive pool at the cap and its send blocks). Empty when the limit is ample.
std::string MemlockWarningFor(const RdmaOptions& options, uint64_t limit);

struct RdmaDevice {
  std::unique_ptr<Context> context;
  SoftDevice* soft = nullptr;  // the same object when the backend is soft: its fault hooks
  std::unique_ptr<ProtectionDomain> pd;
  // Reads the context's async events from open until the device goes (set by the factory).
  std::unique_ptr<DeviceEventWatcher> watcher;
  ~RdmaDevice() {
    watcher.reset();  // joined first: no event is handed on while the rest goes
    {
      MutexLock lock(responder_mu);
      responder.reset();  // its probes are gone: each held the device
    }
    pd.reset();
  }
  // The server's answers to path probes (probe_responder.h), started on the first call. Any
  // thread.
  Result<ProbeResponder*> probe_responder() {
    MutexLock lock(responder_mu);
    if (responder == nullptr) {
      RRPC_ASSIGN_OR_RETURN(responder, ProbeResponder::Start(context.get()));
    }
    return responder.get();
  }
  Mutex responder_mu;
  std::unique_ptr<ProbeResponder> responder RRPC_GUARDED_BY(responder_mu);
};

class RdmaTransportFactory final : public rpc::TransportFactory {
 public:
  // Opens a device for Device(): an RdmaDevice with its context (and `soft` when the backend is
  // the software one) set; the factory allocates its protection domain. Called under the
  // factory's lock, on the thread that asks for the device, once per try.
  using DeviceOpener = std::function<Result<std::unique_ptr<RdmaDevice>>(const RdmaOptions& options,
                                                                         const Sockaddr& local)>;
  // The opener every factory uses unless given another: the backend options.backend names
  // (soft, or libibverbs), preferring the port that holds `local` (ChoosePort, gid_choice.h).
  static Result<std::unique_ptr<RdmaDevice>> OpenDevice(const RdmaOptions& options,
                                                        const Sockaddr& local);

  // `open_device`: a seam for tests, which wrap OpenDevice (a device that fails to open, then
  // comes up).
  explicit RdmaTransportFactory(RdmaOptions options, DeviceOpener open_device = OpenDevice);
  ~RdmaTransportFactory() override;

  std::unique_ptr<rpc::Transport> NewServerTransport(Socket accepted) override;
  Result<std::unique_ptr<rpc::Transport>> NewClientTransport(const Sockaddr& remote) override;
  std::unique_ptr<rpc::TransportUpgrade> NewUpgrade(bool server_side) override;
  // The same, knowing the peer (the client's path probe remembers a dead path per peer).
  std::unique_ptr<rpc::TransportUpgrade> NewUpgrade(bool server_side,
                                                    const Sockaddr& remote) override;
  // The same, knowing the bootstrap socket's local address too (the connection's GID).
  std::unique_ptr<rpc::TransportUpgrade> NewUpgrade(bool server_side, const Sockaddr& remote,
                                                    const Sockaddr& local) override;

  void UseMetricRegistry(MetricRegistry* registry) override;
  // Keepalive and TCP_USER_TIMEOUT for the TCP sockets this factory makes from now on (each
  // RDMA connection's bootstrap socket, which stays open and watched, and connections that stay
  // on TCP). The last messenger to give them wins.
  void UseDeadPeerSettings(const rpc::StreamTransportOptions& stream) override;

  const RdmaOptions& options() const { return options_; }
  MetricRegistry* metric_registry() const;
  // The device, opened on first call; an error when it can't be, remembered until the next try
  // (a device that reported a fatal error counts as one that failed, in either receive mode):
  // kFirstRetry after the first failure, doubling up to kMaxRetry (a NIC whose driver loads
  // late, a port that comes up): connections meanwhile stay on TCP (no_device).
  // `local`: the bootstrap address of the connection asking; an open prefers the port holding
  // it (ChoosePort, gid_choice.h).
  Result<std::shared_ptr<RdmaDevice>> Device(const Sockaddr& local = Sockaddr());
  static constexpr MonoDelta kFirstRetry = MonoDelta::FromSeconds(1);
  static constexpr MonoDelta kMaxRetry = MonoDelta::FromSeconds(64);
  // Counts and logs (the first of each reason, then every 1000th) a connection staying on TCP.
  void CountFallback(FallbackReason reason, const Status& detail);
  uint64_t fallbacks(FallbackReason reason) const;
  // A connection upgraded to RDMA (counted in rrpc_rdma_upgrades_total).
  void CountUpgrade();
  // The path probe (path_probe.h). A probe to `peer` failed: connections to it stay on TCP for
  // options().dead_path_memory, or until our port comes up again (kPortActive: the paths
  // remembered are forgotten); not remembered while our port is down. Any thread.
  void RememberDeadPath(const Sockaddr& peer);
  bool PathKnownDead(const Sockaddr& peer);
  static constexpr size_t kMaxDeadPaths = 4096;
  RdmaMetrics metrics() const;
  // SRQ mode: the calling reactor thread's context, made on first use, and made again when the
  // one it had is bound to another device than `device` (one that failed: the old context is
  // released here, on its reactor's thread; its connections hold it until they go). The factory
  // owns one reference per reactor, each connection one. A reactor that takes no connection
  // after a device failed keeps its old context (and so the dead device's objects) until the
  // factory goes.
  Result<std::shared_ptr<SrqContext>> SrqForThisThread(const std::shared_ptr<RdmaDevice>& device);
  // One per reactor that has used SRQ mode (any thread).
  struct SrqSnapshot {
    uint64_t posted_receives, pool_bytes, grants_outstanding, credit_waits, pool_growths,
        connections, limit_events, reclaims, credits_reclaimed, background_growths, retiring;
  };
  std::vector<SrqSnapshot> SrqStatsSnapshot() const;
  // What a connection holds so that it may outlive the factory: the device and, when the factory
  // owns it, the registry its metrics live in.
  // Also gives the metrics the connection counts into (held by what it returns).
  std::shared_ptr<void> KeepAlive(std::shared_ptr<RdmaDevice> device, RdmaMetrics* metrics) const;
  // Where connections' setup verbs run (setup_thread.h), and their transports' first
  // registration of a Block sent by reference; nullptr when options().setup_off_reactor is
  // false. Any thread. Transports hold it: it may outlive the factory.
  SetupThread* setup_thread() const { return setup_.get(); }
  std::shared_ptr<SetupThread> shared_setup_thread() const { return setup_; }

 private:
  const RdmaOptions options_;
  const DeviceOpener open_device_;
  std::shared_ptr<rpc::TcpTransportFactory> tcp() const;
  std::shared_ptr<rpc::TcpTransportFactory> tcp_ RRPC_GUARDED_BY(mu_);
  // The metrics in one registry, and references to their entities: a registry (a messenger's)
  // may go before the factory or its connections, the metrics they count into may not. Each
  // connection's KeepAlive holds the one it was made with.
  struct BoundMetrics {
    MetricRegistry* registry = nullptr;
    std::vector<scoped_refptr<MetricEntity>> entities;
    std::array<Counter*, 10> fallbacks{};  // by FallbackReason
    Counter* upgrades = nullptr;
    RdmaMetrics metrics;
  };
  // Makes the metrics in `registry` (the constructor; UseMetricRegistry).
  static std::shared_ptr<BoundMetrics> BindMetrics(MetricRegistry* registry);
  std::shared_ptr<BoundMetrics> bound() const;

  std::shared_ptr<MetricRegistry> owned_registry_;
  mutable Mutex mu_;
  std::shared_ptr<BoundMetrics> bound_ RRPC_GUARDED_BY(mu_);
  std::shared_ptr<RdmaDevice> device_ RRPC_GUARDED_BY(mu_);
  // By reactor thread; declared after device_ so that they go first.
  std::unordered_map<std::thread::id, std::shared_ptr<SrqContext>> srqs_ RRPC_GUARDED_BY(mu_);
  int srq_count_ RRPC_GUARDED_BY(mu_) = 0;  // numbers the reactors' metric entities
  std::unordered_map<std::thread::id, int> srq_ids_ RRPC_GUARDED_BY(mu_);  // each reactor's number
  Status device_error_ RRPC_GUARDED_BY(mu_);
  // Peers whose path probe failed, until when their connections stay on TCP.
  std::map<std::string, MonoTime> dead_paths_ RRPC_GUARDED_BY(mu_);
  // Set (by AsyncEventRouter) when the device reports itself dead: the next Device() call drops
  // it and reopens after a backoff. The pointer is guarded; the flag is set from any thread.
  std::shared_ptr<std::atomic<bool>> device_failed_ RRPC_GUARDED_BY(mu_);
  // Counted by the device's event watcher on each kPortActive (the pointer is guarded); the
  // dead paths are forgotten when it moved past activations_seen_.
  std::shared_ptr<std::atomic<uint64_t>> port_activations_ RRPC_GUARDED_BY(mu_);
  uint64_t activations_seen_ RRPC_GUARDED_BY(mu_) = 0;
  // Clears dead_paths_ if the port came up since last looked.
  void ForgetDeadPathsIfPortCameUp() RRPC_REQUIRES(mu_);
  // A failed open: when to try again, and the wait after the next failure.
  MonoTime retry_at_ RRPC_GUARDED_BY(mu_);
  MonoDelta retry_backoff_ RRPC_GUARDED_BY(mu_) = kFirstRetry;
  // Last: let go before anything above (its jobs hold what they use).
  std::shared_ptr<SetupThread> setup_;
};

}  // namespace rrpc::rdma
