// The server holds peers to docs/wire-format.md: a call requiring a feature it lacks (one it has
// never heard of included) is answered ERROR_UNSUPPORTED_FEATURE; sidecar offsets must start at
// 0, not decrease and stay inside the frame; a malformed frame after negotiation gets a
// FATAL_INVALID_FRAME error frame (call id -2) before the connection closes. Other connections
// are not affected.
#include <gtest/gtest.h>

#include <string>

#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"

namespace rrpc::rpc {
namespace {

const char kEcho[] = "rrpc.rtest.EchoService";

class ProtocolStrictnessTest : public RpcTestBase {
 protected:
  void SetUp() override {
    StartServer();
    StartClient();
  }
  // A negotiated raw connection.
  std::unique_ptr<RawConnection> Connect() {
    auto conn = std::make_unique<RawConnection>(server_addr_);
    EXPECT_TRUE(conn->ok());
    EXPECT_TRUE(conn->Negotiate().ok());
    return conn;
  }
  static RequestHeader EchoHeader(int32_t call_id) {
    RequestHeader header;
    header.set_call_id(call_id);
    header.mutable_remote_method()->set_service_name(kEcho);
    header.mutable_remote_method()->set_method_name("Echo");
    return header;
  }
  // Sends `frame` and expects the documented end: a FATAL_INVALID_FRAME error frame on the
  // negotiation call id, then the close; and the server still serving others.
  void ExpectFatalInvalidFrame(const std::string& frame, const std::string& why) {
    auto conn = Connect();
    ASSERT_TRUE(conn->Write(frame).ok());
    ResponseHeader header;
    std::string body;
    Status s = conn->ReadParsedFrame(&header, &body);
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(kNegotiateCallId, header.call_id());
    ASSERT_TRUE(header.is_error());
    ErrorStatusPB error;
    ASSERT_TRUE(error.ParseFromString(body));
    EXPECT_EQ(ErrorStatusPB::FATAL_INVALID_FRAME, error.code());
    EXPECT_NE(std::string::npos, error.message().find(why)) << error.message();
    EXPECT_TRUE(conn->WaitForClose());
    rtest::EchoRequestPB req;
    req.set_data("others fine");
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(30));
    EXPECT_TRUE(Proxy().Echo(req, &resp, &ctl).ok());
  }
};

TEST_F(ProtocolStrictnessTest, CallRequiringAnUnsupportedFeatureIsRefused) {
  auto conn = Connect();
  rtest::EchoRequestPB req;
  req.set_data("x");
  RequestHeader header = EchoHeader(5);
  header.add_required_feature_flags(TLS);
  ASSERT_TRUE(conn->Write(FrameBytes(header, req)).ok());
  ResponseHeader resp_header;
  std::string body;
  ASSERT_TRUE(conn->ReadParsedFrame(&resp_header, &body).ok());
  EXPECT_EQ(5, resp_header.call_id());
  ASSERT_TRUE(resp_header.is_error());
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(body));
  EXPECT_EQ(ErrorStatusPB::ERROR_UNSUPPORTED_FEATURE, error.code());
  ASSERT_EQ(1, error.unsupported_feature_flags_size());
  EXPECT_EQ(TLS, error.unsupported_feature_flags(0));
  EXPECT_EQ(0, service_->calls());

  // A feature the server has is no obstacle; the connection is still open.
  RequestHeader ok_header = EchoHeader(6);
  ok_header.add_required_feature_flags(SIDECARS);
  ASSERT_TRUE(conn->Write(FrameBytes(ok_header, req)).ok());
  ASSERT_TRUE(conn->ReadParsedFrame(&resp_header, &body).ok());
  EXPECT_EQ(6, resp_header.call_id());
  EXPECT_FALSE(resp_header.is_error());
}

