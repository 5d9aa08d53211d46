// raw-tcp-limit: what this kernel allows for a length-prefixed TCP echo, with no RPC layer at
// all. rrpc's numbers are read against it. Same flags and RESULT line as rpc-bench.
#include "bench/peers/peer_runner.h"
#include "bench/peers/raw_tcp_client.h"
#include "bench/peers/raw_tcp_server.h"
#include "bench/peers/raw_tcp_stream.h"
#include "rrpc/util/command_line.h"

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"raw-tcp-limit [--mode=throughput|latency|cps|stream] [--payload_bytes=N] ...",
       "Raw TCP echo over epoll (stream: one-way frames from a blocking "
       "writer): the kernel's limit for rrpc's benchmarks. Same flags and "
       "RESULT line as rpc-bench.",
       {"bench/peers/raw_tcp_limit_main.cc", "bench/peers/peer_runner.cc"}});
  using rrpc::bench::BenchMode;
  using rrpc::bench::PeerConfig;
  return rrpc::bench::RunPeerMain(
      "raw-tcp",
      [](const PeerConfig& config, std::string* error) {
        return config.mode == BenchMode::kStream
                   ? rrpc::bench::RawTcpStreamServer::Start(config, error)
                   : rrpc::bench::RawTcpEchoServer::Start(config, error);
      },
      [](const PeerConfig& config, const rrpc::bench::ClientThreadArgs& args) {
        if (config.mode == BenchMode::kStream) {
          rrpc::bench::RunRawTcpStreamClientThread(config, args);
        } else {
          rrpc::bench::RunRawTcpClientThread(config, args);
        }
      });
}
