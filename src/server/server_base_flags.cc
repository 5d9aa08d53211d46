// The flags of ServerBaseOptions::FromFlags(): only binaries read them.
#include <gflags/gflags.h>

#include <cstdio>
#include <cstdlib>

#include "rrpc/rpc/messenger_flags.h"
#include "rrpc/rpc/rdma_flags.h"
#include "rrpc/server/server_base.h"

DEFINE_string(rpc_bind, "127.0.0.1:7050",
              "host:port the RPC server listens on (port 0 picks a free one). Beyond a trusted "
              "network give it a certificate (--rpc_certificate_file): TLS is then required from "
              "every non-loopback peer (docs/security.md).");
DEFINE_string(webserver_bind, "127.0.0.1:8050",
              "ipv4:port of the operator web UI (dashboard, /metrics, /rpcz, /healthz, ...); "
              "empty disables it.");
DEFINE_string(webserver_tls_certificate, "",
              "PEM certificate (and chain) for the web UI; set: the UI speaks only HTTPS.");
DEFINE_string(webserver_tls_private_key, "",
              "PEM private key for --webserver_tls_certificate; empty: read from the certificate "
              "file.");
DEFINE_string(webserver_tls_ca_certificate, "",
              "PEM CAs for the web UI's client certificates: set (with "
              "--webserver_tls_certificate), the UI serves only clients presenting a certificate "
              "they signed.");
DEFINE_uint32(webserver_max_connections, 128,
              "Open connections the plain-HTTP web UI holds at most. At the cap a new connection "
              "replaces the oldest one that has not sent its whole request (answered 503), or "
              "gets 503 when all are being served. Each costs a descriptor, not a thread.");
DEFINE_bool(status_require_authentication, false,
            "The status and reflection services answer only authenticated callers (client "
            "certificate or token).");
DEFINE_string(data_dir, "",
              "Directory where the server keeps its data; empty: the server's default, under "
              "the working directory.");
DEFINE_int32(shutdown_timeout_ms, 30000,
             "On SIGTERM/SIGINT, milliseconds to wait for calls in flight to be answered before "
             "closing their connections. Longer drains lose fewer calls but delay restarts.");

DEFINE_string(registry, "",
              "etcd://host:port[,host:port...]/prefix: register this server in etcd under the "
              "prefix (key prefix/<host:port>, with a lease kept alive) so clients with the "
              "target etcd://.../prefix find it; withdrawn before the drain on SIGTERM. Empty: "
              "no registry (docs/discovery.md).");
DEFINE_int32(registry_ttl_s, 10,
             "Lease TTL in seconds of the --registry entry (at least 3): how long a server that "
             "died without withdrawing stays listed. Renewed every third of it; shorter drops "
             "dead servers sooner but costs more renewals.");
DEFINE_int32(registry_withdraw_grace_ms, 500,
             "On SIGTERM/SIGINT with --registry, milliseconds the server keeps serving after it "
             "withdrew its entry and before it refuses new calls, so that clients watching etcd "
             "hear of the withdrawal first. Longer: fewer refused calls; slower restarts.");
DEFINE_string(rpc_advertise_address, "",
              "host:port clients should connect to, as registered in --registry; empty: the "
              "address --rpc_bind resolves to (which must not then be a wildcard).");

// Service pools and admission (docs/isolation.md).
DEFINE_double(rpc_background_share, 0.25,
              "Share of the workers background calls (option rrpc.background) may hold while "
              "foreground calls wait, rounded up to at least one worker; with no foreground "
              "waiting they get every worker. Higher: background progresses faster under "
              "foreground load, at foreground latency's expense.");
DEFINE_bool(rpc_adaptive_limit, false,
            "Limit the calls the default pool holds (queued and running) to an adaptive limit "
            "moved by queueing time, refusing calls beyond it at once with a retriable 'server "
            "too busy' instead of queueing them: shorter latency under overload.");
DEFINE_int32(rpc_adaptive_limit_target_queue_us, 2000,
             "Mean queueing time (microseconds) above which --rpc_adaptive_limit cuts the limit. "
             "Lower: shorter queues and latency under overload, but bursts refused sooner.");
DEFINE_int32(rpc_adaptive_limit_window_ms, 50,
             "Milliseconds over which --rpc_adaptive_limit averages queueing time before it moves "
             "the limit. Shorter: faster reaction, more noise.");

namespace rrpc {

ServerBaseOptions ServerBaseOptions::FromFlags(std::string name) {
  ServerBaseOptions options;
  options.messenger = rpc::MessengerOptionsFromFlags(name);
  options.name = std::move(name);
  options.rpc_bind_address = FLAGS_rpc_bind;
  options.webserver_bind_address = FLAGS_webserver_bind;
  options.webserver_tls_certificate_path = FLAGS_webserver_tls_certificate;
  options.webserver_tls_private_key_path = FLAGS_webserver_tls_private_key;
  options.webserver_tls_ca_certificate_path = FLAGS_webserver_tls_ca_certificate;
  options.webserver_max_connections = FLAGS_webserver_max_connections;
  options.status_requires_authentication = FLAGS_status_require_authentication;
  options.data_dir = FLAGS_data_dir;
  options.shutdown_timeout = MonoDelta::FromMilliseconds(FLAGS_shutdown_timeout_ms);
  options.registry = FLAGS_registry;
  options.registry_ttl = MonoDelta::FromSeconds(FLAGS_registry_ttl_s);
  options.registry_withdraw_grace = MonoDelta::FromMilliseconds(FLAGS_registry_withdraw_grace_ms);
  options.advertised_address = FLAGS_rpc_advertise_address;
  options.messenger.background_share = FLAGS_rpc_background_share;
  options.messenger.adaptive_limit.enabled = FLAGS_rpc_adaptive_limit;
  options.messenger.adaptive_limit.target_queue_time =
      MonoDelta::FromMicroseconds(FLAGS_rpc_adaptive_limit_target_queue_us);
  options.messenger.adaptive_limit.window =
      MonoDelta::FromMilliseconds(FLAGS_rpc_adaptive_limit_window_ms);
  // RDMA: --rdma and the --rdma_* flags (rdma_flags.cc).
  Result<std::optional<rdma::RdmaOptions>> rdma = rdma::RdmaOptionsIfEnabledFromFlags();
  if (!rdma.ok()) {
    fprintf(stderr, "%s: %s\n", options.name.c_str(), rdma.status().message().c_str());
    std::exit(2);
  }
  options.rdma = *std::move(rdma);
  return options;
}

}  // namespace rrpc
