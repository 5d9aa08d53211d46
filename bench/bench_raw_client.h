// RawRpcConnection: one rrpc client connection made by hand on a blocking socket: connect, the
// preamble and negotiation (rpc/core/negotiation.h), then calls one at a time with frames from
// rpc/core/wire_codec.h. rpc-bench uses it where a client Messenger does not fit: cps mode needs a
// fresh connection per call (a Messenger keeps one per remote and reactor), and sparse mode holds
// 10,000s of connections, too many to open through one messenger. It exercises the server's real
// accept, negotiation and call path.
//
// Over TLS (a TlsContext given to Open()) the handshake comes first, blocking and bounded like
// every other wait, and the protocol runs inside it. Every socket wait is bounded by the io timeout
// given to Open(). Not thread-safe: one thread
// uses a connection at a time. It holds only its socket and a call counter, so an idle one costs
// the client almost no memory (sparse mode measures the server's cost per connection).
//
//   RawRpcConnection conn;
//   RRPC_RETURN_NOT_OK(conn.Open(server, MonoDelta::FromSeconds(10), "rpc-bench"));
//   RRPC_RETURN_NOT_OK(conn.Call(service, method, req, Slice(), &resp, &scratch, &sidecars));
//   conn.CloseAbortively();
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rrpc/util/monotime.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"
#include "util/socket.h"

typedef struct ssl_st SSL;
typedef struct ssl_session_st SSL_SESSION;

namespace rrpc::security {
class TlsContext;
}  // namespace rrpc::security

namespace rrpc::bench {

class RawRpcConnection {
 public:
  RawRpcConnection() = default;
  RawRpcConnection(RawRpcConnection&&) noexcept = default;
  RawRpcConnection& operator=(RawRpcConnection&&) noexcept = default;

  // Connects, sends the preamble and the negotiation request and waits for the server's reply.
  // With `await_reply` false it does not wait: like rrpc's own client, the first call follows the
  // request at once (in the same write) and Call() reads the reply (and fails on a refusal)
  // before the response.
  // With `tls`, the connection is TLS, the server verified against the context's CA and IP SAN.
  // `session` (with tls): offered for resumption when it holds one, and given this connection's
  // session when it closes (the caller frees it with SSL_SESSION_free).
  Status Open(const Sockaddr& server, MonoDelta io_timeout, const std::string& client_name,
              bool await_reply = true, const security::TlsContext* tls = nullptr,
              SSL_SESSION** session = nullptr);

  // Sends one call to service.method with `request` and at most one sidecar (none when empty)
  // and waits for its response. Parses the body into `response` and the response's sidecars into
  // `response_sidecars` (replaced). `scratch` holds the response frame: the sidecars point into
  // it until its next use. A server error is a RemoteError with its code and message.
  Status Call(const std::string& service, const std::string& method,
              const google::protobuf::Message& request, Slice request_sidecar,
              google::protobuf::Message* response, std::string* scratch,
              std::vector<Slice>* response_sidecars);

  // Closes with a reset (SO_LINGER 0): no TIME_WAIT is left behind, so a cps run does not use up
  // the ephemeral ports. Idempotent.
  void CloseAbortively();

  bool is_open() const { return socket_.valid(); }
  // Over TLS: whether the handshake resumed a session.
  bool resumed() const;

 private:
  // Checks the server's negotiation reply.
  static Status CheckNegotiationReply(Slice frame);
  // The next frame (the bytes after its length prefix) from the socket, read through `buf`:
  // `*have` bytes of it are received, `*used` consumed. Receives as much as the socket has at a
  // time (one recv for a small frame and anything behind it), as rrpc's own client does.
  Status ReadFrame(std::string* buf, size_t* have, size_t* used, Slice* frame);
  Status WriteAll(iovec* iov, int iovcnt);
  // Up to `len` bytes from the socket (or the TLS session); 0 when SO_RCVTIMEO expired.
  Result<size_t> RecvSome(uint8_t* buf, size_t len);
  Status StartTls(const Sockaddr& server, const security::TlsContext& tls, SSL_SESSION** session);

  struct SslFree {
    void operator()(SSL* ssl) const;
  };

  // The peer's address for error messages (kept out of the object: sparse mode holds 10,000s).
  std::string PeerName() const;

  Socket socket_;
  std::unique_ptr<SSL, SslFree> ssl_;  // set over TLS
  SSL_SESSION** session_slot_ = nullptr;
  uint32_t timeout_ms_ = 0;
  int32_t next_call_id_ = 0;
  bool reply_pending_ = false;  // the server's negotiation reply is still unread
  std::string unsent_hello_;    // with await_reply false: goes out with the first call
};

}  // namespace rrpc::bench
