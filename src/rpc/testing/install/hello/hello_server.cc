// hello-server PORT_FILE [rdma]: serves HelloService through ServerBase on a free loopback port,
// writes the port to PORT_FILE once it serves, and runs until SIGTERM (graceful drain, exit 0).
// With "rdma", connections from clients that offer RDMA upgrade to it (rrpc/rpc/rdma.h, the
// software backend); the others stay on TCP.
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "hello/hello.rrpc.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/server/server_base.h"

namespace {

class HelloServiceImpl : public hello::HelloServiceIf {
 public:
  void Greet(const hello::GreetRequestPB* req, hello::GreetResponsePB* resp,
             rrpc::rpc::RpcContext* context) override {
    resp->set_greeting("hello, " + req->name());
    context->RespondSuccess();
  }
  void Add(const hello::AddRequestPB* req, hello::AddResponsePB* resp,
           rrpc::rpc::RpcContext* context) override {
    resp->set_sum(req->a() + req->b());
    context->RespondSuccess();
  }
};

// Written to a temporary name and renamed: the test never reads half a port.
bool WritePortFile(const std::string& path, uint16_t port) {
  const std::string tmp = path + ".tmp";
  FILE* f = fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  fprintf(f, "%u\n", static_cast<unsigned>(port));
  return fclose(f) == 0 && rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool rdma = argc == 3 && strcmp(argv[2], "rdma") == 0;
  if (argc != 2 && !rdma) {
    fprintf(stderr, "usage: hello-server PORT_FILE [rdma]\n");
    return 2;
  }
  rrpc::ServerBaseOptions options;
  options.name = "hello-server";
  options.rpc_bind_address = "127.0.0.1:0";
  if (rdma)
    options.messenger.transport_factory =
        rrpc::rdma::NewRdmaTransportFactory(rrpc::rdma::SoftRdmaOptions());
  rrpc::ServerBase server(options);
  rrpc::Status s = server.RegisterService(std::make_unique<HelloServiceImpl>());
  if (s.ok()) s = server.Start();
  if (s.ok() && !WritePortFile(argv[1], server.rpc_address().port())) {
    s = rrpc::Status::IOError("cannot write the port file", argv[1]);
  }
  if (s.ok()) s = server.RunUntilSignalled();
  if (!s.ok()) {
    fprintf(stderr, "hello-server: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
