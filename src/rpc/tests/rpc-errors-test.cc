// Each error a server can answer surfaces on the client as its own Status code plus the server's
// ErrorStatusPB, and IsRetriable() says yes only for the retriable ones (docs/wire-format.md,
// "Responses and errors").
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/proxy.h"

namespace rrpc::rpc {
namespace {

const char kEchoService[] = "rrpc.rtest.EchoService";

class RpcErrorsTest : public RpcTestBase {
 protected:
  void SetUp() override {
    StartServer(ServerOptions());
    StartClient();
  }
  virtual MessengerOptions ServerOptions() { return {}; }

  // A call to `service`.`method` with a generic proxy; returns the controller's status.
  Status Call(const std::string& service, const std::string& method,
              const google::protobuf::Message& req, google::protobuf::Message* resp,
              RpcController* ctl) {
    rpc::Proxy proxy(client_, server_addr_, service);
    ctl->set_timeout(MonoDelta::FromSeconds(60));
    return proxy.SyncRequest(method, req, resp, ctl);
  }
};

TEST_F(RpcErrorsTest, UnknownServiceIsNotFoundWithNoSuchService) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  Status s = Call("rrpc.rtest.NoSuchService", "Echo", req, &resp, &ctl);
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_SERVICE, ctl.error_response()->code());
  EXPECT_NE(std::string::npos, s.ToString().find("rrpc.rtest.NoSuchService")) << s.ToString();
  EXPECT_FALSE(ctl.IsRetriable());
  EXPECT_EQ(0, service_->calls());
}

TEST_F(RpcErrorsTest, UnknownMethodIsNotSupportedWithNoSuchMethod) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  Status s = Call(kEchoService, "NoSuchMethod", req, &resp, &ctl);
  EXPECT_TRUE(s.IsNotSupported()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_METHOD, ctl.error_response()->code());
  EXPECT_NE(std::string::npos, s.ToString().find("NoSuchMethod")) << s.ToString();
  EXPECT_FALSE(ctl.IsRetriable());
  EXPECT_EQ(0, service_->calls());
}

TEST_F(RpcErrorsTest, RoutingAfterAKnownMethodStillTellsMethodsAndServicesApart) {
  // The reactor remembers its last routed method (service_pool.cc): calls that differ from it in
  // the method, the service or only a name's length must not take its route.
  auto echo = [&](const std::string& service, const std::string& method) {
    rtest::EchoRequestPB req;
    req.set_data("x");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    Status s = Call(service, method, req, &resp, &ctl);
    return ctl.error_response() != nullptr ? static_cast<int>(ctl.error_response()->code())
                                           : (s.ok() ? -1 : -2);
  };
  EXPECT_EQ(-1, echo(kEchoService, "Echo"));
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_METHOD, echo(kEchoService, "Ech"));
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_METHOD, echo(kEchoService, "Echo2"));
  EXPECT_EQ(ErrorStatusPB::ERROR_NO_SUCH_SERVICE, echo("rrpc.rtest.EchoServicf", "Echo"));
  EXPECT_EQ(-1, echo(kEchoService, "Echo"));
  rtest::AddRequestPB add;
  add.set_a(2);
  add.set_b(3);
  rtest::AddResponsePB sum;
  RpcController ctl;
  ASSERT_TRUE(Call(kEchoService, "Add", add, &sum, &ctl).ok());
  EXPECT_EQ(5, sum.sum());
  EXPECT_EQ(-1, echo(kEchoService, "Echo"));
  EXPECT_EQ(4, service_->calls());
}

TEST_F(RpcErrorsTest, RequestThatDoesNotParseIsInvalidArgumentWithInvalidRequest) {
  // An AddResponsePB's bytes (field 1 as a varint) are not an EchoRequestPB: its required
  // `data` is missing.
  rtest::AddResponsePB not_an_echo_request;
  not_an_echo_request.set_sum(5);
  rtest::EchoResponsePB resp;
  RpcController ctl;
  Status s = Call(kEchoService, "Echo", not_an_echo_request, &resp, &ctl);
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, ctl.error_response()->code());
  EXPECT_NE(std::string::npos, s.ToString().find("EchoRequestPB")) << s.ToString();
  EXPECT_FALSE(ctl.IsRetriable());
  EXPECT_EQ(0, service_->calls());
  EXPECT_EQ(1, MessengerInternals::metrics(*server_)
                   ->ServerMethod(kEchoService, "Echo")
                   ->errors_invalid_request->value());
}

