// ConnectionInfo: what Messenger::DumpConnections() reports about one connection (the web UI's
// /connections page shows it). A snapshot, copied out of the reactor that owns the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rrpc::rpc {

struct ConnectionInfo {
  std::string remote;
  std::string direction;  // "client" / "server"
  std::string state;      // "connecting", "negotiating", "open", "closed"
  std::string transport;  // "tcp", "tls", "rdma"
  // What the transport adds about itself (TLS version and cipher, RDMA credits...).
  std::vector<std::pair<std::string, std::string>> transport_details;
  int reactor = 0;
  uint64_t bytes_received = 0;
  uint64_t bytes_sent = 0;
  size_t calls_in_flight = 0;
  // The server stopped reading: the peer leaves too many responses unread, or its inbound memory
  // is over the limit.
  bool reads_paused = false;
  // Server side: bytes this connection holds against the inbound memory budget (its partial
  // frame, queued and running requests, unsent responses) now, and the most it held.
  int64_t inbound_memory_bytes = 0;
  int64_t inbound_memory_peak_bytes = 0;
  double age_seconds = 0;
};

}  // namespace rrpc::rpc
