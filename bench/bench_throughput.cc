// Throughput mode: a client Messenger with config.client_threads threads, each keeping
// config.async_call_concurrency calls in flight. A call's callback (on a client reactor) checks
// the response, records it when the window is open and issues the slot's next call at once. A
// call the server refuses as too busy is sent again after a jittered backoff (bench_retry.h),
// within its deadline; its latency runs from its first send to its answer.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_clients.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "bench/bench_retry.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "util/countdown_latch.h"
#include "util/thread.h"

namespace rrpc::bench {

namespace {

class ThroughputRun;

// One outstanding call, reused for every call it makes: the request, response, controller and
// sidecar live here, so the benchmark itself allocates nothing per call. Only one call per slot is
// in flight, and the core hands a call's completion over through its reactor queue, so successive
// callbacks of a slot (possibly on different reactors) see each other's writes.
struct CallSlot {
  ThroughputRun* run = nullptr;
  uint64_t index = 0;
  uint64_t calls = 0;
  BenchRequestPB request;
  BenchResponsePB response;
  rpc::RpcController controller;
  SidecarBlock sidecar;
  MonoTime issued;    // first send of the current call
  MonoTime deadline;  // of the current call, over all its attempts
  int attempts = 0;   // sends of the current call so far
  uint64_t rng = 0;   // backoff jitter state
};

class ThroughputRun {
 public:
  ThroughputRun(const BenchConfig& config, BenchServiceProxy proxy, RunControl* control)
      : config_(config),
        control_(control),
        proxy_(std::move(proxy)),
        slots_(static_cast<size_t>(config.client_threads) * config.async_call_concurrency),
        idle_slots_(static_cast<int64_t>(slots_.size())) {
    for (size_t i = 0; i < slots_.size(); i++) {
      CallSlot& slot = slots_[i];
      slot.run = this;
      slot.index = i;
      slot.rng = 0x9e3779b97f4a7c15ULL * (i + 1);
      InitRequest(config, /*stream=*/i, &slot.request);
      slot.sidecar = SidecarBlock(/*stream=*/i + (1ULL << 32), config.sidecar_bytes);
    }
  }

  // Client thread `t`: starts its slots' first calls.
  void StartSlots(int t) {
    const size_t n = static_cast<size_t>(config_.async_call_concurrency);
    for (size_t i = static_cast<size_t>(t) * n; i < static_cast<size_t>(t + 1) * n; i++) {
      Issue(&slots_[i]);
    }
  }

  // Main thread: client thread `t` never ran; its slots count as idle.
  void AbandonSlots(int t) { idle_slots_.CountDown(config_.async_call_concurrency); }

  Status StartRetryTimer() { return retry_timer_.Start(); }
  // Main thread, once no call is in flight or the client messenger is shut down.
  void StopRetryTimer() { retry_timer_.Stop(); }

  // Main thread: waits until no call is in flight (bounded by the call timeout and then some).
  bool WaitIdle() { return idle_slots_.WaitFor(config_.call_timeout + MonoDelta::FromSeconds(5)); }
  int64_t busy_slots() const { return idle_slots_.count(); }

  LatencyRecorders* recorders() { return &recorders_; }

 private:
  // Starts the slot's next call.
  void Issue(CallSlot* slot) {
    const uint64_t seq = slot->calls++ * slots_.size() + slot->index;
    StampCall(seq, &slot->request, &slot->sidecar);
    slot->issued = MonoTime::Now();
    slot->deadline = slot->issued + config_.call_timeout;
    slot->attempts = 0;
    Send(slot, slot->issued);
  }

  // One attempt of the slot's current call, with the time left to its deadline.
  void Send(CallSlot* slot, MonoTime now) {
    slot->attempts++;
    slot->controller.Reset();
    slot->controller.set_timeout(slot->deadline - now);
    if (slot->sidecar.size > 0) slot->controller.AddOutboundSidecar(slot->sidecar.block_slice());
    proxy_.EchoAsync(slot->request, &slot->response, &slot->controller,
                     [slot] { slot->run->OnDone(slot); });
  }

  // The retry timer's thread: the backoff of a refused call is over.
  void Resend(CallSlot* slot) {
    if (control_->stopping()) {
      idle_slots_.CountDown();
      return;
    }
    if (control_->measuring()) recorders_.Local()->retries++;
    Send(slot, MonoTime::Now());
  }

