// Streams through a cluster channel: an idempotent stream whose server fails before the first
// message moves to another server, unseen by the stream's user; once a message arrived it is
// pinned; a stream not marked idempotent never moves; a server that refuses a stream's
// connection is ejected as for a call.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rpc/cluster/cluster-test-util.h"
#include "rpc/testing/rtest_stream_moves.rrpc.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/stream.h"
#include "util/countdown_latch.h"

namespace rrpc::rpc {
namespace {

using RangeServerStream = ServerStream<rtest::RangeRequestPB, rtest::NumberPB>;
using EchoServerStream = ServerStream<rtest::NumberPB, rtest::NumberPB>;

// What the servers do, shared by all of them: the first stream opened on any server is taken by
// `first` (it may write, then it is held open and silent until the test ends); every later one
// sends its range and finishes. `first_opened` counts down once the first stream is held.
struct Script {
  enum class First { kHold, kWriteOneThenHold };
  First first = First::kHold;
  std::atomic<bool> first_taken{false};
  CountDownLatch first_opened{1};
  std::mutex mu;
  std::vector<RangeServerStream> held;        // guarded by mu
  std::vector<EchoServerStream> held_echoes;  // guarded by mu

  // The handler's thread: whether this stream is the first, which the script takes.
  bool TakesFirst() { return !first_taken.exchange(true); }
  template <typename S>
  void Hold(S stream, std::vector<S>* into) {
    {
      std::lock_guard<std::mutex> lock(mu);
      into->push_back(std::move(stream));
    }
    first_opened.CountDown();
  }
  void ReleaseHeld() {
    std::vector<RangeServerStream> ranges;
    std::vector<EchoServerStream> echoes;
    {
      std::lock_guard<std::mutex> lock(mu);
      ranges.swap(held);
      echoes.swap(held_echoes);
    }
    for (auto& s : ranges) s.Finish();
    for (auto& s : echoes) s.Finish();
  }
};

// What one server saw; the test owns it (a server's service goes with its messenger).
struct ServerRecord {
  std::atomic<int> opened{0};           // streams opened there
  std::atomic<int> served{0};           // of them, the ones served to the end
  std::atomic<bool> took_first{false};  // the script's first stream was opened there
};

// One server's MovableStreamService: Range and RangeOnce both play the script.
class ScriptedRangeService final : public rtest::MovableStreamServiceIf {
 public:
  ScriptedRangeService(Script* script, ServerRecord* record) : script_(script), record_(record) {}

  void Range(const rtest::RangeRequestPB* req, RangeServerStream stream) override {
    Play(*req, std::move(stream));
  }
  void RangeOnce(const rtest::RangeRequestPB* req, RangeServerStream stream) override {
    Play(*req, std::move(stream));
  }
  // The first stream is held without reading; the others echo until the client half-closes.
  void Echo(EchoServerStream stream) override {
    record_->opened++;
    if (script_->TakesFirst()) {
      record_->took_first = true;
      script_->Hold(std::move(stream), &script_->held_echoes);
      return;
    }
    rtest::NumberPB n;
    while (true) {
      Result<bool> got = stream.Read(&n);
      if (!got.ok() || (*got && !stream.Write(n).ok())) return;
      if (!*got) break;
    }
    n.set_n(-1);
    if (!stream.Write(n).ok()) return;
    record_->served++;
    stream.Finish();
  }

 private:
  // The handler's worker thread.
  void Play(const rtest::RangeRequestPB& req, RangeServerStream stream) {
    record_->opened++;
    if (script_->TakesFirst()) {
      record_->took_first = true;
      if (script_->first == Script::First::kWriteOneThenHold) {
        rtest::NumberPB n;
        n.set_n(req.first());
        if (!stream.Write(n).ok()) return;
      }
      script_->Hold(std::move(stream), &script_->held);
      return;
    }
    rtest::NumberPB n;
    for (int64_t i = req.first(); i < req.first() + req.count(); i++) {
      n.set_n(i);
      if (!stream.Write(n).ok()) return;
    }
    record_->served++;
    stream.Finish();
  }

