// grpc-peer: gRPC C++ echo, tuned as gRPC's performance notes advise, as the reference rrpc is
// compared with. Same flags and RESULT line as rpc-bench.
#include <gflags/gflags.h>

#include "bench/peers/grpc_echo_client.h"
#include "bench/peers/grpc_echo_server.h"
#include "bench/peers/peer_runner.h"

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "gRPC C++ async echo: the reference peer for rrpc's benchmarks.\n"
      "  grpc-peer --mode=throughput|latency|cps [--payload_bytes=64] ...");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return rrpc::bench::RunPeerMain("grpc", &rrpc::bench::GrpcEchoServer::Start,
                                  &rrpc::bench::RunGrpcClientThread);
}
