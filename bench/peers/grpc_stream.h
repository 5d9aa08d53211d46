// grpc-peer --mode=stream: gRPC C++ server streaming, what rrpc's stream is compared with. The
// server is gRPC's synchronous API (a ServerWriter writing in a loop: gRPC's own flow control
// blocks Write() when the client's window is full); the client reads with a ClientReader and
// checks every message (size, seq, each byte: PayloadPattern's request #seq). One stream per
// client thread, on a channel of its own.
//
// GrpcStreamServer: Start() and Shutdown() are for the main thread; each stream holds one of
// gRPC's sync server threads while it runs. RunGrpcStreamClientThread fails the process on any
// error.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "bench/peers/echo.grpc.pb.h"
#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

class GrpcStreamServer : public PeerServer, private EchoStream::Service {
 public:
  static std::unique_ptr<PeerServer> Start(const PeerConfig& config, std::string* error);
  ~GrpcStreamServer() override;

  int port() const override { return port_; }
  void Shutdown() override;

 private:
  GrpcStreamServer() = default;
  grpc::Status Download(grpc::ServerContext* context, const StreamRequest* request,
                        grpc::ServerWriter<EchoResponse>* writer) override;

  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool stopped_ = false;
};

void RunGrpcStreamClientThread(const PeerConfig& config, const ClientThreadArgs& args);

}  // namespace bench
}  // namespace rrpc
