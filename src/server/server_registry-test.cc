// Tests of ServerBase's registration in etcd (--registry): it registers once listening, and on
// shutdown withdraws before it drains.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>

#include "rpc/discovery/etcd-test-util.h"
#include "rpc/discovery/resolver-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/server/server_base.h"
#include "util/countdown_latch.h"

namespace rrpc {
namespace {

using rpc::EtcdClient;
using rpc::EtcdTestServer;
using rpc::HandlerGate;
using rpc::UpdateRecorder;
using rpc::WaitForCondition;

class ServerRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(etcd_.Start().ok());
    auto built = rpc::MessengerBuilder("client").Build();
    ASSERT_TRUE(built.ok());
    client_ = std::move(built).value();
    auto resolver = rpc::NewResolver(Target());
    ASSERT_TRUE(resolver.ok()) << resolver.status().ToString();
    resolver_ = std::move(*resolver);
    ASSERT_TRUE(resolver_->Start(recorder_.Listener()).ok());
    ASSERT_TRUE(recorder_.WaitForSet({}));
  }
  void TearDown() override {
    gate_.Open();
    resolver_->Stop();
    client_->Shutdown();
    server_.reset();
  }
  std::string Target() const { return "etcd://" + etcd_.endpoint() + "/rrpc/test"; }
  ServerBaseOptions Options() const {
    ServerBaseOptions opts;
    opts.name = "registered-server";
    opts.rpc_bind_address = "127.0.0.1:0";
    opts.registry = Target();
    opts.registry_ttl = MonoDelta::FromSeconds(5);
    return opts;
  }
  Status StartServer(ServerBaseOptions opts) {
    server_ = std::make_unique<ServerBase>(std::move(opts));
    auto echo = std::make_unique<rpc::TestEchoService>();
    echo_ = echo.get();
    RRPC_RETURN_NOT_OK(server_->RegisterService(std::move(echo)));
    return server_->Start();
  }

  EtcdTestServer etcd_;
  UpdateRecorder recorder_;
  std::unique_ptr<rpc::Resolver> resolver_;
  HandlerGate gate_;
  std::shared_ptr<rpc::Messenger> client_;
  std::unique_ptr<ServerBase> server_;
  rpc::TestEchoService* echo_ = nullptr;
};

TEST_F(ServerRegistryTest, ServerAppearsOnceStartedAndIsWithdrawnBeforeItDrains) {
  ASSERT_TRUE(StartServer(Options()).ok());
  const std::string address = server_->rpc_address().ToString();
  ASSERT_TRUE(recorder_.WaitForSet({address}));

  // A call held in its handler keeps the drain going while the test looks.
  echo_->set_echo_hook([this](const rtest::EchoRequestPB&, rpc::RpcContext*) { gate_.Pass(); });
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  rtest::EchoRequestPB req;
  req.set_data("in flight");
  rtest::EchoResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch done(1);
  echo.EchoAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));

  std::thread stopper([&] { server_->Shutdown(); });
  // Draining (refusing new calls) comes only after the withdrawal finished: by the time the
  // server says it drains, its key is gone from etcd.
  ASSERT_TRUE(WaitForCondition([&] { return !server_->Health().ok(); }));
  EtcdClient etcd = etcd_.Client();
  Result<EtcdClient::KeyValue> kv = etcd.Get("/rrpc/test/" + address);
  EXPECT_TRUE(kv.status().IsNotFound()) << kv.status().ToString();
  EXPECT_TRUE(recorder_.WaitForSet({}));
  gate_.Open();
  stopper.join();
  done.Wait();
  EXPECT_TRUE(ctl.status().ok()) << ctl.status().ToString();
}

TEST_F(ServerRegistryTest, KeepsServingThroughTheWithdrawGrace) {
  ServerBaseOptions opts = Options();
  opts.registry_withdraw_grace = MonoDelta::FromSeconds(10);
  ASSERT_TRUE(StartServer(opts).ok());
  ASSERT_TRUE(recorder_.WaitForSet({server_->rpc_address().ToString()}));
  const MonoTime start = MonoTime::Now();
  std::thread stopper([&] { server_->Shutdown(); });
  // A client that just heard of the withdrawal may still have a call on its way: it is served.
  ASSERT_TRUE(recorder_.WaitForSet({}));
  EXPECT_TRUE(server_->Health().ok());
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  EXPECT_TRUE(rpc::EchoOnce(echo, "late call").ok());
  stopper.join();
  EXPECT_GE(MonoTime::Now() - start, opts.registry_withdraw_grace);
}

TEST_F(ServerRegistryTest, AdvertisedAddressIsWhatIsRegistered) {
  ServerBaseOptions opts = Options();
  opts.advertised_address = "127.0.0.9:7777";
  ASSERT_TRUE(StartServer(opts).ok());
  EXPECT_TRUE(recorder_.WaitForSet({"127.0.0.9:7777"}));
  server_->Shutdown();
  EXPECT_TRUE(recorder_.WaitForSet({}));
}

TEST_F(ServerRegistryTest, BadRegistrySettingsFailStart) {
  ServerBaseOptions opts = Options();
  opts.rpc_bind_address = "0.0.0.0:0";  // a wildcard is no address to give clients
  Status s = StartServer(opts);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  opts = Options();
  opts.registry = "etcd://127.0.0.1:2379";
  s = StartServer(opts);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  opts = Options();
  opts.registry_ttl = MonoDelta::FromSeconds(1);
  s = StartServer(opts);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST_F(ServerRegistryTest, ServerStartsWhileEtcdIsDownAndRegistersWhenItIsBack) {
  etcd_.Kill();
  ASSERT_TRUE(StartServer(Options()).ok());
  ASSERT_TRUE(etcd_.Restart().ok());
  EXPECT_TRUE(recorder_.WaitForSet({server_->rpc_address().ToString()}));
}

}  // namespace
}  // namespace rrpc
