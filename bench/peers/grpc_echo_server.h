// GrpcEchoServer: gRPC C++'s echo server set up the way gRPC's performance notes advise for the
// asynchronous API: one completion queue per server thread, each thread polling only its own CQ,
// and enough Echo requests posted on every CQ up front that an arriving call never waits for one
// to be posted.
//
// Start() and Shutdown() are for the main thread; each ServerCall lives on its CQ's thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/peers/echo.grpc.pb.h"
#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

class GrpcEchoServer : public PeerServer {
 public:
  // Serves Echo on config.bind_host:config.port with config.server_threads CQ threads.
  static std::unique_ptr<PeerServer> Start(const PeerConfig& config, std::string* error);

  ~GrpcEchoServer() override;

  int port() const override { return port_; }
  void Shutdown() override;

  // One CQ and the thread that polls it.
  struct CqWorker {
    std::unique_ptr<grpc::ServerCompletionQueue> cq;
    std::thread thread;
    // Guards `accepting`: a call is posted on the CQ only while it is true, so no request is
    // posted after Shutdown() starts shutting the CQ down.
    std::mutex mu;
    bool accepting = true;
  };

 private:
  explicit GrpcEchoServer(const PeerConfig& config) : config_(config) {}

  // Posts one Echo request on `worker`'s CQ unless shutting down. Any thread.
  void PostCall(CqWorker* worker);
  void Poll(CqWorker* worker);

  friend class GrpcServerCall;

  const PeerConfig config_;
  Echo::AsyncService service_;
  std::unique_ptr<grpc::Server> server_;
  std::vector<std::unique_ptr<CqWorker>> workers_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace bench
}  // namespace rrpc
