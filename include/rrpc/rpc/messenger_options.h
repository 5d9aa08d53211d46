// MessengerOptions: every knob of a messenger, as plain values. Libraries take this struct;
// binaries fill it from flags (messenger_flags.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/rpc/compression.h"
#include "rrpc/rpc/result_tracker_options.h"
#include "rrpc/rpc/security_options.h"
#include "rrpc/rpc/service_pool_options.h"
#include "rrpc/util/monotime.h"

namespace rrpc {
class MetricRegistry;
}  // namespace rrpc

namespace rrpc::rpc {

class Authorizer;
class TransportFactory;

struct MessengerOptions {
  // Shows up in thread names, logs and the server's connection page.
  std::string name = "rrpc";
  // Reactor threads; each accepts on its own SO_REUSEPORT listener and serves a new connection
  // itself unless another reactor owns fewer server connections (then that one serves it).
  int num_reactors = 2;
  // Worker threads running handlers (only used once a service is registered).
  int num_workers = 2;
  // Calls waiting for a worker; more are refused with ERROR_SERVER_TOO_BUSY.
  size_t service_queue_length = 64;
  // The default pool's share of workers for background calls and its adaptive concurrency limit
  // (service_pool_options.h; off by default).
  double background_share = 0.25;
  AdaptiveLimitOptions adaptive_limit;
  // Named pools, each with a queue and workers of its own, for services and methods put there
  // with ServiceIf::SetPool / SetMethodPool (docs/isolation.md). Empty: one shared pool.
  std::vector<ServicePoolConfig> service_pools;
  // How long a worker that runs out of calls polls for the next one before it sleeps. Polling
  // saves the reactor a futex wake and the worker a context switch per hand-off under load; one
  // worker at most polls, and polling backs off while most polls find nothing (PollPolicy).
  MonoDelta worker_idle_spin = MonoDelta::FromMicroseconds(50);
  // How long a thread making a synchronous call polls for the response before it sleeps; a
  // response within it saves the reactor a wake-up of the caller. Off by default: round trips
  // mostly outlast a short poll, which then costs CPU without cutting latency.
  MonoDelta sync_call_poll;
  // A thread whose synchronous call is its connection's only one outstanding reads the response
  // itself (plain TCP): the reactor's reads stay parked between such calls, and the caller is
  // woken by the kernel, not by the reactor (docs/architecture.md, "The synchronous call path").
  // false: responses always come through the reactor.
  bool sync_call_caller_reads = true;
  // Before a caller takes parked reads it checks (one poll()) that the server sent nothing and
  // did not close while nobody read, so a restarted server gets the call on a fresh connection
  // rather than failing it; skipped when the reads were parked less than this long ago (a
  // thread calling in a loop), where a close racing the call fails it as a network error, as it
  // could between the check and the write anyway. Zero: always check.
  MonoDelta sync_peer_check_after = MonoDelta::FromMicroseconds(1000);
  // Largest frame accepted or sent, checked from the length prefix before buffering.
  size_t max_message_size = 64 * 1024 * 1024;
  // Compression of call bodies (docs/compression.md): the default codec of this messenger's
  // calls, the size below which a body goes uncompressed (requests and, as a server, responses)
  // and zstd's level. A compressed body's stated size is held to max_message_size too.
  CompressionOptions compression;
  // Bytes read per recv() when no large frame is pending.
  size_t read_block_size = 64 * 1024;
  // Calls whose request frame has at least this many bytes, and every stream (docs/streams.md),
  // go to a remote over a connection of their own (one per reactor and remote), so a small call
  // never waits behind a bulk transfer in a write queue or a TCP stream; with more than one
  // reactor, a bulk call or stream from a thread goes to another reactor than that thread's small
  // calls to the remote, so they do not wait for a reactor busy copying a bulk frame
  // (docs/architecture.md, "Bulk and small calls"). 0: every call and stream to a remote shares
  // one connection.
  size_t bulk_connection_bytes = 256 * 1024;
  bool IsBulk(size_t request_bytes) const {
    return bulk_connection_bytes > 0 && request_bytes >= bulk_connection_bytes;
  }
  // Dead-peer detection (docs/reliability.md, "Dead peers"). Every TCP connection (TLS included,
  // and the TCP socket an RDMA connection keeps) sets TCP keepalive (probes after keepalive_idle
  // without traffic, every keepalive_interval, keepalive_count unanswered ones close it) and
  // TCP_USER_TIMEOUT (bytes sent and unacknowledged for tcp_user_timeout close it; longer than a
  // LAN ever stalls, far shorter than the kernel's 15 minutes). A client connection with calls
  // outstanding that has received nothing for ping_after sends a ping (a control frame) so that a
  // silent dead peer leaves unacknowledged bytes, and the user timeout closes the connection: a
  // dead peer is declared within ping_after + the scan period (idle_scan_period) +
  // tcp_user_timeout, under 5 s by default, and its calls fail with a retriable NetworkError. Zero
  // (or Max for ping_after) turns one off.
  MonoDelta tcp_keepalive_idle = MonoDelta::FromSeconds(10);
  MonoDelta tcp_keepalive_interval = MonoDelta::FromSeconds(2);
  int tcp_keepalive_count = 3;
  MonoDelta tcp_user_timeout = MonoDelta::FromMilliseconds(2500);
  MonoDelta ping_after = MonoDelta::FromSeconds(1);
  // Time allowed for connect + negotiation.
  MonoDelta negotiation_timeout = MonoDelta::FromSeconds(3);
  // A connection with nothing in flight for this long is closed; Max() keeps it forever. So is
  // one whose queued bytes have not moved for this long (a peer that stopped reading).
  MonoDelta idle_timeout = MonoDelta::FromSeconds(65);
  // How often each reactor looks for idle connections.
  MonoDelta idle_scan_period = MonoDelta::FromSeconds(1);
  int listen_backlog = 1024;
  // Inbound memory budget: bytes held for a server's inbound calls (partial frames, queued and
  // running requests, responses not yet written), per connection and over the whole messenger.
  // A connection above either stops reading until calls finish and release memory; a frame that
  // alone exceeds the per-connection limit could never fit and closes the connection (after a
  // FATAL_INVALID_FRAME error frame). 0: no limit. Keep the per-connection one above
  // max_message_size, or legal frames that large are refused.
  size_t inbound_memory_per_connection = 128 << 20;
  size_t inbound_memory_limit = size_t{1} << 30;
  // Streams (docs/streams.md). Bytes of messages a peer may send one stream ahead of its reading
  // (its receive window; at least 64 KiB, the window every stream starts with). Server side, the
  // windows beyond 64 KiB of one connection's open streams share stream_window_budget_per_
  // connection (a stream that finds it spent keeps 64 KiB), and a connection opens at most
  // max_streams_per_connection streams (more are refused, retriably, as too busy): so what a
  // connection's stalled streams hold is bounded by max_streams_per_connection * 64 KiB +
  // the budget, plus one message each. Unread stream messages are not counted in the inbound
  // memory above: a stalled stream must not stop its connection's other calls.
  size_t stream_window = 1 << 20;
  size_t stream_window_budget_per_connection = 32 << 20;
  size_t max_streams_per_connection = 256;
  // A frame must arrive whole within this long of its first byte (or of the previous frame, on a
  // busy connection); otherwise the connection closes. Bounds how long a slow sender holds a
  // partial frame. Max(): no bound.
  MonoDelta frame_receive_timeout = MonoDelta::FromSeconds(60);
  // Server connections open at once (over all reactors); 0: no limit. A connection beyond it is
  // sent a retriable ERROR_SERVER_TOO_BUSY frame (call id -2) and closed, so that a flood of
  // clients cannot take every file descriptor of the process.
  size_t max_connections = 0;
  // Where the messenger registers its metrics (rpc/observe/rpc_metrics.h); must outlive the
  // messenger. nullptr: the messenger makes and owns a registry of its own
  // (Messenger::metric_registry()).
  MetricRegistry* metric_registry = nullptr;
  // false: no metrics at all (each hook on the call path then costs one predictable branch);
  // for A/B benchmarks of their cost.
  bool enable_metrics = true;
  // Makes the transports of the messenger's connections (rpc/transport/transport.h); nullptr:
  // plain TCP. For transports beyond TCP and for tests that watch or wrap every connection.
  std::shared_ptr<TransportFactory> transport_factory;
  // TLS, authentication and their policies (docs/security.md).
  SecurityOptions security;
  // Checks every call of a service that has no authorizer of its own
  // (ServiceIf::SetAuthorizer); nullptr: every call is allowed.
  std::shared_ptr<const Authorizer> authorizer;
  // Server side: the result tracker that runs calls of tracked methods at most once
  // (docs/exactly-once.md).
  ResultTrackerOptions result_tracker;
};

}  // namespace rrpc::rpc