// The case the field exists for: a newer client requires a feature no rrpc version knows. The
// server must keep the number while parsing (not drop it as an unknown enum value) and refuse the
// call, naming the number, without running the handler.
TEST_F(ProtocolStrictnessTest, CallRequiringAFeatureNoVersionKnowsIsRefusedNamingIt) {
  auto conn = Connect();
  rtest::EchoRequestPB req;
  req.set_data("x");
  RequestHeader header = EchoHeader(7);
  header.add_required_feature_flags(SIDECARS);
  header.add_required_feature_flags(1000);
  ASSERT_TRUE(conn->Write(FrameBytes(header, req)).ok());
  ResponseHeader resp_header;
  std::string body;
  ASSERT_TRUE(conn->ReadParsedFrame(&resp_header, &body).ok());
  EXPECT_EQ(7, resp_header.call_id());
  ASSERT_TRUE(resp_header.is_error());
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(body));
  EXPECT_EQ(ErrorStatusPB::ERROR_UNSUPPORTED_FEATURE, error.code());
  ASSERT_EQ(1, error.unsupported_feature_flags_size());
  EXPECT_EQ(1000u, error.unsupported_feature_flags(0));
  EXPECT_NE(std::string::npos, error.message().find("1000")) << error.message();
  EXPECT_EQ(0, service_->calls());
}

TEST_F(ProtocolStrictnessTest, FirstSidecarOffsetMustBeZero) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  RequestHeader header = EchoHeader(1);
  header.add_sidecar_offsets(2);  // would drop the first two bytes
  ExpectFatalInvalidFrame(FrameBytes(header, req, "abcdef"), "first sidecar offset");
}

TEST_F(ProtocolStrictnessTest, DecreasingSidecarOffsetsAreMalformed) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  RequestHeader header = EchoHeader(1);
  header.add_sidecar_offsets(0);
  header.add_sidecar_offsets(4);
  header.add_sidecar_offsets(2);
  ExpectFatalInvalidFrame(FrameBytes(header, req, "abcdef"), "sidecar offsets");
}

TEST_F(ProtocolStrictnessTest, SidecarOffsetPastTheFrameIsMalformed) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  RequestHeader header = EchoHeader(1);
  header.add_sidecar_offsets(0);
  header.add_sidecar_offsets(100);
  ExpectFatalInvalidFrame(FrameBytes(header, req, "abcdef"), "sidecar offsets");
}

TEST_F(ProtocolStrictnessTest, BytesAfterTheBodyWithoutSidecarOffsetsAreMalformed) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  ExpectFatalInvalidFrame(FrameBytes(EchoHeader(1), req, "stray"), "no sidecar offsets");
}

TEST_F(ProtocolStrictnessTest, HeaderThatDoesNotParseGetsAFatalErrorFrame) {
  ExpectFatalInvalidFrame(RawFrame(std::string("\x05\xff\xff\xff\xff\xff\x00", 7)), "header");
}

// A control frame carries no remote method (docs/wire-format.md, section 3).
TEST_F(ProtocolStrictnessTest, ControlFrameNamingAMethodGetsAFatalErrorFrame) {
  rtest::EchoRequestPB req;
  req.set_data("x");
  ExpectFatalInvalidFrame(FrameBytes(EchoHeader(-3), req), "call id -3");
}

// A control frame of a kind this server does not know (a later version's) is ignored, so that a
// new kind can be added (docs/wire-format.md, section 3): the connection serves on.
TEST_F(ProtocolStrictnessTest, ControlFrameOfAnUnknownKindIsIgnored) {
  auto conn = Connect();
  RequestHeader control_header;
  control_header.set_call_id(kControlCallId);
  const std::string header_bytes = control_header.SerializeAsString();
  // ControlPB{kind: 9, call_ids: [1]}: no version defines kind 9.
  const std::string control_body("\x08\x09\x12\x01\x01", 5);
  const std::string frame = RawFrame(static_cast<char>(header_bytes.size()) + header_bytes +
                                     static_cast<char>(control_body.size()) + control_body);
  ASSERT_TRUE(conn->Write(frame).ok());
  rtest::EchoRequestPB req;
  req.set_data("after");
  ASSERT_TRUE(conn->Write(FrameBytes(EchoHeader(1), req)).ok());
  ResponseHeader header;
  std::string body;
  Status s = conn->ReadParsedFrame(&header, &body);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(1, header.call_id());
  EXPECT_FALSE(header.is_error()) << body;
}

}  // namespace
}  // namespace rrpc::rpc
