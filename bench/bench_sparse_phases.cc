#include "bench/bench_sparse_phases.h"

#include <string>
#include <thread>
#include <vector>

#include "bench/bench_clients.h"
#include "bench/bench_usage.h"
#include "util/countdown_latch.h"

namespace rrpc::bench {

namespace {

// Shared by the main thread and the senders; lives on the main thread's stack for the run.
struct SparseRun {
  SparseRun(const BenchConfig& c, RunControl* ctl, size_t n)
      : config(c), control(ctl), connections(n), ready(c.senders), opened(c.senders) {}

  const BenchConfig& config;
  RunControl* const control;
  const size_t connections;
  LatencyRecorders recorders;
  CountDownLatch ready;       // senders set up; main may read the baseline RSS
  CountDownLatch open_go{1};  // main: open your connections
  CountDownLatch opened;      // senders' connections are open (or the run failed)
  CountDownLatch send_go{1};  // main: start calling
};

void RunSender(SparseRun* run, int s,
               const std::function<std::unique_ptr<SparseSender>(int s)>& make_sender) {
  const BenchConfig& config = run->config;
  RunControl* control = run->control;
  const size_t n = run->connections;
  const size_t step = static_cast<size_t>(config.senders);
  // Everything the sender allocates comes before the baseline RSS is read.
  LatencyRecorders::PerThread* recorder = run->recorders.Local();
  std::unique_ptr<SparseSender> sender = make_sender(s);
  run->ready.CountDown();

  run->open_go.Wait();
  uint64_t seq = s;
  for (size_t i = s; i < n && !control->failed(); i += step, seq += step) {
    Status st = sender->Open(i, seq);
    if (!st.ok()) control->Fail(st.CloneAndPrepend("opening connection " + std::to_string(i)));
  }
  run->opened.CountDown();

  run->send_go.Wait();
  for (size_t i = s; i < n && !control->stopping(); seq += step) {
    MonoTime start;
    MonoTime end;
    Status st = sender->Call(i, seq, &start, &end);
    if (!st.ok()) {
      control->Fail(st.CloneAndPrepend("call on connection " + std::to_string(i)));
      return;
    }
    if (control->measuring()) recorder->RecordCall(start, end);
    i += step;
    if (i >= n) i = s;
    if (config.sleep_us > 0) SleepFor(MonoDelta::FromMicroseconds(config.sleep_us));
  }
}

}  // namespace

Status RunSparsePhases(const BenchConfig& config, RunControl* control, size_t connections,
                       const std::function<std::unique_ptr<SparseSender>(int s)>& make_sender,
                       const std::function<void()>& all_open, ModeOutput* out) {
  SparseRun run(config, control, connections);
  std::vector<std::thread> threads = StartClientThreads(
      "sender", config.senders, control,
      [&run, &make_sender](int s) { RunSender(&run, s, make_sender); },
      [&run](int missing) {
        // The missing senders never count down.
        run.ready.CountDown(missing);
        run.opened.CountDown(missing);
      });
  run.ready.Wait();
  out->rss_before_open_kb = ReadProcessStatusKb("VmRSS");
  run.open_go.CountDown();
  // Bounded: every connect, negotiation and call ends by the call timeout.
  run.opened.Wait();
  // Each connection was open and negotiated, so the server holds them all now.
  out->rss_all_open_kb = ReadProcessStatusKb("VmRSS");
  out->connections = static_cast<int64_t>(connections);
  if (!control->failed()) all_open();
  run.send_go.CountDown();
  MeasureAndJoin(config, control, &threads, out);
  out->rss_after_run_kb = ReadProcessStatusKb("VmRSS");
  run.recorders.Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
