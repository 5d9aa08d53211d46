// Tests of ServerBase: start with the web UI and status service, options from flags, graceful
// drain (stop accepting, answer what is in flight), and signal handling.
#include "rrpc/server/server_base.h"

#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/connection_info.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/rpc/rpc_controller.h"
#include "rrpc/server/server_status.rrpc.h"
#include "server/web/http_client.h"
#include "util/socket.h"

DEFINE_string(server_base_test_secret, "hunter2", "A secret the status service must not show.");

namespace rrpc {
namespace {

using rpc::HandlerGate;
using rpc::WaitForCondition;

// Whether 127.0.0.1:port accepts a TCP connection.
bool AcceptsConnections(uint16_t port) {
  Result<Socket> sock = Socket::CreateTcp(AF_INET);
  return sock.ok() && sock->SetNonBlocking(false).ok() &&
         sock->BlockingConnect(Sockaddr::Loopback(port)).ok();
}

// The status line of GET `path` from the web UI at 127.0.0.1:port ("" when it does not answer).
std::string GetStatusLine(uint16_t port, const std::string& path) {
  Result<HttpReply> reply = HttpGet(Sockaddr::Loopback(port), path, MonoDelta::FromSeconds(30));
  return reply.ok() ? reply->status_line : "";
}

uint16_t PortOfUrl(const std::string& url) {
  return static_cast<uint16_t>(std::stoi(url.substr(url.rfind(':') + 1)));
}

class ServerBaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto built = rpc::MessengerBuilder("client").Build();
    ASSERT_TRUE(built.ok());
    client_ = std::move(built).value();
  }
  void TearDown() override {
    gate_.Open();
    client_->Shutdown();
    server_.reset();
  }
  void StartServer(ServerBaseOptions opts) {
    server_ = std::make_unique<ServerBase>(std::move(opts));
    auto echo = std::make_unique<rpc::TestEchoService>();
    echo_ = echo.get();
    ASSERT_TRUE(server_->RegisterService(std::move(echo)).ok());
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ServerBaseOptions Options() {
    ServerBaseOptions opts;
    opts.name = "test-server";
    opts.rpc_bind_address = "127.0.0.1:0";
    return opts;
  }

  HandlerGate gate_;
  std::shared_ptr<rpc::Messenger> client_;
  std::unique_ptr<ServerBase> server_;
  rpc::TestEchoService* echo_ = nullptr;
};

TEST_F(ServerBaseTest, ReportedHealthShowsInHealthzAndGetStatus) {
  ServerBaseOptions opts = Options();
  opts.webserver_bind_address = "127.0.0.1:0";
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  const uint16_t web_port = PortOfUrl(server_->web_url());
  server::ServerStatusServiceProxy proxy(client_, server_->rpc_address());
  auto status = [&] {
    server::GetStatusRequestPB req;
    server::GetStatusResponsePB resp;
    rpc::RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    EXPECT_TRUE(proxy.GetStatus(req, &resp, &ctl).ok()) << ctl.status().ToString();
    return resp;
  };

  // Degraded: still healthy (200), but it says so.
  server_->ReportHealth("disk", ServerBase::HealthState::kDegraded, "slow fsync");
  EXPECT_TRUE(server_->Health().ok());
  EXPECT_EQ("HTTP/1.1 200 OK", GetStatusLine(web_port, "/healthz"));
  server::GetStatusResponsePB resp = status();
  EXPECT_TRUE(resp.healthy());
  EXPECT_EQ("DEGRADED: disk: slow fsync", resp.health());

  // Failed: unhealthy everywhere, with the reason.
  server_->ReportHealth("db", ServerBase::HealthState::kFailed, "background error");
  EXPECT_FALSE(server_->Health().ok());
  EXPECT_EQ("HTTP/1.1 503 Service Unavailable", GetStatusLine(web_port, "/healthz"));
  resp = status();
  EXPECT_FALSE(resp.healthy());
  EXPECT_NE(std::string::npos, resp.health().find("db: background error")) << resp.health();

  // Recovered.
  server_->ReportHealth("db", ServerBase::HealthState::kOk, "");
  server_->ReportHealth("disk", ServerBase::HealthState::kOk, "");
  EXPECT_TRUE(server_->Health().ok());
  EXPECT_EQ("HTTP/1.1 200 OK", GetStatusLine(web_port, "/healthz"));
  EXPECT_EQ("OK", status().health());
}

TEST_F(ServerBaseTest, StatusHidesSecretsAndCanRequireAuthentication) {
  ServerBaseOptions opts = Options();
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  server::ServerStatusServiceProxy proxy(client_, server_->rpc_address());
  server::GetStatusRequestPB req;
  server::GetStatusResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.GetStatus(req, &resp, &ctl).ok()) << ctl.status().ToString();
  bool saw_secret = false;
  for (const auto& f : resp.flags()) {
    if (f.name() == "server_base_test_secret") {
      saw_secret = true;
      EXPECT_EQ(f.value(), "<redacted>");
    }
  }
  EXPECT_TRUE(saw_secret);
  EXPECT_TRUE(server_->ReloadSecurity().ok());  // nothing configured: nothing to fail
  server_->Shutdown();

