#include "rrpc/rpc/messenger_flags.h"

#include <gflags/gflags.h>

#include <algorithm>

DEFINE_int32(rpc_num_reactors, 2,
             "Reactor threads per messenger. Each accepts on its own SO_REUSEPORT socket and owns "
             "its connections; more reactors spread socket work over more cores.");
DEFINE_int32(rpc_num_workers, 2,
             "Worker threads running RPC handlers. Handlers that block on disk need more.");
DEFINE_int32(rpc_service_queue_length, 64,
             "Calls that may wait for a worker. Beyond it the call with the latest deadline is "
             "refused with a retriable 'server too busy'. Longer queues absorb bursts but add "
             "queueing delay.");
DEFINE_int32(rpc_worker_idle_spin_us, 50,
             "Microseconds a worker that runs out of calls polls for the next one before it "
             "sleeps (0: never). Saves a wake-up per call under load; at most one worker polls, "
             "and polling backs off while most polls find nothing.");
DEFINE_int32(rpc_sync_call_poll_us, 0,
             "Microseconds a thread making a synchronous call polls for the response before it "
             "sleeps (0: never). Saves a wake-up per call when responses come that fast; costs "
             "CPU when they do not.");
DEFINE_bool(rpc_sync_call_caller_reads, true,
            "A thread whose synchronous call is the only one outstanding on its connection "
            "(plain TCP) reads the response from the socket itself instead of being woken by a "
            "reactor that read it (saves a thread wake-up per call).");
DEFINE_int32(rpc_sync_peer_check_after_us, 1000,
             "A synchronous caller about to read its own response first checks (one poll()) "
             "that the server did not close or send anything while the connection sat idle, so "
             "a restarted server gets the call on a fresh connection; skipped when the previous "
             "response came less than this many microseconds ago (a close in that window fails "
             "the call instead). 0: always check.");
DEFINE_int64(rpc_max_message_size, 64 * 1024 * 1024,
             "Largest frame (bytes) accepted or sent. Checked from the length prefix before "
             "anything is buffered, so a peer cannot make the server allocate more.");
DEFINE_int64(rpc_bulk_connection_bytes, 256 * 1024,
             "Calls whose request has at least this many bytes (sidecars included), and every "
             "stream, go over a connection of their own, so small calls to the same server do "
             "not wait behind them. 0: all calls and streams to a server share one connection.");
DEFINE_int32(rpc_negotiation_timeout_ms, 3000,
             "Milliseconds allowed for connect plus negotiation of a connection.");
DEFINE_int32(rpc_idle_timeout_ms, 65000,
             "Milliseconds after which a connection with nothing in flight is closed; "
             "0 keeps idle connections forever.");
DEFINE_int64(rpc_max_connections, 0,
             "Server connections a messenger keeps open at once (0: no limit). Beyond it a new "
             "connection gets a retriable 'server too busy' error frame and is closed. Set it "
             "below the process's open-file limit (ulimit -n) minus what the service needs.");

DEFINE_int64(rpc_inbound_memory_per_connection, 128 << 20,
             "Bytes a server connection may hold for its inbound calls (partial frames, queued "
             "and running requests, unsent responses) before it stops reading (0: no limit). "
             "Keep it above --rpc_max_message_size.");
DEFINE_int64(rpc_inbound_memory_limit, int64_t{1} << 30,
             "Bytes all server connections of a messenger may hold for inbound calls before they "
             "stop reading (0: no limit).");
DEFINE_int32(rpc_frame_receive_timeout_ms, 60000,
             "Milliseconds a frame may take to arrive whole (0: no bound). A sender slower than "
             "that has its connection closed, freeing the partial frame.");

DEFINE_int32(rpc_tcp_keepalive_idle_s, 10,
             "Seconds without traffic before TCP keepalive probes a connection (0: no keepalive). "
             "Lower finds dead idle peers sooner, at a probe per connection per period.");
DEFINE_int32(rpc_tcp_keepalive_interval_s, 2, "Seconds between TCP keepalive probes.");
DEFINE_int32(rpc_tcp_keepalive_count, 3,
             "Unanswered TCP keepalive probes after which a connection is closed.");
DEFINE_int32(rpc_tcp_user_timeout_ms, 2500,
             "TCP_USER_TIMEOUT: milliseconds sent bytes may stay unacknowledged before the "
             "connection is closed as dead (0: the kernel's ~15 minutes). Too low closes "
             "connections over a congested path.");
DEFINE_int32(rpc_ping_after_ms, 1000,
             "A client connection with calls outstanding that received nothing for this many "
             "milliseconds sends a ping frame, so a dead peer is found by the user timeout "
             "(0: never ping).");