  Script* const script_;
  ServerRecord* const record_;
};

class ChannelStreamTest : public ::testing::Test {
 protected:
  // Servers on 127.0.0.1 .. 127.0.0.<n>, each with a ScriptedRangeService playing script_.
  void StartServers(int n) {
    for (int i = 1; i <= n; i++) {
      MessengerOptions options;
      options.name = "server" + std::to_string(i);
      auto messenger = MessengerBuilder(options).Build();
      ASSERT_TRUE(messenger.ok()) << messenger.status().ToString();
      services_.push_back(std::make_unique<ServerRecord>());
      auto service = std::make_unique<ScriptedRangeService>(&script_, services_.back().get());
      ASSERT_TRUE((*messenger)->RegisterService(std::move(service)).ok());
      auto want = Sockaddr::Parse("127.0.0." + std::to_string(i) + ":0");
      ASSERT_TRUE(want.ok());
      Sockaddr bound;
      ASSERT_TRUE((*messenger)->Listen(*want, &bound).ok());
      servers_.push_back(*messenger);
      addrs_.push_back(bound);
    }
  }
  rtest::MovableStreamServiceProxy NewProxy(ChannelOptions options = {}) {
    auto client = MessengerBuilder("client").Build();
    CHECK(client.ok()) << client.status().ToString();
    client_ = *client;
    auto channel =
        Channel::Create(client_, std::make_unique<TestResolver>(addrs_), std::move(options));
    CHECK(channel.ok()) << channel.status().ToString();
    channel_ = *channel;
    return rtest::MovableStreamServiceProxy(channel_);
  }
  // Two servers, the first stopped (its port refuses connections), every stream that arrives
  // served, and a round-robin channel whose first pick is the stopped server.
  rtest::MovableStreamServiceProxy ProxyWhoseFirstPickRefuses() {
    StartServers(2);
    servers_[0]->Shutdown();
    script_.first_taken = true;
    ChannelOptions options;
    options.balancer = BalancerPolicy::kRoundRobin;
    return NewProxy(options);
  }
  // The server that holds the script's first stream.
  int FirstServer() const {
    for (size_t i = 0; i < services_.size(); i++) {
      if (services_[i]->took_first) return static_cast<int>(i);
    }
    return -1;
  }
  static rtest::RangeRequestPB Request(int64_t count) {
    rtest::RangeRequestPB req;
    req.set_first(100);
    req.set_count(count);
    return req;
  }
  static StreamOptions Options() {
    StreamOptions options;
    options.timeout = MonoDelta::FromSeconds(60);  // a hang fails the test, never a slow machine
    return options;
  }
  // Reads the stream to its end: the numbers read.
  // The server `stream` opened on stops: the stream ends with a network error, not moved (the
  // other server never saw it).
  void StopItsServerAndExpectItEnds(ClientStream<rtest::RangeRequestPB, rtest::NumberPB>* stream) {
    script_.first_opened.Wait();
    const int first = FirstServer();
    ASSERT_NE(first, -1);
    servers_[first]->Shutdown();
    EXPECT_TRUE(ReadAll(stream).empty());
    Status end = stream->Finish();
    EXPECT_TRUE(end.IsNetworkError()) << end.ToString();
    EXPECT_EQ(services_[1 - first]->opened, 0);
  }
  static std::vector<int64_t> ReadAll(ClientStream<rtest::RangeRequestPB, rtest::NumberPB>* s) {
    std::vector<int64_t> got;
    rtest::NumberPB n;
    while (true) {
      Result<bool> more = s->Read(&n);
      EXPECT_TRUE(more.ok()) << more.status().ToString();
      if (!more.ok() || !*more) break;
      got.push_back(n.n());
    }
    return got;
  }
  BackendInfo BackendOf(const Sockaddr& addr) const {
    for (const BackendInfo& b : channel_->Backends()) {
      if (b.addr == addr) return b;
    }
    ADD_FAILURE() << "no backend " << addr.ToString();
    return {};
  }
  void TearDown() override {
    script_.ReleaseHeld();
    if (client_ != nullptr) client_->Shutdown();
    for (auto& s : servers_) s->Shutdown();
  }

