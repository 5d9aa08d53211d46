// echo-cost: a fixed number of 64-byte echo calls, client and server in one process, for counting
// the instructions one call costs. Under callgrind it dumps the counts after the warm-up calls
// ("warm-up") and again after the measured ones ("measured"): a dump writes and then resets every
// thread's counts, so the second dump holds exactly the measured calls, every thread (callers,
// reactors, workers) included. (CALLGRIND_ZERO_STATS would not do: it resets only the calling
// thread's counts.) build-support/echo-cost divides by --calls. Outside valgrind it just runs and
// prints the wall time per call.
//
// Calls go one at a time, each issued by the previous call's callback (as rpc-bench's latency
// mode does), so every call takes the same path and the count does not depend on how batches
// happen to fill. Idle workers do not poll by default (--worker_idle_spin_us=0): a poll's length
// is wall time, which callgrind stretches, so polls would add a count that varies run to run.
//
//   valgrind --tool=callgrind --callgrind-out-file=cg.out echo-cost --calls=2000
#include <gflags/gflags.h>
#include <glog/logging.h>
#include <valgrind/callgrind.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>

#include "bench/bench.rrpc.h"
#include "bench/bench_payload.h"
#include "bench/bench_service.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/command_line.h"
#include "rrpc/util/monotime.h"
#include "util/countdown_latch.h"

DEFINE_int32(calls, 2000, "Measured calls");
DEFINE_int32(warmup_calls, 500, "Calls before the measured ones (caches, connection, pools)");
DEFINE_int32(payload_bytes, 64, "Request and response payload, in bytes");
DEFINE_string(compression, "none",
              "Codec of the client's calls: none, lz4 or zstd (docs/compression.md)");
DEFINE_bool(random_payload, false,
            "Incompressible payload bytes (the default repeats one byte, which compresses well)");
DEFINE_bool(inline_handlers, false, "Run the echo handler on the server reactor");
DEFINE_int32(worker_idle_spin_us, 0, "Server workers' idle poll (0: none, for stable counts)");
DEFINE_bool(rdma_soft, false,
            "Client and server over the software RDMA NIC (an RDMA connection each way upgraded "
            "from TCP before the warm-up ends), instead of TCP loopback");
DEFINE_bool(rdma_srq, false, "--rdma_soft: both sides receive through an SRQ per reactor");
DEFINE_bool(sync_calls, false,
            "Make the calls synchronous, one after another from the main thread, instead of "
            "each from the previous call's callback (the synchronous call path's cost)");
DEFINE_bool(channel, false,
            "Call through a cluster channel over list://<the server> (one backend) instead of a "
            "proxy to its address: the channel's cost per call");

namespace rrpc::bench {
namespace {

// Issues `total` calls one after another, each from the previous one's callback.
class CallChain {
 public:
  CallChain(const BenchServiceProxy* proxy, int total, const std::string& payload)
      : proxy_(proxy), left_(total), done_(1) {
    request_.set_payload(payload);
  }

  Status Run() {
    Next();
    done_.Wait();
    return status_;
  }

 private:
  void Next() {
    controller_.Reset();
    controller_.set_timeout(MonoDelta::FromSeconds(60));
    proxy_->EchoAsync(request_, &response_, &controller_, [this] { OnDone(); });
  }

  void OnDone() {
    if (!controller_.status().ok()) {
      status_ = controller_.status();
      done_.CountDown();
      return;
    }
    if (response_.payload() != request_.payload()) {
      status_ = Status::Corruption("echo payload differs");
      done_.CountDown();
      return;
    }
    if (--left_ == 0) {
      done_.CountDown();
      return;
    }
    Next();
  }

