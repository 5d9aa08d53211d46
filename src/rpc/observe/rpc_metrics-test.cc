// Tests of the RPC metrics: real messengers on loopback run a scripted set of calls (successes, an
// application error, an invalid request, an unknown method, a too-busy rejection and an expiry in
// the queue), then every metric of the server and the client must have its exact value. Also:
// disabled metrics register nothing, an external registry is used and outlives the messenger,
// the proxy's metrics cache, and promtool accepts the Prometheus text.
#include "rpc/observe/rpc_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/negotiation.h"
#include "rpc/core/service_pool.h"
#include "rpc/core/wire_codec.h"
#include "rpc/testing/rpc-test-util.h"
#include "util/metrics/prometheus_writer.h"

namespace rrpc::rpc {
namespace {

const std::string kService = "rrpc.rtest.EchoService";
const std::string kEcho = kService + ".Echo";
const std::string kAdd = kService + ".Add";
const std::string kNope = kService + ".Nope";

// One snapshot of a registry, with lookups that fail the test when a metric is missing.
class MetricsView {
 public:
  explicit MetricsView(const MetricRegistry* registry) : snapshot_(registry->TakeSnapshot()) {}

  bool HasEntity(const std::string& type, const std::string& id) const {
    return FindEntity(type, id) != nullptr;
  }
  size_t num_entities() const { return snapshot_.entities.size(); }
  // Counter or gauge value.
  int64_t Value(const std::string& type, const std::string& id, const std::string& name) const {
    const MetricSnapshot* m = Find(type, id, name);
    return m == nullptr ? -1 : m->value;
  }
  uint64_t Count(const std::string& type, const std::string& id, const std::string& name) const {
    const MetricSnapshot* m = Find(type, id, name);
    return m == nullptr || m->histogram == nullptr ? 0 : m->histogram->count();
  }
  uint64_t Sum(const std::string& type, const std::string& id, const std::string& name) const {
    const MetricSnapshot* m = Find(type, id, name);
    return m == nullptr || m->histogram == nullptr ? 0 : m->histogram->sum();
  }

 private:
  const EntitySnapshot* FindEntity(const std::string& type, const std::string& id) const {
    for (const EntitySnapshot& e : snapshot_.entities) {
      if (e.type == type && e.id == id) return &e;
    }
    return nullptr;
  }
  const MetricSnapshot* Find(const std::string& type, const std::string& id,
                             const std::string& name) const {
    const EntitySnapshot* e = FindEntity(type, id);
    if (e == nullptr) {
      ADD_FAILURE() << "no entity " << type << " " << id;
      return nullptr;
    }
    for (const MetricSnapshot& m : e->metrics) {
      if (name == m.prototype->name) return &m;
    }
    ADD_FAILURE() << "no metric " << name << " in " << type << " " << id;
    return nullptr;
  }

