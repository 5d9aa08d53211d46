// Exactly-once for tracked methods (docs/exactly-once.md): the result tracker replays finished
// calls, makes duplicates of a running call wait, forgets results below the client's lowest
// in-flight number, keeps its memory under its caps, refuses forged ids cleanly; the client
// retries lost outcomes with the same request id; old peers work each way. Raw sockets send the
// exact request ids a test needs; every wait is on an event or a bounded condition.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "rpc/core/fault_injection.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/core/request_tracker.h"
#include "rpc/core/result_tracker.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/rtest_tracked.rrpc.h"
#include "rrpc/rpc/messenger.h"
#include "rrpc/rpc/rpc_context.h"
#include "util/countdown_latch.h"
#include "util/metrics/metric_registry.h"
#include "util/metrics/prometheus_writer.h"

namespace rrpc::rpc {
namespace {

using rtest::CounterAddRequestPB;
using rtest::CounterAddResponsePB;

class CounterService : public rtest::CounterServiceIf {
 public:
  void Add(const CounterAddRequestPB* req, CounterAddResponsePB* resp, RpcContext* ctx) override {
    runs_.fetch_add(1);
    {
      MutexLock l(mu_);
      runs_by_key_[req->key()]++;
    }
    if (hook_) hook_();
    resp->set_value(Apply(*req));
    if (req->sidecar_bytes() > 0) {
      BlockRef block = Block::Allocate(req->sidecar_bytes());
      for (uint32_t i = 0; i < req->sidecar_bytes(); i++) block->data()[i] = 'a' + i % 26;
      Slice bytes(block->data(), req->sidecar_bytes());
      ctx->AddOutboundSidecar(BlockSlice{std::move(block), bytes});
    }
    ctx->RespondSuccess();
  }
  void AddUntracked(const CounterAddRequestPB* req, CounterAddResponsePB* resp,
                    RpcContext* ctx) override {
    runs_.fetch_add(1);
    resp->set_value(Apply(*req));
    ctx->RespondSuccess();
  }
  int runs() const { return runs_.load(); }
  // Add's runs for `key`.
  int runs_of(const std::string& key) {
    MutexLock l(mu_);
    return runs_by_key_[key];
  }
  // Runs in each Add before it applies (set before calls start).
  void set_hook(std::function<void()> hook) { hook_ = std::move(hook); }

