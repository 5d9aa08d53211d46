// Tests of the frame codec: what SerializeFrameHead writes, what ParseFrame and SplitSidecars
// accept and what they refuse as corrupt.
#include "rpc/core/wire_codec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rpc/core/constants.h"
#include "rpc/testing/rtest.pb.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {
namespace {

constexpr size_t kNoLimit = 1u << 31;

// A repeated-field stand-in with the interface SplitSidecars reads.
struct Offsets {
  std::vector<uint32_t> v;
  int size() const { return static_cast<int>(v.size()); }
  uint32_t operator[](int i) const { return v[i]; }
};

std::string Bytes(std::initializer_list<uint8_t> b) { return std::string(b.begin(), b.end()); }

// The frame content (after the length prefix) of a serialized head plus its sidecars.
std::string FrameContent(const BlockSlice& head, const std::string& sidecars) {
  return head.slice.ToString().substr(kFrameLengthSize) + sidecars;
}

RequestHeader SampleRequestHeader() {
  RequestHeader h;
  h.set_call_id(7);
  h.mutable_remote_method()->set_service_name("rrpc.rtest.EchoService");
  h.mutable_remote_method()->set_method_name("Echo");
  h.set_timeout_millis(1000);
  return h;
}

TEST(WireCodecTest, BigEndianLengthRoundTrips) {
  uint8_t buf[4];
  EncodeBigEndian32(buf, 0x01020304u);
  EXPECT_EQ(Bytes({1, 2, 3, 4}), std::string(reinterpret_cast<char*>(buf), 4));
  for (uint32_t v : {0u, 1u, 255u, 256u, 0x7fffffffu, 0xffffffffu}) {
    EncodeBigEndian32(buf, v);
    EXPECT_EQ(v, DecodeBigEndian32(buf));
  }
}

TEST(WireCodecTest, MatchesTheWorkedExampleOfTheWireFormatDoc) {
  rtest::EchoRequestPB body;
  body.set_data("hi");
  auto head = SerializeFrameHead(SampleRequestHeader(), body, 0, kNoLimit);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  const std::string expected =
      Bytes({0x00, 0x00, 0x00, 0x2b, 0x25, 0x08, 0x07, 0x12, 0x1e, 0x0a, 0x16}) +
      "rrpc.rtest.EchoService" + Bytes({0x12, 0x04}) + "Echo" +
      Bytes({0x18, 0xe8, 0x07, 0x04, 0x0a, 0x02}) + "hi";
  EXPECT_EQ(expected, head->slice.ToString());
}

TEST(WireCodecTest, RequestWithSidecarsRoundTrips) {
  RequestHeader header = SampleRequestHeader();
  const std::vector<std::string> sidecars = {"abc", "", std::string(1000, 'x'), "z"};
  std::string sidecar_bytes;
  for (const auto& s : sidecars) {
    header.add_sidecar_offsets(static_cast<uint32_t>(sidecar_bytes.size()));
    sidecar_bytes += s;
  }
  rtest::EchoRequestPB body;
  body.set_data(std::string(300, 'd'));
  body.set_sleep_ms(5);

  auto head = SerializeFrameHead(header, body, sidecar_bytes.size(), kNoLimit);
  ASSERT_TRUE(head.ok()) << head.status().ToString();
  // The head block is exactly sized and its prefix counts the sidecars that follow it.
  EXPECT_EQ(head->block->capacity(), head->slice.size());
  const std::string content = FrameContent(*head, sidecar_bytes);
  EXPECT_EQ(content.size(), DecodeBigEndian32(head->slice.data()));

  RequestHeader parsed_header;
  Slice parsed_body, tail;
  ASSERT_TRUE(ParseFrame(Slice(content), &parsed_header, &parsed_body, &tail).ok());
  EXPECT_EQ(header.SerializeAsString(), parsed_header.SerializeAsString());
  rtest::EchoRequestPB parsed;
  ASSERT_TRUE(parsed.ParseFromArray(parsed_body.data(), static_cast<int>(parsed_body.size())));
  EXPECT_EQ(body.data(), parsed.data());
  EXPECT_EQ(5u, parsed.sleep_ms());
  EXPECT_EQ(sidecar_bytes, tail.ToString());

  std::vector<Slice> split;
  ASSERT_TRUE(SplitSidecars(tail, parsed_header.sidecar_offsets(), &split).ok());
  ASSERT_EQ(sidecars.size(), split.size());
  for (size_t i = 0; i < sidecars.size(); i++) EXPECT_EQ(sidecars[i], split[i].ToString()) << i;
}

TEST(WireCodecTest, ErrorResponseRoundTrips) {
  ResponseHeader header;
  header.set_call_id(12345);
  header.set_is_error(true);
  ErrorStatusPB error;
  error.set_message("nope");
  error.set_code(ErrorStatusPB::ERROR_SERVER_TOO_BUSY);
  auto head = SerializeFrameHead(header, error, 0, kNoLimit);
  ASSERT_TRUE(head.ok());
  ResponseHeader parsed_header;
  Slice body, tail;
  const std::string content = FrameContent(*head, "");
  ASSERT_TRUE(ParseFrame(Slice(content), &parsed_header, &body, &tail).ok());
  EXPECT_EQ(12345, parsed_header.call_id());
  EXPECT_TRUE(parsed_header.is_error());
  EXPECT_TRUE(tail.empty());
  ErrorStatusPB parsed;
  ASSERT_TRUE(parsed.ParseFromArray(body.data(), static_cast<int>(body.size())));
  EXPECT_EQ("nope", parsed.message());
  EXPECT_EQ(ErrorStatusPB::ERROR_SERVER_TOO_BUSY, parsed.code());
}

TEST(WireCodecTest, EmptyBodyRoundTrips) {
  ResponseHeader header;
  header.set_call_id(1);
  rtest::EchoResponsePB empty;  // nothing set: zero bytes
  auto head = SerializeFrameHead(header, empty, 0, kNoLimit);
  ASSERT_TRUE(head.ok());
  ResponseHeader parsed_header;
  Slice body, tail;
  const std::string content = FrameContent(*head, "");
  ASSERT_TRUE(ParseFrame(Slice(content), &parsed_header, &body, &tail).ok());
  EXPECT_EQ(0u, body.size());
  EXPECT_EQ(0u, tail.size());
}

TEST(WireCodecTest, RefusesFramesAboveTheMaximumCountingSidecars) {
  RequestHeader header = SampleRequestHeader();
  rtest::EchoRequestPB body;
  body.set_data("payload");
  auto unlimited = SerializeFrameHead(header, body, 0, kNoLimit);
  ASSERT_TRUE(unlimited.ok());
  const size_t head_content = unlimited->slice.size() - kFrameLengthSize;
  constexpr size_t kSidecars = 100;
  // Exactly at the maximum: fine. One byte over: refused, with both sizes in the message.
  EXPECT_TRUE(SerializeFrameHead(header, body, kSidecars, head_content + kSidecars).ok());
  auto over = SerializeFrameHead(header, body, kSidecars, head_content + kSidecars - 1);
  ASSERT_FALSE(over.ok());
  EXPECT_TRUE(over.status().IsInvalidArgument()) << over.status().ToString();
  EXPECT_NE(std::string::npos, over.status().message().find("exceeds"));
  EXPECT_NE(std::string::npos,
            over.status().message().find(std::to_string(head_content + kSidecars)));
}

// ---- SplitSidecars.

// A head written before a body that goes separately, then the body's bytes: the same frame as
// the head with the body copied in, for both header kinds.
TEST(WireCodecTest, HeadBeforeTheBodyAndTheBodyMakeTheSameFrame) {
  const std::string body(3000, 'b');
  const std::string sidecar = "side";
  RequestHeaderFields request;
  request.call_id = 9;
  request.stream_flags = STREAM_MESSAGE;
  request.sidecar_offsets.push_back(0);
  std::string no_method;
  RequestHeaderOptionalParts optional;
  const RequestHeaderParts parts = PartsOf(request, &no_method, &optional);
  Result<BlockSlice> whole = SerializeFrameHead(parts, Slice(body), sidecar.size(), 1 << 20);
  Result<BlockSlice> head =
      SerializeFrameHeadBeforeBody(parts, body.size(), sidecar.size(), 1 << 20);
  ASSERT_TRUE(whole.ok() && head.ok());
  EXPECT_EQ(whole->slice.ToString(), head->slice.ToString() + body);
  ResponseHeaderFields response;
  response.call_id = 9;
  response.stream_flags = STREAM_MESSAGE;
  Result<BlockSlice> whole_response = SerializeFrameHead(response, Slice(body), 0, 1 << 20);
  Result<BlockSlice> head_response =
      SerializeFrameHeadBeforeBody(response, body.size(), 0, 1 << 20);
  ASSERT_TRUE(whole_response.ok() && head_response.ok());
  EXPECT_EQ(whole_response->slice.ToString(), head_response->slice.ToString() + body);
  // The limit counts the body that is not in the head.
  EXPECT_TRUE(
      SerializeFrameHeadBeforeBody(parts, body.size(), 0, 2000).status().IsInvalidArgument());
}

TEST(WireCodecTest, SplitSidecarsWithNoOffsetsYieldsNone) {
  std::vector<Slice> out;
  ASSERT_TRUE(SplitSidecars(Slice(""), Offsets{}, &out).ok());
  EXPECT_TRUE(out.empty());
}

TEST(WireCodecTest, SplitSidecarsRefusesBytesAfterTheBodyWithoutOffsets) {
  // They would be dropped silently: every byte of a frame belongs to one part.
  std::vector<Slice> out;
  Status s = SplitSidecars(Slice("abc"), Offsets{}, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST(WireCodecTest, SplitSidecarsRefusesAFirstOffsetOtherThanZero) {
  // It would drop the bytes before it silently.
  std::vector<Slice> out;
  Status s = SplitSidecars(Slice("abcdef"), Offsets{{2, 4}}, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST(WireCodecTest, SplitSidecarsLastRunsToTheEndOfTheTail) {
  std::vector<Slice> out;
  ASSERT_TRUE(SplitSidecars(Slice("abcdef"), Offsets{{0, 2}}, &out).ok());
  ASSERT_EQ(2u, out.size());
  EXPECT_EQ("ab", out[0].ToString());
  EXPECT_EQ("cdef", out[1].ToString());
}

TEST(WireCodecTest, SplitSidecarsAcceptsEmptySidecarsAnywhere) {
  std::vector<Slice> out;
  // Empty first, empty middle (equal offsets) and empty last (offset == tail size).
  ASSERT_TRUE(SplitSidecars(Slice("abcd"), Offsets{{0, 0, 2, 2, 4}}, &out).ok());
  ASSERT_EQ(5u, out.size());
  EXPECT_EQ("", out[0].ToString());
  EXPECT_EQ("ab", out[1].ToString());
  EXPECT_EQ("", out[2].ToString());
  EXPECT_EQ("cd", out[3].ToString());
  EXPECT_EQ("", out[4].ToString());
  out.clear();
  ASSERT_TRUE(SplitSidecars(Slice(""), Offsets{{0}}, &out).ok());
  ASSERT_EQ(1u, out.size());
  EXPECT_TRUE(out[0].empty());
}

TEST(WireCodecTest, SplitSidecarsRefusesDecreasingOffsets) {
  std::vector<Slice> out;
  Status s = SplitSidecars(Slice("abcdef"), Offsets{{0, 4, 2}}, &out);
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
}

TEST(WireCodecTest, SplitSidecarsRefusesOffsetsPastTheTail) {
  std::vector<Slice> out;
  EXPECT_TRUE(SplitSidecars(Slice("abc"), Offsets{{4}}, &out).IsCorruption());
  EXPECT_TRUE(SplitSidecars(Slice("abc"), Offsets{{0, 4}}, &out).IsCorruption());
  EXPECT_TRUE(SplitSidecars(Slice("abc"), Offsets{{0, 0xffffffffu}}, &out).IsCorruption());
  EXPECT_TRUE(SplitSidecars(Slice(""), Offsets{{1}}, &out).IsCorruption());
}

// ---- ParseFrame on malformed input.

Status Parse(const std::string& content) {
  RequestHeader header;
  Slice body, tail;
  return ParseFrame(Slice(content), &header, &body, &tail);
}

// A valid serialized RequestHeader.
std::string HeaderBytes() { return SampleRequestHeader().SerializeAsString(); }
std::string Varint(uint32_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}

TEST(WireCodecTest, ParseFrameAcceptsAHandBuiltFrame) {
  const std::string h = HeaderBytes();
  EXPECT_TRUE(Parse(Varint(h.size()) + h + Varint(2) + "xy").ok());
}

TEST(WireCodecTest, ParseFrameRefusesAnEmptyFrame) { EXPECT_TRUE(Parse("").IsCorruption()); }

TEST(WireCodecTest, ParseFrameRefusesBadHeaderVarints) {
  // Every byte has the continuation bit: never terminates within a varint's 10 bytes.
  EXPECT_TRUE(Parse(std::string(12, '\xff')).IsCorruption());
  // Truncated: continuation bit set on the last byte of the frame.
  EXPECT_TRUE(Parse(Bytes({0x80})).IsCorruption());
  EXPECT_TRUE(Parse(Bytes({0xff, 0xff})).IsCorruption());
}

TEST(WireCodecTest, ParseFrameRefusesAHeaderLengthPastTheEnd) {
  const std::string h = HeaderBytes();
  EXPECT_TRUE(Parse(Varint(h.size() + 1) + h).IsCorruption());
  EXPECT_TRUE(Parse(Varint(0xffffffffu) + h).IsCorruption());
}

TEST(WireCodecTest, ParseFrameRefusesABodyLengthPastTheEnd) {
  const std::string h = HeaderBytes();
  const std::string prefix = Varint(h.size()) + h;
  EXPECT_TRUE(Parse(prefix + Varint(3) + "xy").IsCorruption());
  EXPECT_TRUE(Parse(prefix + Varint(0xffffffffu)).IsCorruption());
  // The body length itself is missing or malformed.
  EXPECT_TRUE(Parse(prefix).IsCorruption());
  EXPECT_TRUE(Parse(prefix + std::string(11, '\xff')).IsCorruption());
}

TEST(WireCodecTest, ParseFrameRefusesAHeaderThatDoesNotParse) {
  // Garbage bytes: field 0 with an invalid wire type.
  const std::string garbage = Bytes({0x07, 0xff, 0xff});
  EXPECT_TRUE(Parse(Varint(garbage.size()) + garbage + Varint(0)).IsCorruption());
  // Well-formed protobuf, but the required call_id is missing; the error names it.
  RequestHeader no_call_id;
  no_call_id.mutable_remote_method()->set_service_name("s");
  no_call_id.mutable_remote_method()->set_method_name("m");
  const std::string h = no_call_id.SerializePartialAsString();
  Status s = Parse(Varint(h.size()) + h + Varint(0));
  EXPECT_TRUE(s.IsCorruption()) << s.ToString();
  EXPECT_NE(std::string::npos, s.ToString().find("call_id")) << s.ToString();
}

}  // namespace
}  // namespace rrpc::rpc
