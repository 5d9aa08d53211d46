// The transport seam end to end: every connection of a messenger goes through the transport its
// TransportFactory makes, and a live connection can be handed to a new transport mid-stream
// (Connection::UpgradeTransport, what TLS and RDMA negotiation use) without losing a call; the
// connections of a reactor take turns writing (core/write_turns.h).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rpc/core/connection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/reactor.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/test-stream-service.h"
#include "rpc/transport/tcp_transport.h"

namespace rrpc::rpc {
namespace {

// Counts what passes through: a TcpTransport under a transport of another name.
struct Traffic {
  std::atomic<int> transports{0};
  std::atomic<int> frames_in{0};
  std::atomic<uint64_t> bytes_out{0};
  // Writes given a limit below "no limit" (WriteTurns), and writes that took more than theirs.
  std::atomic<int> limited_writes{0};
  std::atomic<int> writes_over_limit{0};
};

class CountingTransport final : public Transport, private TransportHost {
 public:
  CountingTransport(std::unique_ptr<Transport> inner, const char* name, Traffic* traffic)
      : inner_(std::move(inner)), name_(name), traffic_(traffic) {
    traffic_->transports++;
  }
  const char* name() const override { return name_; }
  TransportCapabilities capabilities() const override { return inner_->capabilities(); }
  void Start(struct ev_loop* loop, TransportHost* host) override {
    host_ = host;
    inner_->Start(loop, this);
  }
  Status ExpectPreamble(size_t bytes) override { return inner_->ExpectPreamble(bytes); }
  Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) override {
    Result<size_t> w = inner_->Write(queue, max_bytes);
    if (max_bytes != TransferQueue::kNoByteLimit) traffic_->limited_writes++;
    if (w.ok() && *w > max_bytes) traffic_->writes_over_limit++;
    if (w.ok()) traffic_->bytes_out += *w;
    return w;
  }
  void NotifyWhenWritable(bool on) override { inner_->NotifyWhenWritable(on); }
  void PauseReading(bool paused) override { inner_->PauseReading(paused); }
  Result<DetachedStream> Detach() override { return inner_->Detach(); }
  void Close() override { inner_->Close(); }
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override {
    out->emplace_back("wrapped", inner_->name());
  }

 private:
  void OnTransportConnected() override { host_->OnTransportConnected(); }
  void OnBytesReceived(size_t bytes, MonoTime now) override { host_->OnBytesReceived(bytes, now); }
  void OnPreamble(Slice preamble) override { host_->OnPreamble(preamble); }
  void OnFrame(BlockSlice&& frame) override {
    traffic_->frames_in++;
    host_->OnFrame(std::move(frame));
  }
  void OnWritable() override { host_->OnWritable(); }
  void OnTransportFailed(const Status& reason) override { host_->OnTransportFailed(reason); }
  void OnProtocolError(const Status& reason) override { host_->OnProtocolError(reason); }

  std::unique_ptr<Transport> inner_;
  const char* const name_;
  Traffic* const traffic_;
  TransportHost* host_ = nullptr;
};

class CountingFactory final : public TransportFactory {
 public:
  explicit CountingFactory(Traffic* traffic) : tcp_(StreamTransportOptions()), traffic_(traffic) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override {
    return std::make_unique<CountingTransport>(tcp_.NewServerTransport(std::move(accepted)),
                                               "counted", traffic_);
  }
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override {
    RRPC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> inner, tcp_.NewClientTransport(remote));
    return std::unique_ptr<Transport>(
        std::make_unique<CountingTransport>(std::move(inner), "counted", traffic_));
  }

 private:
  TcpTransportFactory tcp_;
  Traffic* const traffic_;
};

class TransportSeamTest : public RpcTestBase {
 protected:
  void Call(const std::string& data) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = Proxy().Echo(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(data, resp.data());
  }

  // Runs `fn` on every connection of the server's (only) reactor, and waits for it.
  void OnServerConnections(const std::function<void(Connection*)>& fn) {
    CountDownLatch done(1);
    Reactor* reactor = MessengerInternals::reactor(*server_, 0);
    reactor->RunOnReactor([&] {
      reactor->ForEachConnection(fn);
      done.CountDown();
    });
    done.Wait();
  }
};

TEST_F(TransportSeamTest, EveryConnectionUsesTheFactorysTransport) {
  Traffic server_traffic, client_traffic;
  MessengerOptions server_options;
  server_options.transport_factory = std::make_shared<CountingFactory>(&server_traffic);
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.transport_factory = std::make_shared<CountingFactory>(&client_traffic);
  StartClient(client_options);
  for (int i = 0; i < 5; i++) ASSERT_NO_FATAL_FAILURE(Call("call " + std::to_string(i)));
  EXPECT_EQ(1, client_traffic.transports.load());
  EXPECT_GE(server_traffic.transports.load(), 1);
  EXPECT_EQ(6, server_traffic.frames_in.load());  // the negotiation request and five calls
  EXPECT_EQ(6, client_traffic.frames_in.load());  // the negotiation reply and five responses
  EXPECT_GT(client_traffic.bytes_out.load(), 0u);
  const std::vector<ConnectionInfo> conns = server_->DumpConnections();
  ASSERT_EQ(1u, conns.size());
  EXPECT_EQ("counted", conns[0].transport);
  ASSERT_EQ(1u, conns[0].transport_details.size());
  EXPECT_EQ("wrapped", conns[0].transport_details[0].first);
  EXPECT_EQ("tcp", conns[0].transport_details[0].second);
}