 private:
  int64_t Apply(const CounterAddRequestPB& req) {
    MutexLock l(mu_);
    return counters_[req.key()] += req.delta();
  }
  std::atomic<int> runs_{0};
  std::function<void()> hook_;
  Mutex mu_;
  std::map<std::string, int64_t> counters_ RRPC_GUARDED_BY(mu_);
  std::map<std::string, int> runs_by_key_ RRPC_GUARDED_BY(mu_);
};

const std::string kService = "rrpc.rtest.CounterService";

// A call frame of `method` with a request id (client id `client`).
std::string TrackedFrame(int32_t call_id, const std::string& client, uint64_t seq,
                         uint64_t first_incomplete, int64_t delta, uint32_t sidecar_bytes = 0,
                         const std::string& method = "Add") {
  RequestHeader header;
  header.set_call_id(call_id);
  header.mutable_remote_method()->set_service_name(kService);
  header.mutable_remote_method()->set_method_name(method);
  RequestIdPB* id = header.mutable_request_id();
  id->set_client_id(client);
  id->set_seq_no(seq);
  id->set_first_incomplete_seq_no(first_incomplete);
  id->set_attempt_no(1);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(delta);
  if (sidecar_bytes > 0) req.set_sidecar_bytes(sidecar_bytes);
  return FrameBytes(header, req);
}

struct RawAnswer {
  ResponseHeader header;
  int64_t value = -1;
  ErrorStatusPB error;
  std::string sidecars;
};

RawAnswer ReadAnswer(RawConnection* conn) {
  RawAnswer a;
  std::string body;
  Status s = conn->ReadParsedFrame(&a.header, &body, &a.sidecars);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (a.header.is_error()) {
    EXPECT_TRUE(a.error.ParseFromString(body));
  } else {
    CounterAddResponsePB resp;
    EXPECT_TRUE(resp.ParseFromString(body));
    a.value = resp.value();
  }
  return a;
}

class ExactlyOnceTest : public ::testing::Test {
 protected:
  void StartServer(MessengerOptions options = {}) {
    options.name = "server";
    auto built = MessengerBuilder(options).Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    server_ = std::move(built).value();
    auto service = std::make_unique<CounterService>();
    service_ = service.get();
    ASSERT_TRUE(server_->RegisterService(std::move(service)).ok());
    ASSERT_TRUE(server_->Listen(Sockaddr::Loopback(0), &addr_).ok());
  }
  // `faults`: injected into the client's connections (fault_injection.h); nullptr: none.
  void StartClient(MessengerOptions options = {}, std::shared_ptr<FaultInjector> faults = nullptr) {
    options.name = "client";
    MessengerBuilder builder(options);
    MessengerInternals::SetFaultInjector(&builder, std::move(faults));
    auto built = builder.Build();
    ASSERT_TRUE(built.ok()) << built.status().ToString();
    client_ = std::move(built).value();
  }
  std::unique_ptr<RawConnection> Connect() {
    auto conn = std::make_unique<RawConnection>(addr_);
    EXPECT_TRUE(conn->ok()) << conn->status().ToString();
    EXPECT_TRUE(conn->Negotiate().ok());
    return conn;
  }
  ResultTrackerStats stats() const { return MessengerInternals::result_tracker(*server_)->stats(); }
  // Waits (bounded) until `done` holds.
  static bool WaitFor(const std::function<bool()>& done) {
    const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(60);
    while (!done()) {
      if (MonoTime::Now() > deadline) return false;
      SleepFor(MonoDelta::FromMilliseconds(1));
    }
    return true;
  }
  void TearDown() override {
    gate_.Open();
    if (client_) client_->Shutdown();
    if (server_) server_->Shutdown();
  }

