// The web UI's data pages over real sockets on 127.0.0.1: a server messenger running the test
// echo service, a client making calls, and a Webserver serving the pages, each fetched and read
// back (JSON checked by Python's parser, Prometheus text by promtool when installed).
#include "server/web/web_pages.h"

#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rpc/observe/rpcz_store.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/cluster/channel.h"
#include "rrpc/rpc/rdma.h"
#include "server/web/http-test-util.h"
#include "server/web/web_dashboard.h"
#include "server/web/webserver.h"
#include "util/metrics/metric_registry.h"
#include "util/thread.h"

DEFINE_int32(web_pages_test_knob, 42, "A flag for /varz to list (web_pages-test).");
DEFINE_string(web_pages_test_password, "hunter2", "A secret /varz must not show.");

namespace rrpc {
namespace {

using rpc::HandlerGate;
using rpc::MessengerOptions;
using rpc::RpcController;
using rpc::WaitForCondition;

// Runs `command` with `input` on its standard input; returns its exit code and output.
int RunWithInput(const std::string& command, const std::string& input, std::string* output) {
  const std::string path = testing::TempDir() + "web_pages-" + std::to_string(getpid()) + "-input";
  {
    std::ofstream out(path, std::ios::binary);
    out << input;
  }
  const std::string cmd = command + " < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  CHECK(p != nullptr);
  output->clear();
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output->append(buf, n);
  const int rc = pclose(p);
  unlink(path.c_str());
  return rc;
}

bool HaveCommand(const std::string& name) {
  return system(("command -v " + name + " >/dev/null 2>&1").c_str()) == 0;
}

// The checks a test could not make for want of a tool ("" when none); the fixture's TearDown
// reports the test skipped, naming them (test thread only).
std::string g_unchecked;

// Fails the test unless `body` parses as JSON.
void ExpectValidJson(const std::string& body) {
  if (!HaveCommand("python3")) {
    g_unchecked = "python3 not installed: JSON not checked";
    return;
  }
  std::string output;
  EXPECT_EQ(0, RunWithInput("python3 -c 'import json,sys; json.load(sys.stdin)'", body, &output))
      << output << "\n"
      << body;
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class WebPagesTest : public rpc::RpcTestBase {
 protected:
  void SetUp() override { g_unchecked.clear(); }
  void TearDown() override {
    if (web_) web_->Stop();  // Before the messenger the pages read goes away.
    rpc::RpcTestBase::TearDown();
    // Every other check passed, but not all could be made: reported as skipped, not passed.
    if (!g_unchecked.empty()) GTEST_SKIP() << g_unchecked;
  }

  // A server and a client messenger, and a web server with the dashboard and the pages.
  void StartAll(MessengerOptions server_options = {}, WebPagesOptions page_options = {}) {
    ASSERT_NO_FATAL_FAILURE(StartServer(server_options));
    ASSERT_NO_FATAL_FAILURE(StartClient());
    StartWeb(server_.get(), nullptr, std::move(page_options));
  }

  void StartWeb(rpc::Messenger* messenger, MetricRegistry* registry,
                WebPagesOptions page_options = {}) {
    web_ = std::make_unique<Webserver>(WebserverOptions{});
    RegisterDashboard(web_.get());
    RegisterRpcPages(web_.get(), messenger, registry, std::move(page_options));
    Status s = web_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  HttpReply Fetch(const std::string& target) { return Get(web_->bound_port(), target); }

  Status Echo(const std::string& data, uint32_t sleep_ms = 0, const std::string& fail_with = "") {
    rtest::EchoRequestPB req;
    req.set_data(data);
    if (sleep_ms > 0) req.set_sleep_ms(sleep_ms);
    if (!fail_with.empty()) req.set_fail_with(fail_with);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    return Proxy().Echo(req, &resp, &ctl);
  }

  std::unique_ptr<Webserver> web_;
};

TEST_F(WebPagesTest, HealthzAnswersOkWhileTheMessengerRuns) {
  StartAll();
  HttpReply r = Fetch("/healthz");
  EXPECT_EQ(200, r.status);
  EXPECT_EQ("OK\n", r.body);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("text/plain", 0));

  server_->Shutdown();
  r = Fetch("/healthz");
  EXPECT_EQ(503, r.status);
  EXPECT_TRUE(Contains(r.body, "shutting down")) << r.body;
}

TEST_F(WebPagesTest, HealthzFollowsTheHealthCheck) {
  std::atomic<bool> draining{false};
  WebPagesOptions options;
  options.health_check = [&draining]() {
    return draining.load() ? Status::ServiceUnavailable("draining") : Status::OK();
  };
  StartAll({}, std::move(options));
  EXPECT_EQ(200, Fetch("/healthz").status);
  draining.store(true);
  HttpReply r = Fetch("/healthz");
  EXPECT_EQ(503, r.status);
  EXPECT_TRUE(Contains(r.body, "draining")) << r.body;
}

TEST_F(WebPagesTest, MetricsIsPrometheusTextThatPromtoolAccepts) {
  StartAll();
  for (int i = 0; i < 5; i++) ASSERT_TRUE(Echo("hello").ok());
  EXPECT_FALSE(Echo("x", 0, "nope").ok());

  HttpReply r = Fetch("/metrics");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("text/plain; version=0.0.4", 0))
      << r.headers["content-type"];
  EXPECT_TRUE(Contains(r.body, "# TYPE rrpc_")) << r.body;
  EXPECT_TRUE(Contains(r.body, "rrpc.rtest.EchoService.Echo")) << r.body;
  if (HaveCommand("promtool")) {
    std::string output;
    EXPECT_EQ(0, RunWithInput("promtool check metrics", r.body, &output)) << output;
    EXPECT_EQ("", output);
  } else {
    g_unchecked = "promtool not installed (Debian package prometheus): format not checked";
  }

  r = Fetch("/metrics.json");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("application/json", 0));
  EXPECT_TRUE(Contains(r.body, "\"entities\":[")) << r.body;
  EXPECT_TRUE(Contains(r.body, "rrpc.rtest.EchoService.Echo")) << r.body;
  ExpectValidJson(r.body);
}

TEST_F(WebPagesTest, MetricsServeTheRegistryGiven) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  MetricRegistry registry;
  static constexpr MetricPrototype kThings =
      MetricPrototype::Counter("things_total", "Things", MetricUnit::kRequests, "Things done.");
  registry.FindOrCreateEntity("server", "s1")->FindOrCreateCounter(&kThings)->IncrementBy(3);
  StartWeb(server_.get(), &registry);
  HttpReply r = Fetch("/metrics");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "rrpc_things_total{entity=\"server\",id=\"s1\"} 3")) << r.body;
  EXPECT_FALSE(Contains(r.body, "rrpc.rtest.EchoService")) << r.body;  // not the messenger's
}