  RegistrySnapshot snapshot_;
};

// Bytes of the frame the codec makes of `header` and `body` (no sidecars), length prefix included.
size_t FrameBytes(const google::protobuf::MessageLite& header,
                  const google::protobuf::MessageLite& body) {
  Result<BlockSlice> head = SerializeFrameHead(header, body, 0, size_t{1} << 30);
  EXPECT_TRUE(head.ok()) << head.status().ToString();
  return head.ok() ? head->slice.size() : 0;
}

// A request frame as the client makes it. Call ids stay below 128 in these tests, so their varint
// is one byte whatever the id; likewise timeouts between 128 and 16383 ms take two.
size_t RequestBytes(const std::string& method, const google::protobuf::MessageLite& body,
                    uint32_t timeout_ms = 0) {
  RequestHeader header;
  header.set_call_id(1);
  header.mutable_remote_method()->set_service_name(kService);
  header.mutable_remote_method()->set_method_name(method);
  if (timeout_ms > 0) header.set_timeout_millis(timeout_ms);
  return FrameBytes(header, body);
}

size_t ResponseBytes(const google::protobuf::MessageLite& body, bool is_error) {
  ResponseHeader header;
  header.set_call_id(1);
  if (is_error) header.set_is_error(true);
  return FrameBytes(header, body);
}

// Bytes a connection spends before its first call: the client's preamble and hello, the server's
// reply.
size_t HelloBytes(const std::string& client_name) {
  return BuildClientHello(client_name).slice.size();
}
size_t ServerReplyBytes() {
  NegotiatePB request;
  request.set_step(NegotiatePB::NEGOTIATE);
  request.add_supported_features(SIDECARS);
  request.add_supported_features(CANCELLATION);
  request.add_supported_features(EXACTLY_ONCE);
  request.add_supported_features(TRACE_CONTEXT);
  request.add_supported_features(STREAMS);
  request.add_supported_features(COMPRESSION);
  NegotiatedPeer peer;  // a server with its result tracker on (the default) accepts all six
  peer.features = {SIDECARS, CANCELLATION, EXACTLY_ONCE, TRACE_CONTEXT, STREAMS, COMPRESSION};
  return BuildServerReply(request, Status::OK(), {}, &peer).slice.size();
}
// The cancel frame a client sends for a call it gave up on (at its deadline); call ids below 128.
size_t CancelFrameBytes() {
  RequestHeader header;
  header.set_call_id(kControlCallId);
  ControlPB control;
  control.set_kind(ControlPB::CANCEL);
  control.add_call_ids(1);
  return FrameBytes(header, control);
}

// Runs promtool on `text`; "" when it accepts it, else its complaint.
std::string PromtoolComplaint(const std::string& text) {
  const std::string path = testing::TempDir() + "rpc-metrics-" + std::to_string(getpid()) + ".prom";
  {
    std::ofstream out(path);
    out << text;
  }
  const std::string cmd = "promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return "popen failed";
  std::string output;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) output.append(buf, n);
  const int rc = pclose(p);
  unlink(path.c_str());
  if (rc != 0 && output.empty()) output = "promtool exited with " + std::to_string(rc);
  return output;
}

class RpcMetricsTest : public RpcTestBase {
 protected:
  void TearDown() override {
    gate_.Open();  // a failed assertion must not leave the worker blocked in the gate
    RpcTestBase::TearDown();
  }
  MetricsView Server() const { return MetricsView(server_->metric_registry()); }
  MetricsView Client() const { return MetricsView(client_->metric_registry()); }

  // An asynchronous call's state, kept by the fixture so that a failed assertion cannot leave a
  // callback pointing into a finished test body.
  struct AsyncCall {
    rtest::EchoRequestPB req;
    rtest::EchoResponsePB resp;
    RpcController ctl;
    CountDownLatch done{1};
  };

