// sparse mode: many mostly idle connections, as a storage server sees from a large cluster.
// Opens config.connections connections (RawRpcConnection: a client Messenger would open only one
// per reactor), then config.senders threads go round them, one call per connection and a
// sleep_us nap between calls (bench_sparse_phases.h). Reports call latency and the memory each
// open connection costs (VmRSS before opening them and once all are open).

#include <memory>
#include <string>
#include <vector>

#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "bench/bench_raw_client.h"
#include "bench/bench_sparse_phases.h"
#include "bench/bench_usage.h"

namespace rrpc::bench {

namespace {

// Sender s's connections are raw ones it opens itself.
class RawSparseSender : public SparseSender {
 public:
  RawSparseSender(const BenchConfig& config, int s, std::vector<RawRpcConnection>* connections)
      : config_(config), echo_(config, /*stream=*/s), connections_(connections) {}

  Status Open(size_t i, uint64_t seq) override {
    return (*connections_)[i].Open(config_.server, config_.call_timeout, "rpc-bench",
                                   /*await_reply=*/true, config_.raw_client_tls.get());
  }

  Status Call(size_t i, uint64_t seq, MonoTime* start, MonoTime* end) override {
    echo_.Stamp(seq);
    *start = MonoTime::Now();
    RRPC_RETURN_NOT_OK(echo_.CallRaw(&(*connections_)[i]));
    *end = MonoTime::Now();
    return echo_.Check();
  }

 private:
  const BenchConfig& config_;
  EchoCaller echo_;
  std::vector<RawRpcConnection>* const connections_;
};

}  // namespace

Status RunSparseMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  if (config.senders > config.connections) {
    return Status::InvalidArgument("--senders must not exceed --connections");
  }
  // Each connection is one descriptor here, and one more in the server when it runs in-process;
  // the margin covers the messengers' own (epoll, eventfd, listeners) and the libraries'.
  const uint64_t per_connection = config.in_process_server ? 2 : 1;
  RRPC_RETURN_NOT_OK(EnsureFileLimit(per_connection * config.connections + 256));

  std::vector<RawRpcConnection> connections(static_cast<size_t>(config.connections));
  Status s = RunSparsePhases(
      config, control, connections.size(),
      [&config, &connections](int sender) {
        return std::make_unique<RawSparseSender>(config, sender, &connections);
      },
      [] {}, out);
  for (RawRpcConnection& conn : connections) conn.CloseAbortively();
  return s;
}

}  // namespace rrpc::bench