TEST_F(WebPagesTest, ConnectionsListsTheClientsConnection) {
  MessengerOptions options;
  options.negotiation_timeout = MonoDelta::FromSeconds(600);  // the raw socket never negotiates
  StartAll(options);
  ASSERT_TRUE(Echo("hello").ok());
  // A connection whose address the test knows: the server sees it as this peer.
  const int raw = ConnectLoopback(server_addr_.port());
  const std::string raw_peer = LocalAddress(raw);
  ASSERT_TRUE(WaitForCondition([&] {
    for (const auto& c : server_->DumpConnections()) {
      if (c.remote == raw_peer) return true;
    }
    return false;
  }));

  HttpReply r = Fetch("/connections?format=json");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("application/json", 0));
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"total\":2")) << r.body;
  EXPECT_TRUE(Contains(r.body, "{\"peer\":\"" + raw_peer + "\",\"direction\":\"server\""))
      << r.body;
  // The echo client's connection: open, over TCP, with the call's bytes counted.
  EXPECT_TRUE(Contains(r.body, "\"direction\":\"server\",\"state\":\"open\",\"transport\":\"tcp\""))
      << r.body;
  for (const auto& c : server_->DumpConnections()) {
    if (c.remote == raw_peer) continue;
    EXPECT_GT(c.bytes_received, 0u);
    EXPECT_TRUE(Contains(r.body, "\"peer\":\"" + c.remote + "\"")) << r.body;
  }

  r = Fetch("/connections");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("text/html", 0));
  EXPECT_TRUE(Contains(r.body, "<td class=\"mono\">" + raw_peer + "</td>")) << r.body;
  EXPECT_TRUE(Contains(r.body, "<span class=\"pill open\">open</span>")) << r.body;
  close(raw);
}

