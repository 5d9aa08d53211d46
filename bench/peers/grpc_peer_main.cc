// grpc-peer: gRPC C++ echo, tuned as gRPC's performance notes advise, as the reference rrpc is
// compared with. Same flags and RESULT line as rpc-bench.
#include "bench/peers/grpc_echo_client.h"
#include "bench/peers/grpc_echo_server.h"
#include "bench/peers/peer_runner.h"
#include "rrpc/util/command_line.h"

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(&argc, &argv,
                         {"grpc-peer [--mode=throughput|latency|cps] [--payload_bytes=N] ...",
                          "gRPC C++ async echo: the reference peer for rrpc's benchmarks. Same "
                          "flags and RESULT line as rpc-bench.",
                          {"bench/peers/grpc_peer_main.cc", "bench/peers/grpc_echo_server.cc",
                           "bench/peers/peer_runner.cc"}});
  return rrpc::bench::RunPeerMain("grpc", &rrpc::bench::GrpcEchoServer::Start,
                                  &rrpc::bench::RunGrpcClientThread);
}
