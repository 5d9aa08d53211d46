// cps mode: connections per second. Each client thread loops: open a fresh connection (connect,
// preamble, negotiation), make one Echo call, close it with a reset. A client Messenger cannot do
// this (it reuses one connection per remote and reactor), so the clients speak the protocol by
// hand (RawRpcConnection); the server runs its real accept, negotiation and call path.

#include <openssl/ssl.h>

#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "bench/bench_raw_client.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

void RunCpsClient(const BenchConfig& config, int index, RunControl* control,
                  LatencyRecorders* recorders) {
  LatencyRecorders::PerThread* recorder = recorders->Local();
  const std::string& service = BenchServiceIf::static_service_name();
  const std::string method = "Echo";
  BenchRequestPB request;
  InitRequest(config, /*stream=*/index, &request);
  std::string sidecar(config.sidecar_bytes, '\0');
  FillPattern(/*stream=*/index + (1ULL << 32), sidecar.data(), sidecar.size());
  BenchResponsePB response;
  std::string scratch;
  std::vector<Slice> response_sidecars;
  RawRpcConnection conn;
  // Over TLS with resumption: the session of this thread's previous connection.
  SSL_SESSION* session = nullptr;
  SSL_SESSION** resume = config.tls_resume_sessions ? &session : nullptr;
  for (uint64_t n = 0; !control->stopping(); n++) {
    StampCall(n * config.client_threads + index, &request, &sidecar);
    const MonoTime start = MonoTime::Now();
    // The call follows the negotiation request without waiting for the reply, as rrpc's own
    // client sends it: one round trip per connection, like the raw TCP peer's.
    Status s = conn.Open(config.server, config.call_timeout, "rpc-bench", /*await_reply=*/false,
                         config.raw_client_tls.get(), resume);
    if (s.ok()) {
      s = conn.Call(service, method, request, Slice(sidecar), &response, &scratch,
                    &response_sidecars);
    }
    if (s.ok()) {
      s = CheckResponse(config, request, response, Slice(sidecar), response_sidecars.size(),
                        response_sidecars.empty() ? Slice() : response_sidecars[0]);
    }
    if (s.ok() && resume != nullptr && n > 0 && !conn.resumed()) {
      s = Status::IllegalState("TLS session not resumed");
    }
    conn.CloseAbortively();
    const MonoTime end = MonoTime::Now();
    if (!s.ok()) {
      control->Fail(s.CloneAndPrepend("connection " + std::to_string(n) + " of client thread " +
                                      std::to_string(index)));
      break;
    }
    if (control->measuring()) {
      recorder->completed++;
      recorder->latency_ns.Record(static_cast<uint64_t>((end - start).ToNanoseconds()));
    }
  }
  if (session != nullptr) SSL_SESSION_free(session);
}

}  // namespace

Status RunCpsMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  LatencyRecorders recorders;
  std::vector<std::thread> threads;
  for (int t = 0; t < config.client_threads; t++) {
    Result<std::thread> thread = StartThread(
        "bench", "client-bench-" + std::to_string(t),
        [&config, t, control, &recorders] { RunCpsClient(config, t, control, &recorders); });
    if (!thread.ok()) {
      control->Fail(thread.status());
      break;
    }
    threads.push_back(std::move(thread).value());
  }
  control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                     &out->window_end);
  out->measured = control->measured();
  // Bounded: every socket wait of a client ends by the call timeout.
  for (auto& t : threads) t.join();
  recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
