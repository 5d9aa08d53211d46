// Test fixtures shared by the RPC tests: an echo service and a server + client pair on loopback.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>

#include "rpc/messenger.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_controller.h"
#include "rpc/rtest.rrpc.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {

// Echoes data back (and its sidecars); sleeps or fails on request. Add adds.
class TestEchoService : public rtest::EchoServiceIf {
 public:
  void Echo(const rtest::EchoRequestPB* req, rtest::EchoResponsePB* resp,
            RpcContext* context) override {
    calls_.fetch_add(1);
    if (req->sleep_ms() > 0) SleepFor(MonoDelta::FromMilliseconds(req->sleep_ms()));
    if (req->has_fail_with()) {
      context->RespondFailure(Status::IllegalState(req->fail_with()));
      return;
    }
    resp->set_data(req->data());
    for (size_t i = 0; i < context->num_inbound_sidecars(); i++) {
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
  int calls() const { return calls_.load(); }

 private:
  std::atomic<int> calls_{0};
};

// A server messenger with TestEchoService on 127.0.0.1 and a client messenger.
class RpcTestBase : public ::testing::Test {
 protected:
  void StartServer(MessengerOptions options = {}) {
    options.name = "server";
    auto built = MessengerBuilder(options).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    auto service = std::make_unique<TestEchoService>();
    service_ = service.get();
    ASSERT_TRUE(server_->RegisterService(std::move(service)).ok());
    ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &server_addr_).ok());
  }
  void StartClient(MessengerOptions options = {}) {
    options.name = "client";
    auto built = MessengerBuilder(options).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    client_ = std::move(built).value();
  }
  void TearDown() override {
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }
  rtest::EchoServiceProxy Proxy() { return rtest::EchoServiceProxy(client_, server_addr_); }

  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  TestEchoService* service_ = nullptr;
  Sockaddr server_addr_;
};

}  // namespace rrpc::rpc