TEST_F(RpcErrorsTest, HandlerFailureIsRemoteErrorWithApplicationCode) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  req.set_fail_with("the disk is on fire");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = Proxy().Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_APPLICATION, ctl.error_response()->code());
  EXPECT_EQ("the disk is on fire", ctl.error_response()->message());
  // The handler failed with IllegalState; its code travels in app_status_code.
  EXPECT_EQ(static_cast<int>(Status::Code::kIllegalState), ctl.error_response()->app_status_code());
  EXPECT_NE(std::string::npos, s.ToString().find("the disk is on fire"));
  EXPECT_FALSE(ctl.IsRetriable());
}

// One worker, a queue of one: the worker is held in a handler, one call waits in the queue, so
// the next call is refused.
class TooBusyTest : public RpcErrorsTest {
 protected:
  MessengerOptions ServerOptions() override {
    MessengerOptions o;
    o.num_workers = 1;
    o.service_queue_length = 1;
    return o;
  }
};

TEST_F(TooBusyTest, FullQueueIsServiceUnavailableWithTooBusyAndRetriable) {
  BlockEchoes();
  auto proxy = Proxy();
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resps[2];
  RpcController ctls[2];
  CountDownLatch done(2);
  ctls[0].set_timeout(MonoDelta::FromSeconds(120));
  proxy.EchoAsync(req, &resps[0], &ctls[0], [&done] { done.CountDown(); });
  ASSERT_TRUE(gate_.WaitForEntered(1));
  ctls[1].set_timeout(MonoDelta::FromSeconds(120));
  proxy.EchoAsync(req, &resps[1], &ctls[1], [&done] { done.CountDown(); });
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == 1; }));

  // Later deadline than the queued call: refused.
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(600));
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsServiceUnavailable()) << s.ToString();
  ASSERT_NE(nullptr, ctl.error_response());
  EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, ctl.error_response()->code());
  EXPECT_TRUE(ctl.IsRetriable());

  gate_.Open();
  ASSERT_TRUE(done.WaitFor(MonoDelta::FromSeconds(60)));
  EXPECT_TRUE(ctls[0].status().ok()) << ctls[0].status().ToString();
  EXPECT_TRUE(ctls[1].status().ok()) << ctls[1].status().ToString();
  EXPECT_EQ(2, service_->calls());
}

TEST_F(TooBusyTest, CallExpiredInTheQueueIsAnsweredTimedOutOnTheWire) {
  // A raw client, whose own clock never gives up, sees the server's answer to a call whose
  // deadline passed while it waited behind a busy worker.
  BlockEchoes();
  RawConnection raw(server_addr_);
  ASSERT_TRUE(raw.ok());
  ASSERT_TRUE(raw.Negotiate().ok());
  rtest::EchoRequestPB req;
  req.set_data("x");
  ASSERT_TRUE(raw.Write(CallFrame(1, kEchoService, "Echo", req, 600000)).ok());
  ASSERT_TRUE(gate_.WaitForEntered(1));
  ASSERT_TRUE(raw.Write(CallFrame(2, kEchoService, "Echo", req, /*timeout_ms=*/1)).ok());
  ASSERT_TRUE(WaitForCondition(
      [&] { return MessengerInternals::service_pool(*server_)->queue_size() == 1; }));
  // Call 2 arrived before now, so its 1 ms budget is spent once now + 1 ms has passed.
  const MonoTime expired = MonoTime::Now() + MonoDelta::FromMilliseconds(2);
  while (MonoTime::Now() <= expired) SleepFor(MonoDelta::FromMilliseconds(1));
  gate_.Open();

  std::map<int32_t, std::string> bodies;
  std::map<int32_t, bool> is_error;
  for (int i = 0; i < 2; i++) {
    ResponseHeader header;
    std::string body;
    ASSERT_TRUE(raw.ReadParsedFrame(&header, &body).ok());
    bodies[header.call_id()] = body;
    is_error[header.call_id()] = header.is_error();
  }
  EXPECT_FALSE(is_error[1]);
  ASSERT_TRUE(is_error[2]);
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(bodies[2]));
  EXPECT_EQ(ErrorStatusPB::ERROR_TIMED_OUT, error.code()) << error.ShortDebugString();
  // The expired call never reached the handler.
  EXPECT_EQ(1, service_->calls());
  EXPECT_EQ(1, MessengerInternals::metrics(*server_)->calls_expired_in_queue->value());
}

// ---- How each server error code surfaces on the client.

// A scripted server: accepts one connection, negotiates, then answers each call with the bytes
// `respond` returns for it (a whole frame, or anything else). Runs until the client goes away.
class ScriptedServer {
 public:
  using Responder =
      std::function<std::string(const RequestHeader& header, const std::string& body)>;
  explicit ScriptedServer(Responder respond)
      : respond_(std::move(respond)), thread_([this] { Run(); }) {}
  ~ScriptedServer() {
    if (thread_.joinable()) thread_.join();
  }
  const Sockaddr& addr() const { return listener_.addr(); }
  // Waits for the client to go away (every read is bounded); how the script went.
  Status Join() {
    thread_.join();
    return status_;
  }

