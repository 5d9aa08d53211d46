// Trace context (docs/tracing.md): the traceparent helpers are strict; a call carries its
// controller's context to the server, which gives it a span of its own whose parent is the
// caller's; a handler's downstream calls inherit it (client -> A -> B share one trace, B's parent
// is A's span, both /rpcz stores show it); and peers without TRACE_CONTEXT work each way.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/dynamic_message.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rpc/core/messenger_internals.h"
#include "rpc/core/service_pool.h"
#include "rpc/observe/rpcz_store.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rrpc/rpc/trace_context.h"

namespace rrpc::rpc {
namespace {

const MonoDelta kLong = MonoDelta::FromSeconds(60);
// W3C's own example.
constexpr char kExample[] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

TEST(TraceContextTest, ParsesAndFormatsTraceparent) {
  Result<TraceContext> tc = TraceContext::FromTraceparent(kExample);
  ASSERT_TRUE(tc.ok()) << tc.status().ToString();
  EXPECT_EQ(0x4bf92f3577b34da6ULL, tc->trace_id_high);
  EXPECT_EQ(0xa3ce929d0e0e4736ULL, tc->trace_id_low);
  EXPECT_EQ(0x00f067aa0ba902b7ULL, tc->span_id);
  EXPECT_TRUE(tc->sampled());
  EXPECT_TRUE(tc->valid());
  EXPECT_EQ(kExample, tc->ToTraceparent());
  EXPECT_EQ("4bf92f3577b34da6a3ce929d0e0e4736", tc->TraceIdHex());
  // A later version: its first four fields, when a '-' follows them.
  tc = TraceContext::FromTraceparent(
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes-later");
  ASSERT_TRUE(tc.ok()) << tc.status().ToString();
  EXPECT_FALSE(tc->sampled());
}

TEST(TraceContextTest, RefusesMalformedTraceparentWithAClearError) {
  const std::vector<std::string> bad = {
      "",
      "00",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    // short
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // 00 is exactly 55
      "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
      "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // not hex
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper case
      "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
      "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero span id
      "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // separator
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",   // flags
      "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  // later version, no '-'
      std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\0", 55),
      std::string(4096, '0'),
  };
  for (const std::string& s : bad) {
    Result<TraceContext> tc = TraceContext::FromTraceparent(s);
    EXPECT_TRUE(tc.status().IsInvalidArgument()) << s;
    EXPECT_NE(std::string::npos, tc.status().message().find("traceparent")) << s;
  }
  uint64_t high, low;
  EXPECT_TRUE(ParseTraceId("4BF92F3577B34DA6a3ce929d0e0e4736", &high, &low).ok());
  EXPECT_EQ(0x4bf92f3577b34da6ULL, high);
  EXPECT_FALSE(ParseTraceId("4bf92f3577b34da6a3ce929d0e0e473", &high, &low).ok());
  EXPECT_FALSE(ParseTraceId("00000000000000000000000000000000", &high, &low).ok());
  EXPECT_FALSE(ParseTraceId("4bf92f3577b34da6a3ce929d0e0e473z", &high, &low).ok());
}

TEST(TraceContextTest, NewRootsAreValidAndDistinct) {
  const TraceContext a = TraceContext::NewRoot(true);
  const TraceContext b = TraceContext::NewRoot(false);
  EXPECT_TRUE(a.valid() && b.valid());
  EXPECT_TRUE(a.sampled());
  EXPECT_FALSE(b.sampled());
  EXPECT_NE(a.TraceIdHex(), b.TraceIdHex());
  EXPECT_FALSE(TraceContext().valid());
  Result<TraceContext> again = TraceContext::FromTraceparent(a.ToTraceparent());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(a.ToTraceparent(), again->ToTraceparent());
}

// What a handler saw of its call's trace.
struct SeenTrace {
  Mutex mu;
  TraceContext trace RRPC_GUARDED_BY(mu);
  uint64_t parent RRPC_GUARDED_BY(mu) = 0;
  void Record(const RpcContext* context) {
    MutexLock l(mu);
    trace = context->trace_context();
    parent = context->parent_span_id();
  }
  TraceContext Trace() {
    MutexLock l(mu);
    return trace;
  }
  uint64_t Parent() {
    MutexLock l(mu);
    return parent;
  }
};

RpczStore* Rpcz(const std::shared_ptr<Messenger>& m) {
  return MessengerInternals::service_pool(*m)->rpcz_store();
}

// The spans `m` kept of `trace` once there are `n` (a call's span is kept once its response is
// written, which may be just after the client has it).
std::vector<RpczSpan> WaitForSpans(const std::shared_ptr<Messenger>& m, const TraceContext& trace,
                                   size_t n) {
  std::vector<RpczSpan> spans;
  WaitForCondition([&] {
    spans = Rpcz(m)->ListSpans(trace.trace_id_high, trace.trace_id_low);
    return spans.size() >= n;
  });
  return spans;
}

class TraceTest : public RpcTestBase {
 protected:
  void SetUp() override {
    StartServer();
    StartClient();
  }
};

// client -> A -> B over real sockets: A's handler calls B with the context inherited.
TEST_F(TraceTest, ClientToAToBShareOneTraceAndBsParentIsAsSpan) {
  // B: the fixture's server. A: a second server whose Echo forwards to B.
  SeenTrace at_a, at_b;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { at_b.Record(context); });
  auto built = MessengerBuilder(MessengerOptions{}).Build();
  ASSERT_TRUE(built.ok());
  std::shared_ptr<Messenger> a = std::move(built).value();
  auto a_service = std::make_unique<TestEchoService>();
  std::shared_ptr<Messenger> a_client = a;  // A calls B through its own messenger
  const Sockaddr b_addr = server_addr_;
  a_service->set_echo_hook(
      [&, a_client, b_addr](const rtest::EchoRequestPB& req, RpcContext* context) {
        at_a.Record(context);
        RpcController ctl;
        context->InheritDeadline(&ctl);
        context->InheritTraceContext(&ctl);
        rtest::EchoResponsePB resp;
        ASSERT_TRUE(rtest::EchoServiceProxy(a_client, b_addr).Echo(req, &resp, &ctl).ok());
      });
  ASSERT_TRUE(a->RegisterService(std::move(a_service)).ok());
  Sockaddr a_addr;
  ASSERT_TRUE(a->Listen(Sockaddr::Loopback(0), &a_addr).ok());

  const TraceContext root = TraceContext::NewRoot(/*sampled=*/true);
  RpcController ctl;
  ctl.set_timeout(kLong);
  ctl.set_trace_context(root);
  rtest::EchoRequestPB req;
  req.set_data("traced");
  rtest::EchoResponsePB resp;
  ASSERT_TRUE(rtest::EchoServiceProxy(client_, a_addr).Echo(req, &resp, &ctl).ok());

  // The handlers saw one trace: A's parent is the client's span, B's parent is A's span.
  const TraceContext ta = at_a.Trace(), tb = at_b.Trace();
  ASSERT_TRUE(ta.valid());
  ASSERT_TRUE(tb.valid());
  EXPECT_EQ(root.TraceIdHex(), ta.TraceIdHex());
  EXPECT_EQ(root.TraceIdHex(), tb.TraceIdHex());
  EXPECT_EQ(root.span_id, at_a.Parent());
  EXPECT_NE(root.span_id, ta.span_id);
  EXPECT_EQ(ta.span_id, at_b.Parent());
  EXPECT_NE(ta.span_id, tb.span_id);
  EXPECT_TRUE(ta.sampled() && tb.sampled());

  // And so do the /rpcz stores of A and B.
  const std::vector<RpczSpan> a_spans = WaitForSpans(a, root, 1);
  const std::vector<RpczSpan> b_spans = WaitForSpans(server_, root, 1);
  ASSERT_EQ(1u, a_spans.size());
  ASSERT_EQ(1u, b_spans.size());
  EXPECT_EQ("Echo", a_spans[0].method);
  EXPECT_EQ(ta.span_id, a_spans[0].call.trace.span_id);
  EXPECT_EQ(root.span_id, a_spans[0].call.trace.parent_span_id);
  EXPECT_EQ(tb.span_id, b_spans[0].call.trace.span_id);
  EXPECT_EQ(a_spans[0].call.trace.span_id, b_spans[0].call.trace.parent_span_id);
  EXPECT_TRUE(b_spans[0].call.trace.SameTrace(root.trace_id_high, root.trace_id_low));
  a->Shutdown();
}

TEST_F(TraceTest, CallWithoutTraceContextHasNoneAndKeepsNoSpan) {
  SeenTrace seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { seen.Record(context); });
  ASSERT_TRUE(EchoOnce(Proxy(), "plain").ok());
  EXPECT_FALSE(seen.Trace().valid());
  EXPECT_EQ(0u, seen.Parent());
  // Inheriting nothing leaves the controller without a context.
  RpcController ctl;
  EXPECT_FALSE(ctl.trace_context().valid());
}

TEST_F(TraceTest, UnsampledTraceIsPropagatedButNotKeptInRpcz) {
  SeenTrace seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { seen.Record(context); });
  const TraceContext root = TraceContext::NewRoot(/*sampled=*/false);
  RpcController ctl;
  ctl.set_trace_context(root);
  rtest::EchoRequestPB req;
  req.set_data("x");
  rtest::EchoResponsePB resp;
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  EXPECT_EQ(root.TraceIdHex(), seen.Trace().TraceIdHex());
  EXPECT_FALSE(seen.Trace().sampled());
  // A sampled call after it is kept: the unsampled one, finished before, never was.
  const TraceContext sampled = TraceContext::NewRoot(true);
  ctl.Reset();
  ctl.set_trace_context(sampled);
  ASSERT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  EXPECT_EQ(1u, WaitForSpans(server_, sampled, 1).size());
  EXPECT_TRUE(Rpcz(server_)->ListSpans(root.trace_id_high, root.trace_id_low).empty());
}

