// ServerBase: what a storage server embeds to serve RPCs: a messenger listening on one address,
// the services registered on it (plus ServerStatusService), a metric registry, the operator web
// UI (dashboard, /metrics, /rpcz, /varz, /threadz, /connections, /healthz), signal handling and
// a graceful drain on shutdown.
//
// Lifecycle, from one controlling thread: RegisterService()* -> Init() -> Start() ->
// RunUntilSignalled() or Shutdown(). Init() may also come first (services registered after it,
// before Start()). Shutdown() and RequestStop() are thread-safe; the accessors may be read from
// any thread once Start() returned.
//
//   ServerBase server(ServerBaseOptions::FromFlags("kv-server"));
//   RRPC_RETURN_NOT_OK(server.RegisterService(std::make_unique<KvService>(db)));
//   RRPC_RETURN_NOT_OK(server.Init());
//   RRPC_RETURN_NOT_OK(server.Start());
//   server.RunUntilSignalled();  // SIGTERM / SIGINT: graceful drain, then returns
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rrpc/rpc/messenger_options.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc {

class MetricRegistry;
class Webserver;

namespace rpc {
class EtcdRegistration;
class Messenger;
class ServiceIf;
}  // namespace rpc

struct ServerBaseOptions {
  // Shown in logs, thread names, the web UI and GetStatus.
  std::string name = "rrpc-server";
  // "host:port" the RPC server listens on; port 0 picks a free one (ServerBase::rpc_address()).
  std::string rpc_bind_address = "127.0.0.1:0";
  // "ipv4:port" of the web UI; empty: no web UI.
  std::string webserver_bind_address;
  // TLS for the web UI: PEM certificate (chain) and key; empty certificate: plain HTTP. The RPC
  // port's TLS is in messenger.security (docs/security.md).
  std::string webserver_tls_certificate_path;
  std::string webserver_tls_private_key_path;
  // With web UI TLS: PEM CAs whose client certificates the web UI demands (mutual TLS); empty:
  // no client certificates asked for.
  std::string webserver_tls_ca_certificate_path;
  // Plain-HTTP web UI: open connections at most (WebserverOptions::max_connections).
  size_t webserver_max_connections = 128;
  // The status and reflection services answer only authenticated callers (a verified client
  // certificate or a token); others get ERROR_NOT_AUTHORIZED.
  bool status_requires_authentication = false;
  // Reactors, workers, service queue length and the rest of the RPC knobs. Its name and
  // metric_registry are overwritten by ServerBase.
  rpc::MessengerOptions messenger;
  // RDMA (docs/rdma.md): set, the messenger's connections upgrade to RDMA after negotiating with
  // clients that offer it (others stay on TCP); its transport_factory is then replaced. When the
  // backend finds no device (ProbeRdmaDevice: verbs on a host without a NIC) Init() logs so and
  // the server serves over TCP only (ServerBase::rdma_status()). Unset: TCP only.
  std::optional<rdma::RdmaOptions> rdma;
  // Where the server keeps its data; ServerBase itself writes nothing there.
  std::string data_dir;
  // How long Shutdown() waits for calls in flight before closing their connections.
  MonoDelta shutdown_timeout = MonoDelta::FromSeconds(30);
  // "etcd://host:port[,host:port...]/prefix": Start() registers the server there (key
  // prefix/<advertised address>, under a lease renewed at a third of registry_ttl), and
  // Shutdown() withdraws it before draining (docs/discovery.md). Empty: no registry.
  std::string registry;
  // How long the entry of a server that died without withdrawing stays listed (>= 3 s).
  MonoDelta registry_ttl = MonoDelta::FromSeconds(10);
  // After withdrawing, how long Shutdown() keeps serving before it refuses new calls, so that
  // clients watching the registry hear of the withdrawal first.
  MonoDelta registry_withdraw_grace = MonoDelta::FromMilliseconds(500);
  // "host:port" clients should connect to, as registered; empty: the address the RPC server
  // listens on (which must then not be a wildcard such as 0.0.0.0).
  std::string advertised_address;

  // The options from --rpc_bind, --webserver_bind, --data_dir, --shutdown_timeout_ms,
  // --registry, --registry_ttl_s, --registry_withdraw_grace_ms, --rpc_advertise_address, the
  // --rpc_* messenger flags (server_base_flags.cc) and --rdma with the --rdma_* flags
  // (rrpc/rpc/rdma_flags.h). Only binaries call this; an invalid --rdma_* value ends the
  // process (exit status 2) with a message, as a malformed flag does.
  static ServerBaseOptions FromFlags(std::string name);
};

class ServerBase {
 public:
  explicit ServerBase(ServerBaseOptions options);
  // Shuts down (graceful drain) if still running.
  virtual ~ServerBase();
  ServerBase(const ServerBase&) = delete;
  ServerBase& operator=(const ServerBase&) = delete;

  // Before Start(). The server owns the service; its handlers run on worker threads.
  Status RegisterService(std::unique_ptr<rpc::ServiceIf> service);
  // Makes the registry and the messenger and registers ServerStatusService. Once.
  Status Init();
  // Listens for RPCs, registers in options().registry (if set; etcd need not be up) and starts
  // the web UI. Calls Init() first if it was not called.
  Status Start();
  // Graceful drain, then close: withdraws the server from its registry (so clients stop
  // choosing it), stops accepting connections, refuses new calls (retriable
  // ERROR_UNAVAILABLE), waits up to shutdown_timeout for every call in flight to be answered,
  // stops the web UI and shuts the messenger down. Idempotent; any thread but a reactor or a
  // worker of this server.
  void Shutdown();

  // Blocks until SIGTERM or SIGINT (then drains with Shutdown() and returns), RequestStop() or
  // Shutdown() from another thread.
  // SIGHUP reloads certificates, keys, CAs and the token key (ReloadSecurity) and logs it. The
  // handler only writes the
  // signal number into a pipe; all work happens on the calling thread. One server per process at a
  // time.
  Status RunUntilSignalled();
  // Makes RunUntilSignalled() drain and return, as SIGTERM would. Thread-safe (also
  // async-signal-safe).
  void RequestStop();

  // Reads the RPC port's certificate, key, CA and token key files and the web UI's certificate
  // again: new connections use them, open ones go on. On error the old ones stay. Thread-safe.
  Status ReloadSecurity();

  // How a part of the server (a service, its storage) is doing, as it reports it.
  //   kDegraded: still serving, with less function (e.g. reads work, writes are refused while
  //              the database recovers). /healthz answers 200 "DEGRADED: ...".
  //   kFailed:   not doing its job. Health() and /healthz (503) say unhealthy.
  enum class HealthState { kOk, kDegraded, kFailed };
  // Thread-safe, any time: `component` ("rocksdb") is now in `state` because of `detail`; kOk
  // clears what it reported before. State changes are logged.
  void ReportHealth(const std::string& component, HealthState state, const std::string& detail);
  // OK while serving and no component reported kFailed; ServiceUnavailable while starting or
  // draining, or with the failed components' details.
  Status Health() const;
  // "" while Health() is OK and no component is degraded; otherwise one line naming the
  // degraded (or failed) components, e.g. "DEGRADED: rocksdb: IO error: ...".
  std::string HealthNote() const;

  const ServerBaseOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  // The address the RPC server listens on (after Start()).
  const Sockaddr& rpc_address() const { return rpc_address_; }
  // "http://host:port" of the web UI, or "" when it has none.
  std::string web_url() const;
  const std::shared_ptr<rpc::Messenger>& messenger() const { return messenger_; }
  // After Init(): OK when options().rdma is set and its device opened (connections may upgrade
  // to RDMA); why not otherwise (NotFound: no device; IllegalState: options().rdma unset).
  const Status& rdma_status() const { return rdma_status_; }
  MetricRegistry* metric_registry() const { return metric_registry_.get(); }
  MonoTime start_time() const { return start_time_; }

 private:
  enum class State { kNew, kInitialized, kRunning, kDraining, kStopped };
  // SIGHUP: ReloadSecurity(), and logs the outcome.
  void ReloadOnSighup();
  // Registers rpc_address_ (or the advertised address) in options_.registry.
  Status StartRegistration();

  const ServerBaseOptions options_;
  std::unique_ptr<MetricRegistry> metric_registry_;  // outlives the messenger and web UI
  std::shared_ptr<rpc::Messenger> messenger_;
  std::unique_ptr<Webserver> web_;
  // The server's entry in options_.registry, while registered (Start() to Shutdown()).
  std::unique_ptr<rpc::EtcdRegistration> registration_;
  // Services registered before Init(), handed to the messenger by Init().
  std::vector<std::unique_ptr<rpc::ServiceIf>> pending_services_;
  Sockaddr rpc_address_;
  Status rdma_status_ = Status::IllegalState("RDMA not asked for");  // set by Init()
  MonoTime start_time_;
  std::atomic<State> state_{State::kNew};
  mutable Mutex health_mu_;
  // Components not OK, by name: (state, detail).
  std::map<std::string, std::pair<HealthState, std::string>> component_health_
      RRPC_GUARDED_BY(health_mu_);
  Mutex shutdown_mu_;  // serializes Shutdown()
  // Self-pipe of RunUntilSignalled(): the signal handler and RequestStop() write, the loop reads.
  int stop_pipe_[2] = {-1, -1};
};

}  // namespace rrpc
