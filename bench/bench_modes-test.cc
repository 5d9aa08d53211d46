// Tests of rpc-bench's pieces: the payload rule, the raw client against a real server, the usage
// accounting, and every mode run briefly end to end (including a server that damages responses,
// which must fail the run).
#include "bench/bench_modes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench.rrpc.h"
#include "bench/bench_payload.h"
#include "bench/bench_raw_client.h"
#include "bench/bench_retry.h"
#include "bench/bench_service.h"
#include "bench/bench_tls.h"
#include "bench/bench_usage.h"
#include "rpc/rdma/rdma_factory.h"
#include "rrpc/util/mutex.h"
#include "util/metrics/histogram_metric.h"
#include "util/thread.h"

namespace rrpc::bench {
namespace {

TEST(BenchPayloadTest, EchoOfAnySizePassesTheCheck) {
  std::string request(100, '\0');
  FillPattern(7, request.data(), request.size());
  StampSequence(12345, request.data(), request.size());
  for (size_t len : {0, 1, 99, 100, 101, 250}) {
    std::string response(len, '\0');
    BuildEcho(Slice(request), response.data(), len);
    EXPECT_TRUE(CheckEcho(Slice(request), Slice(response), len, "payload").ok()) << len;
  }
  std::string empty_echo(30, '\0');
  BuildEcho(Slice(), empty_echo.data(), empty_echo.size());
  EXPECT_TRUE(CheckEcho(Slice(), Slice(empty_echo), 30, "payload").ok());
}

TEST(BenchPayloadTest, CheckCatchesWrongSizeWrongByteAndAnotherCallsBytes) {
  std::string request(64, '\0');
  FillPattern(1, request.data(), request.size());
  StampSequence(1, request.data(), request.size());
  std::string response = request;
  EXPECT_TRUE(CheckEcho(Slice(request), Slice(response), 64, "payload").ok());
  EXPECT_TRUE(CheckEcho(Slice(request), Slice(response), 65, "payload").IsCorruption());
  response[40] ^= 1;
  Status s = CheckEcho(Slice(request), Slice(response), 64, "payload");
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_NE(std::string::npos, s.ToString().find("byte 40")) << s.ToString();
  // The answer to call 2 of the same stream is not an answer to call 1.
  std::string other = request;
  StampSequence(2, other.data(), other.size());
  EXPECT_TRUE(CheckEcho(Slice(request), Slice(other), 64, "payload").IsCorruption());
}

TEST(BenchUsageTest, ClassifiesThreadsByNamePrefix) {
  EXPECT_EQ(ThreadRole::kServer, RoleOfThreadName("server-reactor-0"));
  EXPECT_EQ(ThreadRole::kServer, RoleOfThreadName("server-worker-1"));
  EXPECT_EQ(ThreadRole::kClient, RoleOfThreadName("client-reactor-1"));
  EXPECT_EQ(ThreadRole::kClient, RoleOfThreadName("client-bench-0"));
  EXPECT_EQ(ThreadRole::kOther, RoleOfThreadName("rpc-bench"));
}

TEST(BenchUsageTest, SnapshotListsTheCallingThreadUnderItsRegisteredName) {
  UsageSnapshot snap;
  std::thread t =
      StartThread("bench", "client-usage-test", [&snap] { snap = TakeUsageSnapshot(); }).value();
  t.join();
  bool found = false;
  for (const ThreadSample& s : snap.threads) {
    if (s.name == "client-usage-test") {
      found = true;
      EXPECT_EQ(ThreadRole::kClient, s.role);
    }
  }
  EXPECT_TRUE(found);
  EXPECT_GT(ReadProcessStatusKb("VmRSS"), 0);
}

class BenchModesTest : public ::testing::Test {
 protected:
  void StartServer(bool corrupt = false, bool inline_handlers = false, bool tls = false,
                   std::shared_ptr<rpc::TransportFactory> factory = nullptr,
                   size_t service_queue_length = 1024) {
    BenchServerOptions options;
    options.messenger.transport_factory = std::move(factory);
    options.service_queue_length = service_queue_length;
    options.workers = server_workers_;
    options.corrupt_responses_for_test = corrupt;
    options.inline_handlers = inline_handlers;
    // sparse over the messenger calls 127.x.y.z, one connection per address.
    if (bind_any_) options.bind_address = Sockaddr::Parse("0.0.0.0:0").value();
    if (tls) {
      auto note = ConfigureBenchTls(&options.messenger, &config_);
      ASSERT_TRUE(note.ok()) << note.status().ToString();
    }
    auto started = StartBenchServer(options, &config_.server);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server_ = std::move(started).value();
    config_.in_process_server = true;
    config_.run_seconds = 0.3;
    config_.warmup_seconds = 0.05;
    config_.async_call_concurrency = 8;
    config_.connections = 50;
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  Status Run(BenchMode mode, ModeOutput* out) {
    config_.mode = mode;
    RunControl control;
    switch (mode) {
      case BenchMode::kThroughput:
        return RunThroughputMode(config_, &control, out);
      case BenchMode::kLatency:
        return RunLatencyMode(config_, &control, out);
      case BenchMode::kCps:
        return config_.cps_messenger_client ? RunCpsMessengerMode(config_, &control, out)
                                            : RunCpsMode(config_, &control, out);
      case BenchMode::kSparse:
        return config_.sparse_messenger_client ? RunSparseMessengerMode(config_, &control, out)
                                               : RunSparseMode(config_, &control, out);
      case BenchMode::kMixed:
        return RunMixedMode(config_, &control, out);
      case BenchMode::kStream:
        return RunStreamMode(config_, &control, out);
    }
    return Status::OK();
  }
  // Server connections by transport.
  std::map<std::string, int> ServerTransports() {
    std::map<std::string, int> n;
    for (const auto& c : server_->DumpConnections()) n[c.transport]++;
    return n;
  }

  BenchConfig config_;
  bool bind_any_ = false;
  int server_workers_ = 2;
  std::shared_ptr<rpc::Messenger> server_;
};

TEST_F(BenchModesTest, EveryModeCompletesCheckedCalls) {
  StartServer();
  for (BenchMode mode :
       {BenchMode::kThroughput, BenchMode::kLatency, BenchMode::kCps, BenchMode::kSparse}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u) << ModeName(mode);
    EXPECT_EQ(out.completed, out.latency_ns.count()) << ModeName(mode);
  }
}

TEST_F(BenchModesTest, ThroughputAndLatencyCallThroughAClusterTarget) {
  StartServer();
  config_.target = "list://" + config_.server.ToString();
  for (BenchMode mode : {BenchMode::kThroughput, BenchMode::kLatency}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u) << ModeName(mode);
  }
  config_.target = "list://no-port";
  ModeOutput out;
  Status s = Run(BenchMode::kThroughput, &out);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
}

TEST_F(BenchModesTest, EveryModeRunsOverTls) {
  StartServer(/*corrupt=*/false, /*inline_handlers=*/false, /*tls=*/true);
  EXPECT_EQ(config_.transport, "tls");
  for (BenchMode mode :
       {BenchMode::kThroughput, BenchMode::kLatency, BenchMode::kCps, BenchMode::kSparse}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u) << ModeName(mode);
  }
  // Resumed handshakes: cps fails its run if a connection after the first is not resumed.
  config_.tls_resume_sessions = true;
  ModeOutput out;
  Status s = Run(BenchMode::kCps, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(out.completed, 1u);
  // Every connection the server saw was TLS.
  for (const auto& c : server_->DumpConnections()) EXPECT_EQ(c.transport, "tls") << c.remote;
}

TEST_F(BenchModesTest, LatencyModeBothWaysAndInlineHandlersCompleteCheckedCalls) {
  StartServer(/*corrupt=*/false, /*inline_handlers=*/true);
  for (bool sync : {false, true}) {
    config_.latency_sync_calls = sync;
    ModeOutput out;
    Status s = Run(BenchMode::kLatency, &out);
    ASSERT_TRUE(s.ok()) << (sync ? "sync: " : "async: ") << s.ToString();
    EXPECT_GT(out.completed, 0u);
    EXPECT_EQ(out.completed, out.latency_ns.count());
  }
  ModeOutput out;
  ASSERT_TRUE(Run(BenchMode::kThroughput, &out).ok());
  EXPECT_GT(out.completed, 0u);
}

// rpc-bench --transport=rdma: throughput and latency over the software backend, every response
// checked, and the messages really went over RDMA.
TEST_F(BenchModesTest, ThroughputAndLatencyRunOverSoftwareRdma) {
  auto server_rdma = std::make_shared<rdma::RdmaTransportFactory>(rdma::SoftRdmaOptions());
  auto client_rdma = std::make_shared<rdma::RdmaTransportFactory>(rdma::SoftRdmaOptions());
  StartServer(false, false, /*tls=*/false, server_rdma);
  config_.client_messenger.transport_factory = client_rdma;
  config_.sidecar_bytes = 20000;  // more than one RDMA buffer: fragments
  for (BenchMode mode : {BenchMode::kThroughput, BenchMode::kLatency}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u);
  }
  for (auto* f : {server_rdma.get(), client_rdma.get()}) {
    EXPECT_GT(f->metrics().posted_send_bytes->Snapshot().count(), 0u);
    EXPECT_EQ(f->fallbacks(rdma::FallbackReason::kDisabled), 0u);
  }
}

