// TcpTransport on real loopback sockets and a real libev loop, driven by a recording host: the
// preamble before frames, frames cut and delivered in order, errors reported once, connect
// results, backpressure, and a stream detached mid-way and continued by a new transport with the
// bytes the first one had read.
#include "rpc/transport/tcp_transport.h"

#include <ev.h>
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "rpc/transport/frame-test-util.h"
#include "rpc/transport/frame_format.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/sockaddr.h"
#include "util/socket.h"

namespace rrpc::rpc {
namespace {

BlockSlice Bytes(const std::string& s) {
  BlockRef block = Block::Allocate(s.size());
  memcpy(block->data(), s.data(), s.size());
  return BlockSlice{block, Slice(block->data(), s.size())};
}

// Records what the transport reports; optionally detaches the transport at the preamble.
class RecordingHost : public TransportHost {
 public:
  void OnTransportConnected() override { connected = true; }
  void OnBytesReceived(size_t bytes, MonoTime) override { bytes_received += bytes; }
  void OnPreamble(Slice preamble) override {
    preamble_seen = preamble.ToString();
    if (detach_at_preamble) {
      Result<DetachedStream> stream = transport->Detach();
      ASSERT_TRUE(stream.ok()) << stream.status().ToString();
      detached = std::make_unique<DetachedStream>(std::move(stream).value());
    }
  }
  void OnFrame(BlockSlice&& frame) override { frames.push_back(frame.slice.ToString()); }
  void OnWritable() override { writable++; }
  void OnTransportFailed(const Status& reason) override { failures.push_back(reason); }
  void OnProtocolError(const Status& reason) override { protocol_errors.push_back(reason); }

  Transport* transport = nullptr;
  bool detach_at_preamble = false;
  std::unique_ptr<DetachedStream> detached;
  bool connected = false;
  size_t bytes_received = 0;
  std::string preamble_seen;
  std::vector<std::string> frames;
  int writable = 0;
  std::vector<Status> failures;
  std::vector<Status> protocol_errors;
};

class TcpTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_ = ev_loop_new(EVFLAG_AUTO);
    auto l = Socket::CreateTcp(AF_INET);
    ASSERT_TRUE(l.ok());
    listener_ = std::move(l).value();
    ASSERT_TRUE(listener_.Bind(Sockaddr::Loopback(0)).ok());
    ASSERT_TRUE(listener_.Listen(16).ok());
    addr_ = listener_.GetSocketAddress().value();
  }
  void TearDown() override { ev_loop_destroy(loop_); }

  // A blocking client socket connected to the listener, and the server side as a transport.
  std::unique_ptr<TcpTransport> AcceptServerTransport(Socket* client) {
    auto c = Socket::CreateTcp(AF_INET);
    EXPECT_TRUE(c.ok());
    *client = std::move(c).value();
    EXPECT_TRUE(client->SetNonBlocking(false).ok());
    Status s = client->ConnectNonBlocking(addr_);  // blocking socket: completes here
    EXPECT_TRUE(s.ok()) << s.ToString();
    Socket accepted;
    Sockaddr peer;
    EXPECT_TRUE(listener_.Accept(&accepted, &peer).ok());
    return std::make_unique<TcpTransport>(std::move(accepted), /*connecting=*/false, options_);
  }

  // Runs the loop until `done` or 5 s pass (a failing test ends instead of hanging).
  template <typename Pred>
  bool RunUntil(Pred done) {
    const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(5);
    while (!done()) {
      if (MonoTime::Now() > deadline) return false;
      ev_run(loop_, EVRUN_NOWAIT);
      SleepFor(MonoDelta::FromMilliseconds(1));
    }
    return true;
  }

  struct ev_loop* loop_ = nullptr;
  Socket listener_;
  Sockaddr addr_;
  StreamTransportOptions options_;
};

TEST_F(TcpTransportTest, DeliversThePreambleThenFramesInOrder) {
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  ASSERT_TRUE(transport->ExpectPreamble(6).ok());
  transport->Start(loop_, &host);
  const std::string bytes =
      std::string("RRPC\x01\x00", 6) + RawFrame("first") + RawFrame("second") + RawFrame("third");
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return host.frames.size() == 3; }));
  EXPECT_EQ(std::string("RRPC\x01\x00", 6), host.preamble_seen);
  EXPECT_EQ((std::vector<std::string>{"first", "second", "third"}), host.frames);
  EXPECT_EQ(bytes.size(), host.bytes_received);
  EXPECT_TRUE(host.failures.empty());
}

