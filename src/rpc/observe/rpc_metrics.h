// RPC metrics: the prototypes of every metric the RPC core keeps, and small structs caching the
// metric pointers of one messenger, one served method and one called method, so that the call
// path updates a striped counter or histogram through a pointer it already holds: no lock, no
// lookup by name. The messenger creates them when MessengerOptions::enable_metrics is set; every
// hook in the core tests its pointer for null first, so disabled metrics cost one branch.
//
// Entities (type, id) and what they count:
//   ("messenger", <messenger name>)     connections, socket bytes, reactor busy time, the service
//                                       queue and the calls refused before reaching a method.
//   ("method", "<service>.<method>")    server side: calls, errors by code, queue / handler /
//                                       total time, request and response frame bytes.
//   ("client", "<service>.<method>")    client side: latency, timeouts, errors, retries.
//
// Names follow util/metrics conventions (snake_case, unit last, counters end in "_total"); the
// Prometheus writer derives "rrpc_<name>" with Prometheus' unit suffixes from them. Errors by code
// are one counter each ("errors_too_busy_total", ...): the Prometheus writer labels samples by
// entity only, so a `code` label is not available.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/ref_counted.h"
#include "rrpc/util/status.h"
#include "util/metrics/metric_registry.h"

namespace rrpc::rpc {

// ---- Messenger ("messenger", <name>).

inline constexpr MetricPrototype METRIC_connections_open = MetricPrototype::Gauge(
    "connections_open", "Open connections", MetricUnit::kConnections,
    "Connections of this messenger open now, server and client side, negotiating ones included.");
inline constexpr MetricPrototype METRIC_connections_accepted_total = MetricPrototype::Counter(
    "connections_accepted_total", "Connections accepted", MetricUnit::kConnections,
    "Server connections accepted on the messenger's listeners.");
inline constexpr MetricPrototype METRIC_connections_closed_total = MetricPrototype::Counter(
    "connections_closed_total", "Connections closed", MetricUnit::kConnections,
    "Connections closed, server and client side, for any reason (peer, error, idle, shutdown).");
inline constexpr MetricPrototype METRIC_received_bytes_total = MetricPrototype::Counter(
    "received_bytes_total", "Bytes received", MetricUnit::kBytes,
    "Bytes read from the messenger's sockets (preambles, negotiation and frames).");
inline constexpr MetricPrototype METRIC_sent_bytes_total = MetricPrototype::Counter(
    "sent_bytes_total", "Bytes sent", MetricUnit::kBytes,
    "Bytes written to the messenger's sockets (preambles, negotiation and frames).");
inline constexpr MetricPrototype METRIC_connections_refused_total = MetricPrototype::Counter(
    "connections_refused_total", "Connections refused", MetricUnit::kConnections,
    "Connections accepted only to be refused (a retriable error frame, then closed): the "
    "messenger was at --rpc_max_connections, or the process had no file descriptor left.");
inline constexpr MetricPrototype METRIC_connections_handed_over_total = MetricPrototype::Counter(
    "connections_handed_over_total", "Connections handed over", MetricUnit::kConnections,
    "Connections a reactor accepted and handed to another reactor of the messenger that owned "
    "fewer server connections (the kernel's SO_REUSEPORT choice evened out).");
inline constexpr MetricPrototype METRIC_accept_fd_exhausted_total = MetricPrototype::Counter(
    "accept_fd_exhausted_total", "Accepts out of descriptors", MetricUnit::kUnits,
    "Times accept() failed for lack of file descriptors (EMFILE/ENFILE); the reactor then "
    "refuses what waits and pauses accepting for a while instead of retrying at once.");
inline constexpr MetricPrototype METRIC_inbound_memory_bytes = MetricPrototype::Gauge(
    "inbound_memory_bytes", "Inbound memory", MetricUnit::kBytes,
    "Bytes held for inbound calls over all server connections (partial frames, queued and "
    "running requests, unsent responses), as of the last idle scan. Bounded by "
    "--rpc_inbound_memory_limit.");
inline constexpr MetricPrototype METRIC_inbound_memory_peak_bytes =
    MetricPrototype::Gauge("inbound_memory_peak_bytes", "Inbound memory peak", MetricUnit::kBytes,
                           "The highest inbound_memory_bytes seen since the messenger started.");
inline constexpr MetricPrototype METRIC_reads_paused_for_memory_total = MetricPrototype::Counter(
    "reads_paused_for_memory_total", "Reads paused for memory", MetricUnit::kUnits,
    "Times a connection stopped reading because it, or the messenger, held more inbound memory "
    "than allowed; it reads again once calls finish and release it.");
inline constexpr MetricPrototype METRIC_frames_refused_total = MetricPrototype::Counter(
    "frames_refused_total", "Frames refused", MetricUnit::kConnections,
    "Connections closed because a frame could never fit in the per-connection inbound memory "
    "limit, or did not arrive whole within --rpc_frame_receive_timeout_ms.");
inline constexpr MetricPrototype METRIC_peer_errors_total = MetricPrototype::Counter(
    "peer_errors_total", "Peer protocol errors", MetricUnit::kConnections,
    "Connections closed because the peer broke the protocol (bad preamble, negotiation or "
    "frame). The log shows a few of them per period, not every one.");
inline constexpr MetricPrototype METRIC_reactor_busy_time_us = MetricPrototype::Counter(
    "reactor_busy_time_us", "Reactor busy time", MetricUnit::kMicroseconds,
    "Time the reactor threads spent handling events rather than waiting for them, summed over "
    "reactors: divide its rate by the number of reactors for their utilization.");
inline constexpr MetricPrototype METRIC_service_queue_length =
    MetricPrototype::Gauge("service_queue_length", "Service queue length", MetricUnit::kCalls,
                           "Calls waiting in the service queue for a worker now.");
inline constexpr MetricPrototype METRIC_service_queue_overflows_total = MetricPrototype::Counter(
    "service_queue_overflows_total", "Service queue overflows", MetricUnit::kCalls,
    "Calls that arrived to a full service queue, so that one call (the one with the latest "
    "deadline) was refused as too busy.");
inline constexpr MetricPrototype METRIC_calls_expired_in_queue_total = MetricPrototype::Counter(
    "calls_expired_in_queue_total", "Calls expired in queue", MetricUnit::kCalls,
    "Calls whose deadline passed while they waited in the service queue; answered timed out "
    "without running.");
inline constexpr MetricPrototype METRIC_calls_cancelled_in_queue_total = MetricPrototype::Counter(
    "calls_cancelled_in_queue_total", "Calls cancelled in queue", MetricUnit::kCalls,
    "Calls the client cancelled (or gave up on at its deadline) while they waited in the "
    "service queue; answered cancelled without running.");
inline constexpr MetricPrototype METRIC_calls_cancelled_running_total = MetricPrototype::Counter(
    "calls_cancelled_running_total", "Calls cancelled while running", MetricUnit::kCalls,
    "Calls the client cancelled while their handler ran: the handler saw cancelled() turn true.");
inline constexpr MetricPrototype METRIC_streams_open = MetricPrototype::Gauge(
    "streams_open", "Streams open", MetricUnit::kUnits,
    "Streams this server has open now (docs/streams.md): opened and not yet ended.");
inline constexpr MetricPrototype METRIC_streams_opened_total =
    MetricPrototype::Counter("streams_opened_total", "Streams opened", MetricUnit::kUnits,
                             "Streams clients opened on this server (refused ones included).");
inline constexpr MetricPrototype METRIC_stream_messages_sent_total = MetricPrototype::Counter(
    "stream_messages_sent_total", "Stream messages sent", MetricUnit::kMessages,
    "Stream messages this messenger wrote to its connections, client and server side.");
inline constexpr MetricPrototype METRIC_stream_messages_received_total = MetricPrototype::Counter(
    "stream_messages_received_total", "Stream messages received", MetricUnit::kMessages,
    "Stream messages this messenger received, client and server side.");
inline constexpr MetricPrototype METRIC_stream_bytes_sent_total = MetricPrototype::Counter(
    "stream_bytes_sent_total", "Stream bytes sent", MetricUnit::kBytes,
    "Bytes of stream messages sent (bodies and sidecars: what flow control counts).");
inline constexpr MetricPrototype METRIC_stream_bytes_received_total = MetricPrototype::Counter(
    "stream_bytes_received_total", "Stream bytes received", MetricUnit::kBytes,
    "Bytes of stream messages received (bodies and sidecars).");
inline constexpr MetricPrototype METRIC_cancel_requests_total = MetricPrototype::Counter(
    "cancel_requests_total", "Cancel requests", MetricUnit::kCalls,
    "Call ids received in cancel frames, whether or not the call was still in the server.");
inline constexpr MetricPrototype METRIC_worker_idle_polls_total = MetricPrototype::Counter(
    "worker_idle_polls_total", "Worker idle polls", MetricUnit::kUnits,
    "Times a worker that ran out of calls polled for the next one before sleeping "
    "(--rpc_worker_idle_spin_us).");
inline constexpr MetricPrototype METRIC_worker_idle_poll_hits_total = MetricPrototype::Counter(
    "worker_idle_poll_hits_total", "Worker idle poll hits", MetricUnit::kUnits,
    "Idle polls that got a call while polling: hand-offs without a futex wake or a context "
    "switch. Few hits for many polls means polling costs CPU for nothing (it then backs off).");
inline constexpr MetricPrototype METRIC_sync_responses_read_by_caller_total =
    MetricPrototype::Counter(
        "sync_responses_read_by_caller_total", "Sync responses read by the caller",
        MetricUnit::kCalls,
        "Responses to synchronous calls that the calling thread read from the socket itself "
        "(its call the connection's only one outstanding), without a reactor's wake-up.");
// Compression of message bodies (docs/compression.md), requests and responses alike.
inline constexpr MetricPrototype METRIC_compress_input_bytes_total = MetricPrototype::Counter(
    "compress_input_bytes_total", "Bytes before compression", MetricUnit::kBytes,
    "Bodies this messenger compressed (or tried to: see compress_skipped_total), before.");
inline constexpr MetricPrototype METRIC_compress_output_bytes_total = MetricPrototype::Counter(
    "compress_output_bytes_total", "Bytes after compression", MetricUnit::kBytes,
    "The same bodies as sent: compressed, or as they were when compression did not shrink them.");
inline constexpr MetricPrototype METRIC_compress_skipped_total = MetricPrototype::Counter(
    "compress_skipped_total", "Compressions skipped", MetricUnit::kMessages,
    "Bodies sent uncompressed because compressing them did not save at least 1/32 of them.");
inline constexpr MetricPrototype METRIC_compress_time_ns = MetricPrototype::Counter(
    "compress_time_ns", "Compression time", MetricUnit::kNanoseconds,
    "Time spent compressing bodies (skipped ones included), summed over threads.");
inline constexpr MetricPrototype METRIC_decompress_input_bytes_total = MetricPrototype::Counter(
    "decompress_input_bytes_total", "Bytes before decompression", MetricUnit::kBytes,
    "Compressed bodies this messenger received, as they came.");
inline constexpr MetricPrototype METRIC_decompress_output_bytes_total =
    MetricPrototype::Counter("decompress_output_bytes_total", "Bytes after decompression",
                             MetricUnit::kBytes, "The same bodies once decompressed.");
inline constexpr MetricPrototype METRIC_decompress_refused_total = MetricPrototype::Counter(
    "decompress_refused_total", "Decompressions refused", MetricUnit::kMessages,
    "Compressed bodies refused: a stated size above the limit, data that does not decompress to "
    "its stated size, or an unknown codec.");
inline constexpr MetricPrototype METRIC_decompress_time_ns =
    MetricPrototype::Counter("decompress_time_ns", "Decompression time", MetricUnit::kNanoseconds,
                             "Time spent decompressing bodies, summed over threads.");
inline constexpr MetricPrototype METRIC_too_busy_rejections_total = MetricPrototype::Counter(
    "too_busy_rejections_total", "Too-busy rejections", MetricUnit::kCalls,
    "Calls answered ERROR_SERVER_TOO_BUSY, by the service queue or by a handler.");
inline constexpr MetricPrototype METRIC_no_such_method_total =
    MetricPrototype::Counter("no_such_method_total", "Unknown methods", MetricUnit::kCalls,
                             "Calls naming a service or method this messenger does not serve.");

// ---- Service pool ("service_pool", "<messenger>.<pool>"; core/worker_pool.h).

inline constexpr MetricPrototype METRIC_pool_concurrency_limit = MetricPrototype::Gauge(
    "concurrency_limit", "Concurrency limit", MetricUnit::kCalls,
    "Calls the pool may hold at once (queued and running) under its adaptive limit now; 0 "
    "without one.");
inline constexpr MetricPrototype METRIC_pool_calls_in_flight = MetricPrototype::Gauge(
    "calls_in_flight", "Calls in flight", MetricUnit::kCalls,
    "Calls holding an admission slot now (queued or running), of methods that take the "
    "admission path (a named pool, a priority, a limit).");
inline constexpr MetricPrototype METRIC_pool_queued_foreground =
    MetricPrototype::Gauge("queued_foreground", "Queued foreground calls", MetricUnit::kCalls,
                           "Foreground calls waiting in the pool's queue now.");
inline constexpr MetricPrototype METRIC_pool_queued_background =
    MetricPrototype::Gauge("queued_background", "Queued background calls", MetricUnit::kCalls,
                           "Background calls waiting in the pool's queue now.");
inline constexpr MetricPrototype METRIC_pool_background_running =
    MetricPrototype::Gauge("background_running", "Background calls running", MetricUnit::kCalls,
                           "Background calls on the pool's workers now.");
inline constexpr MetricPrototype METRIC_pool_limit_refusals_total = MetricPrototype::Counter(
    "limit_refusals_total", "Adaptive limit refusals", MetricUnit::kCalls,
    "Calls refused as too busy because the pool held as many calls as its adaptive limit.");
inline constexpr MetricPrototype METRIC_concurrency_refusals_total = MetricPrototype::Counter(
    "concurrency_refusals_total", "Concurrency limit refusals", MetricUnit::kCalls,
    "Calls refused as too busy because their method had max_concurrency calls in flight.");
inline constexpr MetricPrototype METRIC_method_max_concurrency =
    MetricPrototype::Gauge("max_concurrency", "Max concurrency", MetricUnit::kCalls,
                           "The method's static concurrency limit; 0: none.");

// ---- Server method ("method", "<service>.<method>").

inline constexpr MetricPrototype METRIC_calls_total = MetricPrototype::Counter(
    "calls_total", "Calls", MetricUnit::kCalls,
    "Calls that arrived for this method, counted when routed (refused ones included).");
inline constexpr MetricPrototype METRIC_errors_application_total =
    MetricPrototype::Counter("errors_application_total", "Application errors", MetricUnit::kErrors,
                             "Calls the handler failed (ERROR_APPLICATION).");
inline constexpr MetricPrototype METRIC_errors_invalid_request_total = MetricPrototype::Counter(
    "errors_invalid_request_total", "Invalid requests", MetricUnit::kErrors,
    "Calls whose request did not parse (ERROR_INVALID_REQUEST).");
inline constexpr MetricPrototype METRIC_errors_timed_out_total = MetricPrototype::Counter(
    "errors_timed_out_total", "Timed out", MetricUnit::kErrors,
    "Calls answered ERROR_TIMED_OUT: their deadline passed in the service queue.");
inline constexpr MetricPrototype METRIC_errors_too_busy_total =
    MetricPrototype::Counter("errors_too_busy_total", "Too busy", MetricUnit::kErrors,
                             "Calls answered ERROR_SERVER_TOO_BUSY (service queue full).");
inline constexpr MetricPrototype METRIC_errors_unavailable_total =
    MetricPrototype::Counter("errors_unavailable_total", "Unavailable", MetricUnit::kErrors,
                             "Calls answered ERROR_UNAVAILABLE (server shutting down).");
inline constexpr MetricPrototype METRIC_errors_other_total =
    MetricPrototype::Counter("errors_other_total", "Other errors", MetricUnit::kErrors,
                             "Calls a handler failed with any other RPC error code.");
inline constexpr MetricPrototype METRIC_queue_time_us = MetricPrototype::Histogram(
    "queue_time_us", "Queue time", MetricUnit::kMicroseconds,
    "Time from a call's arrival to a worker picking it up (expired calls included).");
inline constexpr MetricPrototype METRIC_handler_time_us = MetricPrototype::Histogram(
    "handler_time_us", "Handler time", MetricUnit::kMicroseconds,
    "Time from a worker picking a call up to the handler returning (request parsing included). "
    "A handler that answers later, from another thread, is timed by total_time_us.");
inline constexpr MetricPrototype METRIC_total_time_us = MetricPrototype::Histogram(
    "total_time_us", "Total time", MetricUnit::kMicroseconds,
    "Time from a call's arrival to its response being queued for writing, errors included.");
inline constexpr MetricPrototype METRIC_request_bytes_total = MetricPrototype::Counter(
    "request_bytes_total", "Request bytes", MetricUnit::kBytes,
    "Bytes of this method's request frames (length prefix, header, body, sidecars).");
inline constexpr MetricPrototype METRIC_response_bytes_total = MetricPrototype::Counter(
    "response_bytes_total", "Response bytes", MetricUnit::kBytes,
    "Bytes of this method's response frames, errors included (length prefix, header, body, "
    "sidecars).");

// ---- Client method ("client", "<service>.<method>").

inline constexpr MetricPrototype METRIC_client_latency_us = MetricPrototype::Histogram(
    "client_latency_us", "Client latency", MetricUnit::kMicroseconds,
    "Time from a client call being sent to its callback, whatever the outcome.");
inline constexpr MetricPrototype METRIC_client_timeouts_total = MetricPrototype::Counter(
    "client_timeouts_total", "Client timeouts", MetricUnit::kCalls,
    "Client calls that failed timed out (the client's timer or the server's ERROR_TIMED_OUT).");
inline constexpr MetricPrototype METRIC_client_errors_total =
    MetricPrototype::Counter("client_errors_total", "Client errors", MetricUnit::kCalls,
                             "Client calls that failed, for any reason (timeouts included).");
inline constexpr MetricPrototype METRIC_client_retries_total = MetricPrototype::Counter(
    "client_retries_total", "Client retries", MetricUnit::kCalls,
    "Client attempts sent again after a retriable failure (a proxy's RetryPolicy, a channel's "
    "failover); hedges are not counted.");

class MessengerMetrics;

// The cached metrics of one method a messenger serves. Its pointers are set once at creation;
// the metrics are thread-safe, so any thread may record through a MethodMetrics.
struct MethodMetrics {
  MessengerMetrics* messenger;  // the messenger's, for counts both keep
  Counter* calls;
  Counter* errors_application;
  Counter* errors_invalid_request;
  Counter* errors_timed_out;
  Counter* errors_too_busy;
  Counter* errors_unavailable;
  Counter* errors_other;
  HistogramMetric* queue_time_us;
  HistogramMetric* handler_time_us;
  HistogramMetric* total_time_us;
  Counter* request_bytes;
  Counter* response_bytes;

