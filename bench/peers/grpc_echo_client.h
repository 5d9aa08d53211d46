// The gRPC peer's client, following gRPC's performance notes: each client thread owns one channel
// (its own HTTP/2 connection: a distinct channel argument and a local subchannel pool stop gRPC
// from sharing one connection between the threads' channels), one stub reused for every call, and
// one completion queue it polls itself. Throughput mode keeps Depth() async unary calls
// outstanding; latency mode is the same with one; cps mode makes a new channel per call and drops
// it after.
//
// Called on its own client thread by RunPeerMain; it fails the process on any error.
#pragma once

#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

void RunGrpcClientThread(const PeerConfig& config, const ClientThreadArgs& args);

}  // namespace bench
}  // namespace rrpc
