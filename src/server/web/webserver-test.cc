// Webserver over real sockets on 127.0.0.1: pages, static assets, the 4xx answers to bad
// requests, idle and slow clients. HTTPS: webserver_tls-test.cc.
#include "server/web/webserver.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "server/web/http-test-util.h"
#include "server/web/web_assets.h"
#include "server/web/web_dashboard.h"
#include "server/web/web_http_frontend.h"
#include "server/web/webserver-test-util.h"
#include "util/countdown_latch.h"
#include "util/metrics/counter.h"
#include "util/metrics/metric_entity.h"
#include "util/metrics/metric_registry.h"

namespace rrpc {
namespace {

class WebserverTest : public ::testing::Test {
 protected:
  void StartServer(WebserverOptions opts = {}) {
    web_ = std::make_unique<Webserver>(std::move(opts));
    web_->RegisterPage("/echo", &EchoPage);
    web_->RegisterPage("/post", &EchoPage, Webserver::kPost);
    ASSERT_TRUE(web_->Start().ok());
    port_ = web_->bound_port();
  }

  MetricRegistry registry_;  // outlives web_, which counts in it
  std::unique_ptr<Webserver> web_;
  uint16_t port_ = 0;
};

TEST_F(WebserverTest, IdleAndSlowClientsDoNotStarveOthers) {
  WebserverOptions opts;
  opts.request_timeout_ms = 60000;  // they hold their threads for the whole test
  StartServer(opts);
  // Ten connections that send nothing, and two POSTs whose bodies never finish.
  std::vector<int> hostile;
  for (int i = 0; i < 10; i++) hostile.push_back(ConnectLoopback(port_));
  for (int i = 0; i < 2; i++) {
    int fd = ConnectLoopback(port_);
    const std::string head =
        "POST /post HTTP/1.1\r\nHost: h\r\nContent-Length: 1000\r\n\r\nonly ten b";
    ASSERT_EQ(static_cast<ssize_t>(head.size()), send(fd, head.data(), head.size(), MSG_NOSIGNAL));
    hostile.push_back(fd);
  }
  // Other clients are answered while all of them still hold their connections.
  for (int i = 0; i < 3; i++) EXPECT_EQ(Get(port_, "/echo?x=1").status, 200);
  for (int fd : hostile) {
    char c;
    EXPECT_EQ(-1, recv(fd, &c, 1, MSG_DONTWAIT)) << "closed early: the test proves nothing";
    EXPECT_EQ(EAGAIN, errno);
    close(fd);
  }
}

TEST_F(WebserverTest, IdleClientIsCutOffAtTheRequestTimeout) {
  WebserverOptions opts;
  opts.request_timeout_ms = 200;
  StartServer(opts);
  int fd = ConnectLoopback(port_);  // receive timeout 20 s: far above the server's 0.2 s
  // Whatever it says first (civetweb may answer 408), it then closes.
  char buf[512];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_TRUE(n == 0 || errno == ECONNRESET) << "still open: " << strerror(errno);
  close(fd);
  EXPECT_EQ(Get(port_, "/echo").status, 200);
}

TEST_F(WebserverTest, IdleConnectionsBeyondTheCapMakeRoomAndHealthzIsServed) {
  WebserverOptions opts;
  opts.max_connections = 8;
  opts.request_timeout_ms = 60000;  // nothing times out during the test
  opts.metric_registry = &registry_;
  StartServer(opts);
  // More idle connections than the cap (and than civetweb's 16 threads + 64 queued before).
  constexpr int kIdle = 100;
  std::vector<int> idle;
  for (int i = 0; i < kIdle; i++) idle.push_back(ConnectLoopback(port_));
  // A client that sends its request is served: it takes the oldest idle connection's place.
  EXPECT_EQ(Get(port_, "/echo?x=1").status, 200);
  // The oldest kIdle + 1 - cap idle ones got 503 and were closed, in the order they came; the
  // newest cap - 1 are still open (the answered request's slot is free again).
  const int refused = kIdle + 1 - static_cast<int>(opts.max_connections);
  for (int i = 0; i < kIdle; i++) {
    if (i < refused) {
      const std::string got = ReadUntilClosed(idle[i]);
      EXPECT_EQ(got.rfind("HTTP/1.1 503 ", 0), 0u) << "connection " << i << ": " << got;
    } else {
      EXPECT_TRUE(StillOpen(idle[i])) << "connection " << i;
    }
    close(idle[i]);
  }
  EXPECT_EQ(WebCounter(&registry_, &METRIC_web_connections_refused_total), refused);
  // And /healthz-like requests keep being answered, one after another.
  for (int i = 0; i < 5; i++) EXPECT_EQ(Get(port_, "/echo?again=1").status, 200);
}

TEST_F(WebserverTest, AtTheCapWithEveryConnectionServedANewOneGets503) {
  WebserverOptions opts;
  opts.max_connections = 2;
  StartServer(opts);
  CountDownLatch entered(2), release(1);
  web_->RegisterPage("/block", [&](const WebRequest&, WebResponse* resp) {
    entered.CountDown();
    release.Wait();
    resp->body = "done\n";
  });
  std::vector<std::thread> blocked;
  std::atomic<int> ok{0};
  for (int i = 0; i < 2; i++) {
    blocked.emplace_back([&] { ok += Get(port_, "/block").status == 200; });
  }
  entered.Wait();
  EXPECT_EQ(Get(port_, "/echo").status, 503);  // both slots are answering requests
  release.CountDown();
  for (auto& t : blocked) t.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(Get(port_, "/echo").status, 200);
}

TEST_F(WebserverTest, IncompleteRequestGets408AtTheRequestTimeoutAndIsCounted) {
  WebserverOptions opts;
  opts.request_timeout_ms = 200;
  opts.metric_registry = &registry_;
  StartServer(opts);
  int fd = ConnectLoopback(port_);
  const std::string partial = "GET /echo HTTP/1.1\r\nHost: h\r\n";  // no blank line yet
  ASSERT_EQ(static_cast<ssize_t>(partial.size()),
            send(fd, partial.data(), partial.size(), MSG_NOSIGNAL));
  EXPECT_EQ(ReadUntilClosed(fd).rfind("HTTP/1.1 408 ", 0), 0u);
  close(fd);
  EXPECT_EQ(WebCounter(&registry_, &METRIC_web_request_timeouts_total), 1);
  EXPECT_EQ(Get(port_, "/echo").status, 200);
}

TEST_F(WebserverTest, CivetwebsPrivatePortRefusesDirectClients) {
  StartServer();
  ASSERT_NE(web_->civetweb_port(), web_->bound_port());
  EXPECT_EQ(Get(web_->civetweb_port(), "/echo").status, 403);
  // Through the public port the client's own address is reported.
  int fd = ConnectLoopback(port_);
  const std::string me = LocalAddress(fd);
  const std::string req = "GET /echo HTTP/1.1\r\nHost: h\r\n\r\n";
  ASSERT_EQ(static_cast<ssize_t>(req.size()), send(fd, req.data(), req.size(), MSG_NOSIGNAL));
  EXPECT_NE(ReadUntilClosed(fd).find("remote=" + me + "\n"), std::string::npos);
  close(fd);
}

TEST_F(WebserverTest, BindsEphemeralPortAndReportsIt) {
  StartServer();
  EXPECT_NE(port_, 0);
  EXPECT_TRUE(web_->is_running());
  EXPECT_EQ(web_->url(), "http://127.0.0.1:" + std::to_string(port_));
}

TEST_F(WebserverTest, ServesRegisteredPageWithDecodedQueryParams) {
  StartServer();
  HttpReply r = Http(
      port_, "GET /echo?a=1&b=x%20y&c&d=p+q&a=2&e=%zz HTTP/1.1\r\nHost: h\r\nX-Test: yes\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/plain; charset=utf-8");
  EXPECT_EQ(r.headers["content-length"], std::to_string(r.body.size()));
  EXPECT_EQ(r.headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(r.headers["cache-control"], "no-store");
  EXPECT_NE(r.body.find("method=GET\npath=/echo\n"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("param:a=2\n"), std::string::npos) << "last repeated key wins";
  EXPECT_NE(r.body.find("param:b=x y\n"), std::string::npos);
  EXPECT_NE(r.body.find("param:c=\n"), std::string::npos);
  EXPECT_NE(r.body.find("param:d=p q\n"), std::string::npos);
  EXPECT_NE(r.body.find("param:e=%zz\n"), std::string::npos);
  EXPECT_NE(r.body.find("header:x-test=yes\n"), std::string::npos);
}

TEST_F(WebserverTest, HandlerControlsStatusTypeAndHeaders) {
  StartServer();
  web_->RegisterPage("/custom", [](const WebRequest&, WebResponse* resp) {
    resp->status = 503;
    resp->content_type = "application/json";
    resp->body = "{\"ok\":false}";
    resp->headers.emplace_back("X-Custom", "1");
    resp->headers.emplace_back("X-Evil", "a\r\nSet-Cookie: injected=1");
  });
  HttpReply r = Get(port_, "/custom");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers["content-type"], "application/json");
  EXPECT_EQ(r.headers["x-custom"], "1");
  EXPECT_EQ(r.headers.count("x-evil"), 0u) << "a header with a line break is dropped";
  EXPECT_EQ(r.headers.count("set-cookie"), 0u);
  EXPECT_EQ(r.body, "{\"ok\":false}");
}

TEST_F(WebserverTest, InvalidHandlerStatusBecomes500) {
  StartServer();
  web_->RegisterPage("/bad", [](const WebRequest&, WebResponse* resp) { resp->status = 42; });
  EXPECT_EQ(Get(port_, "/bad").status, 500);
}

TEST_F(WebserverTest, HeadSendsHeadersWithoutBody) {
  StartServer();
  HttpReply r = Http(port_, "HEAD /echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.headers["content-length"], "0");
  EXPECT_EQ(r.body, "");
}

TEST_F(WebserverTest, UnknownPathIs404) {
  StartServer();
  HttpReply r = Get(port_, "/nope");
  EXPECT_EQ(r.status, 404);
  EXPECT_NE(r.body.find("no page at /nope"), std::string::npos);
  EXPECT_EQ(Get(port_, "/echo/").status, 404) << "paths match exactly";
  EXPECT_EQ(Get(port_, "/../../etc/passwd").status, 404);
}

TEST_F(WebserverTest, WrongMethodIs405WithAllowHeader) {
  StartServer();
  HttpReply r = Http(port_, "POST /echo HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "GET, HEAD");
  r = Http(port_, "DELETE /echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(r.status, 405);
  r = Get(port_, "/post");
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.headers["allow"], "POST");
}

TEST_F(WebserverTest, PostPageReceivesBody) {
  StartServer();
  HttpReply r =
      Http(port_, "POST /post HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\nhello world");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body=hello world\n"), std::string::npos) << r.body;
  r = Http(port_,
           "POST /post HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n6\r\n chunk\r\n0\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("body=hello chunk\n"), std::string::npos) << r.body;
}

TEST_F(WebserverTest, OversizedBodyIs413) {
  WebserverOptions opts;
  opts.max_body_bytes = 1024;
  StartServer(opts);
  // Declared too large: rejected from the headers alone, the body is never sent.
  HttpReply r = Http(port_, "POST /post HTTP/1.1\r\nHost: h\r\nContent-Length: 10000000\r\n\r\n");
  EXPECT_EQ(r.status, 413);
  EXPECT_NE(r.body.find("exceeds the limit of 1024"), std::string::npos) << r.body;
  // Chunked, so the size shows only while reading.
  r = Http(port_, "POST /post HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" +
                      std::string(2000, 'x') + "\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 413);
  // At the limit is fine.
  r = Http(port_, "POST /post HTTP/1.1\r\nHost: h\r\nContent-Length: 1024\r\n\r\n" +
                      std::string(1024, 'y'));
  EXPECT_EQ(r.status, 200);
}

TEST_F(WebserverTest, OversizedHeadersAre431Or400) {
  WebserverOptions opts;
  opts.max_header_bytes = 1024;
  StartServer(opts);
  // Over our limit but inside civetweb's buffer: the precise 431.
  HttpReply r =
      Http(port_, "GET /echo HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(1500, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.status, 431);
  EXPECT_NE(r.body.find("exceed 1024 bytes"), std::string::npos) << r.body;
  // Far beyond: civetweb's buffer overflows and it can only say 400, with our explanation.
  r = Http(port_,
           "GET /echo HTTP/1.1\r\nHost: h\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n");
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(r.body.find("larger than 1024 bytes"), std::string::npos) << r.body;
  EXPECT_EQ(Get(port_, "/echo").status, 200);
}

TEST_F(WebserverTest, MalformedRequestsAre4xxAndHarmNothing) {
  StartServer();
  EXPECT_EQ(Http(port_, "GARBAGE\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port_, "GET /echo HTTP/1.1\r\nNoColonHeader\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port_, "GET /echo HTTP/1.1\r\nHost: a\x01z\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port_, "GET echo HTTP/1.1\r\nHost: h\r\n\r\n").status, 400);
  EXPECT_EQ(Http(port_, "POST /post HTTP/1.1\r\nHost: h\r\nContent-Length: zz\r\n\r\n").status,
            411);
  int status = Http(port_, "GET /echo HTTP/9.9\r\nHost: h\r\n\r\n").status;
  EXPECT_TRUE(status == 400 || status == 505) << status;
  // A TLS ClientHello to a plain HTTP port, and a client that leaves mid-request.
  EXPECT_EQ(Http(port_, std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) +
                            std::string(100, 'a'))
                .status,
            400);
  SendRaw(port_, "GET /echo HTTP/1.1\r\nHost:");
  // Still serving.
  EXPECT_EQ(Get(port_, "/echo?x=1").status, 200);
}

TEST_F(WebserverTest, ServesStaticAssetsWithContentType) {
  StartServer();
  web_->RegisterStaticAsset("/static/a.css", "text/css; charset=utf-8", "body { color: red }");
  HttpReply r = Get(port_, "/static/a.css");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/css; charset=utf-8");
  EXPECT_EQ(r.headers["cache-control"], "no-cache");
  EXPECT_EQ(r.body, "body { color: red }");
  EXPECT_EQ(Http(port_, "POST /static/a.css HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status, 405);
}

TEST_F(WebserverTest, ServesEmbeddedDashboard) {
  StartServer();
  RegisterDashboard(web_.get());
  ASSERT_GT(kNumEmbeddedWebAssets, 0u);
  HttpReply r = Get(port_, "/");
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/html; charset=utf-8");
  EXPECT_NE(r.body.find("/static/dashboard.js"), std::string::npos);
  EXPECT_NE(r.headers["content-security-policy"].find("default-src 'self'"), std::string::npos);
  r = Get(port_, "/static/dashboard.js");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/javascript; charset=utf-8");
  EXPECT_NE(r.body.find("/metrics.json"), std::string::npos);
  EXPECT_EQ(Get(port_, "/static/dashboard.css").status, 200);
  EXPECT_EQ(Get(port_, "/static/embed.cmake").status, 404) << "the build script is not served";
}

TEST_F(WebserverTest, ReplacingAPageWhileRunningTakesEffect) {
  StartServer();
  web_->RegisterPage("/v", [](const WebRequest&, WebResponse* r) { r->body = "one"; });
  EXPECT_EQ(Get(port_, "/v").body, "one");
  web_->RegisterPage("/v", [](const WebRequest&, WebResponse* r) { r->body = "two"; });
  EXPECT_EQ(Get(port_, "/v").body, "two");
}

TEST_F(WebserverTest, ConcurrentClientsAreAllServed) {
  WebserverOptions opts;
  opts.num_threads = 2;
  StartServer(opts);
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        HttpReply r = Get(port_, "/echo?t=" + std::to_string(t) + "&i=" + std::to_string(i));
        if (r.status == 200 &&
            r.body.find("param:i=" + std::to_string(i) + "\n") != std::string::npos) {
          ok++;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 100);
}

TEST_F(WebserverTest, StopIsIdempotentAndClosesThePort) {
  StartServer();
  web_->Stop();
  web_->Stop();
  EXPECT_FALSE(web_->is_running());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_NE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
}

TEST(WebserverStartTest, RejectsBadBindAddresses) {
  for (const char* bad :
       {"localhost:80", "127.0.0.1", "127.0.0.1:http", "127.0.0.1:70000", ":80", "1.2.3:80"}) {
    WebserverOptions opts;
    opts.bind_address = bad;
    Webserver web(opts);
    Status s = web.Start();
    EXPECT_TRUE(s.IsInvalidArgument()) << bad << ": " << s.ToString();
  }
}

TEST(WebserverStartTest, PortInUseFailsWithReason) {
  Webserver first(WebserverOptions{});
  ASSERT_TRUE(first.Start().ok());
  WebserverOptions opts;
  opts.bind_address = "127.0.0.1:" + std::to_string(first.bound_port());
  Webserver second(opts);
  Status s = second.Start();
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_FALSE(second.is_running());
}

}  // namespace
}  // namespace rrpc