  // A call was routed here; `frame_bytes` counts its length prefix.
  void CallRouted(size_t frame_bytes) {
    calls->Increment();
    request_bytes->IncrementBy(static_cast<int64_t>(frame_bytes));
  }
  // The call is about to be answered with `code` (any error but success).
  void CountError(ErrorStatusPB::RpcErrorCodePB code);
  // A response of `frame_bytes` was queued for the call that arrived at `arrival`.
  void ResponseQueued(MonoTime arrival, MonoTime now, size_t frame_bytes) {
    total_time_us->Record(ElapsedMicros(arrival, now));
    response_bytes->IncrementBy(static_cast<int64_t>(frame_bytes));
  }

  // Whole microseconds from `from` to `to`; 0 if `to` is earlier.
  static uint64_t ElapsedMicros(MonoTime from, MonoTime to) {
    const int64_t us = (to - from).ToMicroseconds();
    return us > 0 ? static_cast<uint64_t>(us) : 0;
  }
};

// The cached metrics of one method a messenger calls. Thread-safe, like MethodMetrics.
struct ClientMethodMetrics {
  HistogramMetric* latency_us;
  Counter* timeouts;
  Counter* errors;
  Counter* retries;  // counted by the attempt engine as it sends a retry (core/attempt_engine.h)