  opts.status_requires_authentication = true;
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  server::ServerStatusServiceProxy anonymous(client_, server_->rpc_address());
  ctl.Reset();
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  EXPECT_FALSE(anonymous.GetStatus(req, &resp, &ctl).ok());
  ASSERT_NE(ctl.error_response(), nullptr);
  EXPECT_EQ(ctl.error_response()->code(), rpc::ErrorStatusPB::ERROR_NOT_AUTHORIZED);
  // Other services are not affected.
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  rtest::EchoRequestPB ereq;
  ereq.set_data("hi");
  rtest::EchoResponsePB eresp;
  ctl.Reset();
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  EXPECT_TRUE(echo.Echo(ereq, &eresp, &ctl).ok());
}

TEST_F(ServerBaseTest, ServesStatusServiceAndWebUi) {
  ServerBaseOptions opts = Options();
  opts.webserver_bind_address = "127.0.0.1:0";
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  EXPECT_TRUE(server_->Health().ok());

  server::ServerStatusServiceProxy proxy(client_, server_->rpc_address());
  server::GetStatusRequestPB req;
  server::GetStatusResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.GetStatus(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_FALSE(resp.version().empty());
  EXPECT_EQ("test-server", resp.server_name());
  EXPECT_TRUE(resp.healthy());
  EXPECT_EQ("OK", resp.health());
  EXPECT_GE(resp.uptime_seconds(), 0);
  bool saw_flag = false;
  for (const auto& f : resp.flags()) saw_flag |= f.name() == "rpc_bind";
  EXPECT_TRUE(saw_flag);

  // The registered service is served too.
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  rtest::EchoRequestPB ereq;
  ereq.set_data("hi");
  rtest::EchoResponsePB eresp;
  ctl.Reset();
  ASSERT_TRUE(echo.Echo(ereq, &eresp, &ctl).ok());
  EXPECT_EQ("hi", eresp.data());

  ASSERT_FALSE(server_->web_url().empty());
  const uint16_t web_port = PortOfUrl(server_->web_url());
  EXPECT_EQ("HTTP/1.1 200 OK", GetStatusLine(web_port, "/healthz"));
  EXPECT_EQ("HTTP/1.1 200 OK", GetStatusLine(web_port, "/metrics"));
  EXPECT_EQ("HTTP/1.1 200 OK", GetStatusLine(web_port, "/"));

  server_->Shutdown();
  EXPECT_FALSE(server_->Health().ok());
  server_->Shutdown();  // idempotent
}

TEST_F(ServerBaseTest, OptionsFromFlags) {
  gflags::FlagSaver saver;
  ASSERT_FALSE(gflags::SetCommandLineOption("rpc_bind", "127.0.0.1:1234").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("webserver_bind", "").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("data_dir", "/tmp/somewhere").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("shutdown_timeout_ms", "1500").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("rpc_num_workers", "7").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("registry", "etcd://127.0.0.1:2379/kv").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("registry_ttl_s", "6").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("registry_withdraw_grace_ms", "250").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("rpc_advertise_address", "10.0.0.7:7050").empty());
  ServerBaseOptions opts = ServerBaseOptions::FromFlags("flagged");
  EXPECT_EQ("etcd://127.0.0.1:2379/kv", opts.registry);
  EXPECT_EQ(6000, opts.registry_ttl.ToMilliseconds());
  EXPECT_EQ(250, opts.registry_withdraw_grace.ToMilliseconds());
  EXPECT_EQ("10.0.0.7:7050", opts.advertised_address);
  EXPECT_EQ("flagged", opts.name);
  EXPECT_EQ("127.0.0.1:1234", opts.rpc_bind_address);
  EXPECT_EQ("", opts.webserver_bind_address);
  EXPECT_EQ("/tmp/somewhere", opts.data_dir);
  EXPECT_EQ(1500, opts.shutdown_timeout.ToMilliseconds());
  EXPECT_EQ(7, opts.messenger.num_workers);
  EXPECT_FALSE(opts.rdma.has_value());  // no --rdma: TCP only
}

// --rdma and the --rdma_* flags become ServerBaseOptions::rdma; the backend is verbs unless
// --rdma_backend names the software NIC.
TEST_F(ServerBaseTest, RdmaOptionsFromFlagsDefaultToVerbs) {
  gflags::FlagSaver saver;
  ASSERT_FALSE(gflags::SetCommandLineOption("rdma", "true").empty());
  ServerBaseOptions opts = ServerBaseOptions::FromFlags("flagged");
  ASSERT_TRUE(opts.rdma.has_value());
  EXPECT_EQ(rdma::RdmaBackend::kVerbs, opts.rdma->backend);
  EXPECT_FALSE(opts.rdma->use_srq);
  ASSERT_FALSE(gflags::SetCommandLineOption("rdma_backend", "soft").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("rdma_use_srq", "true").empty());
  ASSERT_FALSE(gflags::SetCommandLineOption("rdma_service_level", "3").empty());
  opts = ServerBaseOptions::FromFlags("flagged");
  ASSERT_TRUE(opts.rdma.has_value());
  EXPECT_EQ(rdma::RdmaBackend::kSoft, opts.rdma->backend);
  EXPECT_TRUE(opts.rdma->use_srq);
  EXPECT_EQ(3, opts.rdma->endpoint.service_level);
}

// The server's messenger on the software NIC with SRQ: a client offering RDMA ends on it.
TEST_F(ServerBaseTest, RdmaOptionsPutTheServersConnectionsOnRdma) {
  ServerBaseOptions opts = Options();
  opts.rdma = rdma::SoftRdmaOptions();
  opts.rdma->use_srq = true;
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  ASSERT_TRUE(server_->rdma_status().ok()) << server_->rdma_status().ToString();
  client_->Shutdown();
  rpc::MessengerOptions copts;
  copts.name = "rdma-client";
  copts.transport_factory = rdma::NewRdmaTransportFactory(rdma::SoftRdmaOptions());
  client_ = rpc::MessengerBuilder(copts).Build().value();
  server::ServerStatusServiceProxy proxy(client_, server_->rpc_address());
  server::GetStatusRequestPB req;
  server::GetStatusResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.GetStatus(req, &resp, &ctl).ok()) << ctl.status().ToString();
  std::vector<rpc::ConnectionInfo> conns = server_->messenger()->DumpConnections();
  ASSERT_EQ(1u, conns.size());
  EXPECT_EQ("rdma", conns[0].transport);
}