  // A client reactor thread: the server refused the call as too busy. Sends it again after a
  // backoff, unless that would pass its deadline (then the run fails: the server never took it).
  void OnTooBusy(CallSlot* slot, MonoTime now) {
    if (control_->measuring()) recorders_.Local()->rejected++;
    if (control_->stopping()) {
      idle_slots_.CountDown();
      return;
    }
    const MonoTime retry_at = now + RetryBackoff(slot->attempts, &slot->rng);
    if (slot->deadline <= retry_at) {
      control_->Fail(Status::TimedOut("Echo call " + std::to_string(slot->calls - 1) + " of slot " +
                                      std::to_string(slot->index) +
                                      " still refused as too busy after " +
                                      std::to_string(slot->attempts) + " attempts"));
      idle_slots_.CountDown();
      return;
    }
    retry_timer_.Schedule(retry_at, [slot] { slot->run->Resend(slot); });
  }

  // A client reactor thread: must not block.
  void OnDone(CallSlot* slot) {
    const MonoTime now = MonoTime::Now();
    const rpc::RpcController& ctl = slot->controller;
    if (IsServerTooBusy(ctl)) {
      OnTooBusy(slot, now);
      return;
    }
    Status s = ctl.status();
    if (s.ok()) {
      s = CheckResponse(config_, slot->request, slot->response, slot->sidecar.slice(),
                        ctl.num_inbound_sidecars(),
                        ctl.num_inbound_sidecars() > 0 ? ctl.inbound_sidecar(0) : Slice());
    }
    if (!s.ok()) {
      control_->Fail(s.CloneAndPrepend("Echo call " + std::to_string(slot->calls - 1) +
                                       " of slot " + std::to_string(slot->index)));
      idle_slots_.CountDown();
      return;
    }
    if (control_->measuring()) recorders_.Local()->RecordCall(slot->issued, now);
    if (control_->stopping()) {
      idle_slots_.CountDown();
      return;
    }
    Issue(slot);
  }

  const BenchConfig& config_;
  RunControl* const control_;
  const BenchServiceProxy proxy_;
  std::vector<CallSlot> slots_;
  CountDownLatch idle_slots_;
  LatencyRecorders recorders_;
  RetryTimer retry_timer_;
};

// UnaryProbe over a ThroughputRun of one slot. Owns the config the run refers to.
class UnaryProbeRun : public UnaryProbe {
 public:
  UnaryProbeRun(const BenchConfig& config, BenchServiceProxy proxy, RunControl* control)
      : config_(config), run_(config_, std::move(proxy), control) {}
  ~UnaryProbeRun() override { run_.StopRetryTimer(); }

  Status Start() {
    RRPC_RETURN_NOT_OK(run_.StartRetryTimer());
    run_.StartSlots(0);
    return Status::OK();
  }
  bool WaitIdle() override { return run_.WaitIdle(); }
  void Merge(uint64_t* completed, Histogram* latency_ns) const override {
    run_.recorders()->Merge(completed, latency_ns);
  }