  // A call sent at `sent_at` finished with `status`.
  void CallFinished(const Status& status, MonoTime sent_at, MonoTime now);
};

// The metrics of one messenger, and the owner of its methods' and clients' metric structs (which
// live as long as it does). The messenger makes one when metrics are enabled, before its
// reactors and service pool, and destroys it after them. Thread-safe: the pointers below never
// change after construction; ServerMethod() and ClientMethod() lock.
class MessengerMetrics {
 public:
  // Registers the entity ("messenger", `messenger_name`) in `registry`, which must outlive this.
  // Messenger names must be unique within a registry (two would share, and fight over, one
  // service_queue_length gauge).
  MessengerMetrics(MetricRegistry* registry, const std::string& messenger_name);
  ~MessengerMetrics();
  MessengerMetrics(const MessengerMetrics&) = delete;
  MessengerMetrics& operator=(const MessengerMetrics&) = delete;

  MetricRegistry* registry() const { return registry_; }
  MetricEntity* entity() const { return entity_.get(); }

  // The metrics of `service`.`method` served by this messenger (entity "method"), created on first
  // call. For registration time, not the call path.
  MethodMetrics* ServerMethod(const std::string& service, const std::string& method);
  // The metrics of calls to `service`.`method` (entity "client"), created on first call. Callers
  // cache the result (see core/remote_method.h).
  ClientMethodMetrics* ClientMethod(const std::string& service, const std::string& method);

