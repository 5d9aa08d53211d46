// cps mode with rrpc's own client (config.cps_messenger_client): each client thread loops over
// a fresh connection of one client Messenger: connect, negotiate (and, over RDMA, the bootstrap
// and queue pair set-up), one checked Echo call, close. The messenger reuses a connection per
// remote while it is open, so after each call the thread shuts that connection down on its
// reactor (Reactor::ForEachConnection, the core's hook for tools) and waits; the next call to the
// same remote then opens a new one. Thread t calls its own loopback address (SparseRemote), so the
// threads never share a connection. A connection counts from the call's start to the end of its
// shutdown, on the client side (the server tears down its side concurrently).

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "rpc/core/connection.h"
#include "rpc/core/reactor.h"
#include "rpc/messenger.h"
#include "rpc/rpc_controller.h"
#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

// Shuts down every client connection of `client` to `remote` and waits until it is done.
void CloseConnectionsTo(rpc::Messenger* client, const Sockaddr& remote) {
  const int reactors = client->options().num_reactors;
  CountDownLatch done(reactors);
  for (int i = 0; i < reactors; i++) {
    rpc::Reactor* reactor = client->reactor(i);
    reactor->RunOnReactor([reactor, &remote, &done] {
      reactor->ForEachConnection([&remote](rpc::Connection* c) {
        if (c->direction() == rpc::Connection::Direction::kClient && c->remote() == remote) {
          c->Shutdown(Status::Aborted("rpc-bench cps: closed after its call"));
        }
      });
      done.CountDown();
    });
  }
  // Bounded: a reactor runs its tasks until the messenger shuts down, which is after this.
  done.Wait();
}

void RunClient(const BenchConfig& config, int index, rpc::Messenger* messenger,
               const std::shared_ptr<rpc::Messenger>& client, RunControl* control,
               LatencyRecorders* recorders) {
  LatencyRecorders::PerThread* recorder = recorders->Local();
  Result<Sockaddr> remote = SparseRemote(config.server, index);
  if (!remote.ok()) return control->Fail(remote.status());
  const BenchServiceProxy proxy(client, *remote);
  BenchRequestPB request;
  InitRequest(config, /*stream=*/index, &request);
  std::string sidecar(config.sidecar_bytes, '\0');
  FillPattern(/*stream=*/index + (1ULL << 32), sidecar.data(), sidecar.size());
  BenchResponsePB response;
  rpc::RpcController ctl;
  for (uint64_t n = 0; !control->stopping(); n++) {
    StampCall(n * config.client_threads + index, &request, &sidecar);
    const MonoTime start = MonoTime::Now();
    ctl.Reset();
    ctl.set_timeout(config.call_timeout);
    if (!sidecar.empty()) ctl.AddOutboundSidecar(Slice(sidecar));
    Status s = proxy.Echo(request, &response, &ctl);
    if (s.ok()) {
      s = CheckResponse(config, request, response, Slice(sidecar), ctl.num_inbound_sidecars(),
                        ctl.num_inbound_sidecars() > 0 ? ctl.inbound_sidecar(0) : Slice());
    }
    CloseConnectionsTo(messenger, *remote);
    const MonoTime end = MonoTime::Now();
    if (!s.ok()) {
      control->Fail(s.CloneAndPrepend("connection " + std::to_string(n) + " of client thread " +
                                      std::to_string(index)));
      return;
    }
    if (control->measuring()) {
      recorder->completed++;
      recorder->latency_ns.Record(static_cast<uint64_t>((end - start).ToNanoseconds()));
    }
  }
}

}  // namespace

Status RunCpsMessengerMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  rpc::MessengerOptions options = config.client_messenger;
  options.name = "client";
  options.num_reactors = config.client_reactors;
  rpc::MessengerBuilder builder(std::move(options));
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client, builder.Build());
  LatencyRecorders recorders;
  std::vector<std::thread> threads;
  for (int t = 0; t < config.client_threads; t++) {
    Result<std::thread> thread = StartThread(
        "bench", "client-bench-" + std::to_string(t), [&config, t, &client, control, &recorders] {
          RunClient(config, t, client.get(), client, control, &recorders);
        });
    if (!thread.ok()) {
      control->Fail(thread.status());
      break;
    }
    threads.push_back(std::move(thread).value());
  }
  control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                     &out->window_end);
  out->measured = control->measured();
  // Bounded: every call ends by its timeout, every close by its reactor's next turn.
  for (auto& t : threads) t.join();
  client->Shutdown();
  recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
