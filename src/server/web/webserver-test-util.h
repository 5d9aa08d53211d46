// What the web server's tests share (webserver-test.cc: HTTP; webserver_tls-test.cc: HTTPS):
// an HTTPS request, a temporary directory, a self-signed certificate made by `openssl req`, an
// echo page, and checks on raw client sockets and the web counters.
#pragma once

#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

#include "server/web/http-test-util.h"
#include "server/web/webserver.h"
#include "util/metrics/counter.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {

// The same over TLS, trusting only `ca_file`. Returns "" and fails the test on TLS errors.
// Stores the client's own address in `*client` if given.
inline std::string SendTls(uint16_t port, const std::string& request, const std::string& ca_file,
                           std::string* client = nullptr) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  CHECK(ctx != nullptr);
  EXPECT_EQ(SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr), 1);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  int fd = ConnectLoopback(port);
  if (client != nullptr) *client = LocalAddress(fd);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fd);
  std::string out;
  if (SSL_connect(ssl) != 1) {
    ADD_FAILURE() << "TLS handshake failed: " << ERR_error_string(ERR_get_error(), nullptr);
  } else {
    EXPECT_EQ(SSL_get_verify_result(ssl), X509_V_OK);
    EXPECT_EQ(SSL_write(ssl, request.data(), static_cast<int>(request.size())),
              static_cast<int>(request.size()));
    char buf[16384];
    for (;;) {
      int n = SSL_read(ssl, buf, sizeof(buf));
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
    }
  }
  SSL_free(ssl);
  close(fd);
  SSL_CTX_free(ctx);
  return out;
}

// A fresh directory under the test temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base ? base : "/tmp") + "/webserver-test.XXXXXX";
    CHECK(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::system(("rm -rf '" + path_ + "'").c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Runs `openssl req` to make a self-signed certificate for 127.0.0.1 (an EC key: fast).
inline bool MakeSelfSignedCert(const std::string& dir) {
  std::string cmd =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
      " -days 2 -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1"
      " -keyout '" +
      dir + "/key.pem' -out '" + dir + "/cert.pem' >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

// Makes a self-signed certificate in `dir` (MakeSelfSignedCert) and points `opts` at it.
inline bool UseSelfSignedCert(const std::string& dir, WebserverOptions* opts) {
  if (!MakeSelfSignedCert(dir)) return false;
  opts->tls_certificate_path = dir + "/cert.pem";
  opts->tls_private_key_path = dir + "/key.pem";
  return true;
}

// Echoes the request back as "key=value" lines.
inline void EchoPage(const WebRequest& req, WebResponse* resp) {
  resp->body = "method=" + req.method + "\npath=" + req.path + "\n";
  for (const auto& [k, v] : req.query_params) resp->body += "param:" + k + "=" + v + "\n";
  resp->body += "body=" + req.body + "\n";
  resp->body += "header:x-test=" + req.GetHeader("x-test") + "\n";
  resp->body += "remote=" + req.remote_address + "\n";
}

// Everything the server sends on `fd` until it closes (blocking, 20 s receive timeout).
inline std::string ReadUntilClosed(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

inline bool StillOpen(int fd) {
  char c;
  return recv(fd, &c, 1, MSG_DONTWAIT) == -1 && errno == EAGAIN;
}

inline int64_t WebCounter(MetricRegistry* registry, const MetricPrototype* prototype) {
  auto entity = registry->FindEntity("server", "web");
  return entity == nullptr ? -1 : entity->FindOrCreateCounter(prototype)->value();
}

}  // namespace rrpc
