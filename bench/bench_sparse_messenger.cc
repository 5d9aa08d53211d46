// sparse mode with rrpc's own client (config.sparse_messenger_client): one client Messenger holds
// config.connections established connections, over whatever transport it is configured with
// (TCP, TLS, RDMA private-RQ or SRQ), so the client's RSS is rrpc's real cost per connection.
//
// The messenger keeps one connection per remote address (and reactor), so connection i goes to
// its own loopback address, 127.<i / 250>.<i % 250 + 1>, at the server's port: the server must
// listen on 0.0.0.0 (the in-process server then does; a --server_only one needs
// --bind_host=0.0.0.0). Each address is called by one sender thread only, so it stays one
// connection. Connection set-up (TCP, negotiation, the RDMA bootstrap) is one call per connection,
// made before the RSS is read and outside the measured window.

#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "bench/bench_sparse_phases.h"
#include "bench/bench_usage.h"
#include "rpc/rdma/rdma_factory.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::bench {

namespace {

// Sender s's connections are the client messenger's, one per proxy (each to its own address).
class MessengerSparseSender : public SparseSender {
 public:
  MessengerSparseSender(const BenchConfig& config, int s,
                        const std::vector<std::unique_ptr<BenchServiceProxy>>* proxies)
      : echo_(config, /*stream=*/s), proxies_(proxies) {}

  // The first call on an address opens its connection (and upgrades it, over RDMA).
  Status Open(size_t i, uint64_t seq) override {
    echo_.Stamp(seq);
    RRPC_RETURN_NOT_OK(echo_.CallProxy(*(*proxies_)[i]));
    return echo_.Check();
  }

  Status Call(size_t i, uint64_t seq, MonoTime* start, MonoTime* end) override {
    echo_.Stamp(seq);
    *start = MonoTime::Now();
    RRPC_RETURN_NOT_OK(echo_.CallProxy(*(*proxies_)[i]));
    *end = MonoTime::Now();
    return echo_.Check();
  }

 private:
  EchoCaller echo_;
  const std::vector<std::unique_ptr<BenchServiceProxy>>* const proxies_;
};

}  // namespace

Result<Sockaddr> SparseRemote(const Sockaddr& server, int i) {
  if (i < 0 || i >= 250 * 256) return Status::InvalidArgument("too many sparse connections");
  if (!server.IsLoopback() && server.host() != "0.0.0.0") {
    return Status::InvalidArgument(
        "sparse mode over the client messenger needs a server on this host listening on 0.0.0.0 "
        "(one connection per loopback address 127.x.y.z)");
  }
  return Sockaddr::Parse("127." + std::to_string(i / 250) + "." + std::to_string(i % 250 + 1) +
                         ":" + std::to_string(server.port()));
}

Status RunSparseMessengerMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  if (config.senders > config.connections) {
    return Status::InvalidArgument("--senders must not exceed --connections");
  }
  // One descriptor per connection here (its socket; over RDMA the bootstrap socket, and with a
  // private receive queue its completion channel too), the same again in an in-process server,
  // and a margin for the messengers and libraries.
  const auto* rdma_factory = dynamic_cast<const rdma::RdmaTransportFactory*>(
      config.client_messenger.transport_factory.get());
  uint64_t per_connection = rdma_factory != nullptr && !rdma_factory->options().use_srq ? 2 : 1;
  if (config.in_process_server) per_connection *= 2;
  RRPC_RETURN_NOT_OK(EnsureFileLimit(per_connection * config.connections + 256));

  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client,
                        NewClientMessenger(config, "client"));
  std::vector<std::unique_ptr<BenchServiceProxy>> proxies;
  proxies.reserve(static_cast<size_t>(config.connections));
  for (int i = 0; i < config.connections; i++) {
    Result<Sockaddr> remote = SparseRemote(config.server, i);
    if (!remote.ok()) {
      client->Shutdown();
      return remote.status();
    }
    proxies.push_back(std::make_unique<BenchServiceProxy>(client, *remote));
  }
  auto all_open = [&config, &client, out] {
    for (const rpc::ConnectionInfo& c : client->DumpConnections()) {
      if (c.direction != "client") continue;
      out->connections_by_transport[c.transport]++;
    }
    // For scripts that read the server's RSS while every connection is established and idle.
    fprintf(stderr, "rpc-bench: sparse: %d connections established (", config.connections);
    for (const auto& [transport, count] : out->connections_by_transport) {
      fprintf(stderr, " %s %" PRId64, transport.c_str(), count);
    }
    fprintf(stderr, " ); client RSS %" PRId64 " kB; holding them idle for %.1f s\n",
            out->rss_all_open_kb, config.sparse_hold_seconds);
    fflush(stderr);
    if (config.sparse_hold_seconds > 0) {
      SleepFor(MonoDelta::FromSeconds(config.sparse_hold_seconds));
    }
  };
  Status s = RunSparsePhases(
      config, control, proxies.size(),
      [&config, &proxies](int sender) {
        return std::make_unique<MessengerSparseSender>(config, sender, &proxies);
      },
      all_open, out);
  client->Shutdown();
  return s;
}

}  // namespace rrpc::bench
