// The raw-tcp peer's client: one blocking socket per client thread, with the pipelining an RPC
// client could at best achieve. In latency and throughput mode the thread keeps Depth() requests
// outstanding on one connection, answers every batch of responses one read() returned with one
// write() of new requests, and relies on TCP's order to match responses to requests. In cps mode
// it connects, sends one request, reads the answer and closes, over and over.
//
// Called on its own client thread by RunPeerMain; it fails the process on any error.
#pragma once

#include "bench/peers/peer_runner.h"

namespace rrpc {
namespace bench {

void RunRawTcpClientThread(const PeerConfig& config, const ClientThreadArgs& args);

}  // namespace bench
}  // namespace rrpc