// ---- Malformed trace fields from a raw client: ignored, the call served.

TEST_F(TraceTest, InvalidTraceFieldsAreIgnoredAndTheCallServed) {
  SeenTrace seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { seen.Record(context); });
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE(conn.Negotiate().ok());
  rtest::EchoRequestPB req;
  req.set_data("bad trace");
  std::vector<RequestHeader> headers(3);
  headers[0].set_trace_id_high(0);  // zero trace id
  headers[0].set_trace_id_low(0);
  headers[0].set_parent_span_id(7);
  headers[1].set_trace_flags(1);    // flags alone
  headers[2].set_trace_id_high(1);  // a trace id without a span
  int32_t call_id = 1;
  for (RequestHeader& header : headers) {
    header.set_call_id(call_id);
    header.mutable_remote_method()->set_service_name("rrpc.rtest.EchoService");
    header.mutable_remote_method()->set_method_name("Echo");
    ASSERT_TRUE(conn.Write(FrameBytes(header, req)).ok());
    ResponseHeader resp_header;
    std::string body;
    ASSERT_TRUE(conn.ReadParsedFrame(&resp_header, &body).ok());
    EXPECT_EQ(call_id, resp_header.call_id());
    EXPECT_FALSE(resp_header.is_error());
    EXPECT_FALSE(seen.Trace().valid());
    call_id++;
  }
}