// Verbs asked for where no device can be opened: Init() says why, and the server serves on TCP.
TEST_F(ServerBaseTest, RdmaWithoutADeviceServesOverTcp) {
  ServerBaseOptions opts = Options();
  opts.rdma = rdma::RdmaOptions();  // verbs
  opts.rdma->verbs.device = "rrpc_no_such_device";
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  EXPECT_TRUE(server_->rdma_status().IsNotFound()) << server_->rdma_status().ToString();
  server::ServerStatusServiceProxy proxy(client_, server_->rpc_address());
  server::GetStatusRequestPB req;
  server::GetStatusResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(proxy.GetStatus(req, &resp, &ctl).ok()) << ctl.status().ToString();
  std::vector<rpc::ConnectionInfo> conns = server_->messenger()->DumpConnections();
  ASSERT_EQ(1u, conns.size());
  EXPECT_EQ("tcp", conns[0].transport);
}

// A call running when the drain starts is answered; new connections are refused meanwhile.
TEST_F(ServerBaseTest, DrainStopsAcceptingAndAnswersCallsInFlight) {
  ASSERT_NO_FATAL_FAILURE(StartServer(Options()));
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
  EXPECT_EQ(1u, server_->messenger()->inbound_calls_in_flight());

  std::thread stopper([&] { server_->Shutdown(); });
  const uint16_t port = server_->rpc_address().port();
  ASSERT_TRUE(WaitForCondition([&] { return !AcceptsConnections(port); }));
  EXPECT_FALSE(server_->Health().ok());
  EXPECT_FALSE(done.WaitFor(MonoDelta::FromMilliseconds(1)));  // still held at the gate
  gate_.Open();
  stopper.join();
  done.Wait();
  EXPECT_TRUE(ctl.status().ok()) << ctl.status().ToString();
  EXPECT_EQ("in flight", resp.data());
}

