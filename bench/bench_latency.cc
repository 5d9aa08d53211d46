// Latency mode: one call at a time on one connection, so each call's time is the whole round trip
// with nothing queued ahead of it. Two ways to make the calls:
//  - async (default): each call's completion callback, on the client reactor, checks the response
//    and issues the next call; this is throughput mode with one slot. The round trip then crosses
//    the same threads as a raw TCP ping-pong: client reactor, server, client reactor.
//  - sync (config.latency_sync_calls): a client thread calls the synchronous proxy, which adds the
//    hand-offs from the caller to the client reactor and back.

#include <memory>
#include <string>
#include <thread>

#include "bench/bench.rrpc.h"
#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "rrpc/rpc/messenger.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

// The client thread's loop: until the run stops or fails.
void RunLatencyClient(const BenchConfig& config, const BenchServiceProxy& proxy,
                      RunControl* control, LatencyRecorders* recorders) {
  LatencyRecorders::PerThread* recorder = recorders->Local();
  EchoCaller echo(config, /*stream=*/0);
  for (uint64_t seq = 0; !control->stopping(); seq++) {
    echo.Stamp(seq);
    const MonoTime start = MonoTime::Now();
    Status s = echo.CallProxy(proxy);
    const MonoTime end = MonoTime::Now();
    if (s.ok()) s = echo.Check();
    if (!s.ok()) {
      control->Fail(s.CloneAndPrepend("Echo call " + std::to_string(seq)));
      return;
    }
    if (control->measuring()) recorder->RecordCall(start, end);
  }
}

}  // namespace

Status RunLatencyMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  if (!config.latency_sync_calls) {
    BenchConfig one_slot = config;
    one_slot.client_threads = 1;
    one_slot.async_call_concurrency = 1;
    return RunThroughputMode(one_slot, control, out);
  }
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client,
                        NewClientMessenger(config, "client"));
  RRPC_ASSIGN_OR_RETURN(const BenchServiceProxy proxy, NewBenchProxy(config, client));
  LatencyRecorders recorders;
  RRPC_ASSIGN_OR_RETURN(std::thread thread, StartThread("bench", "client-bench-0", [&] {
                          RunLatencyClient(config, proxy, control, &recorders);
                        }));
  control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                     &out->window_end);
  out->measured = control->measured();
  // Bounded: the thread's call in flight ends by its timeout at the latest.
  thread.join();
  client->Shutdown();
  recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