// A server connection shows what it holds against the inbound memory budget: here the part of a
// frame that has arrived so far.
TEST_F(WebPagesTest, ConnectionsShowInboundMemoryOfAPartialFrame) {
  ASSERT_NO_FATAL_FAILURE(StartServer());
  StartWeb(server_.get(), nullptr);
  const int raw = ConnectLoopback(server_addr_.port());
  const std::string raw_peer = LocalAddress(raw);
  const BlockSlice hello = rpc::BuildClientHello("partial-frame");
  std::string bytes = hello.slice.ToString();
  // A frame announced at 5000 bytes, of which 1000 arrive.
  const char length[4] = {0, 0, 0x13, static_cast<char>(0x88)};
  bytes.append(length, 4);
  bytes.append(1000, 'x');
  ASSERT_EQ(static_cast<ssize_t>(bytes.size()), send(raw, bytes.data(), bytes.size(), 0));
  int64_t held = 0;
  ASSERT_TRUE(WaitForCondition([&] {
    for (const auto& c : server_->DumpConnections()) {
      if (c.remote == raw_peer) held = c.inbound_memory_bytes;
    }
    return held >= 1000;
  })) << held;
  HttpReply r = Fetch("/connections?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"inbound_memory_bytes\":" + std::to_string(held))) << r.body;
  r = Fetch("/connections");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "Inbound memory")) << r.body;
  close(raw);
}

// An RDMA connection (software backend) shows its transport and what it says of itself.
TEST_F(WebPagesTest, ConnectionsShowAnRdmaConnectionsCreditsAndSends) {
  MessengerOptions server_options;
  server_options.transport_factory = rdma::NewRdmaTransportFactory(rdma::SoftRdmaOptions());
  ASSERT_NO_FATAL_FAILURE(StartServer(server_options));
  MessengerOptions client_options;
  client_options.transport_factory = rdma::NewRdmaTransportFactory(rdma::SoftRdmaOptions());
  ASSERT_NO_FATAL_FAILURE(StartClient(client_options));
  StartWeb(server_.get(), nullptr);
  ASSERT_TRUE(Echo("over rdma").ok());

  HttpReply r = Fetch("/connections?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"transport\":\"rdma\",\"transport_details\":{")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"credits\":\"")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"inline sends\":\"1\"")) << r.body;
  r = Fetch("/connections");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "rdma (rdma backend soft, credits ")) << r.body;
}

TEST_F(WebPagesTest, PoolsShowEachPoolItsLimitAndItsLimitedMethods) {
  MessengerOptions options;
  options.adaptive_limit.enabled = true;
  options.adaptive_limit.min_limit = 5;
  options.adaptive_limit.max_limit = 5;
  rpc::ServicePoolConfig bulk;
  bulk.name = "bulk";
  options.service_pools.push_back(bulk);
  StartAll(options);
  ASSERT_TRUE(Echo("hello").ok());
  HttpReply r = Fetch("/pools?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "{\"name\":\"default\",\"num_workers\":")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"limit\":5,")) << r.body;
  EXPECT_TRUE(Contains(r.body, "{\"name\":\"bulk\",")) << r.body;
  // With an adaptive limit on the default pool every method takes admission.
  EXPECT_TRUE(Contains(r.body,
                       "{\"method\":\"rrpc.rtest.EchoService.Echo\","
                       "\"priority\":\"foreground\",\"max_concurrency\":0,"
                       "\"in_flight\":0,\"refusals\":0}"))
      << r.body;
  r = Fetch("/pools");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "bulk")) << r.body;
}

