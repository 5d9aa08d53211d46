// WebClientTls: one HTTPS client's TLS session on a non-blocking socket, for WebHttpFrontend's
// event loop, so HTTPS connections are counted, capped and timed like plain ones (a handshake in
// progress is "still sending its request"). Read/Write behave like recv()/send() on a
// non-blocking socket; when they (or Handshake) return "would block", wanted_events() says which
// socket event lets them go on. OpenSSL reads ahead (the shared TlsContext asks it to), so bytes
// may wait inside OpenSSL that poll() will not report: HasPending().
//
// Why not civetweb's TLS: see webserver.h. The context is rpc/security's TlsContext, the one the
// RPC port uses (certificate loading, reload, client certificates).
//
// Thread-safety: the frontend's loop thread only (OpenSSL's error queue is per thread; every call
// clears it first).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <memory>

#include "rpc/security/tls_context.h"
#include "rrpc/util/status.h"

typedef struct ssl_st SSL;

namespace rrpc {

class WebClientTls {
 public:
  // A server session on `fd` (not owned: the frontend closes it after this is destroyed).
  static Result<std::unique_ptr<WebClientTls>> Accept(const security::TlsContext& context, int fd);
  ~WebClientTls();

  enum class Step { kDone, kWouldBlock, kFailed };
  // Continues the handshake.
  Step Handshake();
  bool established() const { return established_; }

  // As recv()/send(): > 0 bytes; 0 (Read) the client closed its side; -1 with errno EAGAIN
  // (wait for wanted_events()) or another errno (the session failed: close the connection).
  ssize_t Read(char* buf, size_t len);
  ssize_t Write(const char* data, size_t len);

  // The socket event (POLLIN or POLLOUT) the last call that would block waits for; 0 if none did.
  short wanted_events() const { return wanted_; }
  // OpenSSL holds bytes already read from the socket that the next Read may return: read without
  // waiting for poll(). False after a Read that would block (the bytes held are part of a record
  // whose rest is still to come, which the socket will report), so a loop does not spin on them.
  bool HasPending() const;

  // One non-blocking try at close_notify (when established).
  void Shutdown();

 private:
  explicit WebClientTls(SSL* ssl) : ssl_(ssl) {}
  // What an SSL call's result `ret` means, as recv() would say it; sets wanted_ (and errno).
  ssize_t Outcome(int ret);

  SSL* const ssl_;  // owned
  bool established_ = false;
  short wanted_ = 0;
  bool read_blocked_ = false;  // the last Read would block
};

}  // namespace rrpc
