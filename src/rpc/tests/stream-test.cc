// Streams end to end over TCP on loopback (docs/streams.md): each kind of stream, flow control,
// the end status, cancellation, deadlines and a lost connection.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/stream_state.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/test-stream-service.h"

namespace rrpc::rpc {
namespace {

using rtest::NumberPB;
using rtest::RangeRequestPB;
using rtest::SumPB;

class StreamTest : public RpcTestBase {
 protected:
  void SetUp() override {
    auto service = std::make_unique<TestStreamService>();
    streams_ = service.get();
    extra_services_.push_back(std::move(service));
    StartServer();
    StartClient();
  }
  rtest::StreamServiceProxy StreamProxy() {
    return rtest::StreamServiceProxy(client_, server_addr_);
  }

  TestStreamService* streams_ = nullptr;
};

RangeRequestPB Range(int64_t first, int64_t count, uint32_t payload = 0) {
  RangeRequestPB req;
  req.set_first(first);
  req.set_count(count);
  if (payload > 0) req.set_payload_bytes(payload);
  return req;
}

TEST_F(StreamTest, ServerStreamDeliversEveryMessageOnceAndInOrder) {
  auto stream = StreamProxy().Range(Range(10, 5000, 100));
  NumberPB n;
  int64_t expected = 10;
  while (true) {
    Result<bool> got = stream.Read(&n);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    if (!*got) break;
    ASSERT_EQ(expected, n.n());
    ASSERT_EQ(100u, n.payload().size());
    expected++;
  }
  EXPECT_EQ(5010, expected);
  EXPECT_TRUE(stream.Finish().ok());
}

TEST_F(StreamTest, ClientStreamGetsTheServersOneResponse) {
  auto stream = StreamProxy().Sum();
  NumberPB n;
  int64_t sum = 0;
  for (int i = 1; i <= 3000; i++) {
    n.set_n(i);
    n.set_payload(std::string(64, 'y'));
    ASSERT_TRUE(stream.Write(n).ok());
    sum += i;
  }
  stream.CloseWrites();
  SumPB out;
  Status s = stream.Finish(&out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(sum, out.sum());
  EXPECT_EQ(3000, out.count());
}

TEST_F(StreamTest, BidiStreamAnswersEachMessageWithItsSidecars) {
  auto stream = StreamProxy().Double();
  NumberPB n;
  for (int i = 0; i < 200; i++) {
    n.set_n(i);
    std::string bytes = Pattern(1000 + i, i);
    BlockRef block = Block::Allocate(bytes.size());
    memcpy(block->data(), bytes.data(), bytes.size());
    std::vector<BlockSlice> sidecars{BlockSlice{block, Slice(block->data(), bytes.size())}};
    ASSERT_TRUE(stream.Write(n, std::move(sidecars)).ok());
    NumberPB back;
    std::vector<BlockSlice> back_sidecars;
    Result<bool> got = stream.Read(&back, &back_sidecars);
    ASSERT_TRUE(got.ok() && *got) << got.status().ToString();
    EXPECT_EQ(2 * i, back.n());
    ASSERT_EQ(1u, back_sidecars.size());
    EXPECT_EQ(bytes, back_sidecars[0].slice.ToString());
  }
  stream.CloseWrites();
  NumberPB extra;
  Result<bool> end = stream.Read(&extra);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
  EXPECT_TRUE(stream.Finish().ok());
}

TEST_F(StreamTest, HandlersErrorIsTheClientsEndStatus) {
  RangeRequestPB req = Range(0, 3);
  req.set_fail_with("disk on fire");
  auto stream = StreamProxy().Range(req);
  NumberPB n;
  int got_messages = 0;
  Result<bool> got = true;
  while ((got = stream.Read(&n)).ok() && *got) got_messages++;
  EXPECT_EQ(3, got_messages);  // the messages before the error all arrive
  Status s = stream.Finish();
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("disk on fire")) << s.ToString();
}

TEST_F(StreamTest, ReaderThatStopsStopsTheWriterWithinOneWindow) {
  constexpr uint32_t kPayload = 4000;
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  auto stream = StreamProxy().Range(Range(0, 1000, kPayload), options);
  // The producer fills the window and waits for room: nothing more is sent.
  ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 1; }));
  const int64_t queued = streams_->range_messages_queued.load();
  const int64_t message_bytes = kPayload + 16;  // payload plus the message's own fields, at most
  EXPECT_LE(queued * message_bytes, StreamState::kInitialWindow + message_bytes);
  EXPECT_GE(queued * static_cast<int64_t>(kPayload), StreamState::kInitialWindow - message_bytes);
  // Reading resumes it, to the end.
  NumberPB n;
  int64_t read = 0;
  while (true) {
    Result<bool> got = stream.Read(&n);
    ASSERT_TRUE(got.ok());
    if (!*got) break;
    ASSERT_EQ(read, n.n());
    read++;
  }
  EXPECT_EQ(1000, read);
  EXPECT_TRUE(stream.Finish().ok());
}