TEST_F(WebPagesTest, RpczShowsACallBlockedInItsHandlerAsRunning) {
  MessengerOptions options;
  options.num_workers = 1;
  StartAll(options);
  HandlerGate gate;
  service_->set_echo_hook([&](const rtest::EchoRequestPB&, rpc::RpcContext*) { gate.Pass(); });
  rtest::EchoRequestPB req;
  req.set_data("held");
  rtest::EchoResponsePB resp[2];
  RpcController ctl[2];
  CountDownLatch done(2);
  auto proxy = Proxy();
  ctl[0].set_timeout(MonoDelta::FromSeconds(60));
  proxy.EchoAsync(req, &resp[0], &ctl[0], [&done] { done.CountDown(); });
  ASSERT_TRUE(gate.WaitForEntered(1));
  // A second call waits behind the first for the only worker.
  ctl[1].set_timeout(MonoDelta::FromSeconds(60));
  proxy.EchoAsync(req, &resp[1], &ctl[1], [&done] { done.CountDown(); });
  const rpc::RpczStore* store = server_->rpcz_store();
  ASSERT_TRUE(WaitForCondition([&] { return store->ListInFlight(10).total == 2; }));

  HttpReply r = Fetch("/rpcz?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"in_flight_total\":2")) << r.body;
  EXPECT_TRUE(
      Contains(r.body, "\"service\":\"rrpc.rtest.EchoService\",\"method\":\"Echo\",\"peer\":\"127"))
      << r.body;
  EXPECT_TRUE(Contains(r.body, "\"state\":\"running\"")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"state\":\"queued\"")) << r.body;

  r = Fetch("/rpcz");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("text/html", 0));
  EXPECT_TRUE(Contains(r.body, "<span class=\"fn\">Echo</span>")) << r.body;
  EXPECT_TRUE(Contains(r.body, "<span class=\"pill running\">running</span>")) << r.body;
  EXPECT_TRUE(Contains(r.body, "<span class=\"pill queued\">queued</span>")) << r.body;

  gate.Open();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(ctl[0].status().ok()) << ctl[0].status().ToString();
  EXPECT_TRUE(ctl[1].status().ok()) << ctl[1].status().ToString();
  ASSERT_TRUE(WaitForCondition([&] { return store->ListInFlight(10).total == 0; }));
  r = Fetch("/rpcz");
  EXPECT_TRUE(Contains(r.body, "No calls in flight.")) << r.body;
}

TEST_F(WebPagesTest, RpczListsOneTracesSpansWithTheirParents) {
  StartAll();
  rpc::RpczStore* store = rpc::MutableRpczStore(*server_);
  store->set_slow_threshold(MonoDelta::FromMilliseconds(10));
  Result<rpc::TraceContext> trace =
      rpc::TraceContext::FromTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  ASSERT_TRUE(trace.ok());
  rtest::EchoRequestPB req;
  req.set_data("traced");
  req.set_sleep_ms(30);  // slow: sampled in the slow calls too
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  ctl.set_trace_context(*trace);
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  ASSERT_TRUE(Echo("untraced").ok());
  ASSERT_TRUE(WaitForCondition(
      [&] { return store->ListSpans(trace->trace_id_high, trace->trace_id_low).size() == 1; }));

  HttpReply r = Fetch("/rpcz?format=json&trace=4bf92f3577b34da6a3ce929d0e0e4736");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"trace_id\":\"4bf92f3577b34da6a3ce929d0e0e4736\"")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"parent_span_id\":\"00f067aa0ba902b7\"")) << r.body;
  EXPECT_TRUE(Contains(r.body, "\"method\":\"Echo\"")) << r.body;
  EXPECT_FALSE(Contains(r.body, "untraced")) << r.body;

  // The slow-call sample shows its trace too, linked to the trace's page.
  r = Fetch("/rpcz");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "/rpcz?trace=4bf92f3577b34da6a3ce929d0e0e4736")) << r.body;
  EXPECT_TRUE(Contains(r.body, "parent 00f067aa0ba902b7")) << r.body;
  r = Fetch("/rpcz?trace=4bf92f3577b34da6a3ce929d0e0e4736");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "Spans of trace 4bf92f3577b34da6a3ce929d0e0e4736")) << r.body;
  EXPECT_TRUE(Contains(r.body, "00f067aa0ba902b7")) << r.body;

  // A trace with no spans here: an empty list. A bad id: 400 saying why.
  r = Fetch("/rpcz?trace=0123456789abcdef0123456789abcdef");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "No spans of this trace on this server.")) << r.body;
  r = Fetch("/rpcz?trace=not-a-trace");
  EXPECT_EQ(400, r.status);
  EXPECT_TRUE(Contains(r.body, "32 hex digits")) << r.body;
}