  const BenchServiceProxy* const proxy_;
  int left_;
  BenchRequestPB request_;
  BenchResponsePB response_;
  rpc::RpcController controller_;
  Status status_;
  CountDownLatch done_;
};

// Makes `total` synchronous calls one after another on this thread.
Status RunSyncCalls(const BenchServiceProxy& proxy, int total, const std::string& payload) {
  BenchRequestPB request;
  request.set_payload(payload);
  BenchResponsePB response;
  rpc::RpcController controller;
  for (int i = 0; i < total; i++) {
    controller.Reset();
    controller.set_timeout(MonoDelta::FromSeconds(60));
    RRPC_RETURN_NOT_OK(proxy.Echo(request, &response, &controller));
    if (response.payload() != request.payload()) return Status::Corruption("echo payload differs");
  }
  return Status::OK();
}

Status RunCalls(const BenchServiceProxy& proxy, int total, const std::string& payload) {
  if (FLAGS_sync_calls) return RunSyncCalls(proxy, total, payload);
  return CallChain(&proxy, total, payload).Run();
}

int Main() {
  BenchServerOptions server_options;
  server_options.reactors = 1;
  server_options.workers = 1;
  server_options.inline_handlers = FLAGS_inline_handlers;
  server_options.messenger.worker_idle_spin =
      MonoDelta::FromMicroseconds(FLAGS_worker_idle_spin_us);
  // One factory per side, as two processes would have.
  rdma::RdmaOptions rdma_options = rdma::SoftRdmaOptions();
  rdma_options.use_srq = FLAGS_rdma_srq;
  if (FLAGS_rdma_soft) {
    server_options.messenger.transport_factory = rdma::NewRdmaTransportFactory(rdma_options);
  }
  Sockaddr bound;
  auto server = StartBenchServer(server_options, &bound);
  CHECK(server.ok()) << server.status().ToString();
  rpc::MessengerOptions client_options;
  client_options.name = "client";
  client_options.num_reactors = 1;
  if (FLAGS_rdma_soft)
    client_options.transport_factory = rdma::NewRdmaTransportFactory(rdma_options);
  CHECK(rpc::ParseCompressionName(FLAGS_compression, &client_options.compression.codec))
      << "--compression must be none, lz4 or zstd";
  auto client = rpc::MessengerBuilder(client_options).Build();
  CHECK(client.ok()) << client.status().ToString();
  std::unique_ptr<BenchServiceProxy> proxy_storage;
  if (FLAGS_channel) {
    auto channel = rpc::Channel::Create(*client, "list://" + bound.ToString());
    CHECK(channel.ok()) << channel.status().ToString();
    proxy_storage = std::make_unique<BenchServiceProxy>(std::move(*channel));
  } else {
    proxy_storage = std::make_unique<BenchServiceProxy>(*client, bound);
  }
  const BenchServiceProxy& proxy = *proxy_storage;
  std::string payload(static_cast<size_t>(FLAGS_payload_bytes), 'x');
  if (FLAGS_random_payload) FillPattern(1, payload.data(), payload.size());

  Status s = RunCalls(proxy, FLAGS_warmup_calls, payload);
  CHECK(s.ok()) << "warm-up: " << s.ToString();
  CALLGRIND_DUMP_STATS_AT("warm-up");
  const MonoTime start = MonoTime::Now();
  s = RunCalls(proxy, FLAGS_calls, payload);
  const MonoDelta elapsed = MonoTime::Now() - start;
  CALLGRIND_DUMP_STATS_AT("measured");
  CHECK(s.ok()) << "measured: " << s.ToString();
  printf("echo-cost: %d calls, %.2f us per call%s\n", FLAGS_calls,
         elapsed.ToSeconds() * 1e6 / FLAGS_calls, RUNNING_ON_VALGRIND ? " (under valgrind)" : "");
  (*client)->Shutdown();
  (*server)->Shutdown();
  return 0;
}

}  // namespace
}  // namespace rrpc::bench

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"echo-cost [--calls=N] [--inline_handlers] [--sync_calls] [--channel] [--rdma_soft]",
       "A fixed number of echo calls in one process, for counting instructions per call under "
       "callgrind (build-support/echo-cost runs it so).",
       {"bench/echo_cost_main.cc"}});
  google::InitGoogleLogging(argv[0]);
  return rrpc::bench::Main();
}