TEST_F(StreamTest, UnaryCallsGoOnBesideAStalledStream) {
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  auto stream = StreamProxy().Range(Range(0, 1000000, 1000), options);
  ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 1; }));
  for (int i = 0; i < 20; i++) {
    ASSERT_TRUE(EchoOnce(Proxy(), "ping " + std::to_string(i)).ok());
  }
  stream.Cancel();
}

// A client's streams go to the server over its bulk connection (MessengerOptions::
// bulk_connection_bytes), on the other reactor, not over the connection its small calls use: TCP
// delivers a connection's bytes in order, so a call's answer sent behind a stream's window would
// wait for the reader to get through all of it. With the threshold at 0 one connection carries
// both. The stream and the calls come from one thread, so the count is exact.
TEST_F(StreamTest, StreamsTravelOnTheBulkConnection) {
  for (size_t threshold : {size_t{256 * 1024}, size_t{0}}) {
    client_->Shutdown();
    client_.reset();
    MessengerOptions o;
    o.bulk_connection_bytes = threshold;
    StartClient(o);
    StreamOptions options;
    options.receive_window = StreamState::kInitialWindow;
    auto stream = StreamProxy().Range(Range(0, 1000000, 1000), options);
    ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 1; }));
    ASSERT_TRUE(EchoOnce(Proxy(), "beside a stream").ok());
    const std::vector<ConnectionInfo> conns = client_->DumpConnections();
    ASSERT_EQ(threshold > 0 ? 2u : 1u, conns.size()) << threshold;
    if (conns.size() == 2) {
      EXPECT_NE(conns[0].reactor, conns[1].reactor);
    }
    stream.Cancel();
    EXPECT_TRUE(stream.Finish().IsAborted());
    ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 0; }));
  }
}

TEST_F(StreamTest, ClientCancelEndsTheServersStream) {
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  auto stream = StreamProxy().Range(Range(0, 1000000, 1000), options);
  NumberPB n;
  ASSERT_TRUE(stream.Read(&n).ok());
  ASSERT_TRUE(WaitForCondition([&] { return streams_->producers_waiting.load() == 1; }));
  stream.Cancel();
  EXPECT_TRUE(stream.Finish().IsAborted());
  // The waiting producer is told (its OnWritable runs) and its next write is refused.
  ASSERT_TRUE(WaitForCondition([&] { return streams_->writes_refused.load() == 1; }));
  EXPECT_EQ(0, streams_->producers_waiting.load());
  // The server's stream state is gone.
  MessengerMetrics* m = MessengerInternals::metrics(*server_);
  ASSERT_TRUE(WaitForCondition([&] { return m->streams_open->value() == 0; }));
  EXPECT_EQ(1, m->streams_opened->value());
}