TEST_F(WebPagesTest, RpczShowsRecentSlowAndFailedCallsWithTimelines) {
  StartAll();
  rpc::RpczStore* store = rpc::MutableRpczStore(*server_);
  store->set_slow_threshold(MonoDelta::FromMilliseconds(10));
  ASSERT_TRUE(Echo("slow", /*sleep_ms=*/30).ok());
  EXPECT_FALSE(Echo("bad", 0, "boom <b>").ok());
  ASSERT_TRUE(WaitForCondition([&] {
    auto samples = store->ListSamples();
    return samples.size() == 1 && !samples[0].slow.empty() && !samples[0].failed.empty();
  }));

  HttpReply r = Fetch("/rpcz?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"slow_threshold_us\":10000")) << r.body;
  EXPECT_TRUE(
      Contains(r.body, "\"error_code\":\"ERROR_APPLICATION\",\"error_message\":\"boom <b>\""))
      << r.body;
  for (const char* field :
       {"\"arrival_unix_us\":", "\"started_us\":", "\"responded_us\":", "\"done_us\":"}) {
    EXPECT_TRUE(Contains(r.body, field)) << field;
  }
  EXPECT_TRUE(Contains(r.body, "\"slow_seen\":1,\"failed_seen\":1")) << r.body;

  r = Fetch("/rpcz");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "Recent slow calls")) << r.body;
  EXPECT_TRUE(Contains(r.body, "Recent failed calls")) << r.body;
  EXPECT_TRUE(Contains(r.body, "<td class=\"err\">ERROR_APPLICATION</td>")) << r.body;
  // The handler's message is the client's to choose: it must arrive escaped.
  EXPECT_TRUE(Contains(r.body, "boom &lt;b&gt;")) << r.body;
  EXPECT_FALSE(Contains(r.body, "boom <b>")) << r.body;
}

TEST_F(WebPagesTest, VarzListsFlagsWithValueAndDefault) {
  gflags::FlagSaver saver;  // restores the flags when the test ends
  ASSERT_FALSE(gflags::SetCommandLineOption("web_pages_test_knob", "7").empty());
  StartAll();

  HttpReply r = Fetch("/varz?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body,
                       "{\"name\":\"web_pages_test_knob\",\"type\":\"int32\",\"value\":\"7\","
                       "\"default\":\"42\",\"is_default\":false"))
      << r.body;
  EXPECT_TRUE(Contains(r.body, "\"name\":\"logtostderr\"")) << r.body;  // glog's, too
  EXPECT_FALSE(Contains(r.body, "hunter2")) << r.body;
  EXPECT_TRUE(Contains(r.body,
                       "\"name\":\"web_pages_test_password\",\"type\":\"string\","
                       "\"value\":\"<redacted>\""))
      << r.body;

  r = Fetch("/varz");
  ASSERT_EQ(200, r.status);
  EXPECT_EQ(0u, r.headers["content-type"].rfind("text/html", 0));
  EXPECT_TRUE(Contains(r.body,
                       "<tr class=\"changed\"><td class=\"mono nowrap\">web_pages_test_knob</td>"
                       "<td class=\"mono value\">7</td><td class=\"mono muted\">42</td>"))
      << r.body;
  EXPECT_FALSE(Contains(r.body, "hunter2"));
}

TEST_F(WebPagesTest, ThreadzListsRrpcThreadsWithTheirCpuTime) {
  StartAll();
  ASSERT_TRUE(Echo("hello").ok());
  HttpReply r = Fetch("/threadz?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  bool saw_reactor = false;
  bool saw_worker = false;
  for (const ThreadInfo& t : ThreadRegistry::Get()->List()) {
    if (t.name.rfind("server", 0) != 0) continue;  // the server messenger's threads
    saw_reactor |= t.category == "reactor";
    saw_worker |= t.category == "worker";
    EXPECT_TRUE(Contains(r.body, "{\"category\":\"" + t.category + "\",\"name\":\"" + t.name +
                                     "\",\"tid\":" + std::to_string(t.tid) +
                                     ",\"registered\":true,\"state\":\""))
        << t.name << "\n"
        << r.body;
  }
  EXPECT_TRUE(saw_reactor);
  EXPECT_TRUE(saw_worker);
  EXPECT_TRUE(Contains(r.body, "\"user_cpu_s\":")) << r.body;
  // This test's own thread is not rrpc's, yet the page lists it.
  EXPECT_TRUE(Contains(
      r.body, "\"tid\":" + std::to_string(GetCurrentThreadTid()) + ",\"registered\":false"))
      << r.body;

  r = Fetch("/threadz");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, "<td>reactor</td>")) << r.body;
  EXPECT_TRUE(Contains(r.body, "<td>worker</td>")) << r.body;
}

