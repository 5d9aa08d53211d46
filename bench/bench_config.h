// BenchConfig: one rpc-bench run's settings as plain values. rpc_bench_main.cc fills it from the
// flags; the mode runners (bench_modes.h) read it and never touch gflags. Immutable once built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "rrpc/rpc/messenger_options.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::security {
class TlsContext;
}  // namespace rrpc::security

namespace rrpc::bench {

enum class BenchMode { kThroughput, kLatency, kCps, kSparse, kMixed, kStream };

const char* ModeName(BenchMode mode);

// Stream mode: who sends the stream's messages. kDown: the server (Download); kUp: the client
// (Upload); kBidi: the client, and the server echoes each one back (Exchange).
enum class StreamDirection { kDown, kUp, kBidi };

const char* DirectionName(StreamDirection direction);

struct BenchConfig {
  BenchMode mode = BenchMode::kThroughput;
  // Where the clients connect: the in-process server's bound address or --server_addr.
  Sockaddr server;
  // Throughput and latency modes: when set, the clients call through a cluster channel over this
  // target (e.g. "list://h1:7000,h2:7000"; rpc/cluster/channel.h) instead of `server`.
  std::string target;
  // True when this process also runs the server (client and server threads then share the
  // process, and usage is split between them by thread name).
  bool in_process_server = true;

  // The client messenger (throughput, latency modes); its name becomes "client" and its reactor
  // count client_reactors.
  rpc::MessengerOptions client_messenger;
  int client_reactors = 2;
  int client_threads = 2;
  // Outstanding calls per client thread (throughput mode).
  int async_call_concurrency = 64;
  // Latency mode: each call is made with the synchronous proxy from a client thread (true), or
  // from the previous call's completion callback on the client reactor (false: no application
  // thread wakeup in the round trip).
  bool latency_sync_calls = false;
  double run_seconds = 5;
  double warmup_seconds = 1;
  size_t payload_bytes = 64;
  size_t response_bytes = 64;
  size_t sidecar_bytes = 0;
  // The request payload is text like kv values (FillText) rather than incompressible bytes.
  bool text_payload = false;
  // Deadline of each call; a call that misses it fails the run.
  MonoDelta call_timeout = MonoDelta::FromSeconds(10);
  // The RESULT line's transport: tcp, tls, rdma-soft (software backend) or rdma-verbs. With tls,
  // client_messenger.security speaks TLS and raw_client_tls is what the hand-made connections of
  // cps and sparse modes use.
  std::string transport = "tcp";
  std::shared_ptr<const security::TlsContext> raw_client_tls;
  // cps over TLS: each connection resumes the previous one's session (a ticket) instead of a
  // full handshake.
  bool tls_resume_sessions = false;
  // mixed mode: `mixed_bulk_streams` bulk calls kept in flight, each with a sidecar of
  // `mixed_bulk_bytes`, beside one chain of small calls (payload_bytes, one at a time) whose
  // latency is what the run reports. `mixed_separate_messenger`: the bulk calls go through a
  // messenger of their own (their own connection and client reactor) instead of the small calls'.
  int mixed_bulk_streams = 1;
  size_t mixed_bulk_bytes = 1 << 20;
  bool mixed_separate_messenger = false;
  // sparse mode.
  int connections = 10000;
  int senders = 2;
  int64_t sleep_us = 1000;
  // sparse: the connections are held by a client Messenger (any transport, rrpc's real cost per
  // connection; bench_sparse_messenger.cc) instead of hand-made raw TCP connections.
  bool sparse_messenger_client = false;
  // cps: each connection is one of a client Messenger's (any transport, the RDMA bootstrap
  // included; bench_cps_messenger.cc) instead of a hand-made raw TCP connection.
  bool cps_messenger_client = false;
  // sparse over the messenger: seconds to keep the established connections idle before the
  // calls start (a script reads the server's RSS then).
  double sparse_hold_seconds = 0;

  // stream mode: `streams` streams open at once on the client messenger's one (bulk) connection,
  // each message of payload_bytes plus (when sidecar_bytes > 0) one sidecar of sidecar_bytes.
  // with_unary_probe: beside them, one chain of payload_bytes-sized Echo calls (one at a time,
  // each issued by the last one's callback) through the same proxy, on the small calls'
  // connection (the streams' with bulk_connection_bytes 0), whose latency is reported apart
  // (probe_* fields).
  StreamDirection stream_direction = StreamDirection::kDown;
  int streams = 1;
  bool with_unary_probe = false;

  // Calls (or connections) in flight at once over the whole run: the RESULT line's conc.
  int Concurrency() const;
};

}  // namespace rrpc::bench
