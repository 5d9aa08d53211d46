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
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "rpc/messenger.h"
#include "rpc/rdma/rdma_factory.h"
#include "rpc/rpc_controller.h"
#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

// Shared by the main thread and the senders; lives on the main thread's stack for the run.
struct MessengerSparseRun {
  MessengerSparseRun(const BenchConfig& c, RunControl* ctl)
      : config(c), control(ctl), ready(c.senders), opened(c.senders) {}

  const BenchConfig& config;
  RunControl* const control;
  LatencyRecorders recorders;
  // Sender s owns proxies s, s + senders, s + 2 * senders, ...
  std::vector<std::unique_ptr<BenchServiceProxy>> proxies;
  CountDownLatch ready;       // senders set up; main may read the baseline RSS
  CountDownLatch open_go{1};  // main: open your connections
  CountDownLatch opened;      // senders' connections are open (or the run failed)
  CountDownLatch send_go{1};  // main: start calling
};

// One checked Echo call on `proxy`.
Status CallOnce(const BenchConfig& config, const BenchServiceProxy& proxy,
                const BenchRequestPB& request, const std::string& sidecar,
                BenchResponsePB* response, rpc::RpcController* ctl) {
  ctl->Reset();
  ctl->set_timeout(config.call_timeout);
  if (!sidecar.empty()) ctl->AddOutboundSidecar(Slice(sidecar));
  RRPC_RETURN_NOT_OK(proxy.Echo(request, response, ctl));
  return CheckResponse(config, request, *response, Slice(sidecar), ctl->num_inbound_sidecars(),
                       ctl->num_inbound_sidecars() > 0 ? ctl->inbound_sidecar(0) : Slice());
}

void RunSender(MessengerSparseRun* run, int s) {
  const BenchConfig& config = run->config;
  RunControl* control = run->control;
  // Everything the sender allocates comes before the baseline RSS is read.
  LatencyRecorders::PerThread* recorder = run->recorders.Local();
  BenchRequestPB request;
  InitRequest(config, /*stream=*/s, &request);
  std::string sidecar(config.sidecar_bytes, '\0');
  FillPattern(/*stream=*/s + (1ULL << 32), sidecar.data(), sidecar.size());
  BenchResponsePB response;
  rpc::RpcController ctl;
  const size_t n = run->proxies.size();
  const size_t step = static_cast<size_t>(config.senders);
  run->ready.CountDown();

  run->open_go.Wait();
  uint64_t seq = s;
  // The first call on each address opens its connection (and upgrades it, over RDMA).
  for (size_t i = s; i < n && !control->failed(); i += step, seq += step) {
    StampCall(seq, &request, &sidecar);
    Status st = CallOnce(config, *run->proxies[i], request, sidecar, &response, &ctl);
    if (!st.ok()) control->Fail(st.CloneAndPrepend("opening connection " + std::to_string(i)));
  }
  run->opened.CountDown();

  run->send_go.Wait();
  size_t i = s;
  for (; i < n && !control->stopping(); seq += step) {
    StampCall(seq, &request, &sidecar);
    const MonoTime start = MonoTime::Now();
    Status st = CallOnce(config, *run->proxies[i], request, sidecar, &response, &ctl);
    const MonoTime end = MonoTime::Now();
    if (!st.ok()) {
      control->Fail(st.CloneAndPrepend("call on connection " + std::to_string(i)));
      return;
    }
    if (control->measuring()) {
      recorder->completed++;
      recorder->latency_ns.Record(static_cast<uint64_t>((end - start).ToNanoseconds()));
    }
    i += step;
    if (i >= n) i = s;
    if (config.sleep_us > 0) SleepFor(MonoDelta::FromMicroseconds(config.sleep_us));
  }
}

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

  rpc::MessengerOptions options = config.client_messenger;
  options.name = "client";
  options.num_reactors = config.client_reactors;
  rpc::MessengerBuilder builder(std::move(options));
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client, builder.Build());

  MessengerSparseRun run(config, control);
  run.proxies.reserve(static_cast<size_t>(config.connections));
  for (int i = 0; i < config.connections; i++) {
    RRPC_ASSIGN_OR_RETURN(Sockaddr remote, SparseRemote(config.server, i));
    run.proxies.push_back(std::make_unique<BenchServiceProxy>(client, remote));
  }
  std::vector<std::thread> threads;
  for (int s = 0; s < config.senders; s++) {
    Result<std::thread> thread = StartThread("bench", "client-sender-" + std::to_string(s),
                                             [&run, s] { RunSender(&run, s); });
    if (!thread.ok()) {
      control->Fail(thread.status());
      // The missing senders never count down.
      run.ready.CountDown(config.senders - s);
      run.opened.CountDown(config.senders - s);
      break;
    }
    threads.push_back(std::move(thread).value());
  }
  run.ready.Wait();
  out->rss_before_open_kb = ReadProcessStatusKb("VmRSS");
  run.open_go.CountDown();
  // Bounded: every call ends by its timeout.
  run.opened.Wait();
  out->rss_all_open_kb = ReadProcessStatusKb("VmRSS");
  out->connections = config.connections;
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
  if (config.sparse_hold_seconds > 0 && !control->failed()) {
    SleepFor(MonoDelta::FromSeconds(config.sparse_hold_seconds));
  }
  run.send_go.CountDown();
  if (!control->failed()) {
    control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                       &out->window_end);
    out->measured = control->measured();
  }
  control->Stop();
  for (auto& t : threads) t.join();
  out->rss_after_run_kb = ReadProcessStatusKb("VmRSS");
  client->Shutdown();
  run.recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
