// Client and server in two processes over the software backend (its devices reach each other
// through abstract UNIX sockets, as two NICs on one host would): calls go over RDMA, and when
// the server process dies mid-call the client's call fails with a network error, promptly.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "rpc/rdma/rdma_factory.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

// The child: an RDMA echo server; reports its port on `out`, then serves until killed, writing
// one byte to `out` as the handler of a call whose data is "doomed" begins.
[[noreturn]] void RunServerChild(int out) {
  MessengerOptions o;
  o.name = "child-server";
  o.transport_factory = std::make_shared<rdma::RdmaTransportFactory>(rdma::SoftRdmaOptions());
  auto server = MessengerBuilder(o).Build();
  if (!server.ok()) _exit(2);
  auto service = std::make_unique<TestEchoService>();
  service->set_echo_hook([out](const rtest::EchoRequestPB& req, RpcContext*) {
    const char entered = 'e';
    if (req.data() == "doomed" && write(out, &entered, 1) != 1) _exit(6);
  });
  if (!(*server)->RegisterService(std::move(service)).ok()) _exit(3);
  Sockaddr addr;
  if (!(*server)->Listen(Sockaddr::Loopback(0), &addr).ok()) _exit(4);
  uint16_t port = addr.port();
  if (write(out, &port, sizeof(port)) != sizeof(port)) _exit(5);
  for (;;) pause();
}

TEST(RdmaProcessTest, CallsCrossProcessesAndFailWhenTheServerDies) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    RunServerChild(fds[1]);
  }
  close(fds[1]);
  uint16_t port = 0;
  ASSERT_EQ(read(fds[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));

  MessengerOptions o;
  o.name = "client";
  auto factory = std::make_shared<rdma::RdmaTransportFactory>(rdma::SoftRdmaOptions());
  o.transport_factory = factory;
  auto client = MessengerBuilder(o).Build().value();
  rtest::EchoServiceProxy proxy(client, Sockaddr::Loopback(port));
  for (size_t size : {10, 5000, 100000}) {
    rtest::EchoRequestPB req;
    req.set_data(std::string(size, 'p'));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    Status s = proxy.Echo(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(resp.data(), req.data());
  }
  auto conns = client->DumpConnections();
  ASSERT_EQ(conns.size(), 1u);
  EXPECT_EQ(conns[0].transport, "rdma");

  // A call the server sits on; the server process dies under it once its handler has begun.
  rtest::EchoRequestPB req;
  req.set_data("doomed");
  req.set_sleep_ms(20000);
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  CountDownLatch done(1);
  proxy.EchoAsync(req, &resp, &ctl, [&done] { done.CountDown(); });
  pollfd entered{fds[0], POLLIN, 0};
  ASSERT_EQ(poll(&entered, 1, 30000), 1) << "the call never reached the server's handler";
  char byte = 0;
  ASSERT_EQ(read(fds[0], &byte, 1), 1);
  close(fds[0]);
  const MonoTime killed = MonoTime::Now();
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(30)));
  EXPECT_TRUE(ctl.status().IsNetworkError()) << ctl.status().ToString();
  EXPECT_LT((MonoTime::Now() - killed).ToSeconds(), 10.0);
  client->Shutdown();
}

}  // namespace
}  // namespace rrpc::rpc