  HandlerGate gate_;
  AsyncCall async_calls_[3];
};

TEST_F(RpcMetricsTest, ScriptedCallsGiveExactMetrics) {
  MessengerOptions server_options;
  server_options.num_reactors = 1;
  server_options.num_workers = 1;
  server_options.service_queue_length = 1;
  StartServer(server_options);
  MessengerOptions client_options;
  client_options.num_reactors = 1;  // one connection carries every call
  StartClient(client_options);
  auto proxy = Proxy();

  // Frame bytes of the Echo method's requests and responses, and of the connection's other
  // frames, as the test expects them.
  size_t echo_request_bytes = 0;
  size_t echo_response_bytes = 0;
  size_t server_in = HelloBytes("client");
  size_t server_out = ServerReplyBytes();

  // 1. Successes.
  constexpr int kSuccesses = 5;
  for (int i = 0; i < kSuccesses; i++) {
    rtest::EchoRequestPB req;
    req.set_data("hello " + std::to_string(i));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(proxy.Echo(req, &resp, &ctl).ok()) << ctl.status().ToString();
    echo_request_bytes += RequestBytes("Echo", req);
    echo_response_bytes += ResponseBytes(resp, false);
  }

  // 2. An application error.
  {
    rtest::EchoRequestPB req;
    req.set_data("x");
    req.set_fail_with("no luck");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    EXPECT_TRUE(proxy.Echo(req, &resp, &ctl).IsRemoteError());
    ASSERT_NE(ctl.error_response(), nullptr);
    EXPECT_EQ(ctl.error_response()->code(), ErrorStatusPB::ERROR_APPLICATION);
    echo_request_bytes += RequestBytes("Echo", req);
    echo_response_bytes += ResponseBytes(*ctl.error_response(), true);
  }

  // 3. An invalid request: an AddRequestPB lacks EchoRequestPB's required field. The name is a
  // temporary string, not the generated proxy's: the client metrics must still be Echo's.
  {
    rtest::AddRequestPB req;
    req.set_a(1);
    req.set_b(2);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    EXPECT_TRUE(proxy.SyncRequest(std::string("Echo"), req, &resp, &ctl).IsInvalidArgument());
    ASSERT_NE(ctl.error_response(), nullptr);
    EXPECT_EQ(ctl.error_response()->code(), ErrorStatusPB::ERROR_INVALID_REQUEST);
    echo_request_bytes += RequestBytes("Echo", req);
    echo_response_bytes += ResponseBytes(*ctl.error_response(), true);
  }

  // 4. An unknown method: counted by the messenger, by no method.
  {
    rtest::EchoRequestPB req;
    req.set_data("?");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    EXPECT_TRUE(proxy.SyncRequest("Nope", req, &resp, &ctl).IsNotSupported());
    ASSERT_NE(ctl.error_response(), nullptr);
    EXPECT_EQ(ctl.error_response()->code(), ErrorStatusPB::ERROR_NO_SUCH_METHOD);
    server_in += RequestBytes("Nope", req);
    server_out += ResponseBytes(*ctl.error_response(), true);
  }

  // 5. A blocks the only worker; B (with a deadline) fills the one-call queue; C (no deadline,
  // so the latest) is refused too busy; B's deadline passes while it waits, so once A finishes
  // the worker answers B timed out without running it.
  service_->set_echo_hook([this](const rtest::EchoRequestPB& req, RpcContext*) {
    if (req.data() == "A") gate_.Pass();
  });
  constexpr int kTimeoutMs = 500;
  AsyncCall& a = async_calls_[0];
  AsyncCall& b = async_calls_[1];
  AsyncCall& c = async_calls_[2];
  a.req.set_data("A");
  b.req.set_data("B");
  c.req.set_data("C");
  proxy.EchoAsync(a.req, &a.resp, &a.ctl, [&a] { a.done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  b.ctl.set_timeout(MonoDelta::FromMilliseconds(kTimeoutMs));
  proxy.EchoAsync(b.req, &b.resp, &b.ctl, [&b] { b.done.CountDown(); });
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == 1; }));
  // B arrived before now, so its server-side deadline is at most kTimeoutMs from now.
  const MonoTime b_queued_by = MonoTime::Now();
  EXPECT_EQ(Server().Value("messenger", "server", "service_queue_length"), 1);
  proxy.EchoAsync(c.req, &c.resp, &c.ctl, [&c] { c.done.CountDown(); });
  c.done.Wait();
  EXPECT_TRUE(c.ctl.status().IsServiceUnavailable()) << c.ctl.status().ToString();
  ASSERT_NE(c.ctl.error_response(), nullptr);
  EXPECT_EQ(c.ctl.error_response()->code(), ErrorStatusPB::ERROR_SERVER_TOO_BUSY);
  b.done.Wait();  // the client's own timer
  EXPECT_TRUE(b.ctl.status().IsTimedOut()) << b.ctl.status().ToString();
  const MonoTime b_expired = b_queued_by + MonoDelta::FromMilliseconds(kTimeoutMs);
  for (int i = 0; i < 1000 && MonoTime::Now() <= b_expired; i++) {
    SleepFor(MonoDelta::FromMilliseconds(2));
  }
  ASSERT_TRUE(MonoTime::Now() > b_expired);
  // Nothing is on its way to the client now: what it received so far stays put until A ends.
  const int64_t client_received_before_a =
      Client().Value("messenger", "client", "received_bytes_total");
  gate_.Open();
  a.done.Wait();
  EXPECT_TRUE(a.ctl.status().ok()) << a.ctl.status().ToString();
  echo_request_bytes += RequestBytes("Echo", a.req) + RequestBytes("Echo", b.req, kTimeoutMs) +
                        RequestBytes("Echo", c.req);
  const size_t a_response_bytes = ResponseBytes(a.resp, false);
  echo_response_bytes += a_response_bytes + ResponseBytes(*c.ctl.error_response(), true);