DEFINE_bool(rpc_result_tracker, true,
            "Keep the results of calls of tracked methods (option rrpc.tracked) so that a retry "
            "gets the first answer instead of running the handler again (docs/exactly-once.md). "
            "Off: tracked methods run every call, and clients do not retry lost outcomes.");
DEFINE_int64(rpc_result_tracker_max_bytes, 64 << 20,
             "Hard cap (bytes) on the result tracker's memory. Past it new tracked calls are "
             "refused with a retriable 'server too busy'.");
DEFINE_int64(rpc_result_tracker_max_bytes_per_client, 4 << 20,
             "Cap (bytes) on the results kept for one client id. Past it the client's oldest "
             "finished results are evicted (their retries get ERROR_REQUEST_STALE, never a second "
             "run); with only running calls left, new ones are refused as too busy.");
DEFINE_int32(rpc_result_tracker_client_idle_s, 300,
             "Seconds after which a client id with no call running and none received is "
             "forgotten. Keep it above the longest time a client retries one call.");
DEFINE_bool(rpc_enable_metrics, true,
            "Keep per-method and per-messenger metrics (counters and histograms updated on every "
            "call). Off saves their cost, measured in docs/performance.md.");

namespace rrpc::rpc {

MessengerOptions MessengerOptionsFromFlags(std::string name) {
  MessengerOptions options;
  options.name = std::move(name);
  options.num_reactors = FLAGS_rpc_num_reactors;
  options.num_workers = FLAGS_rpc_num_workers;
  options.service_queue_length = static_cast<size_t>(FLAGS_rpc_service_queue_length);
  options.worker_idle_spin = MonoDelta::FromMicroseconds(FLAGS_rpc_worker_idle_spin_us);
  options.sync_call_poll = MonoDelta::FromMicroseconds(FLAGS_rpc_sync_call_poll_us);
  options.sync_call_caller_reads = FLAGS_rpc_sync_call_caller_reads;
  options.sync_peer_check_after = MonoDelta::FromMicroseconds(FLAGS_rpc_sync_peer_check_after_us);
  options.max_message_size = static_cast<size_t>(FLAGS_rpc_max_message_size);
  options.bulk_connection_bytes = FLAGS_rpc_bulk_connection_bytes > 0
                                      ? static_cast<size_t>(FLAGS_rpc_bulk_connection_bytes)
                                      : 0;
  options.negotiation_timeout = MonoDelta::FromMilliseconds(FLAGS_rpc_negotiation_timeout_ms);
  options.result_tracker.enabled = FLAGS_rpc_result_tracker;
  options.result_tracker.max_bytes =
      static_cast<size_t>(std::max<int64_t>(0, FLAGS_rpc_result_tracker_max_bytes));
  options.result_tracker.max_bytes_per_client =
      static_cast<size_t>(std::max<int64_t>(0, FLAGS_rpc_result_tracker_max_bytes_per_client));
  options.result_tracker.client_idle_timeout =
      MonoDelta::FromSeconds(std::max(1, FLAGS_rpc_result_tracker_client_idle_s));
  options.idle_timeout = FLAGS_rpc_idle_timeout_ms > 0
                             ? MonoDelta::FromMilliseconds(FLAGS_rpc_idle_timeout_ms)
                             : MonoDelta::Max();
  options.max_connections =
      FLAGS_rpc_max_connections > 0 ? static_cast<size_t>(FLAGS_rpc_max_connections) : 0;
  options.inbound_memory_per_connection =
      static_cast<size_t>(std::max<int64_t>(0, FLAGS_rpc_inbound_memory_per_connection));
  options.inbound_memory_limit =
      static_cast<size_t>(std::max<int64_t>(0, FLAGS_rpc_inbound_memory_limit));
  options.tcp_keepalive_idle = MonoDelta::FromSeconds(std::max(0, FLAGS_rpc_tcp_keepalive_idle_s));
  options.tcp_keepalive_interval = MonoDelta::FromSeconds(FLAGS_rpc_tcp_keepalive_interval_s);
  options.tcp_keepalive_count = FLAGS_rpc_tcp_keepalive_count;
  options.tcp_user_timeout =
      MonoDelta::FromMilliseconds(std::max(0, FLAGS_rpc_tcp_user_timeout_ms));
  options.ping_after = FLAGS_rpc_ping_after_ms > 0
                           ? MonoDelta::FromMilliseconds(FLAGS_rpc_ping_after_ms)
                           : MonoDelta::Max();
  options.frame_receive_timeout =
      FLAGS_rpc_frame_receive_timeout_ms > 0
          ? MonoDelta::FromMilliseconds(FLAGS_rpc_frame_receive_timeout_ms)
          : MonoDelta::Max();
  options.enable_metrics = FLAGS_rpc_enable_metrics;
  options.security = SecurityOptionsFromFlags();
  options.authorizer = AuthorizerFromFlags();
  return options;
}

}  // namespace rrpc::rpc