// docs/wire-format.md, section 5: a trace context lacking some of its four fields is ignored,
// even when the fields it has are valid ids: the call runs untraced.
TEST_F(TraceTest, TraceContextMissingAFieldIsIgnoredAndTheCallServed) {
  SeenTrace seen;
  service_->set_echo_hook(
      [&](const rtest::EchoRequestPB&, RpcContext* context) { seen.Record(context); });
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok()) << conn.status().ToString();
  ASSERT_TRUE(conn.Negotiate().ok());
  rtest::EchoRequestPB req;
  req.set_data("partial trace");
  for (int32_t missing = 0; missing < 4; missing++) {
    RequestHeader header;
    header.set_call_id(missing + 1);
    header.mutable_remote_method()->set_service_name("rrpc.rtest.EchoService");
    header.mutable_remote_method()->set_method_name("Echo");
    if (missing != 0) header.set_trace_id_high(0x0102030405060708ULL);
    if (missing != 1) header.set_trace_id_low(0x090a0b0c0d0e0f10ULL);
    if (missing != 2) header.set_parent_span_id(0x1112131415161718ULL);
    if (missing != 3) header.set_trace_flags(1);
    ASSERT_TRUE(conn.Write(FrameBytes(header, req)).ok());
    ResponseHeader resp_header;
    std::string body;
    ASSERT_TRUE(conn.ReadParsedFrame(&resp_header, &body).ok());
    EXPECT_EQ(missing + 1, resp_header.call_id());
    EXPECT_FALSE(resp_header.is_error());
    EXPECT_FALSE(seen.Trace().valid()) << "field " << missing << " missing";
    EXPECT_EQ(0u, seen.Parent()) << "field " << missing << " missing";
  }
}