  HandlerGate gate_;
  std::shared_ptr<Messenger> server_;
  std::shared_ptr<Messenger> client_;
  CounterService* service_ = nullptr;
  Sockaddr addr_;
  const std::string client_id_ = std::string(16, 'c');
};

TEST(ExactlyOnceCodegenTest, TrackedOptionReachesTheMethodInfo) {
  CounterService service;
  EXPECT_TRUE(service.FindMethod("Add")->tracked);
  EXPECT_FALSE(service.FindMethod("AddUntracked")->tracked);
}

TEST_F(ExactlyOnceTest, RetryOfFinishedCallGetsTheStoredAnswerWithoutRunningAgain) {
  StartServer();
  auto conn = Connect();
  ASSERT_TRUE(conn->Write(TrackedFrame(1, client_id_, 1, 1, 5, /*sidecar_bytes=*/30)).ok());
  RawAnswer first = ReadAnswer(conn.get());
  // The retry comes on another connection, as after a cut, with another call id.
  auto conn2 = Connect();
  ASSERT_TRUE(conn2->Write(TrackedFrame(7, client_id_, 1, 1, 5, 30)).ok());
  RawAnswer retry = ReadAnswer(conn2.get());
  EXPECT_EQ(1, service_->runs());
  EXPECT_EQ(5, first.value);
  EXPECT_EQ(5, retry.value);
  EXPECT_EQ(7, retry.header.call_id());
  EXPECT_EQ(30u, retry.sidecars.size());
  EXPECT_EQ(first.sidecars, retry.sidecars);
  EXPECT_EQ(1u, stats().replays);
  const std::string metrics = FormatPrometheus(server_->metric_registry()->TakeSnapshot());
  EXPECT_NE(std::string::npos, metrics.find("rrpc_result_tracker_replays_total{"));
  EXPECT_NE(std::string::npos, metrics.find("rrpc_result_tracker_bytes{"));
  // A new number runs.
  ASSERT_TRUE(conn->Write(TrackedFrame(2, client_id_, 2, 1, 5)).ok());
  EXPECT_EQ(10, ReadAnswer(conn.get()).value);
  EXPECT_EQ(2, service_->runs());
}

TEST_F(ExactlyOnceTest, DuplicateOfRunningCallWaitsAndGetsTheSameAnswer) {
  StartServer();
  service_->set_hook([this] { gate_.Pass(); });
  auto conn = Connect();
  ASSERT_TRUE(conn->Write(TrackedFrame(1, client_id_, 1, 1, 3)).ok());
  ASSERT_TRUE(gate_.WaitForEntered(1));
  auto conn2 = Connect();
  ASSERT_TRUE(conn2->Write(TrackedFrame(2, client_id_, 1, 1, 3)).ok());
  ASSERT_TRUE(WaitFor([this] { return stats().waits == 1; }));
  gate_.Open();
  EXPECT_EQ(3, ReadAnswer(conn.get()).value);
  RawAnswer dup = ReadAnswer(conn2.get());
  EXPECT_EQ(3, dup.value);
  EXPECT_EQ(2, dup.header.call_id());
  EXPECT_EQ(1, service_->runs());
}

TEST_F(ExactlyOnceTest, ForgetsResultsBelowTheClientsLowestInFlightNumber) {
  StartServer();
  auto conn = Connect();
  for (int seq = 1; seq <= 3; seq++) {
    ASSERT_TRUE(conn->Write(TrackedFrame(seq, client_id_, seq, 1, 1)).ok());
    ReadAnswer(conn.get());
  }
  EXPECT_EQ(3u, stats().entries);
  const size_t bytes_with_three = stats().bytes;
  ASSERT_TRUE(conn->Write(TrackedFrame(4, client_id_, 4, 4, 1)).ok());
  EXPECT_EQ(4, ReadAnswer(conn.get()).value);
  EXPECT_EQ(1u, stats().entries);
  EXPECT_LT(stats().bytes, bytes_with_three);
  // A retry of a forgotten number is refused, never run again.
  ASSERT_TRUE(conn->Write(TrackedFrame(5, client_id_, 2, 4, 1)).ok());
  RawAnswer stale = ReadAnswer(conn.get());
  ASSERT_TRUE(stale.header.is_error());
  EXPECT_EQ(ErrorStatusPB::ERROR_REQUEST_STALE, stale.error.code());
  EXPECT_EQ(4, service_->runs());
}

TEST_F(ExactlyOnceTest, ClientThatNeverAdvancesStaysUnderItsCap) {
  MessengerOptions options;
  options.result_tracker.max_bytes_per_client = 8 << 10;
  StartServer(options);
  auto conn = Connect();
  for (int seq = 1; seq <= 500; seq++) {  // first_incomplete stays 1
    ASSERT_TRUE(conn->Write(TrackedFrame(seq, client_id_, seq, 1, 1, 20)).ok());
    RawAnswer a = ReadAnswer(conn.get());
    ASSERT_FALSE(a.header.is_error()) << a.error.message();
    ASSERT_LE(stats().bytes, options.result_tracker.max_bytes_per_client);
  }
  EXPECT_GT(stats().evicted, 0u);
  // An evicted number is refused, not run twice.
  ASSERT_TRUE(conn->Write(TrackedFrame(501, client_id_, 1, 1, 1)).ok());
  RawAnswer evicted = ReadAnswer(conn.get());
  ASSERT_TRUE(evicted.header.is_error());
  EXPECT_EQ(ErrorStatusPB::ERROR_REQUEST_STALE, evicted.error.code());
  EXPECT_EQ(500, service_->runs());
}

TEST_F(ExactlyOnceTest, ManyClientIdsAreRefusedRetriablyAtTheGlobalCap) {
  MessengerOptions options;
  options.result_tracker.max_bytes = 16 << 10;
  StartServer(options);
  auto conn = Connect();
  int refused = 0;
  for (int i = 0; i < 200; i++) {
    std::string client(16, '\0');
    memcpy(client.data(), &i, sizeof(i));
    ASSERT_TRUE(conn->Write(TrackedFrame(i + 1, client, 1, 1, 1)).ok());
    RawAnswer a = ReadAnswer(conn.get());
    if (a.header.is_error()) {
      EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, a.error.code());
      refused++;
    }
    ASSERT_LE(stats().bytes, options.result_tracker.max_bytes);
  }
  EXPECT_GT(refused, 0);
  EXPECT_EQ(200 - refused, service_->runs());
  EXPECT_EQ(static_cast<uint64_t>(refused), stats().refused);
}

TEST_F(ExactlyOnceTest, ForgedIdsGetClearErrorsAndHugeNumbersHoldNoMore) {
  StartServer();
  auto conn = Connect();
  // Client ids of 0 and 17 bytes: invalid request; the handler does not run.
  for (const std::string& bad : {std::string(), std::string(17, 'x')}) {
    ASSERT_TRUE(conn->Write(TrackedFrame(1, bad, 1, 1, 1)).ok());
    RawAnswer a = ReadAnswer(conn.get());
    ASSERT_TRUE(a.header.is_error());
    EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, a.error.code());
  }
  EXPECT_EQ(0, service_->runs());
  // The largest numbers are just numbers: one entry.
  ASSERT_TRUE(conn->Write(TrackedFrame(2, client_id_, UINT64_MAX, UINT64_MAX, 1)).ok());
  EXPECT_EQ(1, ReadAnswer(conn.get()).value);
  EXPECT_EQ(1u, stats().entries);
  // A lowest in-flight number above the call's own: the call is stale, nothing runs.
  ASSERT_TRUE(conn->Write(TrackedFrame(3, std::string(16, 'd'), 5, 1000, 1)).ok());
  RawAnswer forged = ReadAnswer(conn.get());
  ASSERT_TRUE(forged.header.is_error());
  EXPECT_EQ(ErrorStatusPB::ERROR_REQUEST_STALE, forged.error.code());
  EXPECT_EQ(1, service_->runs());
  // An untracked method ignores a request id, valid or not.
  ASSERT_TRUE(conn->Write(TrackedFrame(4, std::string(40, 'y'), 1, 1, 1, 0, "AddUntracked")).ok());
  EXPECT_EQ(2, ReadAnswer(conn.get()).value);
}