  // Settled: every response written (the connection has no call in flight) and read.
  ASSERT_TRUE(WaitForCondition([&] {
    std::vector<ConnectionInfo> conns = server_->DumpConnections();
    return conns.size() == 1 && conns[0].calls_in_flight == 0 &&
           Server().Value("messenger", "server", "sent_bytes_total") ==
               Client().Value("messenger", "client", "received_bytes_total");
  }));
  // B's answer went to a client that had stopped waiting; its size (its message names the time it
  // waited) is what the client read after A's answer.
  const MetricsView server = Server();
  const MetricsView client = Client();
  const int64_t b_response_bytes = client.Value("messenger", "client", "received_bytes_total") -
                                   client_received_before_a -
                                   static_cast<int64_t>(a_response_bytes);
  {
    ErrorStatusPB shortest;
    shortest.set_message("call expired in the service queue after ");
    shortest.set_code(ErrorStatusPB::ERROR_TIMED_OUT);
    EXPECT_GT(b_response_bytes, static_cast<int64_t>(ResponseBytes(shortest, true)));
  }
  echo_response_bytes += static_cast<size_t>(b_response_bytes);
  server_in += echo_request_bytes + CancelFrameBytes();  // B's cancel, sent at its deadline
  server_out += echo_response_bytes;

  // Server, method Echo: 5 successes + application error + invalid + A + B + C.
  EXPECT_EQ(server.Value("method", kEcho, "calls_total"), 10);
  EXPECT_EQ(server.Value("method", kEcho, "errors_application_total"), 1);
  EXPECT_EQ(server.Value("method", kEcho, "errors_invalid_request_total"), 1);
  EXPECT_EQ(server.Value("method", kEcho, "errors_timed_out_total"), 1);
  EXPECT_EQ(server.Value("method", kEcho, "errors_too_busy_total"), 1);
  EXPECT_EQ(server.Value("method", kEcho, "errors_unavailable_total"), 0);
  EXPECT_EQ(server.Value("method", kEcho, "errors_other_total"), 0);
  // Picked up by the worker: all but C. Handlers run: successes, the application error and A.
  EXPECT_EQ(server.Count("method", kEcho, "queue_time_us"), 9u);
  EXPECT_EQ(server.Count("method", kEcho, "handler_time_us"), 7u);
  EXPECT_EQ(server.Count("method", kEcho, "total_time_us"), 10u);
  EXPECT_GT(server.Sum("method", kEcho, "queue_time_us"), 0u);    // B waited for A
  EXPECT_GT(server.Sum("method", kEcho, "handler_time_us"), 0u);  // A waited for the gate
  EXPECT_GT(server.Sum("method", kEcho, "total_time_us"), 0u);
  EXPECT_EQ(server.Value("method", kEcho, "request_bytes_total"),
            static_cast<int64_t>(echo_request_bytes));
  EXPECT_EQ(server.Value("method", kEcho, "response_bytes_total"),
            static_cast<int64_t>(echo_response_bytes));

  // Server, method Add: registered, never called.
  EXPECT_EQ(server.Value("method", kAdd, "calls_total"), 0);
  EXPECT_EQ(server.Count("method", kAdd, "total_time_us"), 0u);
  EXPECT_EQ(server.Value("method", kAdd, "request_bytes_total"), 0);
  EXPECT_FALSE(server.HasEntity("method", kNope));
  EXPECT_EQ(server.num_entities(), 3u);  // the messenger and its two methods

