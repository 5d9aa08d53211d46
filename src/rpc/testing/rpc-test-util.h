// Test fixtures shared by the RPC tests: an echo service and a server + client pair on loopback.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpc/messenger.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_controller.h"
#include "rpc/testing/rtest.rrpc.h"
#include "util/countdown_latch.h"
#include "util/mutex.h"

namespace rrpc::rpc {

// Holds handlers inside a method until the test opens it, and counts the handlers that reached
// it, so a test can fill a service queue behind a busy worker deterministically:
//   HandlerGate gate;
//   service_->set_echo_hook([&](const auto&, RpcContext*) { gate.Pass(); });
//   ... send a call; ASSERT_TRUE(gate.WaitForEntered(1)); ... gate.Open();
// Thread-safe. Open it before it is destroyed, or workers stay blocked.
class HandlerGate {
 public:
  // Handler side: counts this handler in, then blocks until Open().
  void Pass() {
    {
      MutexLock l(mu_);
      entered_++;
    }
    entered_cv_.NotifyAll();
    open_.Wait();
  }
  // Test side: waits (bounded) until `n` handlers have reached the gate.
  bool WaitForEntered(int n, MonoDelta timeout = MonoDelta::FromSeconds(60)) {
    const MonoTime deadline = MonoTime::Now() + timeout;
    MutexLock l(mu_);
    while (entered_ < n) {
      if (!entered_cv_.WaitUntil(mu_, deadline)) return entered_ >= n;
    }
    return true;
  }
  int entered() const {
    MutexLock l(mu_);
    return entered_;
  }
  void Open() { open_.CountDown(); }

 private:
  mutable Mutex mu_;
  CondVar entered_cv_;
  int entered_ GUARDED_BY(mu_) = 0;
  CountDownLatch open_{1};
};

// Polls `cond` until it holds or `timeout` passes; returns whether it held. For conditions
// another thread makes true "soon" (a reactor closing a socket, a queue filling up).
inline bool WaitForCondition(const std::function<bool()>& cond,
                             MonoDelta timeout = MonoDelta::FromSeconds(60)) {
  const MonoTime deadline = MonoTime::Now() + timeout;
  while (!cond()) {
    if (MonoTime::Now() > deadline) return false;
    SleepFor(MonoDelta::FromMilliseconds(2));
  }
  return true;
}

// Echoes data back (and its sidecars); sleeps or fails on request. Add adds.
class TestEchoService : public rtest::EchoServiceIf {
 public:
  // Runs first in every Echo handler, on its worker thread: tests block there (HandlerGate),
  // record the order calls run in, or add response sidecars. Settable at any time.
  using EchoHook = std::function<void(const rtest::EchoRequestPB& req, RpcContext* context)>;
  void set_echo_hook(EchoHook hook) {
    MutexLock l(hook_mu_);
    hook_ = std::move(hook);
  }
  // true: the response carries the request's sidecars themselves (slices of the blocks they
  // arrived in: zero copy on a transport that can send from them); false (default): copies.
  void set_echo_sidecars_by_reference(bool on) { echo_by_reference_.store(on); }

  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    calls_.fetch_add(1);
    EchoHook hook;
    {
      MutexLock l(hook_mu_);
      hook = hook_;
    }
    if (hook) hook(*req, context);
    if (req->sleep_ms() > 0) SleepFor(MonoDelta::FromMilliseconds(req->sleep_ms()));
    if (req->has_fail_with()) {
      context->RespondFailure(Status::IllegalState(req->fail_with()));
      return;
    }
    resp->set_data(req->data());
    for (size_t i = 0; i < context->num_inbound_sidecars(); i++) {
      if (echo_by_reference_.load()) {
        context->AddOutboundSidecar(context->inbound_sidecar_block(i));
        continue;
      }
      Slice s = context->inbound_sidecar(i);
      BlockRef block = Block::Allocate(s.size());
      memcpy(block->data(), s.data(), s.size());
      context->AddOutboundSidecar(BlockSlice{block, Slice(block->data(), s.size())});
    }
    context->RespondSuccess();
  }
  void Add(const rtest::AddRequestPB* req, rtest::AddResponsePB* resp,
           RpcContext* context) override {
    calls_.fetch_add(1);
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
  // Handlers run (Echo and Add), counted as they start.
  int calls() const { return calls_.load(); }

 private:
  std::atomic<int> calls_{0};
  std::atomic<bool> echo_by_reference_{false};
  Mutex hook_mu_;
  EchoHook hook_ GUARDED_BY(hook_mu_);
};

// A server messenger with TestEchoService on 127.0.0.1 and a client messenger.
class RpcTestBase : public ::testing::Test {
 protected:
  // `port` 0 picks a free one; a test restarting the server passes the old one.
  // `inline_methods` run on the server's reactors (RpcMethodInfo::run_inline).
  void StartServer(MessengerOptions options = {}, uint16_t port = 0,
                   const std::vector<std::string>& inline_methods = {}) {
    options.name = "server";
    auto built = MessengerBuilder(options).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    auto service = std::make_unique<TestEchoService>();
    service_ = service.get();
    for (const std::string& method : inline_methods) {
      ASSERT_TRUE(service->SetRunInline(method).ok()) << method;
    }
    ASSERT_TRUE(server_->RegisterService(std::move(service)).ok());
    Status s = server_->Listen(Sockaddr::Loopback(port), &server_addr_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void StartClient(MessengerOptions options = {}) {
    options.name = "client";
    auto built = MessengerBuilder(options).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    client_ = std::move(built).value();
  }
  void TearDown() override {
    gate_.Open();  // a test that stopped early must not leave workers blocked
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }
  rtest::EchoServiceProxy Proxy() { return rtest::EchoServiceProxy(client_, server_addr_); }

  // Makes every Echo wait at gate_ (see HandlerGate) until the test opens it.
  void BlockEchoes() {
    service_->set_echo_hook([this](const rtest::EchoRequestPB&, RpcContext*) { gate_.Pass(); });
  }

  // Lives as long as the fixture, so handlers never wait on a destroyed gate.
  HandlerGate gate_;
  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  TestEchoService* service_ = nullptr;
  Sockaddr server_addr_;
};

}  // namespace rrpc::rpc
