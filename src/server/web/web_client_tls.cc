#include "server/web/web_client_tls.h"

#include <glog/logging.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <climits>

namespace rrpc {

Result<std::unique_ptr<WebClientTls>> WebClientTls::Accept(const security::TlsContext& context,
                                                           int fd) {
  RRPC_ASSIGN_OR_RETURN(SSL * ssl, context.NewServerSsl());
  if (SSL_set_fd(ssl, fd) != 1) {
    SSL_free(ssl);
    return Status::RuntimeError("SSL_set_fd failed", security::OpenSslErrors());
  }
  // A response is written from the frontend's buffer as the socket takes it: part of it at a
  // time, and a retried write may start at another address (the buffer moved as it grew).
  SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return std::unique_ptr<WebClientTls>(new WebClientTls(ssl));
}

WebClientTls::~WebClientTls() {
  SSL_free(ssl_);
  ERR_clear_error();
}

WebClientTls::Step WebClientTls::Handshake() {
  ERR_clear_error();
  const int ret = SSL_accept(ssl_);
  if (ret == 1) {
    established_ = true;
    wanted_ = 0;
    return Step::kDone;
  }
  if (Outcome(ret) < 0 && errno == EAGAIN) return Step::kWouldBlock;
  VLOG(1) << "web UI TLS handshake failed: " << security::OpenSslErrors();
  return Step::kFailed;
}

ssize_t WebClientTls::Read(char* buf, size_t len) {
  ERR_clear_error();
  const ssize_t n = Outcome(SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(len, INT_MAX))));
  read_blocked_ = n < 0 && errno == EAGAIN;
  return n;
}

ssize_t WebClientTls::Write(const char* data, size_t len) {
  ERR_clear_error();
  return Outcome(SSL_write(ssl_, data, static_cast<int>(std::min<size_t>(len, INT_MAX))));
}

bool WebClientTls::HasPending() const { return !read_blocked_ && SSL_has_pending(ssl_) == 1; }

void WebClientTls::Shutdown() {
  if (!established_) return;
  ERR_clear_error();
  SSL_shutdown(ssl_);
  ERR_clear_error();
}

ssize_t WebClientTls::Outcome(int ret) {
  wanted_ = 0;
  if (ret > 0) return ret;
  switch (SSL_get_error(ssl_, ret)) {
    case SSL_ERROR_WANT_READ:
      wanted_ = POLLIN;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_WANT_WRITE:
      wanted_ = POLLOUT;
      errno = EAGAIN;
      return -1;
    case SSL_ERROR_ZERO_RETURN:
      return 0;  // close_notify
    default:
      // A reset, an EOF without close_notify, or a protocol error: the session is over.
      ERR_clear_error();
      errno = ECONNRESET;
      return -1;
  }
}

}  // namespace rrpc
