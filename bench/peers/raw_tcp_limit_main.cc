// raw-tcp-limit: what this kernel allows for a length-prefixed TCP echo, with no RPC layer at
// all. rrpc's numbers are read against it. Same flags and RESULT line as rpc-bench.
#include "bench/peers/peer_runner.h"
#include "bench/peers/raw_tcp_client.h"
#include "bench/peers/raw_tcp_server.h"
#include "rrpc/util/command_line.h"

int main(int argc, char** argv) {
  rrpc::ParseCommandLine(&argc, &argv,
                         {"raw-tcp-limit [--mode=throughput|latency|cps] [--payload_bytes=N] ...",
                          "Raw TCP echo over epoll: the kernel's limit for rrpc's benchmarks. "
                          "Same flags and RESULT line as rpc-bench.",
                          {"bench/peers/raw_tcp_limit_main.cc", "bench/peers/peer_runner.cc"}});
  return rrpc::bench::RunPeerMain("raw-tcp", &rrpc::bench::RawTcpEchoServer::Start,
                                  &rrpc::bench::RunRawTcpClientThread);
}