TEST_F(TcpTransportTest, OversizedFrameIsAProtocolErrorAndStopsDelivery) {
  options_.max_frame_size = 100;
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  transport->Start(loop_, &host);
  std::string big(4, '\0');
  EncodeBigEndian32(reinterpret_cast<uint8_t*>(big.data()), 1000);
  const std::string bytes = RawFrame("ok") + big;
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return !host.protocol_errors.empty(); }));
  EXPECT_EQ((std::vector<std::string>{"ok"}), host.frames);
  EXPECT_NE(std::string::npos, host.protocol_errors[0].ToString().find("exceeds the maximum"));
}

// Frames larger than the read block, back to back, are read into blocks of their size together
// with the next frame's length prefix (readv): they come out whole and in order, and a bad prefix
// that arrives right after one of them is refused like any other.
TEST_F(TcpTransportTest, LargeFramesBackToBackAndABadPrefixAfterThem) {
  options_.read_block_size = 1024;
  options_.max_frame_size = 64 * 1024;
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  transport->Start(loop_, &host);
  std::vector<std::string> expected;
  std::string bytes;
  for (int i = 0; i < 20; i++) {
    std::string content(3000 + i * 500 + (i % 3 == 0 ? 0 : 100 - i), static_cast<char>('a' + i));
    if (i % 5 == 4) content.resize(10);  // small ones between them too
    expected.push_back(content);
    bytes += RawFrame(content);
  }
  std::string bad(4, '\0');
  EncodeBigEndian32(reinterpret_cast<uint8_t*>(bad.data()), 64 * 1024 + 1);
  bytes += bad;
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return !host.protocol_errors.empty(); }));
  EXPECT_EQ(expected, host.frames);
  EXPECT_EQ(bytes.size(), host.bytes_received);
  EXPECT_NE(std::string::npos, host.protocol_errors[0].ToString().find("exceeds the maximum"));
  EXPECT_TRUE(host.failures.empty());
}

// While a large frame is partial, the socket's low watermark holds the loop's wake-up until the
// rest is there: bytes that do not complete the frame are not even read, the frame comes out
// whole once they do, and the watermark is back to one byte for the next (small) frame.
TEST_F(TcpTransportTest, APartialLargeFrameWakesTheLoopOnlyWhenWhole) {
  options_.read_block_size = 1024;
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  transport->Start(loop_, &host);
  const std::string content(60000, 'w');
  const std::string frame = RawFrame(content);
  auto send = [&](size_t from, size_t n) {
    ASSERT_TRUE(
        client.BlockingWrite(reinterpret_cast<const uint8_t*>(frame.data()) + from, n).ok());
  };
  const size_t first = kFrameLengthSize + 20000;
  send(0, first);
  ASSERT_TRUE(RunUntil([&] { return host.bytes_received == first; }));
  send(first, 20000);  // 20,000 of the 40,000 missing: no wake-up, nothing read
  // The loop polls until the transport's socket holds them (all acknowledged: the client's send
  // queue is empty) and twice more: a socket readable for them would have woken it.
  auto client_queue = [&] {
    int unacked = -1;
    return ioctl(client.fd(), SIOCOUTQ, &unacked) == 0 ? unacked : -1;
  };
  ASSERT_TRUE(RunUntil([&] { return client_queue() == 0; }));
  ev_run(loop_, EVRUN_NOWAIT);
  ev_run(loop_, EVRUN_NOWAIT);
  EXPECT_EQ(first, host.bytes_received);
  EXPECT_TRUE(host.frames.empty());
  send(first + 20000, frame.size() - first - 20000);
  ASSERT_TRUE(RunUntil([&] { return host.frames.size() == 1; }));
  EXPECT_EQ(content, host.frames[0]);
  const std::string small = RawFrame("small");
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(small.data()), small.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return host.frames.size() == 2; }));
  EXPECT_EQ("small", host.frames[1]);
  EXPECT_TRUE(host.failures.empty());
}

TEST_F(TcpTransportTest, PeerCloseIsReportedOnce) {
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  host.transport = transport.get();
  transport->Start(loop_, &host);
  client.Close();
  ASSERT_TRUE(RunUntil([&] { return !host.failures.empty(); }));
  EXPECT_TRUE(host.failures[0].IsNetworkError()) << host.failures[0].ToString();
  transport->Close();  // what the connection does on failure: no more callbacks
  ev_run(loop_, EVRUN_NOWAIT);
  EXPECT_EQ(1u, host.failures.size());
}

