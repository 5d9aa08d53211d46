// raw-tcp-limit: what this kernel allows for a length-prefixed TCP echo, with no RPC layer at
// all. rrpc's numbers are read against it. Same flags and RESULT line as rpc-bench.
#include <gflags/gflags.h>

#include "bench/peers/peer_runner.h"
#include "bench/peers/raw_tcp_client.h"
#include "bench/peers/raw_tcp_server.h"

int main(int argc, char** argv) {
  gflags::SetUsageMessage(
      "Raw TCP echo over epoll: the kernel's limit for rrpc's benchmarks.\n"
      "  raw-tcp-limit --mode=throughput|latency|cps [--payload_bytes=64] ...");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  return rrpc::bench::RunPeerMain("raw-tcp", &rrpc::bench::RawTcpEchoServer::Start,
                                  &rrpc::bench::RunRawTcpClientThread);
}