// A call that outlives the shutdown timeout does not hold the shutdown forever; its caller
// still gets its callback (a connection failure).
TEST_F(ServerBaseTest, DrainGivesUpAfterShutdownTimeout) {
  ServerBaseOptions opts = Options();
  opts.shutdown_timeout = MonoDelta::FromMilliseconds(50);
  ASSERT_NO_FATAL_FAILURE(StartServer(opts));
  echo_->set_echo_hook([this](const rtest::EchoRequestPB&, rpc::RpcContext*) { gate_.Pass(); });
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch done(1);
  echo.EchoAsync(req, &resp, &ctl, [&] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  std::thread stopper([&] { server_->Shutdown(); });
  // The messenger closes the connection after the timeout: the caller hears of it.
  done.Wait();
  EXPECT_FALSE(ctl.status().ok());
  gate_.Open();  // the worker finishes; Shutdown joins it
  stopper.join();
}

bool HandlerInstalled(int signo) {
  struct sigaction sa;
  sigaction(signo, nullptr, &sa);
  return sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
}

TEST_F(ServerBaseTest, SigtermDrainsAndSighupOnlyLogs) {
  ASSERT_NO_FATAL_FAILURE(StartServer(Options()));
  Status run_status = Status::IllegalState("not run");
  std::thread runner([&] { run_status = server_->RunUntilSignalled(); });
  ASSERT_TRUE(
      WaitForCondition([] { return HandlerInstalled(SIGTERM) && HandlerInstalled(SIGHUP); }));
  ASSERT_EQ(0, kill(getpid(), SIGHUP));
  // SIGHUP changes nothing: the server still answers.
  rtest::EchoServiceProxy echo(client_, server_->rpc_address());
  rtest::EchoRequestPB req;
  req.set_data("after hup");
  rtest::EchoResponsePB resp;
  rpc::RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ASSERT_TRUE(echo.Echo(req, &resp, &ctl).ok());
  EXPECT_TRUE(server_->Health().ok());

  ASSERT_EQ(0, kill(getpid(), SIGTERM));
  runner.join();
  EXPECT_TRUE(run_status.ok()) << run_status.ToString();
  EXPECT_FALSE(server_->Health().ok());
  EXPECT_FALSE(HandlerInstalled(SIGTERM));  // back to the default action
}

TEST_F(ServerBaseTest, RequestStopEndsRunUntilSignalled) {
  ASSERT_NO_FATAL_FAILURE(StartServer(Options()));
  Status run_status = Status::IllegalState("not run");
  std::thread runner([&] { run_status = server_->RunUntilSignalled(); });
  server_->RequestStop();
  runner.join();
  EXPECT_TRUE(run_status.ok()) << run_status.ToString();
  EXPECT_FALSE(server_->Health().ok());
}

}  // namespace
}  // namespace rrpc
