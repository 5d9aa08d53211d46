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

#include "rrpc/bench/bench.rrpc.h"
#include "rrpc/bench/cluster_bench_recorder.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/countdown_latch.h"
#include "rrpc/util/histogram.h"
#include "rrpc/util/monotime.h"

namespace rrpc::bench {

constexpr int kPayloadBytes = 64;

// Closed-loop echo calls through one channel until Stop(): failures and extra attempts counted.
class Load {
 public:
  Load(std::shared_ptr<rpc::Channel> channel, int slots, Recorder* recorder)
      : channel_(std::move(channel)), proxy_(channel_), recorder_(recorder), done_(slots) {
    for (int i = 0; i < slots; i++) slots_.emplace_back(std::make_unique<Slot>());
  }
  void Start() {
    for (auto& slot : slots_) Next(slot.get());
  }
  void Stop() {
    stop_.store(true);
    done_.Wait();
  }
  int64_t calls() const { return calls_.load(); }
  int64_t failed() const { return failed_.load(); }
  int64_t extra_attempts() const { return extra_attempts_.load(); }
  const std::shared_ptr<rpc::Channel>& channel() const { return channel_; }

 private:
  struct Slot {
    BenchRequestPB req;
    BenchResponsePB resp;
    rpc::RpcController ctl;
    MonoTime sent;
  };
  void Next(Slot* slot) {
    if (stop_.load()) {
      done_.CountDown();
      return;
    }
    slot->ctl.Reset();
    slot->ctl.set_timeout(MonoDelta::FromSeconds(10));
    slot->req.set_payload(std::string(kPayloadBytes, 'p'));
    slot->sent = MonoTime::Now();
    proxy_.EchoAsync(slot->req, &slot->resp, &slot->ctl, [this, slot] {
      const MonoTime now = MonoTime::Now();
      calls_.fetch_add(1);
      if (!slot->ctl.status().ok() || slot->resp.payload() != slot->req.payload()) {
        if (failed_.fetch_add(1) == 0) {
          fprintf(stderr, "cluster-bench: a call failed: %s\n",
                  slot->ctl.status().ok() ? "wrong echo" : slot->ctl.status().ToString().c_str());
        }
      } else if (recorder_ != nullptr) {
        recorder_->Record(slot->sent, now);
      }
      if (slot->ctl.attempts() > 1) extra_attempts_.fetch_add(slot->ctl.attempts() - 1);
      Next(slot);
    });
  }

  const std::shared_ptr<rpc::Channel> channel_;
  BenchServiceProxy proxy_;
  Recorder* const recorder_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> failed_{0};
  std::atomic<int64_t> extra_attempts_{0};
  CountDownLatch done_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

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
      loads_.push_back(std::make_unique<Load>(*channel, concurrency, recorder));
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
