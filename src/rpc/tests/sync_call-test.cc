// The synchronous call path: once a thread's synchronous call has gone out on a connection, the
// thread writes its next lone call to that remote itself (Connection::TrySendCallFromCaller)
// instead of handing it to a reactor; such a call still times out at its deadline and still
// fails when the connection or the messenger goes.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "rpc/testing/rpc-test-util.h"
#include "rpc/transport/tcp_transport.h"
#include "rrpc/util/mutex.h"

namespace rrpc::rpc {
namespace {

// Which threads wrote how many times: a TcpTransport whose Write() notes its caller.
struct WriterLog {
  Mutex mu;
  std::vector<std::thread::id> writers;  // RRPC_GUARDED_BY(mu)
  int WritesBy(std::thread::id id) {
    MutexLock lock(mu);
    int n = 0;
    for (auto w : writers) n += w == id;
    return n;
  }
};

class LoggingTransport final : public Transport {
 public:
  LoggingTransport(std::unique_ptr<Transport> inner, WriterLog* log)
      : inner_(std::move(inner)), log_(log) {}
  const char* name() const override { return inner_->name(); }
  TransportCapabilities capabilities() const override { return inner_->capabilities(); }
  void Start(struct ev_loop* loop, TransportHost* host) override { inner_->Start(loop, host); }
  Status ExpectPreamble(size_t bytes) override { return inner_->ExpectPreamble(bytes); }
  Result<size_t> Write(const TransferQueue& queue, size_t max_bytes) override {
    {
      MutexLock lock(log_->mu);
      log_->writers.push_back(std::this_thread::get_id());
    }
    return inner_->Write(queue, max_bytes);
  }
  void NotifyWhenWritable(bool on) override { inner_->NotifyWhenWritable(on); }
  void PauseReading(bool paused) override { inner_->PauseReading(paused); }
  Result<DetachedStream> Detach() override { return inner_->Detach(); }
  void Close() override { inner_->Close(); }
  void Describe(std::vector<std::pair<std::string, std::string>>* out) const override {
    inner_->Describe(out);
  }

 private:
  std::unique_ptr<Transport> inner_;
  WriterLog* const log_;
};

class LoggingFactory final : public TransportFactory {
 public:
  explicit LoggingFactory(WriterLog* log) : tcp_(StreamTransportOptions()), log_(log) {}
  std::unique_ptr<Transport> NewServerTransport(Socket accepted) override {
    return tcp_.NewServerTransport(std::move(accepted));
  }
  Result<std::unique_ptr<Transport>> NewClientTransport(const Sockaddr& remote) override {
    RRPC_ASSIGN_OR_RETURN(std::unique_ptr<Transport> inner, tcp_.NewClientTransport(remote));
    return std::unique_ptr<Transport>(std::make_unique<LoggingTransport>(std::move(inner), log_));
  }

 private:
  TcpTransportFactory tcp_;
  WriterLog* const log_;
};

class SyncCallTest : public RpcTestBase {
 protected:
  void StartLoggedClient() {
    MessengerOptions options;
    options.transport_factory = std::make_shared<LoggingFactory>(&log_);
    StartClient(options);
  }
  Status Echo(const std::string& data, MonoDelta timeout, uint32_t sleep_ms = 0) {
    return EchoOnce(Proxy(), data, timeout, sleep_ms);
  }
  WriterLog log_;
};

TEST_F(SyncCallTest, AfterTheFirstCallTheCallingThreadWritesItsCallsItself) {
  StartServer();
  StartLoggedClient();
  const auto me = std::this_thread::get_id();
  ASSERT_TRUE(Echo("first", MonoDelta::FromSeconds(60)).ok());
  EXPECT_EQ(0, log_.WritesBy(me));  // the reactor sent it (and connected)
  for (int i = 0; i < 10; i++) {
    ASSERT_TRUE(Echo("call " + std::to_string(i), MonoDelta::FromSeconds(60)).ok()) << i;
  }
  EXPECT_EQ(10, log_.WritesBy(me));
}

TEST_F(SyncCallTest, ACallWrittenByTheCallerTimesOutAtItsDeadlineAndTheConnectionStaysUsable) {
  StartServer();
  StartLoggedClient();
  ASSERT_TRUE(Echo("first", MonoDelta::FromSeconds(60)).ok());
  // The "slow" handler is held at the gate until the call has returned: a call that waited for
  // its response could only return after the gate opens.
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "slow") gate_.Pass();
  });
  const MonoTime start = MonoTime::Now();
  Status s = Echo("slow", MonoDelta::FromMilliseconds(200));
  const MonoDelta took = MonoTime::Now() - start;
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_GE(took.ToMilliseconds(), 190);  // not before its deadline
  EXPECT_EQ(1, log_.WritesBy(std::this_thread::get_id()));
  // It returned while its handler was held: the call did not wait for the response.
  ASSERT_TRUE(gate_.WaitForEntered(1));
  gate_.Open();
  // The late response is dropped; the next calls go through (the first of them via the
  // reactor's queue or directly, depending on whether the slow handler still holds a worker).
  for (int i = 0; i < 3; i++) EXPECT_TRUE(Echo("after", MonoDelta::FromSeconds(60)).ok());
}

TEST_F(SyncCallTest, MessengerShutdownFailsACallWrittenByTheCaller) {
  StartServer();
  StartLoggedClient();
  ASSERT_TRUE(Echo("first", MonoDelta::FromSeconds(60)).ok());
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "never answered") gate_.Pass();
  });
  Status s;
  std::thread caller([&] {
    // Direct writes need a thread that made a call before: this one makes its own first.
    Status first = Echo("first", MonoDelta::FromSeconds(60));
    EXPECT_TRUE(first.ok()) << first.ToString();
    s = Echo("never answered", MonoDelta::FromSeconds(60));
  });
  // Once the caller wrote its second call itself and the server holds it, shut the client down.
  ASSERT_TRUE(gate_.WaitForEntered(1));
  EXPECT_EQ(1, log_.WritesBy(caller.get_id()));
  client_->Shutdown();
  caller.join();  // the gate is still shut: only the shutdown (or the 60 s timeout) ends it
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(s.IsTimedOut()) << s.ToString();
  gate_.Open();
}

}  // namespace
}  // namespace rrpc::rpc
