// grpc-peer: gRPC C++ echo, tuned as gRPC's performance notes advise, as the reference rrpc is
// compared with. Same flags and RESULT line as rpc-bench.
#include "bench/peers/grpc_echo_client.h"
#include "bench/peers/grpc_echo_server.h"
#include "bench/peers/grpc_stream.h"
#include "bench/peers/peer_runner.h"
#include "rrpc/util/command_line.h"

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(
      &argc, &argv,
      {"grpc-peer [--mode=throughput|latency|cps|stream] [--payload_bytes=N] ...",
       "gRPC C++ async echo (stream: sync server streaming): the reference "
       "peer for rrpc's benchmarks. Same flags and RESULT line as rpc-bench.",
       {"bench/peers/grpc_peer_main.cc", "bench/peers/grpc_echo_server.cc",
        "bench/peers/peer_runner.cc"}});
  using rrpc::bench::BenchMode;
  using rrpc::bench::PeerConfig;
  return rrpc::bench::RunPeerMain(
      "grpc",
      [](const PeerConfig& config, std::string* error) {
        return config.mode == BenchMode::kStream
                   ? rrpc::bench::GrpcStreamServer::Start(config, error)
                   : rrpc::bench::GrpcEchoServer::Start(config, error);
      },
      [](const PeerConfig& config, const rrpc::bench::ClientThreadArgs& args) {
        if (config.mode == BenchMode::kStream) {
          rrpc::bench::RunGrpcStreamClientThread(config, args);
        } else {
          rrpc::bench::RunGrpcClientThread(config, args);
        }
      });
}
