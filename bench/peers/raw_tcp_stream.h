// raw-tcp-limit --mode=stream: one-way bytes over raw TCP, the limit a stream of rrpc or gRPC is
// read against. The client connects and sends one frame whose 4-byte payload is the message size
// it wants; the server then writes frames of that size (raw_tcp_wire.h: a length, then
// PayloadPattern's request #seq) as fast as the socket takes them, many per send(), until the
// client closes. The client checks every frame (length, seq, each byte) as rpc-bench's stream
// client does.
//
// RawTcpStreamServer: an accepting thread and one blocking writer thread per connection; Start()
// and Shutdown() are for the main thread. RunRawTcpStreamClientThread runs on its client thread
// (one connection, one stream) and fails the process on any error.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

class RawTcpStreamServer : public PeerServer {
 public:
  static std::unique_ptr<PeerServer> Start(const PeerConfig& config, std::string* error);
  ~RawTcpStreamServer() override;

  int port() const override { return port_; }
  void Shutdown() override;

 private:
  RawTcpStreamServer() = default;
  void AcceptLoop();
  // One connection's writer: reads the wanted size, then streams until the client goes.
  void Serve(int fd);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> fds_;              // GUARDED_BY(mu_): open connections, shut down by Shutdown()
  std::vector<std::thread> writers_;  // GUARDED_BY(mu_)
  bool stopped_ = false;
};

void RunRawTcpStreamClientThread(const PeerConfig& config, const ClientThreadArgs& args);

}  // namespace bench
}  // namespace rrpc