TEST_F(WebPagesTest, ChannelsListsEachChannelsBackendsAndTheirHealth) {
  StartAll();
  auto channel = rpc::Channel::Create(client_, "list://" + server_addr_.ToString());
  ASSERT_TRUE(channel.ok()) << channel.status().ToString();
  rtest::EchoServiceProxy proxy(*channel);
  ASSERT_TRUE(rpc::EchoOnce(proxy, "through the channel").ok());
  HttpReply r = Fetch("/channels?format=json");
  ASSERT_EQ(200, r.status);
  ExpectValidJson(r.body);
  EXPECT_TRUE(Contains(r.body, "\"target\":\"list://" + server_addr_.ToString() + "\"")) << r.body;
  EXPECT_TRUE(Contains(r.body, "{\"address\":\"" + server_addr_.ToString() +
                                   "\",\"health\":\"healthy\",\"outstanding\":0"))
      << r.body;
  r = Fetch("/channels");
  ASSERT_EQ(200, r.status);
  EXPECT_TRUE(Contains(r.body, server_addr_.ToString())) << r.body;
}

TEST_F(WebPagesTest, HtmlPagesShareTheDashboardsLookAndNav) {
  StartAll();
  for (const std::string page : {"/rpcz", "/varz", "/threadz", "/connections", "/channels"}) {
    SCOPED_TRACE(page);
    HttpReply r = Fetch(page);
    ASSERT_EQ(200, r.status);
    EXPECT_EQ("text/html; charset=utf-8", r.headers["content-type"]);
    EXPECT_EQ("no-store", r.headers["cache-control"]);
    EXPECT_EQ(0u, r.body.rfind("<!doctype html>", 0));
    EXPECT_TRUE(Contains(r.body, "<link rel=\"stylesheet\" href=\"/static/dashboard.css\">"));
    EXPECT_TRUE(Contains(r.body, "<link rel=\"stylesheet\" href=\"/static/pages.css\">"));
    EXPECT_TRUE(Contains(r.body, "<span class=\"server\">server</span>"));  // messenger's name
    EXPECT_TRUE(Contains(r.body, "<a href=\"" + page + "\" class=\"active\""));
    for (const char* link :
         {"/metrics", "/rpcz", "/varz", "/threadz", "/connections", "/healthz"}) {
      EXPECT_TRUE(Contains(r.body, std::string("<a href=\"") + link + "\"")) << link;
    }
    EXPECT_TRUE(Contains(r.body, "<a href=\"" + page + "?format=json\">JSON</a>"));
    // The content policy refuses inline code and styles: the pages must not rely on them.
    EXPECT_FALSE(Contains(r.body, "<script"));
    EXPECT_FALSE(Contains(r.body, "<style"));
    EXPECT_FALSE(Contains(r.body, "style=\""));
    EXPECT_TRUE(Contains(r.body, "</html>\n"));
  }
  HttpReply css = Fetch("/static/pages.css");
  EXPECT_EQ(200, css.status);
  EXPECT_EQ(0u, css.headers["content-type"].rfind("text/css", 0));
  EXPECT_TRUE(Contains(css.body, "table.data"));
  EXPECT_EQ(200, Fetch("/static/dashboard.css").status);
}

TEST_F(WebPagesTest, WithoutAMessengerOnlyProcessPagesAreServed) {
  MetricRegistry registry;
  StartWeb(nullptr, &registry);
  EXPECT_EQ(200, Fetch("/healthz").status);
  EXPECT_EQ(200, Fetch("/varz").status);
  EXPECT_EQ(200, Fetch("/threadz").status);
  EXPECT_EQ(200, Fetch("/metrics").status);
  EXPECT_EQ(404, Fetch("/rpcz").status);
  EXPECT_EQ(404, Fetch("/connections").status);
}

TEST(EscapeHtmlTest, EscapesMarkupAndQuotes) {
  EXPECT_EQ("&lt;script&gt;alert(&quot;x&quot; &amp; &#39;y&#39;)&lt;/script&gt;",
            EscapeHtml("<script>alert(\"x\" & 'y')</script>"));
  EXPECT_EQ("plain µs", EscapeHtml("plain µs"));
}

}  // namespace
}  // namespace rrpc
