// Webserver over HTTPS on 127.0.0.1 with a self-signed certificate made by `openssl req`:
// serving, certificate reload, concurrent clients, a stalled handshake at stop, and HTTPS under
// the same connection cap and request timeout as HTTP.
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "server/web/http-test-util.h"
#include "server/web/web_http_frontend.h"
#include "server/web/webserver-test-util.h"
#include "server/web/webserver.h"

namespace rrpc {
namespace {

TEST(WebserverTlsTest, ServesHttpsWithSelfSignedCertificate) {
  TempDir dir;
  WebserverOptions opts;
  ASSERT_TRUE(UseSelfSignedCert(dir.path(), &opts)) << "openssl req failed";
  Webserver web(opts);
  web.RegisterPage("/echo", &EchoPage);
  Status s = web.Start();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(web.url(), "https://127.0.0.1:" + std::to_string(web.bound_port()));

  std::string client;
  HttpReply r =
      ParseReply(SendTls(web.bound_port(), "GET /echo?via=tls HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                         opts.tls_certificate_path, &client));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("param:via=tls\n"), std::string::npos) << r.body;
  // The page sees the TLS client, not the loopback relay.
  EXPECT_NE(r.body.find("remote=" + client + "\n"), std::string::npos) << r.body;
  EXPECT_EQ(r.headers["content-length"], std::to_string(r.body.size()));
  r = ParseReply(SendTls(web.bound_port(), "GET /missing HTTP/1.1\r\nHost: h\r\n\r\n",
                         opts.tls_certificate_path));
  EXPECT_EQ(r.status, 404);

  // Plain HTTP to the HTTPS port gets no page; the server keeps serving TLS.
  EXPECT_EQ(Get(web.bound_port(), "/echo").status, 0);
  // civetweb's private port refuses whoever goes around TLS.
  ASSERT_NE(web.civetweb_port(), web.bound_port());
  r = Get(web.civetweb_port(), "/echo");
  EXPECT_EQ(r.status, 403);
  EXPECT_EQ(r.body.find("param:"), std::string::npos);
  r = ParseReply(SendTls(web.bound_port(), "GET /echo HTTP/1.1\r\nHost: h\r\n\r\n",
                         opts.tls_certificate_path));
  EXPECT_EQ(r.status, 200);
}

TEST(WebserverTlsTest, ReloadServesTheNewCertificateAndKeepsTheOldOneOnError) {
  TempDir live, fresh;
  ASSERT_TRUE(MakeSelfSignedCert(live.path())) << "openssl req failed";
  ASSERT_TRUE(MakeSelfSignedCert(fresh.path())) << "openssl req failed";
  const std::string cert = live.path() + "/cert.pem";
  const std::string key = live.path() + "/key.pem";
  const std::string old_ca = live.path() + "/old-cert.pem";
  ASSERT_EQ(0, std::system(("cp '" + cert + "' '" + old_ca + "'").c_str()));
  WebserverOptions opts;
  opts.tls_certificate_path = cert;
  opts.tls_private_key_path = key;
  Webserver web(opts);
  web.RegisterPage("/echo", &EchoPage);
  ASSERT_TRUE(web.Start().ok());
  const std::string request = "GET /echo HTTP/1.1\r\nHost: h\r\n\r\n";
  EXPECT_EQ(200, ParseReply(SendTls(web.bound_port(), request, old_ca)).status);

  // A broken certificate file: the reload fails and the old certificate keeps being served.
  ASSERT_EQ(0, std::system(("echo broken > '" + cert + "'").c_str()));
  EXPECT_FALSE(web.ReloadTlsCertificates().ok());
  EXPECT_EQ(200, ParseReply(SendTls(web.bound_port(), request, old_ca)).status);

  // The rotated pair: new connections verify against the new certificate only.
  ASSERT_EQ(0, std::system(("cp '" + fresh.path() + "/cert.pem' '" + cert + "' && cp '" +
                            fresh.path() + "/key.pem' '" + key + "'")
                               .c_str()));
  Status s = web.ReloadTlsCertificates();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(200, ParseReply(SendTls(web.bound_port(), request, fresh.path() + "/cert.pem")).status);
  web.Stop();
}

TEST(WebserverTlsTest, ReloadWithoutTlsIsRefused) {
  Webserver web(WebserverOptions{});
  ASSERT_TRUE(web.Start().ok());
  EXPECT_TRUE(web.ReloadTlsCertificates().IsIllegalState());
  web.Stop();
}

TEST(WebserverTlsTest, ConcurrentHttpsClientsAreAllServed) {
  TempDir dir;
  WebserverOptions opts;
  ASSERT_TRUE(UseSelfSignedCert(dir.path(), &opts)) << "openssl req failed";
  Webserver web(opts);
  // A body larger than one TLS record (16 KiB) and than the relay buffer.
  const std::string big(100000, 'z');
  web.RegisterPage("/big", [&big](const WebRequest&, WebResponse* resp) { resp->body = big; });
  ASSERT_TRUE(web.Start().ok());
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < 5; ++i) {
        HttpReply r = ParseReply(SendTls(web.bound_port(), "GET /big HTTP/1.1\r\nHost: h\r\n\r\n",
                                         opts.tls_certificate_path));
        if (r.status == 200 && r.body == big) ok++;
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 15);
}

TEST(WebserverTlsTest, StalledTlsClientIsCutOffAtStop) {
  TempDir dir;
  WebserverOptions opts;
  ASSERT_TRUE(UseSelfSignedCert(dir.path(), &opts)) << "openssl req failed";
  opts.request_timeout_ms = 60000;
  Webserver web(opts);
  ASSERT_TRUE(web.Start().ok());
  // Connects and never sends a ClientHello: the handshake waits on the frontend's event loop.
  int fd = ConnectLoopback(web.bound_port());
  // Stop cuts the handshake instead of waiting out its 60 s timeout (30 s is far from both).
  auto start = std::chrono::steady_clock::now();
  web.Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30));
  char c;
  ssize_t n = recv(fd, &c, 1, 0);
  int err = errno;
  EXPECT_TRUE(n == 0 || (n < 0 && err == ECONNRESET)) << "connection left open: " << n;
  close(fd);
}

// An HTTPS client connection that completed its handshake (trusting anything: these tests are
// about the connection, not the certificate) and sends only what the test says.
class TlsClient {
 public:
  explicit TlsClient(uint16_t port)
      : ctx_(SSL_CTX_new(TLS_client_method())), fd_(ConnectLoopback(port)) {
    ssl_ = SSL_new(ctx_);
    SSL_set_fd(ssl_, fd_);
    handshake_done_ = SSL_connect(ssl_) == 1;
  }
  ~TlsClient() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
    close(fd_);
    ERR_clear_error();
  }
  bool handshake_done() const { return handshake_done_; }
  bool Send(const std::string& bytes) {
    return SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())) ==
           static_cast<int>(bytes.size());
  }
  // The plaintext the server sends until it closes.
  std::string ReadUntilClosed() {
    std::string out;
    char buf[4096];
    int n;
    while ((n = SSL_read(ssl_, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

 private:
  SSL_CTX* const ctx_;
  const int fd_;
  SSL* ssl_ = nullptr;
  bool handshake_done_ = false;
};

// An HTTPS web server with /echo, counting in its own registry, for the cap and timeout tests.
class HttpsLimitsTest : public ::testing::Test {
 protected:
  void StartServer(size_t max_connections, int request_timeout_ms) {
    WebserverOptions opts;
    ASSERT_TRUE(UseSelfSignedCert(dir_.path(), &opts)) << "openssl req failed";
    opts.max_connections = max_connections;
    opts.request_timeout_ms = request_timeout_ms;
    opts.metric_registry = &registry_;
    web_ = std::make_unique<Webserver>(opts);
    web_->RegisterPage("/echo", &EchoPage);
    ASSERT_TRUE(web_->Start().ok());
    port_ = web_->bound_port();
  }
  // The status of a whole HTTPS request sent at once.
  int EchoStatus() {
    return ParseReply(
               SendTls(port_, "GET /echo HTTP/1.1\r\nHost: h\r\n\r\n", dir_.path() + "/cert.pem"))
        .status;
  }

  TempDir dir_;
  MetricRegistry registry_;  // outlives web_
  std::unique_ptr<Webserver> web_;
  uint16_t port_ = 0;
};

// HTTPS is terminated on the frontend's event loop, so the cap and timeouts hold for it as for
// HTTP: a connection in its handshake, or past it without a complete request, is "still sending
// its request" and makes room for a new one.
TEST_F(HttpsLimitsTest, IdleHttpsConnectionsBeyondTheCapMakeRoomAndTheRequestIsServed) {
  constexpr size_t kCap = 8;
  StartServer(kCap, /*request_timeout_ms=*/60000);  // nothing times out during the test
  // The oldest idle connection finished its handshake; the 29 after it never send a ClientHello.
  auto handshaken = std::make_unique<TlsClient>(port_);
  ASSERT_TRUE(handshaken->handshake_done());
  constexpr int kSilent = 29;
  std::vector<int> silent;
  for (int i = 0; i < kSilent; i++) silent.push_back(ConnectLoopback(port_));
  // A client that sends its request at once is served: it takes the oldest idle one's place.
  EXPECT_EQ(EchoStatus(), 200);
  // The handshaken one got its 503 inside TLS; the silent ones made room in the order they came
  // (closed, nothing to read: they have no TLS session to read a 503 in); the newest cap - 1 are
  // still open.
  const std::string got = handshaken->ReadUntilClosed();
  EXPECT_EQ(got.rfind("HTTP/1.1 503 ", 0), 0u) << got;
  const int refused = 1 + kSilent + 1 - static_cast<int>(kCap);
  for (int i = 0; i < kSilent; i++) {
    if (i < refused - 1) {
      EXPECT_EQ(ReadUntilClosed(silent[i]), "") << "connection " << i;
    } else {
      EXPECT_TRUE(StillOpen(silent[i])) << "connection " << i;
    }
    close(silent[i]);
  }
  EXPECT_EQ(WebCounter(&registry_, &METRIC_web_connections_refused_total), refused);
  for (int i = 0; i < 3; i++) EXPECT_EQ(EchoStatus(), 200);
}

TEST_F(HttpsLimitsTest, HttpsRequestNotCompleteInTimeGets408AndASilentClientIsClosed) {
  StartServer(/*max_connections=*/128, /*request_timeout_ms=*/200);
  TlsClient partial(port_);
  ASSERT_TRUE(partial.handshake_done());
  ASSERT_TRUE(partial.Send("GET /echo HTTP/1.1\r\nHost: h\r\n"));  // no blank line yet
  const int silent = ConnectLoopback(port_);                       // never sends a ClientHello
  const std::string got = partial.ReadUntilClosed();
  EXPECT_EQ(got.rfind("HTTP/1.1 408 ", 0), 0u) << got;
  EXPECT_EQ(ReadUntilClosed(silent), "");
  close(silent);
  EXPECT_EQ(WebCounter(&registry_, &METRIC_web_request_timeouts_total), 2);
  EXPECT_EQ(EchoStatus(), 200);
}

TEST(WebserverTlsTest, BadKeyFailsStartWithReason) {
  TempDir dir;
  ASSERT_TRUE(MakeSelfSignedCert(dir.path())) << "openssl req failed";
  WebserverOptions opts;
  opts.tls_certificate_path = dir.path() + "/cert.pem";
  opts.tls_private_key_path = dir.path() + "/missing-key.pem";
  Webserver web(opts);
  Status s = web.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("private key"), std::string::npos) << s.ToString();

  // The certificate in place of the key: loads as no key at all.
  opts.tls_private_key_path = opts.tls_certificate_path;
  Webserver web2(opts);
  EXPECT_FALSE(web2.Start().ok());
}

}  // namespace
}  // namespace rrpc
