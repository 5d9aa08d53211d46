// A closed loop of calls through one cluster channel, for the cluster benchmarks (cluster-bench's
// echo load, kv-cluster-bench's reads): `slots` calls in flight, each issuing the next from its
// callback until Stop(); each success's latency told to a Recorder (cluster_bench_recorder.h),
// failures and extra attempts counted. Callbacks run on the channel's messenger's reactors.
//
// `Call` is one slot's call: constructed from (Call::Proxy*, slot index), it has a public
// `rpc::RpcController ctl`, `template <typename F> void Send(F done)` that issues the call with
// `ctl` and runs `done` when it ends, and `std::string Failure() const`: empty when the call
// succeeded and its answer is right, else what went wrong.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench/cluster_bench_recorder.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/monotime.h"
#include "util/countdown_latch.h"

namespace rrpc::bench {

template <typename Call>
class ClosedLoop {
 public:
  // `name` prefixes the one message printed (the first failure); `recorder` may be null.
  ClosedLoop(std::shared_ptr<rpc::Channel> channel, int slots, Recorder* recorder, std::string name)
      : channel_(std::move(channel)),
        proxy_(channel_),
        recorder_(recorder),
        name_(std::move(name)),
        done_(slots) {
    for (int i = 0; i < slots; i++) slots_.push_back(std::make_unique<Slot>(&proxy_, i));
  }
  void Start() {
    for (auto& slot : slots_) Next(slot.get());
  }
  // Blocks until every slot's last call has ended.
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
    Slot(typename Call::Proxy* proxy, int index) : call(proxy, index) {}
    Call call;
    MonoTime sent;
  };
  void Next(Slot* slot) {
    if (stop_.load()) {
      done_.CountDown();
      return;
    }
    slot->call.ctl.Reset();
    slot->call.ctl.set_timeout(MonoDelta::FromSeconds(10));
    slot->sent = MonoTime::Now();
    slot->call.Send([this, slot] {
      const MonoTime now = MonoTime::Now();
      calls_.fetch_add(1);
      const std::string failure = slot->call.Failure();
      if (!failure.empty()) {
        if (failed_.fetch_add(1) == 0) {
          fprintf(stderr, "%s: a call failed: %s\n", name_.c_str(), failure.c_str());
        }
      } else if (recorder_ != nullptr) {
        recorder_->Record(slot->sent, now);
      }
      const int attempts = slot->call.ctl.attempts();
      if (attempts > 1) extra_attempts_.fetch_add(attempts - 1);
      Next(slot);
    });
  }

  const std::shared_ptr<rpc::Channel> channel_;
  typename Call::Proxy proxy_;
  Recorder* const recorder_;
  const std::string name_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> calls_{0};
  std::atomic<int64_t> failed_{0};
  std::atomic<int64_t> extra_attempts_{0};
  CountDownLatch done_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace rrpc::bench
