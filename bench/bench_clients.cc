#include "bench/bench_clients.h"

#include <utility>

#include "bench/bench_modes.h"
#include "bench/bench_payload.h"
#include "rrpc/rpc/cluster/channel.h"
#include "util/thread.h"

namespace rrpc::bench {

Result<std::shared_ptr<rpc::Messenger>> NewClientMessenger(const BenchConfig& config,
                                                           const std::string& name) {
  rpc::MessengerOptions options = config.client_messenger;
  options.name = name;
  options.num_reactors = config.client_reactors;
  rpc::MessengerBuilder builder(std::move(options));
  return builder.Build();
}

Result<BenchServiceProxy> NewBenchProxy(const BenchConfig& config,
                                        std::shared_ptr<rpc::Messenger> client) {
  if (config.target.empty()) return BenchServiceProxy(std::move(client), config.server);
  RRPC_ASSIGN_OR_RETURN(std::shared_ptr<rpc::Channel> channel,
                        rpc::Channel::Create(std::move(client), config.target));
  return BenchServiceProxy(std::move(channel));
}

EchoCaller::EchoCaller(const BenchConfig& config, uint64_t stream)
    // The sidecar's pattern is a stream of its own: swapped with the payload it fails the check.
    : config_(config), sidecar_(stream + (1ULL << 32), config.sidecar_bytes) {
  InitRequest(config, stream, &request_);
}

void EchoCaller::Stamp(uint64_t seq) { StampCall(seq, &request_, &sidecar_); }

Status EchoCaller::CallProxy(const BenchServiceProxy& proxy) {
  raw_ = false;
  ctl_.Reset();
  ctl_.set_timeout(config_.call_timeout);
  if (sidecar_.size > 0) ctl_.AddOutboundSidecar(sidecar_.block_slice());
  return proxy.Echo(request_, &response_, &ctl_);
}

Status EchoCaller::CallRaw(RawRpcConnection* conn) {
  raw_ = true;
  return conn->Call(BenchServiceIf::static_service_name(), "Echo", request_, sidecar_.slice(),
                    &response_, &scratch_, &raw_sidecars_);
}

Status EchoCaller::Check() const {
  if (raw_) {
    return CheckResponse(config_, request_, response_, sidecar_.slice(), raw_sidecars_.size(),
                         raw_sidecars_.empty() ? Slice() : raw_sidecars_[0]);
  }
  return CheckResponse(config_, request_, response_, sidecar_.slice(), ctl_.num_inbound_sidecars(),
                       ctl_.num_inbound_sidecars() > 0 ? ctl_.inbound_sidecar(0) : Slice());
}

std::vector<std::thread> StartClientThreads(const std::string& role, int count, RunControl* control,
                                            const std::function<void(int)>& body,
                                            const std::function<void(int)>& not_started) {
  std::vector<std::thread> threads;
  for (int t = 0; t < count; t++) {
    Result<std::thread> thread =
        StartThread("bench", "client-" + role + "-" + std::to_string(t), [body, t] { body(t); });
    if (!thread.ok()) {
      control->Fail(thread.status());
      if (not_started) not_started(count - t);
      break;
    }
    threads.push_back(std::move(thread).value());
  }
  return threads;
}

void MeasureAndJoin(const BenchConfig& config, RunControl* control,
                    std::vector<std::thread>* threads, ModeOutput* out) {
  if (!control->failed()) {
    control->RunWindow(config.warmup_seconds, config.run_seconds, &out->window_start,
                       &out->window_end);
    out->measured = control->measured();
  }
  control->Stop();
  // Bounded: every client's wait ends by its call timeout once the run stops.
  for (auto& t : *threads) t.join();
  threads->clear();
}

}  // namespace rrpc::bench
