// What the cluster tests share: a resolver the test controls, a few echo servers on 127.0.0.1, .2
// and .3, and a closed-loop echo load. gtest-free so that a benchmark could use it too.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpc/core/fault_injection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rpc/testing/test-echo-service.h"
#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {

// Reports the sets the test gives it, on the test's thread.
class TestResolver final : public Resolver {
 public:
  explicit TestResolver(std::vector<Sockaddr> initial) : initial_(std::move(initial)) {}
  Status Start(ResolverListener listener) override {
    MutexLock l(mu_);
    listener_ = std::move(listener);
    listener_(initial_);
    return Status::OK();
  }
  void Stop() override {
    MutexLock l(mu_);
    listener_ = nullptr;
  }
  const std::string& target() const override { return target_; }
  void Update(const Result<std::vector<Sockaddr>>& update) {
    MutexLock l(mu_);
    if (listener_) listener_(update);
  }

 private:
  const std::vector<Sockaddr> initial_;
  const std::string target_ = "test://";
  Mutex mu_;
  ResolverListener listener_ RRPC_GUARDED_BY(mu_);
};

// An echo server on 127.0.0.<host>.
struct TestServer {
  std::shared_ptr<Messenger> messenger;
  TestEchoService* service = nullptr;
  Sockaddr addr;

  static Result<TestServer> Start(int host, MessengerOptions options = {},
                                  std::shared_ptr<FaultInjector> faults = nullptr) {
    options.name = "server" + std::to_string(host);
    MessengerBuilder builder(options);
    if (faults != nullptr) MessengerInternals::SetFaultInjector(&builder, std::move(faults));
    RRPC_ASSIGN_OR_RETURN(auto messenger, builder.Build());
    TestServer server;
    server.messenger = std::move(messenger);
    auto service = std::make_unique<TestEchoService>();
    server.service = service.get();
    RRPC_RETURN_NOT_OK(server.messenger->RegisterService(std::move(service)));
    RRPC_ASSIGN_OR_RETURN(Sockaddr want, Sockaddr::Parse("127.0.0." + std::to_string(host) + ":0"));
    RRPC_RETURN_NOT_OK(server.messenger->Listen(want, &server.addr));
    return server;
  }
};

// `slots` echo calls in flight at once through `proxy` (each started from the callback of the
// one before, on a reactor thread), `total` in all; counts failures and the attempts beyond the
// first (retries and hedges). Start() once, then Wait(); the load outlives its calls.
class EchoLoad {
 public:
  EchoLoad(rtest::EchoServiceProxy proxy, int slots, int total,
           MonoDelta timeout = MonoDelta::FromSeconds(60))
      : proxy_(std::move(proxy)), slots_(slots), timeout_(timeout), left_(total), done_(slots) {}
  void Start() {
    for (int i = 0; i < slots_; i++) {
      slot_.emplace_back(std::make_unique<Slot>());
      Next(slot_.back().get());
    }
  }
  void Wait() { done_.Wait(); }
  int failed() const { return failed_.load(); }
  int finished() const { return finished_.load(); }
  int extra_attempts() const { return extra_attempts_.load(); }
  std::string first_error() {
    MutexLock l(mu_);
    return first_error_;
  }

 private:
  struct Slot {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
  };
  void Next(Slot* slot) {
    if (left_.fetch_sub(1) <= 0) {
      done_.CountDown();
      return;
    }
    slot->ctl.Reset();
    slot->ctl.set_timeout(timeout_);
    slot->req.set_data("payload");
    proxy_.EchoAsync(slot->req, &slot->resp, &slot->ctl, [this, slot] {
      if (!slot->ctl.status().ok() || slot->resp.data() != slot->req.data()) {
        failed_.fetch_add(1);
        MutexLock l(mu_);
        if (first_error_.empty()) {
          first_error_ = slot->ctl.status().ok() ? "wrong echo" : slot->ctl.status().ToString();
        }
      }
      if (slot->ctl.attempts() > 1) extra_attempts_.fetch_add(slot->ctl.attempts() - 1);
      finished_.fetch_add(1);
      Next(slot);
    });
  }
  rtest::EchoServiceProxy proxy_;
  const int slots_;
  const MonoDelta timeout_;
  std::atomic<int> left_;
  std::atomic<int> failed_{0};
  std::atomic<int> finished_{0};
  std::atomic<int> extra_attempts_{0};
  CountDownLatch done_;
  std::vector<std::unique_ptr<Slot>> slot_;
  Mutex mu_;
  std::string first_error_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