TEST_F(TransportSeamTest, LiveConnectionMovesToANewTransport) {
  MessengerOptions one_reactor;
  one_reactor.num_reactors = 1;
  StartServer(one_reactor);
  StartClient();
  ASSERT_NO_FATAL_FAILURE(Call("before"));
  Traffic upgraded;
  OnServerConnections([&](Connection* conn) {
    Status s = conn->UpgradeTransport([&](DetachedStream stream) {
      auto tcp = std::make_unique<TcpTransport>(std::move(stream), StreamTransportOptions());
      return Result<std::unique_ptr<Transport>>(
          std::make_unique<CountingTransport>(std::move(tcp), "upgraded", &upgraded));
    });
    EXPECT_TRUE(s.ok()) << s.ToString();
  });
  EXPECT_EQ(1, upgraded.transports.load());
  // Calls go on over the same socket, now through the new transport, many at once.
  constexpr int kCalls = 50;
  std::vector<rtest::EchoRequestPB> reqs(kCalls);
  std::vector<rtest::EchoResponsePB> resps(kCalls);
  std::vector<RpcController> ctls(kCalls);
  CountDownLatch done(kCalls);
  auto proxy = Proxy();
  for (int i = 0; i < kCalls; i++) {
    reqs[i].set_data("after " + std::to_string(i));
    ctls[i].set_timeout(MonoDelta::FromSeconds(60));
    proxy.EchoAsync(reqs[i], &resps[i], &ctls[i], [&] { done.CountDown(); });
  }
  done.Wait();
  for (int i = 0; i < kCalls; i++) {
    ASSERT_TRUE(ctls[i].status().ok()) << ctls[i].status().ToString();
    EXPECT_EQ(reqs[i].data(), resps[i].data());
  }
  EXPECT_EQ(kCalls, upgraded.frames_in.load());
  EXPECT_EQ("upgraded", server_->DumpConnections().at(0).transport);
}

TEST_F(TransportSeamTest, FailedUpgradeClosesOnlyThatConnection) {
  MessengerOptions one_reactor;
  one_reactor.num_reactors = 1;
  StartServer(one_reactor);
  StartClient();
  ASSERT_NO_FATAL_FAILURE(Call("before"));
  OnServerConnections([&](Connection* conn) {
    Status s = conn->UpgradeTransport([](DetachedStream) {
      return Result<std::unique_ptr<Transport>>(Status::NotSupported("no such transport"));
    });
    EXPECT_TRUE(s.IsNotSupported()) << s.ToString();
  });
  EXPECT_TRUE(WaitForCondition([&] { return server_->DumpConnections().empty(); }));
  // The client notices, reconnects and carries on.
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
  ASSERT_NO_FATAL_FAILURE(Call("after"));
}

// A reactor's busy connections take turns (core/write_turns.h). A stream alone on the server's
// reactor is written without a limit; once calls on another connection come in between its
// reads, its writes are limited to a turn's share. Every message still arrives once, in order.
TEST_F(TransportSeamTest, AStreamSharingItsReactorWithCallsWritesInTurns) {
  Traffic traffic;
  MessengerOptions server_options;
  server_options.num_reactors = 1;
  server_options.transport_factory = std::make_shared<CountingFactory>(&traffic);
  extra_services_.push_back(std::make_unique<TestStreamService>());
  StartServer(server_options);
  StartClient();
  constexpr int64_t kMessages = 400;
  constexpr uint32_t kPayload = 16000;
  rtest::RangeRequestPB range;
  range.set_first(0);
  range.set_count(kMessages);
  range.set_payload_bytes(kPayload);
  // The stream travels on the client's bulk connection, the calls on its small one.
  auto stream = rtest::StreamServiceProxy(client_, server_addr_).Range(range);
  rtest::NumberPB n;
  int64_t next = 0;
  auto read_one = [&] {
    Result<bool> got = stream.Read(&n);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(*got);
    ASSERT_EQ(next, n.n());
    ASSERT_EQ(kPayload, n.payload().size());
    next++;
  };
  // Alone: more than a window read (1 MiB, 65 messages), so the server wrote after credit came.
  for (int i = 0; i < 100; i++) ASSERT_NO_FATAL_FAILURE(read_one());
  EXPECT_EQ(0, traffic.limited_writes.load());
  // A call between reads: the server's reactor receives from both connections in turn.
  for (int i = 0; i < 100; i++) {
    ASSERT_NO_FATAL_FAILURE(Call("beside the stream"));
    ASSERT_NO_FATAL_FAILURE(read_one());
  }
  EXPECT_GT(traffic.limited_writes.load(), 0);
  while (next < kMessages) ASSERT_NO_FATAL_FAILURE(read_one());
  Result<bool> end = stream.Read(&n);
  ASSERT_TRUE(end.ok());
  EXPECT_FALSE(*end);
  EXPECT_TRUE(stream.Finish().ok());
  EXPECT_EQ(0, traffic.writes_over_limit.load());
}

}  // namespace
}  // namespace rrpc::rpc