 private:
  void Run() {
    Result<Socket> sock = listener_.Accept();
    if (!sock.ok()) {
      status_ = sock.status();
      return;
    }
    RawConnection conn(std::move(sock).value());
    status_ = conn.AcceptNegotiation();
    while (status_.ok()) {
      RequestHeader header;
      std::string body;
      if (!conn.ReadParsedFrame(&header, &body).ok()) return;  // the client went away
      status_ = conn.Write(respond_(header, body));
    }
  }

  const Responder respond_;
  RawListener listener_;  // before thread_: Run() uses it
  Status status_;
  std::thread thread_;
};

// An error response frame to `header`'s call.
std::string ErrorFrame(const RequestHeader& header, ErrorStatusPB::RpcErrorCodePB code,
                       const std::string& message) {
  ResponseHeader rh;
  rh.set_call_id(header.call_id());
  rh.set_is_error(true);
  ErrorStatusPB error;
  error.set_code(code);
  error.set_message(message);
  return FrameBytes(rh, error);
}

TEST_F(RpcErrorsTest, EachServerErrorCodeIsADistinctClientStatus) {
  struct Expected {
    ErrorStatusPB::RpcErrorCodePB code;
    Status::Code status;
    bool retriable;
  };
  const std::vector<Expected> table = {
      {ErrorStatusPB::ERROR_APPLICATION, Status::Code::kRemoteError, false},
      {ErrorStatusPB::ERROR_NO_SUCH_METHOD, Status::Code::kNotSupported, false},
      {ErrorStatusPB::ERROR_NO_SUCH_SERVICE, Status::Code::kNotFound, false},
      {ErrorStatusPB::ERROR_SERVER_TOO_BUSY, Status::Code::kServiceUnavailable, true},
      {ErrorStatusPB::ERROR_INVALID_REQUEST, Status::Code::kInvalidArgument, false},
      {ErrorStatusPB::ERROR_TIMED_OUT, Status::Code::kTimedOut, false},
      {ErrorStatusPB::ERROR_UNAVAILABLE, Status::Code::kAborted, true},
  };
  // Answers each call with the error code its data names.
  ScriptedServer scripted([](const RequestHeader& header, const std::string& body) {
    rtest::EchoRequestPB req;
    req.ParseFromString(body);
    return ErrorFrame(header, static_cast<ErrorStatusPB::RpcErrorCodePB>(std::stoi(req.data())),
                      "scripted error " + req.data());
  });
  rtest::EchoServiceProxy proxy(client_, scripted.addr());
  std::set<Status::Code> seen;
  for (const Expected& e : table) {
    SCOPED_TRACE(ErrorStatusPB::RpcErrorCodePB_Name(e.code));
    rtest::EchoRequestPB req;
    req.set_data(std::to_string(e.code));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = proxy.Echo(req, &resp, &ctl);
    EXPECT_EQ(e.status, s.code()) << s.ToString();
    ASSERT_NE(nullptr, ctl.error_response());
    EXPECT_EQ(e.code, ctl.error_response()->code());
    EXPECT_NE(std::string::npos, s.ToString().find("scripted error")) << s.ToString();
    EXPECT_EQ(e.retriable, ctl.IsRetriable());
    seen.insert(s.code());
  }
  EXPECT_EQ(table.size(), seen.size()) << "two server errors map to the same client status";
  client_->Shutdown();  // the scripted server sees EOF and returns
  Status script = scripted.Join();
  EXPECT_TRUE(script.ok()) << script.ToString();
}

// ---- A misbehaving server: the client fails the affected calls with a clear error.

TEST_F(RpcErrorsTest, ServerRefusingNegotiationIsNetworkErrorWithItsReason) {
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  std::thread server([&] {
    Result<Socket> sock = listener.Accept();
    if (!sock.ok()) return;
    RawConnection conn(std::move(sock).value());
    std::string preamble, frame;
    if (!conn.ReadBytes(kPreambleSize, &preamble).ok() || !conn.ReadFrame(&frame).ok()) return;
    NegotiatePB request;
    (void)conn.Write(BuildServerReply(request, Status::NotSupported("scripted refusal"),
                                      ErrorStatusPB::FATAL_VERSION_MISMATCH)
                         .slice.ToString());
    conn.WaitForClose();
  });
  rtest::EchoServiceProxy proxy(client_, listener.addr());
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsNetworkError()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("scripted refusal")) << s.ToString();
  client_->Shutdown();
  server.join();
}

