// What the modes with client threads share: a client Messenger made from the run's options, one
// checked Echo call (through the messenger's proxy or a raw connection), and client threads run
// through the warmup and measuring window.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_config.h"
#include "bench/bench_modes.h"
#include "bench/bench_raw_client.h"
#include "bench/bench_runner.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"

namespace rrpc::bench {

// A client Messenger from config.client_messenger, named `name`, with config.client_reactors.
Result<std::shared_ptr<rpc::Messenger>> NewClientMessenger(const BenchConfig& config,
                                                           const std::string& name);

// The proxy the clients call through: to config.server, or through a channel over
// config.target (InvalidArgument when the target is malformed).
Result<BenchServiceProxy> NewBenchProxy(const BenchConfig& config,
                                        std::shared_ptr<rpc::Messenger> client);

// One client thread's Echo calls of stream `stream` (its own payload and sidecar pattern): stamp
// call `seq`, make it, check the answer. The caller times the call alone, so the checks of a
// large sidecar do not count in its latency. One thread.
class EchoCaller {
 public:
  EchoCaller(const BenchConfig& config, uint64_t stream);

  void Stamp(uint64_t seq);
  // Through the synchronous proxy, with the run's call timeout.
  Status CallProxy(const BenchServiceProxy& proxy);
  // On a raw connection that is open.
  Status CallRaw(RawRpcConnection* conn);
  // The answer to the last call echoes its request (bench_modes.h CheckResponse).
  Status Check() const;

 private:
  const BenchConfig& config_;
  BenchRequestPB request_;
  SidecarBlock sidecar_;  // a Block of its own: RDMA registers it once, sends it without a copy
  BenchResponsePB response_;
  bool raw_ = false;  // which of the two below holds the last answer's sidecars
  rpc::RpcController ctl_;
  std::string scratch_;
  std::vector<Slice> raw_sidecars_;
};

// Starts `count` client threads named "client-<role>-<t>", each running body(t). A thread that
// cannot start fails the run; `not_started(n)` (when given) hears how many did not, so whatever
// they would have counted down can be released.
std::vector<std::thread> StartClientThreads(const std::string& role, int count, RunControl* control,
                                            const std::function<void(int)>& body,
                                            const std::function<void(int)>& not_started = {});

// Unless the run has failed already, runs the warmup and the measuring window into `out`; then
// stops the run and joins `threads`.
void MeasureAndJoin(const BenchConfig& config, RunControl* control,
                    std::vector<std::thread>* threads, ModeOutput* out);

}  // namespace rrpc::bench
