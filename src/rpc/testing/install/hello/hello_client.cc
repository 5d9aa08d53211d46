// hello-client PORT [rdma]: calls HelloService on 127.0.0.1:PORT (Greet on a worker, Add inline,
// then Greet again through a cluster channel over the target list://127.0.0.1:PORT) and prints
// what it got back and the transport its connection ended on; exits 1 if a call fails.
// The generated header is enough to build a messenger and call; with "rdma" the messenger's
// transport factory is RDMA's (rrpc/rpc/rdma.h, the software backend: no device needed).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hello/hello.rrpc.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/rdma.h"

int main(int argc, char** argv) {
  const bool rdma = argc == 3 && strcmp(argv[2], "rdma") == 0;
  if (argc != 2 && !rdma) {
    fprintf(stderr, "usage: hello-client PORT [rdma]\n");
    return 2;
  }
  rrpc::rpc::MessengerOptions options;
  options.name = "hello-client";
  if (rdma)
    options.transport_factory = rrpc::rdma::NewRdmaTransportFactory(rrpc::rdma::SoftRdmaOptions());
  auto messenger = rrpc::rpc::MessengerBuilder(options).Build();
  if (!messenger.ok()) {
    fprintf(stderr, "hello-client: %s\n", messenger.status().ToString().c_str());
    return 1;
  }
  hello::HelloServiceProxy proxy(messenger.value(),
                                 rrpc::Sockaddr::Loopback(static_cast<uint16_t>(atoi(argv[1]))));

  hello::GreetRequestPB greet_req;
  hello::GreetResponsePB greet_resp;
  greet_req.set_name("install-test");
  rrpc::rpc::RpcController greet_ctl;
  greet_ctl.set_timeout(rrpc::MonoDelta::FromSeconds(30));
  rrpc::Status s = proxy.Greet(greet_req, &greet_resp, &greet_ctl);
  if (!s.ok()) {
    fprintf(stderr, "hello-client: Greet: %s\n", s.ToString().c_str());
    return 1;
  }

  hello::AddRequestPB add_req;
  hello::AddResponsePB add_resp;
  add_req.set_a(40);
  add_req.set_b(2);
  rrpc::rpc::RpcController add_ctl;
  add_ctl.set_timeout(rrpc::MonoDelta::FromSeconds(30));
  s = proxy.Add(add_req, &add_resp, &add_ctl);
  if (!s.ok()) {
    fprintf(stderr, "hello-client: Add: %s\n", s.ToString().c_str());
    return 1;
  }
  auto channel =
      rrpc::rpc::Channel::Create(messenger.value(), std::string("list://127.0.0.1:") + argv[1]);
  if (!channel.ok()) {
    fprintf(stderr, "hello-client: Channel::Create: %s\n", channel.status().ToString().c_str());
    return 1;
  }
  hello::HelloServiceProxy cluster_proxy(channel.value());
  rrpc::rpc::RpcController cluster_ctl;
  cluster_ctl.set_timeout(rrpc::MonoDelta::FromSeconds(30));
  s = cluster_proxy.Greet(greet_req, &greet_resp, &cluster_ctl);
  if (!s.ok()) {
    fprintf(stderr, "hello-client: Greet through a channel: %s\n", s.ToString().c_str());
    return 1;
  }
  std::string transport = "none";
  for (const rrpc::rpc::ConnectionInfo& c : messenger.value()->DumpConnections()) {
    if (c.direction == "client") transport = c.transport;
  }
  printf("greeting=%s\nsum=%lld\ntransport=%s\n", greet_resp.greeting().c_str(),
         static_cast<long long>(add_resp.sum()), transport.c_str());
  return 0;
}
