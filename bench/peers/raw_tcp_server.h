// RawTcpEchoServer: the least a TCP echo server can do on this kernel, as a yardstick for rrpc.
// N threads, each with its own epoll set and its own SO_REUSEPORT listener (the kernel spreads new
// connections over them), level-triggered, 4-byte length-prefixed frames, no serialization. Every
// complete frame read in one read() is answered, and all the answers go out in one write(); a
// plain echo is written straight from the read buffer without a copy.
// With --server_workers=N the loops only read: each frame goes to one of N worker threads, which
// answers it and writes the answer itself (the hop a worker-pool RPC server makes per call).
//
// Start() and Shutdown() are for the main thread; the loops own their connections.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

class HandoffPool;
class RawTcpEchoLoop;

class RawTcpEchoServer : public PeerServer {
 public:
  // Listens on config.bind_host:config.port with config.server_threads loops and answers with
  // config.server_response_bytes bytes per request (-1: the request's own size).
  static std::unique_ptr<PeerServer> Start(const PeerConfig& config, std::string* error);

  ~RawTcpEchoServer() override;

  int port() const override { return port_; }
  void Shutdown() override;

 private:
  RawTcpEchoServer() = default;

  std::unique_ptr<HandoffPool> workers_;  // --server_workers > 0 only
  std::vector<std::unique_ptr<RawTcpEchoLoop>> loops_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace bench
}  // namespace rrpc