 private:
  const BenchConfig config_;
  mutable ThroughputRun run_;
};

}  // namespace

Result<std::unique_ptr<UnaryProbe>> UnaryProbe::Start(const BenchConfig& config,
                                                      BenchServiceProxy proxy,
                                                      RunControl* control) {
  BenchConfig probe = config;
  probe.client_threads = 1;
  probe.async_call_concurrency = 1;
  probe.sidecar_bytes = 0;
  probe.response_bytes = probe.payload_bytes;
  auto run = std::make_unique<UnaryProbeRun>(probe, std::move(proxy), control);
  RRPC_RETURN_NOT_OK(run->Start());
  return std::unique_ptr<UnaryProbe>(std::move(run));
}

Status RunMixedMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  // The small calls: one slot, each call issued by the last one's callback (latency mode).
  BenchConfig small = config;
  small.client_threads = 1;
  small.async_call_concurrency = 1;
  small.sidecar_bytes = 0;
  // The bulk calls: their own slots, each echoing a large sidecar with a small body.
  BenchConfig bulk = config;
  bulk.client_threads = 1;
  bulk.async_call_concurrency = config.mixed_bulk_streams;
  bulk.sidecar_bytes = config.mixed_bulk_bytes;
  bulk.payload_bytes = bulk.response_bytes = 64;

  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client,
                        NewClientMessenger(config, "client"));
  std::shared_ptr<rpc::Messenger> bulk_client = client;
  if (config.mixed_separate_messenger) {
    Result<std::shared_ptr<rpc::Messenger>> made = NewClientMessenger(config, "client-bulk");
    if (!made.ok()) {
      client->Shutdown();
      return made.status();
    }
    bulk_client = std::move(made).value();
  }
  Result<BenchServiceProxy> small_proxy = NewBenchProxy(small, client);
  Result<BenchServiceProxy> bulk_proxy = NewBenchProxy(bulk, bulk_client);
  if (!small_proxy.ok() || !bulk_proxy.ok()) {
    client->Shutdown();
    bulk_client->Shutdown();
    return small_proxy.ok() ? bulk_proxy.status() : small_proxy.status();
  }
  auto small_run = std::make_unique<ThroughputRun>(small, std::move(*small_proxy), control);
  std::unique_ptr<ThroughputRun> bulk_run;
  if (config.mixed_bulk_streams > 0) {
    bulk_run = std::make_unique<ThroughputRun>(bulk, std::move(*bulk_proxy), control);
  }
  Status s = small_run->StartRetryTimer();
  if (s.ok() && bulk_run) s = bulk_run->StartRetryTimer();
  if (s.ok()) {
    // Slots start from this thread: the small chain then runs on the reactor its first call
    // went to, and so do the bulk calls (same messenger: the same reactor and remote).
    if (bulk_run) bulk_run->StartSlots(0);
    small_run->StartSlots(0);
    control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                       &out->window_end);
    out->measured = control->measured();
  } else {
    control->Fail(s);
    if (bulk_run) bulk_run->AbandonSlots(0);
    small_run->AbandonSlots(0);
  }
  for (ThroughputRun* run : {small_run.get(), bulk_run.get()}) {
    if (run != nullptr && !run->WaitIdle()) {
      control->Fail(Status::TimedOut(std::to_string(run->busy_slots()) +
                                     " calls still in flight long after the run stopped"));
    }
  }
  client->Shutdown();
  bulk_client->Shutdown();
  small_run->StopRetryTimer();
  small_run->recorders()->Merge(&out->completed, &out->latency_ns);
  if (bulk_run) {
    bulk_run->StopRetryTimer();
    Histogram unused(LatencyRecorders::kMaxLatencyNs);
    bulk_run->recorders()->Merge(&out->bulk_completed, &unused);
  }
  if (control->failed()) return control->error();
  return Status::OK();
}

Status RunThroughputMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  rpc::MessengerOptions options = config.client_messenger;
  options.name = "client";
  options.num_reactors = config.client_reactors;
  rpc::MessengerBuilder builder(std::move(options));
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client, builder.Build());
  Result<BenchServiceProxy> proxy = NewBenchProxy(config, client);
  if (!proxy.ok()) {
    client->Shutdown();
    return proxy.status();
  }
  auto run = std::make_unique<ThroughputRun>(config, std::move(*proxy), control);
  Status timer = run->StartRetryTimer();
  if (!timer.ok()) {
    client->Shutdown();
    return timer;
  }

  std::vector<std::thread> threads;
  for (int t = 0; t < config.client_threads; t++) {
    Result<std::thread> thread = StartThread("bench", "client-bench-" + std::to_string(t),
                                             [&run, t] { run->StartSlots(t); });
    if (!thread.ok()) {
      control->Fail(thread.status());
      run->AbandonSlots(t);
      continue;
    }
    threads.push_back(std::move(thread).value());
  }
  // The threads only start their slots; from then on completions drive the calls.
  for (auto& t : threads) t.join();

  if (rpc::MessengerMetrics* m = rpc::MessengerInternals::metrics(*client)) {
    control->set_wire_bytes([m] { return m->sent_bytes->value() + m->received_bytes->value(); });
  }
  control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                     &out->window_end);
  control->set_wire_bytes(nullptr);
  if (out->window_start.wire_bytes >= 0) {
    out->wire_bytes = out->window_end.wire_bytes - out->window_start.wire_bytes;
  }
  out->measured = control->measured();
  if (!run->WaitIdle()) {
    control->Fail(Status::TimedOut(std::to_string(run->busy_slots()) +
                                   " calls still in flight long after the run stopped"));
  }
  // Joins the client reactors: no callback runs after this, so the recorders are quiet.
  client->Shutdown();
  // Pending retries see the run stopping and give their slots up.
  run->StopRetryTimer();
  run->recorders()->Merge(&out->completed, &out->latency_ns);
  run->recorders()->MergeRetries(&out->rejected, &out->retries);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
