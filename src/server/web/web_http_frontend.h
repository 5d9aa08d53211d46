// WebHttpFrontend: the web UI's public port, HTTP or HTTPS. It accepts connections on one
// event-loop thread, reads each request (headers, and a body of announced length) there, and
// relays only complete requests to civetweb on a private loopback port. With a TLS context it
// terminates TLS there too (WebClientTls, non-blocking): a handshake in progress counts as a
// request still being sent, so HTTPS clients are capped and timed exactly like HTTP ones.
//
// Why: civetweb gives every accepted connection a blocking thread (16) or a queue slot (64), and
// has no limit of its own; a client that connects and sends nothing holds one until the request
// timeout, so enough idle or slow clients kept /healthz waiting. Here an idle connection costs a
// descriptor and a few bytes of buffer, never a civetweb thread, and:
//   - at most `max_connections` are open at once. At the cap, a new connection takes the place
//     of the oldest one still sending its request (that one gets "503 Service Unavailable" and
//     is closed); when every open connection is already being served, the new one gets the 503.
//     So a stream of idle connections can't lock the port, and a client that sends its request
//     at once (a health checker) is always served.
//   - a request not complete within `request_timeout_ms` of the connect gets "408 Request
//     Timeout" and is closed (HTTPS: handshake included; one still in its handshake is closed).
//   - a relayed connection idle (no byte either way) for `io_timeout_ms` is closed.
// Requests civetweb must refuse (headers too large, body of unknown or too large length) are
// relayed as soon as that is known, so civetweb's precise 4xx still answers them.
//
// Counts: open connections, refused (503) and timed out (408), exported as metrics when given
// a registry (web_connections_open, web_connections_refused_total,
// web_request_timeouts_total).
//
// Thread-safety: Bind/Start/Stop from one controlling thread; LookupClient and stats from any
// thread. Everything else runs on the frontend's own thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "rrpc/util/mutex.h"
#include "rrpc/util/status.h"
#include "util/metrics/metric_prototype.h"

namespace rrpc {

// In the registry given in Options, entity ("server", "web").
inline constexpr MetricPrototype METRIC_web_connections_open = MetricPrototype::Gauge(
    "web_connections_open", "Open web UI connections", MetricUnit::kConnections,
    "HTTP connections open at the web UI's port (webserver_max_connections "
    "caps them).");
inline constexpr MetricPrototype METRIC_web_connections_refused_total = MetricPrototype::Counter(
    "web_connections_refused_total", "Refused web UI connections", MetricUnit::kConnections,
    "HTTP connections answered 503 and closed at webserver_max_connections (the oldest idle one "
    "makes room for a new one, or the new one is refused).");
inline constexpr MetricPrototype METRIC_web_request_timeouts_total = MetricPrototype::Counter(
    "web_request_timeouts_total", "Web UI request timeouts", MetricUnit::kConnections,
    "HTTP connections answered 408 and closed: no complete request within the request timeout.");

class MetricRegistry;
class Counter;
class Gauge;
namespace security {
class TlsContext;
}

class WebHttpFrontend {
 public:
  struct Options {
    size_t max_connections = 128;
    int request_timeout_ms = 3000;  // connect to a complete request
    int io_timeout_ms = 10000;      // a relayed connection with no traffic
    // Headers longer than this, or a body longer than max_body_bytes, are relayed at once for
    // civetweb to refuse.
    size_t max_header_bytes = 32 * 1024;
    size_t max_body_bytes = 64 * 1024;
    MetricRegistry* metric_registry = nullptr;  // optional; not owned
    // Set: HTTPS only (mutual TLS when the context has a CA). Not owned; outlives the frontend
    // (its Reload() applies to connections accepted afterwards).
    const security::TlsContext* tls = nullptr;
  };
  struct Stats {
    int64_t open = 0;
    int64_t refused = 0;    // answered 503 at the cap
    int64_t timed_out = 0;  // answered 408: no complete request in time
  };

  explicit WebHttpFrontend(Options options);
  ~WebHttpFrontend();  // Stops if running.

  // Binds host:port (port 0: ephemeral) and listens. No thread yet.
  Status Bind(const std::string& host, uint16_t port);
  uint16_t bound_port() const { return bound_port_; }

  // Starts the event loop, relaying complete requests to 127.0.0.1:backend_port.
  Status Start(uint16_t backend_port);

  // Closes the listener and every connection, joins the thread. Idempotent.
  void Stop();

  // If `backend_local_port` is the local port of one of our live connections to the backend,
  // stores the client's "ip:port" in `client` and returns true.
  bool LookupClient(uint16_t backend_local_port, std::string* client) const;

  Stats stats() const;

 private:
  struct Conn;

  void Loop();
  void AcceptNew();
  // HTTPS: continues the handshake; the request is read once it is done.
  void ContinueHandshake(Conn* c);
  // Reads what the client sent; starts the relay once the request is complete.
  void ReadRequest(Conn* c);
  // The client's socket, through TLS when it speaks it: as recv()/send() (non-blocking).
  ssize_t ClientRecv(Conn* c, char* buf, size_t len);
  ssize_t ClientSend(Conn* c, const char* data, size_t len);
  // Connects to civetweb and hands it the request read so far.
  void StartRelay(Conn* c);
  // Moves bytes both ways as the poll results allow; false when the connection is done.
  bool Relay(Conn* c, short client_events, short backend_events);
  // Best-effort short answer (503, 408), then close.
  void Refuse(Conn* c, const char* response);
  void Close(Conn* c);
  // civetweb is done with this connection: its socket and lookup entry go.
  void CloseBackend(Conn* c);
  // True when `buffer` holds a whole request, or enough to know civetweb will refuse it.
  bool RequestReadyToRelay(const std::string& buffer) const;

  const Options options_;
  int listen_fd_ = -1;  // owned
  int wake_fd_ = -1;    // eventfd, owned: Stop() wakes the loop
  uint16_t bound_port_ = 0;
  uint16_t backend_port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};

  // Loop thread only. Oldest first (eviction takes the oldest still reading).
  std::list<std::unique_ptr<Conn>> conns_;
  int64_t accept_paused_until_ms_ = 0;  // out of descriptors: accept again after this

  std::atomic<int64_t> open_{0};
  Gauge* open_metric_ = nullptr;
  Counter* refused_metric_ = nullptr;
  Counter* timed_out_metric_ = nullptr;
  std::atomic<int64_t> refused_{0};
  std::atomic<int64_t> timed_out_{0};

  mutable Mutex mu_;
  std::map<uint16_t, std::string> clients_by_port_ RRPC_GUARDED_BY(mu_);
};

}  // namespace rrpc
