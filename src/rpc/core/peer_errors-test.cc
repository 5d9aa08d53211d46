// A hostile peer cannot flood the server's log: protocol errors are counted
// (peer_errors_total) but only a few per period are logged, and a request body that does not
// parse is refused without protobuf's own ERROR line.
#include <glog/logging.h>
#include <google/protobuf/stubs/logging.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

// Counts glog lines at WARNING or above that mention `needle`, while it is registered.
class CountingLogSink : public google::LogSink {
 public:
  explicit CountingLogSink(std::string needle) : needle_(std::move(needle)) {
    google::AddLogSink(this);
  }
  ~CountingLogSink() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t message_len) override {
    if (severity < google::GLOG_WARNING) return;
    if (std::string(message, message_len).find(needle_) != std::string::npos) lines_++;
  }
  int lines() const { return lines_.load(); }

 private:
  const std::string needle_;
  std::atomic<int> lines_{0};
};

// Counts protobuf's own log lines (ERROR: "Can't parse message of type ...").
std::atomic<int> g_protobuf_lines{0};
void CountProtobufLog(google::protobuf::LogLevel, const char*, int, const std::string&) {
  g_protobuf_lines++;
}

class PeerErrorsTest : public RpcTestBase {
 protected:
  void SetUp() override {
    StartServer();
    StartClient();
  }
};

TEST_F(PeerErrorsTest, BadPreamblesAreCountedButLoggedOnlyAFewTimes) {
  CountingLogSink sink("negotiation with");
  constexpr int kBadPeers = 100;
  for (int i = 0; i < kBadPeers; i++) {
    RawConnection conn(server_addr_);
    ASSERT_TRUE(conn.ok()) << conn.status().ToString();
    ASSERT_TRUE(conn.Write("GET / HTTP/1.1\r\n\r\n").ok());
    ASSERT_TRUE(conn.WaitForClose());
  }
  Counter* peer_errors = MessengerInternals::metrics(*server_)->peer_errors;
  ASSERT_TRUE(WaitForCondition([&] { return peer_errors->value() == kBadPeers; }))
      << peer_errors->value();
  // 5 per reactor per 10 s; the test may straddle one period boundary.
  EXPECT_LE(sink.lines(), 2 * 5 * 2);
  EXPECT_GE(sink.lines(), 1);
  // The server still serves.
  rtest::EchoRequestPB req;
  req.set_data("still here");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  EXPECT_EQ("still here", resp.data());
}

TEST_F(PeerErrorsTest, RequestBodyThatDoesNotParseLogsNothing) {
  google::protobuf::LogHandler* old = google::protobuf::SetLogHandler(&CountProtobufLog);
  g_protobuf_lines = 0;
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  // An empty body lacks EchoRequestPB's required `data`.
  rtest::AddResponsePB empty;
  constexpr int kCalls = 50;
  std::string burst;
  for (int i = 0; i < kCalls; i++) burst += CallFrame(i, "rrpc.rtest.EchoService", "Echo", empty);
  ASSERT_TRUE(conn.Write(burst).ok());
  for (int i = 0; i < kCalls; i++) {
    ResponseHeader header;
    std::string body;
    ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
    ASSERT_TRUE(header.is_error());
    ErrorStatusPB error;
    ASSERT_TRUE(error.ParseFromString(body));
    EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, error.code());
    EXPECT_NE(std::string::npos, error.message().find("data")) << error.message();
  }
  google::protobuf::SetLogHandler(old);
  EXPECT_EQ(0, g_protobuf_lines.load());
}

}  // namespace
}  // namespace rrpc::rpc