  // Server messenger.
  EXPECT_EQ(server.Value("messenger", "server", "connections_open"), 1);
  EXPECT_EQ(server.Value("messenger", "server", "connections_accepted_total"), 1);
  EXPECT_EQ(server.Value("messenger", "server", "connections_closed_total"), 0);
  EXPECT_EQ(server.Value("messenger", "server", "received_bytes_total"),
            static_cast<int64_t>(server_in));
  EXPECT_EQ(server.Value("messenger", "server", "sent_bytes_total"),
            static_cast<int64_t>(server_out));
  EXPECT_GT(server.Value("messenger", "server", "reactor_busy_time_us"), 0);
  EXPECT_EQ(server.Value("messenger", "server", "service_queue_length"), 0);
  EXPECT_EQ(server.Value("messenger", "server", "service_queue_overflows_total"), 1);
  EXPECT_EQ(server.Value("messenger", "server", "calls_expired_in_queue_total"), 1);
  EXPECT_EQ(server.Value("messenger", "server", "too_busy_rejections_total"), 1);
  EXPECT_EQ(server.Value("messenger", "server", "no_such_method_total"), 1);

  // Client, method Echo: the same 10 calls; failed: application, invalid, B (timed out), C.
  EXPECT_EQ(client.Count("client", kEcho, "client_latency_us"), 10u);
  EXPECT_GE(client.Sum("client", kEcho, "client_latency_us"),
            static_cast<uint64_t>(kTimeoutMs) * 1000);  // B alone waited that long
  EXPECT_EQ(client.Value("client", kEcho, "client_errors_total"), 4);
  EXPECT_EQ(client.Value("client", kEcho, "client_timeouts_total"), 1);
  EXPECT_EQ(client.Value("client", kEcho, "client_retries_total"), 0);
  EXPECT_EQ(client.Count("client", kNope, "client_latency_us"), 1u);
  EXPECT_EQ(client.Value("client", kNope, "client_errors_total"), 1);
  EXPECT_EQ(client.Value("client", kNope, "client_timeouts_total"), 0);
  EXPECT_EQ(client.num_entities(), 3u);  // the messenger and two client methods

  // Client messenger: one connection, its bytes the mirror of the server's.
  EXPECT_EQ(client.Value("messenger", "client", "connections_open"), 1);
  EXPECT_EQ(client.Value("messenger", "client", "connections_accepted_total"), 0);
  EXPECT_EQ(client.Value("messenger", "client", "connections_closed_total"), 0);
  EXPECT_EQ(client.Value("messenger", "client", "sent_bytes_total"),
            static_cast<int64_t>(server_in));
  EXPECT_EQ(client.Value("messenger", "client", "received_bytes_total"),
            static_cast<int64_t>(server_out));
  EXPECT_GT(client.Value("messenger", "client", "reactor_busy_time_us"), 0);
  EXPECT_EQ(client.Value("messenger", "client", "no_such_method_total"), 0);
  EXPECT_EQ(client.Value("messenger", "client", "too_busy_rejections_total"), 0);

  // Closing the client closes the connection on both sides.
  client_->Shutdown();
  EXPECT_EQ(Client().Value("messenger", "client", "connections_open"), 0);
  EXPECT_EQ(Client().Value("messenger", "client", "connections_closed_total"), 1);
  ASSERT_TRUE(WaitForCondition(
      [&] { return Server().Value("messenger", "server", "connections_closed_total") == 1; }));
  EXPECT_EQ(Server().Value("messenger", "server", "connections_open"), 0);
}