TEST_F(StreamTest, DeadlineEndsAStreamThatNeverFinishes) {
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  options.timeout = MonoDelta::FromMilliseconds(300);
  auto stream = StreamProxy().Range(Range(0, 1000000, 1000), options);
  Status s = stream.Finish();  // never reads: the producer waits until the deadline
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  ASSERT_TRUE(WaitForCondition([&] { return streams_->writes_refused.load() == 1; }));
}

TEST_F(StreamTest, LostConnectionFailsTheReader) {
  auto stream = StreamProxy().Range(Range(0, 1000000, 1000));
  NumberPB n;
  ASSERT_TRUE(stream.Read(&n).ok());
  server_->Shutdown();
  Result<bool> got = true;
  while ((got = stream.Read(&n)).ok() && *got) {
  }
  EXPECT_TRUE(got.ok());  // the messages end; Finish() says why
  Status s = stream.Finish();
  EXPECT_TRUE(s.IsNetworkError() || s.IsAborted()) << s.ToString();
}

TEST_F(StreamTest, ManyStreamsShareOneConnection) {
  std::vector<rtest::StreamServiceProxy> proxies(1, StreamProxy());
  std::vector<ClientStream<RangeRequestPB, NumberPB>> streams;
  for (int i = 0; i < 50; i++) streams.push_back(proxies[0].Range(Range(i * 1000, 200, 50)));
  for (int i = 0; i < 50; i++) {
    NumberPB n;
    int64_t expected = i * 1000;
    while (true) {
      Result<bool> got = streams[i].Read(&n);
      ASSERT_TRUE(got.ok());
      if (!*got) break;
      ASSERT_EQ(expected++, n.n());
    }
    EXPECT_EQ(i * 1000 + 200, expected);
    EXPECT_TRUE(streams[i].Finish().ok());
  }
  EXPECT_EQ(50, streams_->ranges_finished.load());
}

// Streams count against their method's concurrency limit while open, not only while their
// handler runs: with a limit of 2, a third stream is refused (retriably) until one ends.
TEST(StreamPoolTest, OpenStreamsCountAgainstTheMethodsConcurrencyLimit) {
  MessengerOptions so;
  so.name = "server";
  auto server = MessengerBuilder(so).Build().value();
  auto service = std::make_unique<TestStreamService>();
  TestStreamService* streams = service.get();
  ASSERT_TRUE(service->SetMaxConcurrency("Range", 2).ok());
  ASSERT_TRUE(server->RegisterService(std::move(service)).ok());
  Sockaddr addr;
  ASSERT_TRUE(server->Listen(Sockaddr::Loopback(0), &addr).ok());
  auto client = MessengerBuilder(MessengerOptions()).Build().value();
  rtest::StreamServiceProxy proxy(client, addr);
  StreamOptions options;
  options.receive_window = StreamState::kInitialWindow;
  auto a = proxy.Range(Range(0, 1000000, 1000), options);
  auto b = proxy.Range(Range(0, 1000000, 1000), options);
  // Both open (their producers wait for credit), their handlers long returned.
  ASSERT_TRUE(WaitForCondition([&] { return streams->producers_waiting.load() == 2; }));
  auto c = proxy.Range(Range(0, 10, 0), options);
  NumberPB n;
  Result<bool> got = c.Read(&n);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(*got);
  Status refused = c.Finish();
  EXPECT_TRUE(refused.IsServiceUnavailable()) << refused.ToString();
  // One ends: a new stream is admitted and runs to its end.
  a.Cancel();
  ASSERT_TRUE(a.Finish().IsAborted());
  ASSERT_TRUE(WaitForCondition([&] { return streams->writes_refused.load() == 1; }));
  Status ok;
  ASSERT_TRUE(WaitForCondition([&] {
    auto d = proxy.Range(Range(0, 10, 0), options);
    int64_t count = 0;
    while (*d.Read(&n)) count++;
    ok = d.Finish();
    return ok.ok() && count == 10;
  })) << ok.ToString();
  b.Cancel();
  client->Shutdown();
  server->Shutdown();
}

}  // namespace
}  // namespace rrpc::rpc