TEST(BenchRetryTest, BackoffGrowsIsJitteredAndCapped) {
  uint64_t rng = 42;
  for (int attempt = 1; attempt <= 30; attempt++) {
    const int64_t full_us = std::min<int64_t>(20'000, int64_t{100} << std::min(attempt - 1, 20));
    for (int i = 0; i < 20; i++) {
      const int64_t us = RetryBackoff(attempt, &rng).ToMicroseconds();
      EXPECT_GE(us, full_us / 2) << attempt;
      EXPECT_LE(us, full_us) << attempt;
    }
  }
  // Two draws for the same attempt differ (jitter), and the state moves on.
  uint64_t a = 7;
  EXPECT_NE(RetryBackoff(10, &a).ToNanoseconds(), RetryBackoff(10, &a).ToNanoseconds());
}

TEST(BenchRetryTest, TimerRunsInTimeOrderAndStopRunsWhatIsLeft) {
  RetryTimer timer;
  ASSERT_TRUE(timer.Start().ok());
  Mutex mu;
  std::vector<int> order;
  const MonoTime now = MonoTime::Now();
  auto record = [&](int i) {
    MutexLock lock(mu);
    order.push_back(i);
  };
  timer.Schedule(now + MonoDelta::FromMilliseconds(20), [&] { record(2); });
  timer.Schedule(now + MonoDelta::FromMilliseconds(1), [&] { record(1); });
  timer.Schedule(now + MonoDelta::FromSeconds(3600), [&] { record(3); });  // only Stop() runs it
  while (true) {
    {
      MutexLock lock(mu);
      if (order.size() == 2) break;
    }
    SleepFor(MonoDelta::FromMilliseconds(1));
  }
  timer.Stop();
  EXPECT_EQ((std::vector<int>{1, 2, 3}), order);
}

// The server's queue holds 2 calls and one worker serves 32 in flight: most sends are refused as
// too busy. The run still succeeds (every call is retried until taken) and counts the refusals.
TEST_F(BenchModesTest, TooBusyCallsAreRetriedCountedAndDoNotFailTheRun) {
  server_workers_ = 1;
  StartServer(/*corrupt=*/false, /*inline_handlers=*/false, /*tls=*/false, nullptr,
              /*service_queue_length=*/2);
  config_.client_threads = 2;
  config_.async_call_concurrency = 16;
  ModeOutput out;
  Status s = Run(BenchMode::kThroughput, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_GT(out.completed, 0u);
  EXPECT_GT(out.rejected, 0u);
  EXPECT_GT(out.retries, 0u);
}

TEST_F(BenchModesTest, MixedModeRunsSmallCallsBesideBulkCallsBothWays) {
  StartServer();
  config_.mixed_bulk_streams = 2;
  config_.mixed_bulk_bytes = 300 * 1024;  // above the messenger's bulk connection threshold
  for (bool separate : {false, true}) {
    config_.mixed_separate_messenger = separate;
    ModeOutput out;
    Status s = Run(BenchMode::kMixed, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_GT(out.completed, 0u) << separate;
    EXPECT_EQ(out.completed, out.latency_ns.count());
    EXPECT_GT(out.bulk_completed, 0u) << separate;
  }
}

// Every direction with several streams, messages with a body and a sidecar (each checked by the
// reader; up: the server's totals checked against what was sent), and a unary probe on the same
// connection served by the server's only worker: an open stream holds none.
TEST_F(BenchModesTest, StreamModeRunsEveryDirectionBesideUnaryCallsWithOneWorker) {
  server_workers_ = 1;
  StartServer();
  config_.run_seconds = 0.1;
  config_.streams = 3;
  config_.payload_bytes = config_.response_bytes = 1000;
  config_.sidecar_bytes = 3000;
  config_.with_unary_probe = true;
  for (StreamDirection d : {StreamDirection::kDown, StreamDirection::kUp, StreamDirection::kBidi}) {
    config_.stream_direction = d;
    // The window is 0.1 s: on a loaded machine (a sanitizer build) a probe call may not end
    // inside one, so a run without one is run again. Streams that held the only worker would stop
    // every probe call, in every run.
    std::unique_ptr<ModeOutput> out;
    for (int run = 0; run < 10 && (out == nullptr || out->probe_completed == 0); run++) {
      out = std::make_unique<ModeOutput>();
      Status s = Run(BenchMode::kStream, out.get());
      ASSERT_TRUE(s.ok()) << DirectionName(d) << ": " << s.ToString();
      EXPECT_GT(out->completed, 0u) << DirectionName(d);
      EXPECT_EQ(out->completed * 4000, out->stream_bytes) << DirectionName(d);
      EXPECT_EQ(out->probe_completed, out->probe_latency_ns.count());
    }
    EXPECT_GT(out->probe_completed, 0u) << DirectionName(d);
  }
}

// Messages larger than the window a stream starts with (64 KiB): the first goes alone, on TLS.
TEST_F(BenchModesTest, StreamModeMovesMessagesLargerThanTheFirstWindowOverTls) {
  StartServer(/*corrupt=*/false, /*inline_handlers=*/false, /*tls=*/true);
  config_.run_seconds = 0.1;
  config_.payload_bytes = config_.response_bytes = 100 * 1024;
  for (StreamDirection d : {StreamDirection::kDown, StreamDirection::kBidi}) {
    config_.stream_direction = d;
    ModeOutput out;
    Status s = Run(BenchMode::kStream, &out);
    ASSERT_TRUE(s.ok()) << DirectionName(d) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u) << DirectionName(d);
  }
}

TEST_F(BenchModesTest, SparseReportsItsConnectionsAndMemory) {
  StartServer();
  ModeOutput out;
  Status s = Run(BenchMode::kSparse, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(50, out.connections);
  EXPECT_GT(out.rss_before_open_kb, 0);
  EXPECT_GT(out.rss_all_open_kb, 0);
  EXPECT_GT(out.rss_after_run_kb, 0);
}

TEST(BenchSparseTest, ConnectionIGoesToItsOwnLoopbackAddress) {
  const Sockaddr any = Sockaddr::Parse("0.0.0.0:7000").value();
  EXPECT_EQ("127.0.0.1", SparseRemote(any, 0).value().host());
  EXPECT_EQ(7000, SparseRemote(any, 0).value().port());
  EXPECT_EQ("127.0.0.250", SparseRemote(any, 249).value().host());
  EXPECT_EQ("127.1.0.1", SparseRemote(Sockaddr::Loopback(7000), 250).value().host());
  EXPECT_EQ("127.39.0.250", SparseRemote(any, 9999).value().host());
  EXPECT_FALSE(SparseRemote(Sockaddr::Parse("10.0.0.1:7000").value(), 0).ok());
  EXPECT_FALSE(SparseRemote(any, 250 * 256).ok());
}

// sparse through rrpc's client messenger: one connection per loopback address, held by the
// messenger over TCP, then over RDMA with SRQ and private-RQ clients against one SRQ server.
TEST_F(BenchModesTest, SparseOverTheMessengerHoldsEveryConnection) {
  auto server_rdma_options = rdma::SoftRdmaOptions();
  server_rdma_options.use_srq = true;
  auto server_rdma = std::make_shared<rdma::RdmaTransportFactory>(server_rdma_options);
  bind_any_ = true;
  StartServer(false, false, /*tls=*/false, server_rdma);
  config_.sparse_messenger_client = true;
  config_.senders = 4;
  config_.sleep_us = 100;
  {
    ModeOutput out;
    Status s = Run(BenchMode::kSparse, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_GT(out.completed, 0u);
    EXPECT_EQ(50, out.connections);
    EXPECT_EQ((std::map<std::string, int64_t>{{"tcp", 50}}), out.connections_by_transport);
  }
  for (bool srq : {true, false}) {
    rdma::RdmaOptions client_options = rdma::SoftRdmaOptions();
    client_options.use_srq = srq;
    config_.client_messenger.transport_factory =
        std::make_shared<rdma::RdmaTransportFactory>(client_options);
    ModeOutput out;
    Status s = Run(BenchMode::kSparse, &out);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_GT(out.completed, 0u);
    EXPECT_EQ((std::map<std::string, int64_t>{{"rdma", 50}}), out.connections_by_transport)
        << (srq ? "srq" : "private rq");
  }
  EXPECT_EQ(0u, server_rdma->fallbacks(rdma::FallbackReason::kResources));
}

// cps through the client messenger: every call on a connection of its own (the server accepted
// one connection per call), over TCP and over RDMA (SRQ) with the bootstrap each time.
TEST_F(BenchModesTest, CpsOverTheMessengerOpensAConnectionPerCall) {
  rdma::RdmaOptions srq = rdma::SoftRdmaOptions();
  srq.use_srq = true;
  auto server_rdma = std::make_shared<rdma::RdmaTransportFactory>(srq);
  bind_any_ = true;
  StartServer(false, false, /*tls=*/false, server_rdma);
  config_.cps_messenger_client = true;
  for (bool rdma : {false, true}) {
    if (rdma) {
      config_.client_messenger.transport_factory =
          std::make_shared<rdma::RdmaTransportFactory>(srq);
    }
    // A run is 0.3 s: on a loaded machine (sanitizers) one may finish no connection at all, so
    // up to ten runs, until one completes more than one call.
    uint64_t completed = 0;
    for (int attempt = 0; attempt < 10 && completed <= 1; attempt++) {
      ModeOutput out;
      Status s = Run(BenchMode::kCps, &out);
      ASSERT_TRUE(s.ok()) << s.ToString();
      completed = out.completed;
    }
    EXPECT_GT(completed, 1u);
  }
  // Every RDMA connection upgraded: none fell back for any reason but kDisabled (the TCP leg's
  // client offers no RDMA).
  for (int r = 2; r <= 7; r++) {
    EXPECT_EQ(0u, server_rdma->fallbacks(static_cast<rdma::FallbackReason>(r))) << r;
  }
}

TEST_F(BenchModesTest, SidecarsAndOtherResponseSizesAreEchoedAndChecked) {
  StartServer();
  config_.payload_bytes = 100;
  config_.response_bytes = 333;
  config_.sidecar_bytes = 5000;
  for (BenchMode mode : {BenchMode::kThroughput, BenchMode::kLatency, BenchMode::kCps}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    ASSERT_TRUE(s.ok()) << ModeName(mode) << ": " << s.ToString();
    EXPECT_GT(out.completed, 0u);
  }
}

TEST_F(BenchModesTest, DamagedResponsesFailTheRun) {
  StartServer(/*corrupt=*/true);
  for (BenchMode mode :
       {BenchMode::kThroughput, BenchMode::kLatency, BenchMode::kCps, BenchMode::kSparse}) {
    ModeOutput out;
    Status s = Run(mode, &out);
    EXPECT_TRUE(s.IsCorruption()) << ModeName(mode) << ": " << s.ToString();
  }
}

TEST_F(BenchModesTest, RawConnectionReportsServerErrors) {
  StartServer();
  RawRpcConnection conn;
  ASSERT_TRUE(conn.Open(config_.server, MonoDelta::FromSeconds(10), "test").ok());
  BenchRequestPB request;
  request.set_payload("abc");
  BenchResponsePB response;
  std::string scratch;
  std::vector<Slice> sidecars;
  Status s = conn.Call(BenchServiceIf::static_service_name(), "NoSuchMethod", request, Slice(),
                       &response, &scratch, &sidecars);
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("ERROR_NO_SUCH_METHOD")) << s.ToString();
  // The connection stays usable after an error response.
  ASSERT_TRUE(conn.Call(BenchServiceIf::static_service_name(), "Echo", request, Slice(), &response,
                        &scratch, &sidecars)
                  .ok());
  EXPECT_EQ("abc", response.payload());
  conn.CloseAbortively();
  EXPECT_FALSE(conn.is_open());
}

}  // namespace
}  // namespace rrpc::bench
