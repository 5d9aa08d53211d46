// cps mode: connections per second. Each client thread loops: open a fresh connection (connect,
// preamble, negotiation), make one Echo call, close it with a reset. A client Messenger cannot do
// this (it reuses one connection per remote and reactor), so the clients speak the protocol by
// hand (RawRpcConnection); the server runs its real accept, negotiation and call path.

#include <openssl/ssl.h>

#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "bench/bench_raw_client.h"

namespace rrpc::bench {

namespace {

void RunCpsClient(const BenchConfig& config, int index, RunControl* control,
                  LatencyRecorders* recorders) {
  LatencyRecorders::PerThread* recorder = recorders->Local();
  EchoCaller echo(config, /*stream=*/index);
  RawRpcConnection conn;
  // Over TLS with resumption: the session of this thread's previous connection.
  SSL_SESSION* session = nullptr;
  SSL_SESSION** resume = config.tls_resume_sessions ? &session : nullptr;
  for (uint64_t n = 0; !control->stopping(); n++) {
    echo.Stamp(n * config.client_threads + index);
    const MonoTime start = MonoTime::Now();
    // The call follows the negotiation request without waiting for the reply, as rrpc's own
    // client sends it: one round trip per connection, like the raw TCP peer's.
    Status s = conn.Open(config.server, config.call_timeout, "rpc-bench", /*await_reply=*/false,
                         config.raw_client_tls.get(), resume);
    if (s.ok()) s = echo.CallRaw(&conn);
    if (s.ok() && resume != nullptr && n > 0 && !conn.resumed()) {
      s = Status::IllegalState("TLS session not resumed");
    }
    conn.CloseAbortively();
    const MonoTime end = MonoTime::Now();
    if (s.ok()) s = echo.Check();
    if (!s.ok()) {
      control->Fail(s.CloneAndPrepend("connection " + std::to_string(n) + " of client thread " +
                                      std::to_string(index)));
      break;
    }
    if (control->measuring()) recorder->RecordCall(start, end);
  }
  if (session != nullptr) SSL_SESSION_free(session);
}

}  // namespace

Status RunCpsMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  LatencyRecorders recorders;
  std::vector<std::thread> threads = StartClientThreads(
      "bench", config.client_threads, control,
      [&config, control, &recorders](int t) { RunCpsClient(config, t, control, &recorders); });
  MeasureAndJoin(config, control, &threads, out);
  recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