TEST_F(ExactlyOnceTest, OldClientWithoutTheFeatureTalksToNewServer) {
  StartServer();
  RawConnection conn(addr_);
  ASSERT_TRUE(conn.ok());
  // An old client's hello: SIDECARS only, and calls without request ids.
  RequestHeader hello_header;
  hello_header.set_call_id(kNegotiateCallId);
  NegotiatePB hello;
  hello.set_step(NegotiatePB::NEGOTIATE);
  hello.add_supported_features(SIDECARS);
  ASSERT_TRUE(conn.SendPreamble().ok());
  ASSERT_TRUE(conn.Write(FrameBytes(hello_header, hello)).ok());
  std::string frame;
  ASSERT_TRUE(conn.ReadFrame(&frame).ok());
  NegotiatePB reply;
  ASSERT_TRUE(ParseServerReply(Slice(frame), &reply).ok());
  for (int f : reply.supported_features()) EXPECT_NE(EXACTLY_ONCE, f);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(2);
  for (int i = 1; i <= 2; i++) {
    ASSERT_TRUE(conn.Write(CallFrame(i, kService, "Add", req)).ok());
    EXPECT_EQ(2 * i, ReadAnswer(&conn).value);  // every call runs, as before
  }
  EXPECT_EQ(0u, stats().entries);
}

TEST_F(ExactlyOnceTest, NewServerAcceptsTheFeatureAndProxyCallsCarryIds) {
  StartServer();
  StartClient();
  rtest::CounterServiceProxy proxy(client_, addr_);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  for (int i = 1; i <= 3; i++) {
    CounterAddResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
    EXPECT_EQ(i, resp.value());
    EXPECT_EQ(static_cast<uint64_t>(i), ctl.request_seq_no());
    EXPECT_TRUE(ctl.server_tracks_results());
  }
  // Finished calls are no longer in flight: the next call lets the server forget them.
  EXPECT_EQ(4u, MessengerInternals::request_tracker(*client_)->FirstIncomplete());
  EXPECT_EQ(1u, stats().entries);
}

