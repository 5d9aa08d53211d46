// Throughput mode: a client Messenger with config.client_threads threads, each keeping
// config.async_call_concurrency calls in flight. A call's callback (on a client reactor) checks
// the response, records it when the window is open and issues the slot's next call at once.

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "rpc/messenger.h"
#include "rpc/rpc_controller.h"
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
  std::string sidecar;
  MonoTime issued;
};

class ThroughputRun {
 public:
  ThroughputRun(const BenchConfig& config, std::shared_ptr<rpc::Messenger> messenger,
                RunControl* control)
      : config_(config),
        control_(control),
        proxy_(std::move(messenger), config.server),
        slots_(static_cast<size_t>(config.client_threads) * config.async_call_concurrency),
        idle_slots_(static_cast<int64_t>(slots_.size())) {
    for (size_t i = 0; i < slots_.size(); i++) {
      CallSlot& slot = slots_[i];
      slot.run = this;
      slot.index = i;
      InitRequest(config, /*stream=*/i, &slot.request);
      slot.sidecar.resize(config.sidecar_bytes);
      FillPattern(/*stream=*/i + (1ULL << 32), slot.sidecar.data(), slot.sidecar.size());
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

  // Main thread: waits until no call is in flight (bounded by the call timeout and then some).
  bool WaitIdle() { return idle_slots_.WaitFor(config_.call_timeout + MonoDelta::FromSeconds(5)); }
  int64_t busy_slots() const { return idle_slots_.count(); }

  LatencyRecorders* recorders() { return &recorders_; }

 private:
  void Issue(CallSlot* slot) {
    const uint64_t seq = slot->calls++ * slots_.size() + slot->index;
    StampCall(seq, &slot->request, &slot->sidecar);
    slot->controller.Reset();
    slot->controller.set_timeout(config_.call_timeout);
    if (!slot->sidecar.empty()) slot->controller.AddOutboundSidecar(Slice(slot->sidecar));
    slot->issued = MonoTime::Now();
    proxy_.EchoAsync(slot->request, &slot->response, &slot->controller,
                     [slot] { slot->run->OnDone(slot); });
  }

  // A client reactor thread: must not block.
  void OnDone(CallSlot* slot) {
    const MonoTime now = MonoTime::Now();
    const rpc::RpcController& ctl = slot->controller;
    Status s = ctl.status();
    if (s.ok()) {
      s = CheckResponse(config_, slot->request, slot->response, Slice(slot->sidecar),
                        ctl.num_inbound_sidecars(),
                        ctl.num_inbound_sidecars() > 0 ? ctl.inbound_sidecar(0) : Slice());
    }
    if (!s.ok()) {
      control_->Fail(s.CloneAndPrepend("Echo call " + std::to_string(slot->calls - 1) +
                                       " of slot " + std::to_string(slot->index)));
      idle_slots_.CountDown();
      return;
    }
    if (control_->measuring()) {
      LatencyRecorders::PerThread* r = recorders_.Local();
      r->completed++;
      r->latency_ns.Record(static_cast<uint64_t>((now - slot->issued).ToNanoseconds()));
    }
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
};

}  // namespace

Status RunThroughputMode(const BenchConfig& config, RunControl* control, ModeOutput* out) {
  rpc::MessengerOptions options = config.client_messenger;
  options.name = "client";
  options.num_reactors = config.client_reactors;
  rpc::MessengerBuilder builder(std::move(options));
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Messenger> client, builder.Build());
  auto run = std::make_unique<ThroughputRun>(config, client, control);

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

  control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                     &out->window_end);
  out->measured = control->measured();
  if (!run->WaitIdle()) {
    control->Fail(Status::TimedOut(std::to_string(run->busy_slots()) +
                                   " calls still in flight long after the run stopped"));
  }
  // Joins the client reactors: no callback runs after this, so the recorders are quiet.
  client->Shutdown();
  run->recorders()->Merge(&out->completed, &out->latency_ns);
  if (control->failed()) return control->error();
  return Status::OK();
}

}  // namespace rrpc::bench
