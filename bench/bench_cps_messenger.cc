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
#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rrpc/rpc/messenger.h"
#include "util/countdown_latch.h"

namespace rrpc::bench {

namespace {

// Shuts down every client connection of `client` to `remote` and waits until it is done.
void CloseConnectionsTo(rpc::Messenger* client, const Sockaddr& remote) {
  const int reactors = client->options().num_reactors;
  CountDownLatch done(reactors);
  for (int i = 0; i < reactors; i++) {
    rpc::Reactor* reactor = rpc::MessengerInternals::reactor(*client, i);
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

void RunClient(const BenchConfig& config, int index, const std::shared_ptr<rpc::Messenger>& client,
               RunControl* control, LatencyRecorders* recorders) {
  LatencyRecorders::PerThread* recorder = recorders->Local();
  Result<Sockaddr> remote = SparseRemote(config.server, index);
  if (!remote.ok()) return control->Fail(remote.status());
  const BenchServiceProxy proxy(client, *remote);
  EchoCaller echo(config, /*stream=*/index);
  for (uint64_t n = 0; !control->stopping(); n++) {
    echo.Stamp(n * config.client_threads + index);
    const MonoTime start = MonoTime::Now();
    Status s = echo.CallProxy(proxy);
    CloseConnectionsTo(client.get(), *remote);
    const MonoTime end = MonoTime::Now();
    if (s.ok()) s = echo.Check();
    if (!s.ok()) {
      control->Fail(s.CloneAndPrepend("connection " + std::to_string(n) + " of client thread " +
                                      std::to_string(index)));
      return;
    }
    if (control->measuring()) recorder->RecordCall(start, end);
  }
}

}  // namespace

Status RunCpsMessengerMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client,
                        NewClientMessenger(config, "client"));
  LatencyRecorders recorders;
  std::vector<std::thread> threads = StartClientThreads(
      "bench", config.client_threads, control, [&config, &client, control, &recorders](int t) {
        RunClient(config, t, client, control, &recorders);
      });
  // Every call ends by its timeout, every close by its reactor's next turn.
  MeasureAndJoin(config, control, &threads, out);
  client->Shutdown();
  recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
