// TlsTransport: a connection's frames inside TLS over a non-blocking TCP socket, driven by the
// reactor like TcpTransport (docs/security.md). The handshake runs on the socket's watchers, never
// blocking: a client transport reports OnTransportConnected() only once TCP and TLS are both up;
// a server transport is made by the connection's negotiation when the first bytes of a new
// connection are a TLS ClientHello (Connection::UpgradeTransport), and the bytes already read
// are replayed into OpenSSL before the socket's. Either way the handshake lies inside the
// connection's negotiation timeout, so a peer that stalls mid-handshake is cut off by it.
//
// Reads: SSL_read (read-ahead on, so one recv() takes many records) into a FrameReader, frames
// out as on TCP. Writes: the queue's first bytes, up to 256 KiB, are gathered into one buffer and
// go out in one SSL_write: one call per reactor write batch, not one per frame. When the socket
// is full the transport keeps that buffer (bounded: one per connection) and finishes it when the
// socket drains; the bytes count as taken, like bytes in a kernel socket buffer.
//
// One SSL session serves both directions; every SSL call holds ssl_mu_, so a worker may write a
// lone response (capabilities().concurrent_write) while the reactor reads: it waits for at most
// one SSL_read. Reactor thread, except Write() and HoldsUnsentBytes() (see Transport).
#pragma once

#include <ev.h>

#include <memory>
#include <string>
#include <vector>

#include "rpc/security/tls_context.h"
#include "rpc/transport/frame_reader.h"
#include "rpc/transport/tcp_transport.h"
#include "rpc/transport/transport.h"
#include "rrpc/util/mutex.h"
#include "rrpc/util/sockaddr.h"
#include "util/socket.h"

typedef struct bio_st BIO;

namespace rrpc::rpc {

class TlsTransport final : public Transport {
 public:
  // Client: `socket` is connecting to `remote`; the server's certificate must verify against
  // the context's CA and name `server_name` (or, when empty, `remote`'s IP address).
  static Result<std::unique_ptr<Transport>> NewClient(Socket socket, const Sockaddr& remote,
                                                      const security::TlsContext& context,
                                                      const std::string& server_name,
                                                      const StreamTransportOptions& options);
  // Server: continues an accepted stream whose first unread bytes are the client's ClientHello.
  static Result<std::unique_ptr<Transport>> NewServer(DetachedStream stream,
                                                      const security::TlsContext& context,
                                                      const StreamTransportOptions& options);
  ~TlsTransport() override;

  const char* name() const override { return "tls"; }
  TransportCapabilities capabilities() const override;
  TransportSecurity security() const override;
  void Start(struct ev_loop* loop, TransportHost* host) override;
  Status ExpectPreamble(size_t bytes) override;
  Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) override;
  bool HoldsUnsentBytes() const override;
  void NotifyWhenWritable(bool on) override;
  void PauseReading(bool paused) override;
  Result<DetachedStream> Detach() override;
  void Close() override;
  // The decrypted bytes of a frame not yet complete (the connection's inbound memory budget and
  // frame progress timeout count them, as over TCP).
  size_t buffered_bytes() const override { return reader_.buffered(); }
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override;

  // What the socket BIO sees (it lives in the .cc); public for the BIO's callbacks.
  struct SocketBioState {
    int fd = -1;
    std::string replay;  // bytes read before the handshake began (the ClientHello's start)
    size_t replay_pos = 0;
    int last_errno = 0;
  };

 private:
  enum class Phase { kConnecting, kHandshaking, kEstablished, kClosed };

  TlsTransport(Socket socket, SSL* ssl, Phase phase, std::string replay,
               const StreamTransportOptions& options);

  static void OnReadable(struct ev_loop* loop, ev_io* w, int revents);
  static void OnWritable(struct ev_loop* loop, ev_io* w, int revents);
  void HandleReadable();
  void HandleWritable();
  void FinishConnect();
  // Drives SSL_do_handshake; on success tells the host (client) and starts reading frames.
  void ContinueHandshake();
  // SSL_read until the socket and OpenSSL's buffer are drained (or the fairness limit).
  void ReadRecords();
  // Sends what is left of the pending buffer; true when it is all out. REQUIRES: ssl_mu_ held.
  Result<bool> FlushPending() RRPC_REQUIRES(ssl_mu_);
  // The same, taking ssl_mu_.
  Result<bool> FlushPendingLocked();
  void DeliverBuffered();
  // The watchers the current state needs, on or off.
  void UpdateWatchers();
  void SetWatcher(ev_io* w, bool* active, bool on);
  // A failed SSL call: its error as a Status (and clears OpenSSL's error queue).
  Status SslError(int ret, const char* what);
  void Fail(const Status& s);

  Socket socket_;
  SSL* ssl_;  // owned
  SocketBioState bio_state_;
  FrameReader reader_;
  struct ev_loop* loop_ = nullptr;
  TransportHost* host_ = nullptr;
  ev_io read_watcher_;
  ev_io write_watcher_;
  Phase phase_;
  bool read_active_ = false;
  bool write_active_ = false;
  bool reads_paused_ = false;
  bool wants_writable_ = false;  // the host asked for OnWritable
  bool handshake_wants_write_ = false;
  bool read_wants_write_ = false;  // SSL_read needs the socket writable to go on
  size_t preamble_bytes_ = 0;
  // Serializes the SSL calls of the reactor (reads, handshake) and of a worker writing a lone
  // response; guards the two fields below. Never held across a host callback. Lock order: the
  // connection's write lock, then this.
  mutable Mutex ssl_mu_;
  // The pending SSL_write needs the socket readable.
  bool write_wants_read_ RRPC_GUARDED_BY(ssl_mu_) = false;
  // Bytes handed to SSL_write that the socket has not taken yet (SSL_write must be repeated
  // with the same buffer). Empty when nothing is pending.
  std::string pending_ RRPC_GUARDED_BY(ssl_mu_);
};

// Makes the transports of a messenger whose client side speaks TLS: TLS for connections it
// opens; accepted connections start on TCP (the negotiation switches to TLS when it sees a
// ClientHello). Thread-safe: the context is.
class TlsClientTransportFactory final : public TransportFactory {
 public:
  TlsClientTransportFactory(std::shared_ptr<const security::TlsContext> context,
                            std::string server_name, StreamTransportOptions options)
      : context_(std::move(context)), server_name_(std::move(server_name)), options_(options) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override;
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override;

 private:
  const std::shared_ptr<const security::TlsContext> context_;
  const std::string server_name_;
  const StreamTransportOptions options_;
};

// The first byte of a TLS handshake record (a ClientHello starts with it); an rrpc preamble
// starts with 'R'.
inline constexpr uint8_t kTlsHandshakeRecordType = 0x16;
// A TLS alert record "fatal, handshake_failure": what a server that does not speak TLS answers a
// ClientHello with, so a TLS client reports a handshake failure instead of garbage.
inline constexpr uint8_t kTlsHandshakeFailureAlert[7] = {0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x28};

}  // namespace rrpc::rpc
