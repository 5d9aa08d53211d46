// cluster-bench's load (cluster_bench_main.cc and its scenarios): client messengers, each with a
// channel and a closed loop of echo calls, each call's end told to a Recorder
// (cluster_bench_recorder.h).
// Internal to cluster-bench; the calls' callbacks run on the clients' reactors.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/closed_loop.h"
#include "bench/cluster_bench_recorder.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "util/countdown_latch.h"
#include "util/histogram.h"

namespace rrpc::bench {

constexpr int kPayloadBytes = 64;

// One slot's echo call (closed_loop.h).
struct EchoCall {
  using Proxy = BenchServiceProxy;
  EchoCall(Proxy* p, int /*index*/) : proxy(p) { req.set_payload(std::string(kPayloadBytes, 'p')); }
  template <typename F>
  void Send(F done) {
    proxy->EchoAsync(req, &resp, &ctl, std::move(done));
  }
  std::string Failure() const {
    if (!ctl.status().ok()) return ctl.status().ToString();
    return resp.payload() == req.payload() ? std::string() : "wrong echo";
  }
  Proxy* const proxy;
  BenchRequestPB req;
  BenchResponsePB resp;
  rpc::RpcController ctl;
};

// Closed-loop echo calls through one channel.
using Load = ClosedLoop<EchoCall>;

// `clients` loads on `target` (or on resolvers the caller makes), started at once.
class Clients {
 public:
  Clients(int clients, const std::string& target, rpc::ChannelOptions options, int concurrency,
          Recorder* recorder) {
    for (int i = 0; i < clients; i++) {
      rpc::MessengerOptions mo;
      mo.name = "client" + std::to_string(i);
      messengers_.push_back(rpc::MessengerBuilder(mo).Build().value());
      rpc::ChannelOptions co = options;
      co.name = "bench" + std::to_string(i);
      auto channel = rpc::Channel::Create(messengers_.back(), target, co);
      CHECK(channel.ok()) << channel.status().ToString();
      loads_.push_back(std::make_unique<Load>(*channel, concurrency, recorder, "cluster-bench"));
    }
  }
  ~Clients() {
    Stop();
    for (auto& m : messengers_) m->Shutdown();
  }
  void Start() {
    for (auto& l : loads_) l->Start();
  }
  void Stop() {
    if (stopped_) return;
    stopped_ = true;
    for (auto& l : loads_) l->Stop();
  }
  int64_t Sum(int64_t (Load::*field)() const) const {
    int64_t sum = 0;
    for (const auto& l : loads_) sum += ((*l).*field)();
    return sum;
  }
  const std::vector<std::unique_ptr<Load>>& loads() const { return loads_; }

 private:
  std::vector<std::shared_ptr<rpc::Messenger>> messengers_;
  std::vector<std::unique_ptr<Load>> loads_;
  bool stopped_ = false;
};

}  // namespace rrpc::bench