  Script script_;
  std::vector<std::shared_ptr<Messenger>> servers_;
  std::vector<std::unique_ptr<ServerRecord>> services_;  // one per server
  std::vector<Sockaddr> addrs_;
  std::shared_ptr<Messenger> client_;
  std::shared_ptr<Channel> channel_;
};

const std::vector<int64_t> kHundredToHundredFive = {100, 101, 102, 103, 104};

TEST_F(ChannelStreamTest, IdempotentStreamMovesPastAServerThatRefusesItsConnection) {
  auto proxy = ProxyWhoseFirstPickRefuses();
  auto stream = proxy.Range(Request(5), Options());
  EXPECT_EQ(ReadAll(&stream), kHundredToHundredFive);
  Status end = stream.Finish();
  EXPECT_TRUE(end.ok()) << end.ToString();
  EXPECT_EQ(services_[1]->served, 1);
  EXPECT_STREQ(BackendOf(addrs_[0]).health, "ejected");
}

TEST_F(ChannelStreamTest, AStreamWhoseServerRefusesItsConnectionEjectsThatServer) {
  auto proxy = ProxyWhoseFirstPickRefuses();
  auto refused = proxy.RangeOnce(Request(5), Options());
  EXPECT_TRUE(ReadAll(&refused).empty());
  Status end = refused.Finish();
  EXPECT_TRUE(end.IsNetworkError()) << end.ToString();  // not idempotent: not moved
  const BackendInfo dead = BackendOf(addrs_[0]);
  EXPECT_STREQ(dead.health, "ejected");
  EXPECT_EQ(dead.ejections, 1);
  // Round robin would send every other stream to the dead server: its ejection keeps them away.
  for (int i = 0; i < 4; i++) {
    auto stream = proxy.RangeOnce(Request(5), Options());
    EXPECT_EQ(ReadAll(&stream), kHundredToHundredFive);
    Status s = stream.Finish();
    EXPECT_TRUE(s.ok()) << "stream " << i << ": " << s.ToString();
  }
  EXPECT_EQ(services_[1]->served, 4);
}

TEST_F(ChannelStreamTest, IdempotentStreamMovesWhenItsServerFailsBeforeTheFirstMessage) {
  StartServers(2);
  script_.first = Script::First::kHold;
  auto proxy = NewProxy();
  auto stream = proxy.Range(Request(5), Options());
  script_.first_opened.Wait();  // on whichever server the balancer picked
  const int first = FirstServer();
  ASSERT_NE(first, -1);
  servers_[first]->Shutdown();  // the stream's connection resets: a retriable failure
  EXPECT_EQ(ReadAll(&stream), kHundredToHundredFive);
  Status end = stream.Finish();
  EXPECT_TRUE(end.ok()) << end.ToString();
  EXPECT_TRUE(stream.status().ok());
  EXPECT_EQ(services_[first]->opened, 1);
  EXPECT_EQ(services_[1 - first]->opened, 1);
  EXPECT_EQ(services_[1 - first]->served, 1);
}

TEST_F(ChannelStreamTest, IdempotentStreamIsPinnedOnceItsFirstMessageArrived) {
  StartServers(2);
  script_.first = Script::First::kWriteOneThenHold;
  auto proxy = NewProxy();
  auto stream = proxy.Range(Request(5), Options());
  rtest::NumberPB n;
  Result<bool> got = stream.Read(&n);
  ASSERT_TRUE(got.ok() && *got) << got.status().ToString();
  EXPECT_EQ(n.n(), 100);
  StopItsServerAndExpectItEnds(&stream);
}

TEST_F(ChannelStreamTest, StreamNotMarkedIdempotentIsNotMoved) {
  StartServers(2);
  script_.first = Script::First::kHold;
  auto proxy = NewProxy();
  auto stream = proxy.RangeOnce(Request(5), Options());
  StopItsServerAndExpectItEnds(&stream);
}

TEST_F(ChannelStreamTest, IdempotentStreamIsNotMovedBeyondMaxAttempts) {
  StartServers(2);
  script_.first = Script::First::kHold;
  ChannelOptions options;
  options.max_attempts = 1;
  auto proxy = NewProxy(options);
  auto stream = proxy.Range(Request(5), Options());
  StopItsServerAndExpectItEnds(&stream);
}

TEST_F(ChannelStreamTest, BidiStreamMovesWithItsHalfCloseWhenItWroteNothing) {
  StartServers(2);
  auto proxy = NewProxy();
  auto stream = proxy.Echo(Options());
  stream.CloseWrites();  // before or during the move: either way the next server gets it
  script_.first_opened.Wait();
  const int first = FirstServer();
  ASSERT_NE(first, -1);
  servers_[first]->Shutdown();
  std::vector<int64_t> got;
  rtest::NumberPB n;
  while (true) {
    Result<bool> more = stream.Read(&n);
    ASSERT_TRUE(more.ok()) << more.status().ToString();
    if (!*more) break;
    got.push_back(n.n());
  }
  EXPECT_EQ(got, std::vector<int64_t>{-1});
  Status end = stream.Finish();
  EXPECT_TRUE(end.ok()) << end.ToString();
  EXPECT_EQ(services_[1 - first]->served, 1);
}

TEST_F(ChannelStreamTest, BidiStreamIsPinnedOnceItWroteAMessage) {
  StartServers(2);
  auto proxy = NewProxy();
  auto stream = proxy.Echo(Options());
  rtest::NumberPB n;
  n.set_n(7);
  ASSERT_TRUE(stream.Write(n).ok());  // queued before the failure: it may have reached the server
  script_.first_opened.Wait();
  const int first = FirstServer();
  ASSERT_NE(first, -1);
  servers_[first]->Shutdown();
  Result<bool> more = stream.Read(&n);
  ASSERT_TRUE(more.ok()) << more.status().ToString();
  EXPECT_FALSE(*more);
  Status end = stream.Finish();
  EXPECT_TRUE(end.IsNetworkError()) << end.ToString();
  EXPECT_EQ(services_[1 - first]->opened, 0);
}

}  // namespace
}  // namespace rrpc::rpc
