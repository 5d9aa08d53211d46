// The blocking HTTP client over real loopback sockets: against the web server, and against a
// scripted peer that answers what a broken server would (not HTTP, a body cut short, nothing).
#include "server/web/http_client.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <thread>

#include "server/web/webserver.h"
#include "util/countdown_latch.h"
#include "util/socket.h"

namespace rrpc {
namespace {

constexpr MonoDelta kTimeout = MonoDelta::FromSeconds(20);

// Accepts one connection on 127.0.0.1, reads the request (until the client stops sending),
// writes `answer` and closes; with `answer` empty it holds the connection open, silent, until
// the test is done with it.
class ScriptedPeer {
 public:
  explicit ScriptedPeer(std::string answer) {
    Result<Socket> listener = Socket::CreateTcp(AF_INET);
    CHECK(listener.ok()) << listener.status().ToString();
    listener_ = std::move(listener).value();
    CHECK(listener_.Bind(Sockaddr::Loopback(0)).ok());
    CHECK(listener_.Listen(1).ok());
    addr_ = listener_.GetSocketAddress().value();
    thread_ = std::thread([this, answer = std::move(answer)] { Serve(answer); });
  }
  ~ScriptedPeer() {
    test_done_.CountDown();
    thread_.join();
  }

  const Sockaddr& addr() const { return addr_; }

 private:
  void Serve(const std::string& answer) {
    pollfd p{listener_.fd(), POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(kTimeout.ToMilliseconds())) != 1) return;
    Socket conn;
    Sockaddr peer;
    if (!listener_.Accept(&conn, &peer).ok() || !conn.SetNonBlocking(false).ok()) return;
    CHECK(conn.SetIoTimeout(kTimeout).ok());
    uint8_t buf[4096];
    // The client half-closes after its request: read to EOF.
    for (;;) {
      Result<size_t> n = conn.Recv(buf, sizeof(buf));
      if (!n.ok() || *n == 0) break;
    }
    if (answer.empty()) {
      test_done_.Wait();
      return;
    }
    CHECK(conn.BlockingWrite(reinterpret_cast<const uint8_t*>(answer.data()), answer.size()).ok());
  }

  Socket listener_;
  Sockaddr addr_;
  CountDownLatch test_done_{1};
  std::thread thread_;
};

TEST(HttpClientTest, GetsAPageWithItsStatusHeadersAndBody) {
  Webserver web(WebserverOptions{});
  web.RegisterPage("/hello", [](const WebRequest&, WebResponse* resp) {
    resp->body = "hi there\n";
    resp->headers.emplace_back("X-Test", "yes");
  });
  ASSERT_TRUE(web.Start().ok());
  Result<HttpReply> reply = HttpGet(Sockaddr::Loopback(web.bound_port()), "/hello", kTimeout);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(200, reply->status);
  EXPECT_EQ("HTTP/1.1 200 OK", reply->status_line);
  EXPECT_EQ("yes", reply->headers["x-test"]);
  EXPECT_EQ("hi there\n", reply->body);

  reply = HttpGet(Sockaddr::Loopback(web.bound_port()), "/missing", kTimeout);
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  EXPECT_EQ(404, reply->status);
}

TEST(HttpClientTest, AnswerThatIsNotHttpIsCorruption) {
  ScriptedPeer peer("SSH-2.0-OpenSSH_9.2\r\n");
  Result<HttpReply> reply = HttpGet(peer.addr(), "/metrics", kTimeout);
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsCorruption()) << reply.status().ToString();
  EXPECT_NE(std::string::npos, reply.status().ToString().find("not an HTTP/1.x response"));
}

TEST(HttpClientTest, BodyShorterThanItsContentLengthIsCorruption) {
  ScriptedPeer peer("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this");
  Result<HttpReply> reply = HttpGet(peer.addr(), "/metrics", kTimeout);
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsCorruption()) << reply.status().ToString();
  EXPECT_NE(std::string::npos, reply.status().ToString().find("cut short"));
}

TEST(HttpClientTest, SilentServerTimesOut) {
  ScriptedPeer peer("");
  Result<HttpReply> reply = HttpGet(peer.addr(), "/metrics", MonoDelta::FromMilliseconds(200));
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsTimedOut()) << reply.status().ToString();
}

TEST(HttpClientTest, RefusedConnectionIsANetworkError) {
  // A port that was just free: bound, then closed.
  Sockaddr addr;
  {
    Socket s = Socket::CreateTcp(AF_INET).value();
    ASSERT_TRUE(s.Bind(Sockaddr::Loopback(0)).ok());
    addr = s.GetSocketAddress().value();
  }
  Result<HttpReply> reply = HttpGet(addr, "/", kTimeout);
  ASSERT_FALSE(reply.ok());
  EXPECT_TRUE(reply.status().IsNetworkError()) << reply.status().ToString();
}

}  // namespace
}  // namespace rrpc
