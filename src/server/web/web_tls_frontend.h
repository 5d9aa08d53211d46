// WebTlsFrontend: terminates HTTPS for the Webserver and relays the plaintext to civetweb over
// loopback.
//
// Why not civetweb's own TLS: Debian's civetweb 1.15 loads OpenSSL by name at run time
// ("libssl.so") and looks up SSL_get_peer_certificate, which OpenSSL 3 no longer exports, so
// its HTTPS cannot start (civetweb issue #1334). Here TLS uses the OpenSSL 3 that rrpc links.
//
// One request per connection (civetweb closes after each response), so each TLS connection is
// a handshake, one relayed request and one relayed response. An acceptor thread queues accepted
// sockets (bounded; overflow is closed at once) for `num_threads` relay threads. Every blocking
// call is bounded by io_timeout_ms, so a stalled client holds a relay thread for at most that.
//
// The loopback port is reachable by local processes too: the Webserver asks LookupClient()
// whether a request came through here and refuses it otherwise, so TLS can't be bypassed.
//
// Thread-safety: Bind/Start/Stop from one controlling thread; LookupClient from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rpc/security/tls_context.h"
#include "util/mutex.h"
#include "util/status.h"

namespace rrpc {

class WebTlsFrontend {
 public:
  struct Options {
    std::string certificate_path;  // PEM, leaf first then chain.
    std::string private_key_path;  // PEM; empty: read from certificate_path.
    // PEM CAs; set: clients must present a certificate one of them signed (mutual TLS).
    std::string ca_certificate_path;
    int num_threads = 2;
    int io_timeout_ms = 10000;  // Handshake, idle read/write limit per connection.
    size_t max_queued_connections = 64;
  };

  explicit WebTlsFrontend(Options options);
  ~WebTlsFrontend();  // Stops if running.

  // Loads the certificate and key and binds host:port (port 0: ephemeral). No threads yet.
  Status Bind(const std::string& host, uint16_t port);
  uint16_t bound_port() const { return bound_port_; }

  // Starts relaying accepted connections to 127.0.0.1:backend_port.
  void Start(uint16_t backend_port);

  // Closes the listener, cuts every open connection and joins all threads. Idempotent.
  void Stop();

  // Reads the certificate, key and CA files again; new connections use them, open ones keep
  // theirs. On error the old ones stay. Thread-safe (e.g. from a SIGHUP handler's thread).
  Status ReloadCertificates();

  // If `backend_local_port` is the local port of one of our live loopback connections to the
  // backend, stores the TLS client's "ip:port" in `client` and returns true.
  bool LookupClient(uint16_t backend_local_port, std::string* client) const;

 private:
  void AcceptLoop();
  void RelayLoop();
  // Serves one accepted TLS connection to completion (or timeout / Stop).
  void Relay(int client_fd, const std::string& client_addr);

  const Options options_;
  // The same certificate loading and reload as the RPC port's TLS (rpc/security). Thread-safe.
  std::unique_ptr<security::TlsContext> tls_;
  int listen_fd_ = -1;  // Owned.
  uint16_t bound_port_ = 0;
  uint16_t backend_port_ = 0;

  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::vector<std::thread> relays_;

  mutable Mutex mu_;
  CondVar queue_cv_;
  std::deque<std::pair<int, std::string>> queue_ GUARDED_BY(mu_);  // accepted fd, client
  std::set<int> active_fds_ GUARDED_BY(mu_);                       // shut down by Stop()
  std::map<uint16_t, std::string> clients_by_port_ GUARDED_BY(mu_);
};

}  // namespace rrpc
