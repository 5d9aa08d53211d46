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

#include "rpc/core/messenger_internals.h"
#include "rpc/testing/rtest.rrpc.h"
#include "rpc/testing/test-echo-service.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/util/mutex.h"
#include "util/countdown_latch.h"

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
  int entered_ RRPC_GUARDED_BY(mu_) = 0;
  CountDownLatch open_{1};
};

// `n` bytes of a pattern that differs per `seed` and from one KiB to the next, so a payload
// shifted, truncated or swapped with another shows in a byte-for-byte comparison.
inline std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i++) s[i] = static_cast<char>((i * 7 + seed * 13 + (i >> 10)) & 0xff);
  return s;
}

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

// `m`'s /rpcz store, writable: for tests that lower its slow threshold (Messenger::rpcz_store()
// is the read-only view).
inline RpczStore* MutableRpczStore(const Messenger& m) { return MessengerInternals::rpcz_store(m); }

// One synchronous Echo of `data` through `proxy` (the handler sleeps `sleep_ms` first): the
// call's status, or Corruption when the answer is not `data`.
inline Status EchoOnce(rtest::EchoServiceProxy proxy, const std::string& data,
                       MonoDelta timeout = MonoDelta::FromSeconds(60), uint32_t sleep_ms = 0) {
  rtest::EchoRequestPB req;
  req.set_data(data);
  if (sleep_ms > 0) req.set_sleep_ms(sleep_ms);
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(timeout);
  Status s = proxy.Echo(req, &resp, &ctl);
  if (s.ok() && resp.data() != data) return Status::Corruption("wrong echo");
  return s;
}

// A transport detail (DescribeTransport: RDMA credits, TLS cipher...) of the one connection `m`
// has; "" when it has none, several, or not that detail.
inline std::string ConnectionDetail(const std::shared_ptr<Messenger>& m, const std::string& key) {
  auto conns = m->DumpConnections();
  if (conns.size() != 1) return "";
  for (const auto& [k, v] : conns[0].transport_details) {
    if (k == key) return v;
  }
  return "";
}

// A server messenger with TestEchoService on 127.0.0.1 and a client messenger.
class RpcTestBase : public ::testing::Test {
 protected:
  // `port` 0 picks a free one; a test restarting the server passes the old one.
  // `inline_methods` run on the server's reactors (RpcMethodInfo::run_inline).
  // `configure`, if given, sets the service up (pools, priorities, limits) before registration.
  void StartServer(MessengerOptions options = {}, uint16_t port = 0,
                   const std::vector<std::string>& inline_methods = {},
                   const std::function<void(TestEchoService*)>& configure = nullptr) {
    options.name = "server";
    MessengerBuilder builder(options);
    MessengerInternals::SetFaultInjector(&builder, server_fault_injector_);
    auto built = builder.Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    auto service = std::make_unique<TestEchoService>();
    service_ = service.get();
    for (const std::string& method : inline_methods) {
      ASSERT_TRUE(service->SetRunInline(method).ok()) << method;
    }
    if (configure) configure(service.get());
    ASSERT_TRUE(server_->RegisterService(std::move(service)).ok());
    for (auto& extra : extra_services_)
      ASSERT_TRUE(server_->RegisterService(std::move(extra)).ok());
    extra_services_.clear();
    Status s = server_->Listen(Sockaddr::Loopback(port), &server_addr_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  void StartClient(MessengerOptions options = {}) {
    options.name = "client";
    MessengerBuilder builder(options);
    MessengerInternals::SetFaultInjector(&builder, client_fault_injector_);
    auto built = builder.Build();
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

  // Injected into the messengers StartServer() and StartClient() build (fault_injection.h);
  // nullptr (the default): none.
  std::shared_ptr<FaultInjector> server_fault_injector_;
  std::shared_ptr<FaultInjector> client_fault_injector_;
  // Lives as long as the fixture, so handlers never wait on a destroyed gate.
  HandlerGate gate_;
  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  TestEchoService* service_ = nullptr;
  // Registered beside TestEchoService by the next StartServer().
  std::vector<std::unique_ptr<ServiceIf>> extra_services_;
  Sockaddr server_addr_;
};

}  // namespace rrpc::rpc