// Every response the client reads is dropped: each attempt of a tracked call times out.
RetryPolicy LostResponsesPolicy() {
  RetryPolicy policy;
  policy.max_attempts = 3;
  policy.attempt_timeout = MonoDelta::FromMilliseconds(300);
  return policy;
}

std::shared_ptr<FaultInjector> DroppingClientFaults() {
  FaultSpec spec;
  spec.drop_read = 1.0;  // after the negotiation reply
  return std::make_shared<FaultInjector>(spec);
}

TEST_F(ExactlyOnceTest, LostOutcomesAreRetriedWithTheSameIdAndRunOnce) {
  StartServer();
  StartClient({}, DroppingClientFaults());
  rtest::CounterServiceProxy proxy(client_, addr_);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  CounterAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ctl.set_retry_policy(LostResponsesPolicy());
  EXPECT_TRUE(proxy.Add(req, &resp, &ctl).IsTimedOut()) << ctl.status().ToString();
  EXPECT_EQ(3, ctl.attempts());
  ASSERT_TRUE(WaitFor([this] { return stats().replays + stats().waits == 2; }));
  EXPECT_EQ(1, service_->runs());
  // The same asynchronously.
  CounterAddResponsePB resp2;
  RpcController ctl2;
  ctl2.set_timeout(MonoDelta::FromSeconds(30));
  ctl2.set_retry_policy(LostResponsesPolicy());
  CountDownLatch done(1);
  proxy.AddAsync(req, &resp2, &ctl2, [&done] { done.CountDown(); });
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_EQ(3, ctl2.attempts());
  ASSERT_TRUE(WaitFor([this] { return stats().replays + stats().waits == 4; }));
  EXPECT_EQ(2, service_->runs());
}

TEST_F(ExactlyOnceTest, NewClientWithOldServerDoesNotRetryLostOutcomes) {
  MessengerOptions server_options;
  server_options.result_tracker.enabled = false;  // as a server from before the feature
  server_options.num_workers = 1;
  StartServer(server_options);
  StartClient({}, DroppingClientFaults());
  rtest::CounterServiceProxy proxy(client_, addr_);
  CounterAddRequestPB req;
  req.set_key("k");
  req.set_delta(1);
  CounterAddResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(30));
  ctl.set_retry_policy(LostResponsesPolicy());
  EXPECT_TRUE(proxy.Add(req, &resp, &ctl).IsTimedOut());
  EXPECT_FALSE(ctl.server_tracks_results());
  EXPECT_EQ(1, ctl.attempts());  // a retry could have run it twice
  // The call ran (whenever the server got to it) ...
  ASSERT_TRUE(WaitFor([this] { return service_->runs_of("k") >= 1; }));
  // ... and ran once: a later call on the same connection, written after any attempt of the
  // first and with a later deadline, has run on the single worker (which takes the earliest
  // deadline first), and "k" still ran once.
  CounterAddRequestPB marker;
  marker.set_key("marker");
  marker.set_delta(1);
  CounterAddResponsePB marker_resp;
  RpcController marker_ctl;
  marker_ctl.set_timeout(MonoDelta::FromSeconds(30));  // its answer is dropped too
  CountDownLatch marker_done(1);
  proxy.AddAsync(marker, &marker_resp, &marker_ctl, [&] { marker_done.CountDown(); });
  ASSERT_TRUE(WaitFor([this] { return service_->runs_of("marker") == 1; }));
  EXPECT_EQ(1, service_->runs_of("k"));
  EXPECT_EQ(2, service_->runs());
  marker_ctl.Cancel();
  ASSERT_TRUE(marker_done.WaitFor(MonoDelta::FromSeconds(60)));
}

}  // namespace
}  // namespace rrpc::rpc