TEST_F(RpcMetricsTest, DisabledMetricsRegisterNothingAndCallsWork) {
  MetricRegistry registry;
  MessengerOptions options;
  options.enable_metrics = false;
  options.metric_registry = &registry;  // ignored: metrics are off
  StartServer(options);
  StartClient(options);
  EXPECT_EQ(server_->metric_registry(), nullptr);
  EXPECT_EQ(MessengerInternals::metrics(*server_), nullptr);
  EXPECT_EQ(client_->metric_registry(), nullptr);
  auto proxy = Proxy();
  rtest::AddRequestPB req;
  req.set_a(2);
  req.set_b(3);
  rtest::AddResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(resp.sum(), 5);
  EXPECT_EQ(registry.num_entities(), 0u);
  client_->Shutdown();
  server_->Shutdown();
}

TEST_F(RpcMetricsTest, ExternalRegistryIsUsedAndOutlivesTheMessenger) {
  MetricRegistry registry;
  MessengerOptions options;
  options.metric_registry = &registry;
  StartServer(options);
  StartClient(options);  // "client" and "server" share the registry
  EXPECT_EQ(server_->metric_registry(), &registry);
  EXPECT_EQ(client_->metric_registry(), &registry);
  // Method entities exist from registration on.
  EXPECT_NE(registry.FindEntity("method", kEcho), nullptr);
  EXPECT_NE(registry.FindEntity("method", kAdd), nullptr);
  EXPECT_EQ(registry.FindEntity("client", kAdd), nullptr);  // not called yet
  auto proxy = Proxy();
  rtest::AddRequestPB req;
  req.set_a(2);
  req.set_b(3);
  rtest::AddResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(proxy.Add(req, &resp, &ctl).ok()) << ctl.status().ToString();
  EXPECT_EQ(MetricsView(&registry).Value("method", kAdd, "calls_total"), 1);
  EXPECT_EQ(MetricsView(&registry).Count("client", kAdd, "client_latency_us"), 1u);

  // The messengers go; their counts stay readable and the queue gauge no longer reads the pool.
  // Shut down explicitly: `proxy` still holds the client messenger, so reset() alone would leave
  // its connection to close later, when it notices the server is gone.
  client_->Shutdown();
  client_.reset();
  server_.reset();
  const MetricsView after(&registry);
  EXPECT_EQ(after.Value("method", kAdd, "calls_total"), 1);
  EXPECT_EQ(after.Value("messenger", "server", "service_queue_length"), 0);
  EXPECT_EQ(after.Value("messenger", "server", "connections_open"), 0);
  EXPECT_EQ(after.Value("messenger", "client", "connections_closed_total"), 1);
}

TEST_F(RpcMetricsTest, PromtoolAcceptsThePrometheusText) {
  if (access("/usr/bin/promtool", X_OK) != 0 && system("promtool --version >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "promtool not installed (Debian package prometheus)";
  }
  MetricRegistry registry;
  MessengerOptions options;
  options.metric_registry = &registry;
  StartServer(options);
  StartClient(options);
  auto proxy = Proxy();
  for (int i = 0; i < 3; i++) {
    rtest::EchoRequestPB req;
    req.set_data("p");
    if (i == 2) req.set_fail_with("bad");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    proxy.Echo(req, &resp, &ctl);
  }
  const std::string text = FormatPrometheus(registry.TakeSnapshot());
  // Every entity type of the RPC core is there, under its Prometheus names.
  for (const char* name :
       {"rrpc_calls_total{entity=\"method\"", "rrpc_handler_time_seconds_bucket{entity=\"method\"",
        "rrpc_request_bytes_total{entity=\"method\"", "rrpc_errors_application_total{",
        "rrpc_connections_open{entity=\"messenger\"", "rrpc_received_bytes_total{",
        "rrpc_reactor_busy_time_seconds_total{", "rrpc_service_queue_length{",
        "rrpc_worker_idle_polls_total{", "rrpc_worker_idle_poll_hits_total{",
        "rrpc_client_latency_seconds_count{entity=\"client\"", "rrpc_client_retries_total{"}) {
    EXPECT_NE(text.find(name), std::string::npos) << name << " missing in\n" << text;
  }
  EXPECT_EQ(PromtoolComplaint(text), "");
  client_->Shutdown();
  server_->Shutdown();
}

}  // namespace
}  // namespace rrpc::rpc