  // service_queue_length reads `length` from now on (on the reader's thread). Detach it before
  // what it reads is destroyed: DetachServiceQueueLength() returns once no call of it runs.
  void AttachServiceQueueLength(std::function<int64_t()> length);
  void DetachServiceQueueLength();

  // Connection hooks (reactor threads).
  void ConnectionOpened(bool accepted) {
    connections_open->Increment();
    if (accepted) connections_accepted->Increment();
  }
  void ConnectionClosed() {
    connections_open->Decrement();
    connections_closed->Increment();
  }

  Gauge* const connections_open;
  Counter* const connections_accepted;
  Counter* const connections_closed;
  Counter* const received_bytes;
  Counter* const sent_bytes;
  Counter* const reactor_busy_time_us;
  Counter* const peer_errors;
  Counter* const connections_refused;
  Counter* const connections_handed_over;
  Counter* const accept_fd_exhausted;
  Gauge* const inbound_memory_bytes;
  Gauge* const inbound_memory_peak_bytes;
  Counter* const reads_paused_for_memory;
  Counter* const frames_refused;
  Counter* const service_queue_overflows;
  Counter* const calls_expired_in_queue;
  Counter* const calls_cancelled_in_queue;
  Counter* const calls_cancelled_running;
  Counter* const cancel_requests;
  Gauge* const streams_open;
  Counter* const streams_opened;
  Counter* const stream_messages_sent;
  Counter* const stream_messages_received;
  Counter* const stream_bytes_sent;
  Counter* const stream_bytes_received;
  Counter* const too_busy_rejections;
  Counter* const no_such_method;
  Counter* const worker_idle_polls;
  Counter* const worker_idle_poll_hits;
  Counter* const sync_responses_read_by_caller;
  Counter* const compress_input_bytes;
  Counter* const compress_output_bytes;
  Counter* const compress_skipped;
  Counter* const compress_time_ns;
  Counter* const decompress_input_bytes;
  Counter* const decompress_output_bytes;
  Counter* const decompress_refused;
  Counter* const decompress_time_ns;

  // Compression hooks (any thread). A body of `in` bytes was compressed to `out` bytes, or sent
  // as it was (`skipped`, out == in), in `elapsed`.
  void BodyCompressed(size_t in, size_t out, bool skipped, MonoDelta elapsed);
  // A compressed body of `in` bytes was decompressed to `out`, or refused (`ok` false).
  void BodyDecompressed(size_t in, size_t out, bool ok, MonoDelta elapsed);

 private:
  MessengerMetrics(MetricRegistry* registry, scoped_refptr<MetricEntity> entity);

  MetricRegistry* const registry_;
  const scoped_refptr<MetricEntity> entity_;
  CallbackGauge* const service_queue_length_;

  Mutex mu_;
  // By "<service>.<method>". Never removed: pointers handed out stay valid.
  std::map<std::string, std::unique_ptr<MethodMetrics>> server_methods_ RRPC_GUARDED_BY(mu_);
  std::map<std::string, std::unique_ptr<ClientMethodMetrics>> client_methods_ RRPC_GUARDED_BY(mu_);
  // Each method/client entity, kept for the lifetime of the pointers into it.
  std::map<std::string, scoped_refptr<MetricEntity>> entities_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc::rpc