TEST_F(RpcErrorsTest, ResponseThatDoesNotParseFailsOnlyThatCall) {
  ScriptedServer scripted([](const RequestHeader& header, const std::string& body) {
    rtest::EchoRequestPB req;
    req.ParseFromString(body);
    ResponseHeader rh;
    rh.set_call_id(header.call_id());
    rtest::EchoResponsePB resp;
    if (req.data() == "good") resp.set_data("good");  // else: required `data` missing
    return FrameBytes(rh, resp);
  });
  rtest::EchoServiceProxy proxy(client_, scripted.addr());
  for (const char* data : {"good", "bad", "good"}) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = proxy.Echo(req, &resp, &ctl);
    if (std::string(data) == "good") {
      EXPECT_TRUE(s.ok()) << s.ToString();
    } else {
      EXPECT_TRUE(s.IsCorruption()) << s.ToString();
      EXPECT_NE(std::string::npos, s.ToString().find("response does not parse"));
    }
  }
  // All three went over the one connection: the bad response did not close it.
  EXPECT_EQ(1u, client_->DumpConnections().size());
  client_->Shutdown();
  Status script = scripted.Join();
  EXPECT_TRUE(script.ok()) << script.ToString();
}

TEST_F(RpcErrorsTest, ResponseWithBadSidecarOffsetsFailsThatCall) {
  ScriptedServer scripted([](const RequestHeader& header, const std::string&) {
    ResponseHeader rh;
    rh.set_call_id(header.call_id());
    rh.add_sidecar_offsets(0);
    rh.add_sidecar_offsets(50);  // past the 3 sidecar bytes
    rtest::EchoResponsePB resp;
    resp.set_data("x");
    return FrameBytes(rh, resp, "abc");
  });
  rtest::EchoServiceProxy proxy(client_, scripted.addr());
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_EQ(0u, ctl.num_inbound_sidecars());
  client_->Shutdown();
  scripted.Join();
}

TEST_F(RpcErrorsTest, MalformedResponseFrameClosesTheConnectionAndFailsItsCalls) {
  ScriptedServer scripted([](const RequestHeader&, const std::string&) {
    return RawFrame(std::string(12, '\xff'));  // a header length that never ends
  });
  rtest::EchoServiceProxy proxy(client_, scripted.addr());
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromSeconds(60));
  Status s = proxy.Echo(req, &resp, &ctl);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.ToString().find("bad frame from")) << s.ToString();
  EXPECT_TRUE(WaitForCondition([&] { return client_->DumpConnections().empty(); }));
  scripted.Join();  // the client closed the connection
}

TEST_F(RpcErrorsTest, ResponseToAnUnknownCallIdIsIgnored) {
  ScriptedServer scripted([](const RequestHeader& header, const std::string& body) {
    rtest::EchoRequestPB req;
    req.ParseFromString(body);
    ResponseHeader stray;
    stray.set_call_id(header.call_id() + 1000);
    ResponseHeader rh;
    rh.set_call_id(header.call_id());
    rtest::EchoResponsePB resp;
    resp.set_data(req.data());
    return FrameBytes(stray, resp) + FrameBytes(rh, resp);
  });
  rtest::EchoServiceProxy proxy(client_, scripted.addr());
  for (int i = 0; i < 3; i++) {
    rtest::EchoRequestPB req;
    req.set_data("call " + std::to_string(i));
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    Status s = proxy.Echo(req, &resp, &ctl);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(req.data(), resp.data());
  }
  client_->Shutdown();
  Status script = scripted.Join();
  EXPECT_TRUE(script.ok()) << script.ToString();
}

TEST_F(RpcErrorsTest, LocalFailuresCarryNoServerError) {
  // Client-side timeout: TimedOut like the server's ERROR_TIMED_OUT, but no ErrorStatusPB.
  BlockEchoes();
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_timeout(MonoDelta::FromMilliseconds(50));
  Status s = Proxy().Echo(req, &resp, &ctl);
  EXPECT_TRUE(s.IsTimedOut()) << s.ToString();
  EXPECT_EQ(nullptr, ctl.error_response());
  EXPECT_FALSE(ctl.IsRetriable());
  gate_.Open();
  // A call on a shut-down messenger: Aborted, no ErrorStatusPB.
  client_->Shutdown();
  RpcController ctl2;
  ctl2.set_timeout(MonoDelta::FromSeconds(60));
  s = Proxy().Echo(req, &resp, &ctl2);
  EXPECT_TRUE(s.IsAborted()) << s.ToString();
  EXPECT_EQ(nullptr, ctl2.error_response());
}

}  // namespace
}  // namespace rrpc::rpc
