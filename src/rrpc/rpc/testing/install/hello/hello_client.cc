// hello-client PORT: calls HelloService on 127.0.0.1:PORT (Greet on a worker, Add inline) and
// prints what it got back; exits 1 if a call fails. Includes only the generated header: it is
// enough to build a messenger and call.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hello/hello.rrpc.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: hello-client PORT\n");
    return 2;
  }
  auto messenger = rrpc::rpc::MessengerBuilder("hello-client").Build();
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
  printf("greeting=%s\nsum=%lld\n", greet_resp.greeting().c_str(),
         static_cast<long long>(add_resp.sum()));
  return 0;
}
