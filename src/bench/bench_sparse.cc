// sparse mode: many mostly idle connections, as a storage server sees from a large cluster.
// Opens config.connections connections (RawRpcConnection: a client Messenger would open only one
// per reactor), then config.senders threads go round them, one call per connection and a
// sleep_us nap between calls. Reports call latency and the memory each open connection costs
// (VmRSS before opening them and once all are open).

#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "bench/bench_raw_client.h"
#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

// Shared by the main thread and the senders; lives on the main thread's stack for the run.
struct SparseRun {
  SparseRun(const BenchConfig& c, RunControl* ctl)
      : config(c), control(ctl), ready(c.senders), opened(c.senders) {}

  const BenchConfig& config;
  RunControl* const control;
  LatencyRecorders recorders;
  // Sender s owns connections s, s + senders, s + 2 * senders, ...
  std::vector<RawRpcConnection> connections;
  CountDownLatch ready;       // senders set up; main may read the baseline RSS
  CountDownLatch open_go{1};  // main: open your connections
  CountDownLatch opened;      // senders' connections are open (or the run failed)
  CountDownLatch send_go{1};  // main: start calling
};

void RunSender(SparseRun* run, int s) {
  const BenchConfig& config = run->config;
  RunControl* control = run->control;
  // Everything the sender allocates comes before the baseline RSS is read.
  LatencyRecorders::PerThread* recorder = run->recorders.Local();
  const std::string& service = BenchServiceIf::static_service_name();
  const std::string method = "Echo";
  BenchRequestPB request;
  InitRequest(config, /*stream=*/s, &request);
  std::string sidecar(config.sidecar_bytes, '\0');
  FillPattern(/*stream=*/s + (1ULL << 32), sidecar.data(), sidecar.size());
  BenchResponsePB response;
  std::string scratch;
  std::vector<Slice> response_sidecars;
  const size_t n = run->connections.size();
  const size_t step = static_cast<size_t>(config.senders);
  run->ready.CountDown();

  run->open_go.Wait();
  for (size_t i = s; i < n && !control->failed(); i += step) {
    Status st = run->connections[i].Open(config.server, config.call_timeout, "rpc-bench",
                                         /*await_reply=*/true, config.raw_client_tls.get());
    if (!st.ok()) control->Fail(st.CloneAndPrepend("opening connection " + std::to_string(i)));
  }
  run->opened.CountDown();

  run->send_go.Wait();
  size_t i = s;
  for (uint64_t seq = s; i < n && !control->stopping(); seq += step) {
    StampCall(seq, &request, &sidecar);
    const MonoTime start = MonoTime::Now();
    Status st = run->connections[i].Call(service, method, request, Slice(sidecar), &response,
                                         &scratch, &response_sidecars);
    const MonoTime end = MonoTime::Now();
    if (st.ok()) {
      st = CheckResponse(config, request, response, Slice(sidecar), response_sidecars.size(),
                         response_sidecars.empty() ? Slice() : response_sidecars[0]);
    }
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

Status RunSparseMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  if (config.senders > config.connections) {
    return Status::InvalidArgument("--senders must not exceed --connections");
  }
  // Each connection is one descriptor here, and one more in the server when it runs in-process;
  // the margin covers the messengers' own (epoll, eventfd, listeners) and the libraries'.
  const uint64_t per_connection = config.in_process_server ? 2 : 1;
  RRPC_RETURN_NOT_OK(EnsureFileLimit(per_connection * config.connections + 256));

  SparseRun run(config, control);
  run.connections.resize(static_cast<size_t>(config.connections));
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
  // Bounded: every connect and negotiation wait ends by the call timeout.
  run.opened.Wait();
  // Each Open() waited for the server's negotiation reply, so the server holds them all now.
  out->rss_all_open_kb = ReadProcessStatusKb("VmRSS");
  out->connections = config.connections;
  run.send_go.CountDown();
  if (!control->failed()) {
    control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                       &out->window_end);
    out->measured = control->measured();
  }
  control->Stop();
  for (auto& t : threads) t.join();
  out->rss_after_run_kb = ReadProcessStatusKb("VmRSS");
  for (RawRpcConnection& conn : run.connections) conn.CloseAbortively();
  run.recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