// ---- Peers without TRACE_CONTEXT, each way.

bool HasFeature(const NegotiatePB& pb, RpcFeatureFlag f) {
  for (int x : pb.supported_features()) {
    if (x == f) return true;
  }
  return false;
}

TEST_F(TraceTest, ServerAcceptsTraceContextWhenOffered) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Write(BuildClientHello("new", "", false, true).slice.ToString()).ok());
  std::string frame;
  ASSERT_TRUE(conn.ReadFrame(&frame).ok());
  NegotiatePB reply;
  ASSERT_TRUE(ParseServerReply(Slice(frame), &reply).ok());
  EXPECT_TRUE(HasFeature(reply, TRACE_CONTEXT));
}

TEST_F(TraceTest, ClientWithoutTraceContextIsServed) {
  // An older client's hello: preamble, then a negotiation that offers only SIDECARS.
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.SendPreamble().ok());
  RequestHeader hello_header;
  hello_header.set_call_id(kNegotiateCallId);
  NegotiatePB hello;
  hello.set_step(NegotiatePB::NEGOTIATE);
  hello.add_supported_features(SIDECARS);
  ASSERT_TRUE(conn.Write(FrameBytes(hello_header, hello)).ok());
  std::string frame;
  ASSERT_TRUE(conn.ReadFrame(&frame).ok());
  NegotiatePB reply;
  ASSERT_TRUE(ParseServerReply(Slice(frame), &reply).ok());
  EXPECT_FALSE(HasFeature(reply, TRACE_CONTEXT));
  rtest::EchoRequestPB req;
  req.set_data("old client");
  ASSERT_TRUE(conn.Write(CallFrame(1, "rrpc.rtest.EchoService", "Echo", req)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(1, header.call_id());
  EXPECT_FALSE(header.is_error());
  rtest::EchoResponsePB resp;
  ASSERT_TRUE(resp.ParseFromString(body));
  EXPECT_EQ("old client", resp.data());
}

// RequestHeader as a server older than the trace fields knows it: the same message without
// fields 10-19 (its parser skips them as unknown fields).
class OldRequestHeader {
 public:
  OldRequestHeader() {
    google::protobuf::FileDescriptorProto file;
    RequestHeader::descriptor()->file()->CopyTo(&file);
    file.set_name("old_rpc_header.proto");
    for (auto& message : *file.mutable_message_type()) {
      if (message.name() != "RequestHeader") continue;
      auto* fields = message.mutable_field();
      for (int i = fields->size() - 1; i >= 0; i--) {
        if (fields->Get(i).number() >= 10 && fields->Get(i).number() < 20) {
          fields->DeleteSubrange(i, 1);
        }
      }
    }
    file_ = pool_.BuildFile(file);
    prototype_ = file_ == nullptr
                     ? nullptr
                     : factory_.GetPrototype(file_->FindMessageTypeByName("RequestHeader"));
  }
  // A new message of the old type; nullptr if the schema did not build.
  std::unique_ptr<google::protobuf::Message> New() const {
    return std::unique_ptr<google::protobuf::Message>(prototype_ ? prototype_->New() : nullptr);
  }

 private:
  google::protobuf::DescriptorPool pool_;
  const google::protobuf::FileDescriptor* file_ = nullptr;
  google::protobuf::DynamicMessageFactory factory_;
  const google::protobuf::Message* prototype_ = nullptr;
};

TEST_F(TraceTest, ServerWithoutTraceContextServesATracedCall) {
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  OldRequestHeader old_schema;
  ASSERT_NE(nullptr, old_schema.New());
  Status server_status;
  std::string old_parsed_method;
  bool old_has_unknown_fields = false;
  std::thread server([&] {
    Result<Socket> sock = listener.Accept();
    if (!sock.ok()) {
      server_status = sock.status();
      return;
    }
    RawConnection conn(std::move(sock).value());
    // Negotiate as a server older than TRACE_CONTEXT: the client's offer is left out.
    std::string frame;
    NegotiatePB request;
    server_status = conn.ReadBytes(kPreambleSize, &frame);
    if (server_status.ok()) server_status = conn.ReadFrame(&frame);
    if (server_status.ok()) server_status = ParseClientNegotiation(Slice(frame), &request);
    if (!server_status.ok()) return;
    NegotiatePB old;
    old.set_step(request.step());
    for (int f : request.supported_features()) {
      if (f == SIDECARS) old.add_supported_features(SIDECARS);
    }
    server_status = conn.Write(BuildServerReply(old, Status::OK(), {}).slice.ToString());
    // The call, its header read with the old schema, as an old server's generated parser would.
    if (server_status.ok()) server_status = conn.ReadFrame(&frame);
    if (!server_status.ok()) return;
    Slice content(frame);
    uint32_t header_len = 0;
    const uint8_t* p = content.data();
    for (int shift = 0; shift < 35; shift += 7) {  // the header's varint length
      header_len |= static_cast<uint32_t>(*p & 0x7f) << shift;
      if ((*p++ & 0x80) == 0) break;
    }
    std::unique_ptr<google::protobuf::Message> header = old_schema.New();
    if (!header->ParseFromArray(p, static_cast<int>(header_len))) {
      server_status = Status::Corruption("an old server cannot parse the traced header");
      return;
    }
    const auto* reflection = header->GetReflection();
    old_has_unknown_fields = !reflection->GetUnknownFields(*header).empty();
    const auto* desc = header->GetDescriptor();
    const auto& remote = reflection->GetMessage(*header, desc->FindFieldByName("remote_method"));
    old_parsed_method = remote.GetReflection()->GetString(
        remote, remote.GetDescriptor()->FindFieldByName("method_name"));
    ResponseHeader resp_header;
    resp_header.set_call_id(reflection->GetInt32(*header, desc->FindFieldByName("call_id")));
    rtest::EchoResponsePB resp;
    resp.set_data("from an old server");
    server_status = conn.Write(FrameBytes(resp_header, resp));
    conn.WaitForClose();
  });
  RpcController ctl;
  ctl.set_timeout(kLong);
  ctl.set_trace_context(TraceContext::NewRoot(true));
  rtest::EchoRequestPB req;
  req.set_data("traced");
  rtest::EchoResponsePB resp;
  const Status s = rtest::EchoServiceProxy(client_, listener.addr()).Echo(req, &resp, &ctl);
  client_->Shutdown();
  server.join();
  ASSERT_TRUE(server_status.ok()) << server_status.ToString();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ("from an old server", resp.data());
  EXPECT_EQ("Echo", old_parsed_method);
  EXPECT_TRUE(old_has_unknown_fields);  // the trace fields, skipped
}

}  // namespace
}  // namespace rrpc::rpc