TEST_F(TcpTransportTest, ClientConnectsOrReportsTheRefusal) {
  TcpTransportFactory factory(options_);
  auto transport = factory.NewClientTransport(addr_);
  ASSERT_TRUE(transport.ok());
  RecordingHost host;
  (*transport)->Start(loop_, &host);
  ASSERT_TRUE(RunUntil([&] { return host.connected || !host.failures.empty(); }));
  EXPECT_TRUE(host.connected);

  // A port nobody listens on: the listener's, once it is closed.
  listener_.Close();
  auto refused = factory.NewClientTransport(addr_);
  RecordingHost refused_host;
  if (refused.ok()) {  // a refusal may also come at once, from connect() itself
    (*refused)->Start(loop_, &refused_host);
    ASSERT_TRUE(RunUntil([&] { return refused_host.connected || !refused_host.failures.empty(); }));
    EXPECT_FALSE(refused_host.connected);
    EXPECT_FALSE(refused_host.failures.empty());
  }
}

TEST_F(TcpTransportTest, WritesTheQueueAndPausesReading) {
  Socket client;
  auto transport = AcceptServerTransport(&client);
  RecordingHost host;
  transport->Start(loop_, &host);
  BytesTransfer* a = new BytesTransfer(Bytes("hello "));
  BytesTransfer* b = new BytesTransfer(Bytes("world"));
  TransferQueue queue;
  queue.push_back(a);
  queue.push_back(b);
  Result<size_t> w = transport->Write(queue, TransferQueue::kNoByteLimit);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(11u, *w);
  a->Advance(6);
  b->Advance(5);
  uint8_t got[11];
  ASSERT_TRUE(client.BlockingRecv(got, sizeof(got)).ok());
  EXPECT_EQ("hello world", std::string(reinterpret_cast<char*>(got), sizeof(got)));
  while (!queue.empty()) queue.pop_front()->TransferDone();

  // At most max_bytes per write, cut inside a transfer; the rest goes with the next.
  BytesTransfer* c = new BytesTransfer(Bytes("abc"));
  BytesTransfer* d = new BytesTransfer(Bytes("defgh"));
  queue.push_back(c);
  queue.push_back(d);
  w = transport->Write(queue, 4);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(4u, *w);
  c->Advance(3);
  d->Advance(1);
  w = transport->Write(queue, TransferQueue::kNoByteLimit);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(4u, *w);
  d->Advance(4);
  uint8_t cut[8];
  ASSERT_TRUE(client.BlockingRecv(cut, sizeof(cut)).ok());
  EXPECT_EQ("abcdefgh", std::string(reinterpret_cast<char*>(cut), sizeof(cut)));
  while (!queue.empty()) queue.pop_front()->TransferDone();

  // Paused, the transport reads nothing; resumed, it delivers what waited.
  transport->PauseReading(true);
  const std::string bytes = RawFrame("later");
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  for (int i = 0; i < 20; i++) ev_run(loop_, EVRUN_NOWAIT);
  EXPECT_TRUE(host.frames.empty());
  transport->PauseReading(false);
  ASSERT_TRUE(RunUntil([&] { return host.frames.size() == 1; }));
  EXPECT_EQ("later", host.frames[0]);
}

TEST_F(TcpTransportTest, DetachedStreamContinuesWithTheBytesAlreadyRead) {
  Socket client;
  auto first = AcceptServerTransport(&client);
  RecordingHost host;
  host.transport = first.get();
  host.detach_at_preamble = true;
  ASSERT_TRUE(first->ExpectPreamble(6).ok());
  first->Start(loop_, &host);
  // Preamble and two frames in one write: the first transport reads all of them at once.
  const std::string bytes = std::string("RRPC\x01\x00", 6) + RawFrame("one") + RawFrame("two");
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return host.detached != nullptr; }));
  EXPECT_TRUE(host.frames.empty());  // nothing delivered after the detach
  EXPECT_EQ(RawFrame("one") + RawFrame("two"), host.detached->unread);

  TcpTransport second(std::move(*host.detached), options_);
  RecordingHost second_host;
  second.Start(loop_, &second_host);
  ASSERT_TRUE(RunUntil([&] { return second_host.frames.size() == 2; }));
  const std::string more = RawFrame("three");
  ASSERT_TRUE(
      client.BlockingWrite(reinterpret_cast<const uint8_t*>(more.data()), more.size()).ok());
  ASSERT_TRUE(RunUntil([&] { return second_host.frames.size() == 3; }));
  EXPECT_EQ((std::vector<std::string>{"one", "two", "three"}), second_host.frames);
}

}  // namespace
}  // namespace rrpc::rpc
