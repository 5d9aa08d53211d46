// Tests of the hand-written header codec: its bytes are protobuf's, byte for byte, and it decodes
// every header exactly as the generated parser does (the same accepted, the same fields, the same
// refused), whether the fast path or the fallback takes it.
#include "rpc/core/header_codec.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {
namespace {

std::string Encode(const RequestHeaderFields& h) {
  std::string out(EncodedSize(h), '\0');
  uint8_t* begin = reinterpret_cast<uint8_t*>(out.data());
  EXPECT_EQ(begin + out.size(), EncodeTo(h, begin));
  return out;
}

std::string Encode(const ResponseHeaderFields& h) {
  std::string out(EncodedSize(h), '\0');
  uint8_t* begin = reinterpret_cast<uint8_t*>(out.data());
  EXPECT_EQ(begin + out.size(), EncodeTo(h, begin));
  return out;
}

RequestHeader ToProto(const RequestHeaderFields& h) {
  RequestHeader pb;
  pb.set_call_id(h.call_id);
  if (h.has_remote_method) {
    pb.mutable_remote_method()->set_service_name(h.service_name.ToString());
    pb.mutable_remote_method()->set_method_name(h.method_name.ToString());
  }
  if (h.has_timeout_millis) pb.set_timeout_millis(h.timeout_millis);
  for (uint32_t o : h.sidecar_offsets) pb.add_sidecar_offsets(o);
  for (uint32_t f : h.required_feature_flags) pb.add_required_feature_flags(f);
  if (h.has_request_id) {
    RequestIdPB* id = pb.mutable_request_id();
    id->set_client_id(h.request_id.client_id.ToString());
    id->set_seq_no(h.request_id.seq_no);
    id->set_first_incomplete_seq_no(h.request_id.first_incomplete_seq_no);
    id->set_attempt_no(h.request_id.attempt_no);
  }
  if (h.has_trace) {
    pb.set_trace_id_high(h.trace.trace_id_high);
    pb.set_trace_id_low(h.trace.trace_id_low);
    pb.set_parent_span_id(h.trace.parent_span_id);
    pb.set_trace_flags(h.trace.trace_flags);
  }
  if (h.has_compression) {
    pb.set_compression(h.compression.codec);
    pb.set_uncompressed_size(h.compression.uncompressed_size);
  }
  return pb;
}

// Whether protobuf parses `bytes` as a RequestHeader, and DecodeHeader agrees on every field.
void ExpectSameAsProtobuf(const std::string& bytes) {
  RequestHeader pb;
  const bool pb_ok = pb.ParsePartialFromString(bytes) && pb.IsInitialized();
  RequestHeaderFields fields;
  ASSERT_EQ(pb_ok, DecodeHeader(Slice(bytes), &fields));
  if (pb_ok) {
    // Field by field: protobuf keeps unknown fields, which the call path has no use for.
    EXPECT_EQ(pb.call_id(), fields.call_id);
    EXPECT_EQ(pb.has_remote_method(), fields.has_remote_method);
    EXPECT_EQ(pb.remote_method().service_name(), fields.service_name.ToString());
    EXPECT_EQ(pb.remote_method().method_name(), fields.method_name.ToString());
    EXPECT_EQ(pb.has_timeout_millis(), fields.has_timeout_millis);
    EXPECT_EQ(pb.timeout_millis(), fields.timeout_millis);
    EXPECT_EQ(std::vector<uint32_t>(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end()),
              fields.sidecar_offsets);
    EXPECT_EQ(std::vector<uint32_t>(pb.required_feature_flags().begin(),
                                    pb.required_feature_flags().end()),
              fields.required_feature_flags);
    EXPECT_EQ(pb.has_request_id(), fields.has_request_id);
    if (pb.has_request_id()) {
      EXPECT_EQ(pb.request_id().client_id(), fields.request_id.client_id.ToString());
      EXPECT_EQ(pb.request_id().seq_no(), fields.request_id.seq_no);
      EXPECT_EQ(pb.request_id().first_incomplete_seq_no(),
                fields.request_id.first_incomplete_seq_no);
      EXPECT_EQ(pb.request_id().attempt_no(), fields.request_id.attempt_no);
    }
    // A partial trace context is none.
    EXPECT_EQ(pb.has_trace_id_high() && pb.has_trace_id_low() && pb.has_parent_span_id() &&
                  pb.has_trace_flags(),
              fields.has_trace);
    if (fields.has_trace) {
      EXPECT_EQ(pb.trace_id_high(), fields.trace.trace_id_high);
      EXPECT_EQ(pb.trace_id_low(), fields.trace.trace_id_low);
      EXPECT_EQ(pb.parent_span_id(), fields.trace.parent_span_id);
      EXPECT_EQ(pb.trace_flags(), fields.trace.trace_flags);
    }
    // Compression: both fields or none.
    EXPECT_EQ(pb.has_compression() && pb.has_uncompressed_size(), fields.has_compression);
    if (fields.has_compression) {
      EXPECT_EQ(pb.compression(), fields.compression.codec);
      EXPECT_EQ(pb.uncompressed_size(), fields.compression.uncompressed_size);
    }
  }

  ResponseHeader rpb;
  const bool rpb_ok = rpb.ParsePartialFromString(bytes) && rpb.IsInitialized();
  ResponseHeaderFields rfields;
  ASSERT_EQ(rpb_ok, DecodeHeader(Slice(bytes), &rfields));
  if (rpb_ok) {
    EXPECT_EQ(rpb.call_id(), rfields.call_id);
    EXPECT_EQ(rpb.is_error(), rfields.is_error);
    EXPECT_EQ(std::vector<uint32_t>(rpb.sidecar_offsets().begin(), rpb.sidecar_offsets().end()),
              rfields.sidecar_offsets);
    EXPECT_EQ(rpb.has_compression() && rpb.has_uncompressed_size(), rfields.has_compression);
    if (rfields.has_compression) {
      EXPECT_EQ(rpb.compression(), rfields.compression.codec);
      EXPECT_EQ(rpb.uncompressed_size(), rfields.compression.uncompressed_size);
    }
  }
}

std::vector<RequestHeaderFields> SampleRequests() {
  static const std::string kLongName(300, 's');
  std::vector<RequestHeaderFields> out;
  RequestHeaderFields h;
  h.call_id = 7;
  h.has_remote_method = true;
  h.service_name = Slice("rrpc.rtest.EchoService");
  h.method_name = Slice("Echo");
  h.has_timeout_millis = true;
  h.timeout_millis = 1000;
  out.push_back(h);
  h.sidecar_offsets = {0, 65536, 1u << 22};
  out.push_back(h);
  h.call_id = -3;  // ten bytes on the wire
  h.timeout_millis = UINT32_MAX;
  h.service_name = Slice(kLongName);  // a two-byte length
  h.method_name = Slice("");
  out.push_back(h);
  h.call_id = INT32_MAX;
  h.has_remote_method = false;
  h.has_timeout_millis = false;
  h.sidecar_offsets.clear();
  h.required_feature_flags = {SIDECARS, TRANSPORT_UPGRADE};
  out.push_back(h);
  // Numbers RpcFeatureFlag does not list: a newer peer's features, up to the largest uint32.
  h.required_feature_flags = {1000, UINT32_MAX};
  out.push_back(h);
  // Tracked calls (exactly-once): a request id, small and at its largest.
  static const std::string kClientId(16, '\xc7');
  h.required_feature_flags.clear();
  h.has_remote_method = true;
  h.service_name = Slice("rrpc.kv.KvService");
  h.method_name = Slice("Increment");
  h.has_request_id = true;
  h.request_id.client_id = Slice(kClientId);
  h.request_id.seq_no = 5;
  h.request_id.first_incomplete_seq_no = 3;
  h.request_id.attempt_no = 2;
  out.push_back(h);
  h.request_id.seq_no = UINT64_MAX;
  h.request_id.first_incomplete_seq_no = UINT64_MAX;
  h.request_id.attempt_no = UINT32_MAX;
  out.push_back(h);
  // Trace context: with a request id, then alone; flags of one byte and of five.
  h.has_trace = true;
  h.trace.trace_id_high = 0x4bf92f3577b34da6ULL;
  h.trace.trace_id_low = 0xa3ce929d0e0e4736ULL;
  h.trace.parent_span_id = 0x00f067aa0ba902b7ULL;
  h.trace.trace_flags = 1;
  out.push_back(h);
  h.has_request_id = false;
  out.push_back(h);
  h.trace.trace_id_high = UINT64_MAX;
  h.trace.parent_span_id = 0;
  h.trace.trace_flags = UINT32_MAX;
  out.push_back(h);
  // Compression: with a trace context and feature flags, then alone; small and largest values.
  h.required_feature_flags = {COMPRESSION};
  h.has_compression = true;
  h.compression.codec = 2;
  h.compression.uncompressed_size = 65536;
  out.push_back(h);
  h.has_trace = false;
  out.push_back(h);
  h.required_feature_flags.clear();
  h.compression.codec = UINT32_MAX;
  h.compression.uncompressed_size = UINT32_MAX;
  out.push_back(h);
  h.has_request_id = true;  // with a request id (the generated parser's)
  out.push_back(h);
  return out;
}

TEST(HeaderCodecTest, RequestBytesAreProtobufs) {
  for (const RequestHeaderFields& h : SampleRequests()) {
    EXPECT_EQ(ToProto(h).SerializeAsString(), Encode(h));
  }
}

// The remote method, encoded once and copied into each call's header, at every length around the
// copy's block sizes (the names of 0 to 80 bytes).
TEST(HeaderCodecTest, PreEncodedRemoteMethodBytesAreProtobufs) {
  for (size_t service_len = 0; service_len <= 80; service_len++) {
    RequestHeaderFields h;
    h.call_id = 1000;
    h.has_remote_method = true;
    const std::string service(service_len, 's');
    h.service_name = Slice(service);
    h.method_name = Slice("Echo");
    h.has_timeout_millis = true;
    h.timeout_millis = 60000;
    const std::string remote_method = EncodeRemoteMethod(h.service_name, h.method_name);
    RequestHeaderParts parts;
    parts.call_id = h.call_id;
    parts.remote_method = Slice(remote_method);
    parts.has_timeout_millis = true;
    parts.timeout_millis = h.timeout_millis;
    std::string out(EncodedSize(parts), '\0');
    uint8_t* begin = reinterpret_cast<uint8_t*>(out.data());
    ASSERT_EQ(begin + out.size(), EncodeTo(parts, begin));
    EXPECT_EQ(ToProto(h).SerializeAsString(), out) << service_len;
  }
}

TEST(HeaderCodecTest, ResponseBytesAreProtobufs) {
  for (int32_t id : {0, 1, 300, INT32_MAX, -1, INT32_MIN}) {
    for (bool is_error : {false, true}) {
      ResponseHeaderFields h;
      h.call_id = id;
      h.is_error = is_error;
      h.sidecar_offsets = {0, 127, 128, 1u << 30};
      ResponseHeader pb;
      pb.set_call_id(id);
      if (is_error) pb.set_is_error(true);
      for (uint32_t o : h.sidecar_offsets) pb.add_sidecar_offsets(o);
      EXPECT_EQ(pb.SerializeAsString(), Encode(h));
      h.has_compression = true;
      h.compression.codec = 1;
      h.compression.uncompressed_size = 1u << 20;
      pb.set_compression(1);
      pb.set_uncompressed_size(1u << 20);
      EXPECT_EQ(pb.SerializeAsString(), Encode(h));
    }
  }
}

TEST(HeaderCodecTest, TheFastPathTakesWhatTheCallPathWrites) {
  const RequestHeaderFields h = SampleRequests()[1];
  const std::string bytes = Encode(h);
  RequestHeaderFields decoded;
  const uint64_t slow_before = HeadersDecodedByProtobuf();
  ASSERT_TRUE(DecodeHeader(Slice(bytes), &decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_EQ(7, decoded.call_id);
  EXPECT_EQ("rrpc.rtest.EchoService", decoded.service_name.ToString());
  EXPECT_EQ("Echo", decoded.method_name.ToString());
  // The names point into the bytes: nothing copied.
  EXPECT_GE(decoded.service_name.data(), reinterpret_cast<const uint8_t*>(bytes.data()));
  EXPECT_LT(decoded.service_name.data(),
            reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size());
  EXPECT_EQ(1000u, decoded.timeout_millis);
  EXPECT_EQ(h.sidecar_offsets, decoded.sidecar_offsets);

  ResponseHeaderFields r;
  r.call_id = 9;
  r.is_error = true;
  r.sidecar_offsets = {0, 10};
  ResponseHeaderFields r_decoded;
  ASSERT_TRUE(DecodeHeader(Slice(Encode(r)), &r_decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_EQ(9, r_decoded.call_id);
  EXPECT_TRUE(r_decoded.is_error);
  EXPECT_EQ(r.sidecar_offsets, r_decoded.sidecar_offsets);
}

TEST(HeaderCodecTest, OtherLayoutsDecodeThroughProtobufWithTheSameMeaning) {
  const std::string remote = std::string("\x0a\x01S\x12\x01M", 6);
  const std::vector<std::string> cases = {
      // timeout before call id; remote method last
      std::string("\x18\x05\x08\x01\x12\x06", 6) + remote,
      // packed sidecar offsets (length 2: 0, 5)
      std::string("\x08\x01\x22\x02\x00\x05", 6),
      // the remote method twice: protobuf merges the two
      std::string("\x08\x01\x12\x06", 4) + remote + std::string("\x12\x03\x12\x01X", 5),
      // an unknown field (number 9, varint)
      std::string("\x08\x01\x48\x07", 4),
      // call id twice: the last wins
      std::string("\x08\x01\x08\x02", 4),
      // a call id in a non-minimal long varint
      std::string("\x08\x81\x80\x80\x80\x80\x80\x00", 8),
      // is_error as a multi-byte bool (a response header)
      std::string("\x08\x01\x10\x80\x01", 5),
      // required features, packed (length 2: 1, 99)
      std::string("\x08\x01\x2a\x02\x01\x63", 6),
      // the compression fields in the other order
      std::string("\x08\x01\xc8\x02\x64\xc0\x02\x01", 8),
  };
  for (const std::string& bytes : cases) {
    SCOPED_TRACE(testing::PrintToString(bytes));
    ExpectSameAsProtobuf(bytes);
    RequestHeaderFields fields;
    const uint64_t slow_before = HeadersDecodedByProtobuf();
    EXPECT_TRUE(DecodeHeader(Slice(bytes), &fields));
    EXPECT_EQ(slow_before + 1, HeadersDecodedByProtobuf()) << "took the fast path";
  }
  RequestHeaderFields merged;
  ASSERT_TRUE(DecodeHeader(Slice(cases[2]), &merged));
  EXPECT_EQ("X", merged.method_name.ToString());
  EXPECT_EQ("S", merged.service_name.ToString());
}

TEST(HeaderCodecTest, RefusesWhatProtobufRefuses) {
  const std::vector<std::string> cases = {
      std::string(),                                // no call id (required)
      std::string("\x08", 1),                       // truncated varint
      std::string("\x08\x01\x12\x03\x0a\x01S", 7),  // remote method without method name
      std::string("\x08\x01\x12\x09\x0a\x01S", 7),  // remote method longer than the header
      std::string("\x08\x01\x18", 3),               // timeout tag without a value
      std::string("\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12),  // 11-byte varint
      std::string("\x08\x01\x51\x01\x02\x03", 6),                           // trace id cut short
      std::string("\x08\x01\x51\x01\x02\x03\x04\x05\x06\x07\x08\x59", 12),  // no low half
  };
  for (const std::string& bytes : cases) {
    SCOPED_TRACE(testing::PrintToString(bytes));
    ExpectSameAsProtobuf(bytes);
    RequestHeaderFields fields;
    EXPECT_FALSE(DecodeHeader(Slice(bytes), &fields));
  }
}

TEST(HeaderCodecTest, AgreesWithProtobufOnMutatedHeaders) {
  // Deterministic: the same mutations every run (the fuzz target explores further).
  std::mt19937 rng(15);
  std::vector<std::string> seeds;
  for (const RequestHeaderFields& h : SampleRequests()) seeds.push_back(Encode(h));
  for (int i = 0; i < 20000; i++) {
    std::string bytes = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !bytes.empty(); e++) {
      const size_t at = rng() % bytes.size();
      switch (rng() % 3) {
        case 0:
          bytes[at] = static_cast<char>(rng());
          break;
        case 1:
          bytes.erase(at, 1 + rng() % 3);
          break;
        default:
          bytes.insert(at, 1, static_cast<char>(rng()));
      }
    }
    SCOPED_TRACE(testing::PrintToString(bytes));
    ExpectSameAsProtobuf(bytes);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace rrpc::rpc

namespace rrpc::rpc {
namespace {

// docs/wire-format.md, section 5: the bytes a request id adds to a header.
// A traced call, as the client writes it, decodes without the generated parser; without a trace
// context the fields are absent.
TEST(HeaderCodecTest, TheFastPathTakesTraceFields) {
  const std::vector<RequestHeaderFields> samples = SampleRequests();
  const RequestHeaderFields& h = samples[8];  // traced, no request id
  ASSERT_TRUE(h.has_trace);
  ASSERT_FALSE(h.has_request_id);
  const std::string bytes = Encode(h);
  RequestHeaderFields decoded;
  const uint64_t slow_before = HeadersDecodedByProtobuf();
  ASSERT_TRUE(DecodeHeader(Slice(bytes), &decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_TRUE(decoded.has_trace);
  EXPECT_EQ(0x4bf92f3577b34da6ULL, decoded.trace.trace_id_high);
  EXPECT_EQ(0xa3ce929d0e0e4736ULL, decoded.trace.trace_id_low);
  EXPECT_EQ(0x00f067aa0ba902b7ULL, decoded.trace.parent_span_id);
  EXPECT_EQ(1u, decoded.trace.trace_flags);
  // A header without them leaves none behind from the last decode.
  const std::string plain = Encode(samples[0]);
  ASSERT_TRUE(DecodeHeader(Slice(plain), &decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_FALSE(decoded.has_trace);
}

bool HasOptionalFields(const RequestHeaderFields& h) {
  return h.has_request_id || h.has_trace || h.stream_flags != 0 || h.stream_credit != 0 ||
         h.stream_compression != 0 || h.has_compression || h.priority != 0;
}

TEST(HeaderCodecTest, ADecodedHeaderWithoutOptionalFieldsSaysSo) {
  int plain = 0;
  int with_optional = 0;
  for (const RequestHeaderFields& h : SampleRequests()) {
    RequestHeaderFields decoded;
    ASSERT_TRUE(DecodeHeader(Slice(Encode(h)), &decoded));
    if (HasOptionalFields(h)) {
      with_optional++;
      EXPECT_TRUE(decoded.may_have_optional) << "call " << h.call_id;
    } else if (h.call_id >= 0) {  // a negative one takes the generated parser, which says "may"
      plain++;
      EXPECT_FALSE(decoded.may_have_optional) << "call " << h.call_id;
    }
    // Whatever it says, a header that says none has none.
    EXPECT_TRUE(decoded.may_have_optional || !HasOptionalFields(decoded)) << "call " << h.call_id;
  }
  EXPECT_GT(plain, 0);
  EXPECT_GT(with_optional, 0);
}

// The trace fields' bytes as docs/wire-format.md lists them.
TEST(HeaderCodecTest, TraceBytesAreTheDocumentedOnes) {
  RequestHeaderFields h;
  h.call_id = 1;
  h.has_trace = true;
  h.trace.trace_id_high = 0x0102030405060708ULL;
  h.trace.trace_id_low = 0x090a0b0c0d0e0f10ULL;
  h.trace.parent_span_id = 0x1112131415161718ULL;
  h.trace.trace_flags = 1;
  const std::string expected(
      "\x08\x01"
      "\x51\x08\x07\x06\x05\x04\x03\x02\x01"
      "\x59\x10\x0f\x0e\x0d\x0c\x0b\x0a\x09"
      "\x61\x18\x17\x16\x15\x14\x13\x12\x11"
      "\x68\x01",
      2 + 27 + 2);
  EXPECT_EQ(expected, Encode(h));
}

// docs/wire-format.md, section 5: a trace context lacking any of its four fields is ignored, so
// the decoded header has none, whichever fields it has.
TEST(HeaderCodecTest, TraceContextMissingAFieldDecodesAsNone) {
  for (int present = 0; present < 15; present++) {  // every subset but all four
    RequestHeader pb;
    pb.set_call_id(1);
    pb.mutable_remote_method()->set_service_name("s");
    pb.mutable_remote_method()->set_method_name("m");
    if (present & 1) pb.set_trace_id_high(1);
    if (present & 2) pb.set_trace_id_low(2);
    if (present & 4) pb.set_parent_span_id(3);
    if (present & 8) pb.set_trace_flags(1);
    RequestHeaderFields decoded;
    ASSERT_TRUE(DecodeHeader(Slice(pb.SerializeAsString()), &decoded)) << present;
    EXPECT_FALSE(decoded.has_trace) << present;
  }
}

TEST(HeaderCodecTest, RequestIdBytesAreTheDocumentedOnes) {
  std::string client_id;
  for (int i = 0; i < 16; i++) client_id.push_back(static_cast<char>(0xc0 + i));
  RequestHeaderFields h;
  h.call_id = 1;
  h.has_request_id = true;
  h.request_id.client_id = Slice(client_id);
  h.request_id.seq_no = 5;
  h.request_id.first_incomplete_seq_no = 3;
  h.request_id.attempt_no = 2;
  const std::string bytes = Encode(h);
  EXPECT_EQ(27u, EncodedRequestIdSize(h.request_id));
  const std::string expected = std::string("\x08\x01\xa2\x01\x18\x0a\x10", 7) + client_id +
                               std::string("\x10\x05\x18\x03\x20\x02", 6);
  EXPECT_EQ(expected, bytes);
}

// A compressed call as the client writes it (feature flag, then the two compression fields)
// decodes without the generated parser, and so does a compressed response.
TEST(HeaderCodecTest, TheFastPathTakesCompressionFields) {
  RequestHeaderFields h = SampleRequests()[0];
  h.required_feature_flags = {COMPRESSION};
  h.has_compression = true;
  h.compression.codec = 2;
  h.compression.uncompressed_size = 70000;
  RequestHeaderFields decoded;
  const uint64_t slow_before = HeadersDecodedByProtobuf();
  ASSERT_TRUE(DecodeHeader(Slice(Encode(h)), &decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_TRUE(decoded.has_compression);
  EXPECT_EQ(2u, decoded.compression.codec);
  EXPECT_EQ(70000u, decoded.compression.uncompressed_size);
  EXPECT_EQ(std::vector<uint32_t>{COMPRESSION}, decoded.required_feature_flags);
  // A header without them leaves none behind from the last decode.
  ASSERT_TRUE(DecodeHeader(Slice(Encode(SampleRequests()[0])), &decoded));
  EXPECT_FALSE(decoded.has_compression);

  ResponseHeaderFields r;
  r.call_id = 9;
  r.has_compression = true;
  r.compression.codec = 1;
  r.compression.uncompressed_size = 4096;
  ResponseHeaderFields r_decoded;
  ASSERT_TRUE(DecodeHeader(Slice(Encode(r)), &r_decoded));
  EXPECT_EQ(slow_before, HeadersDecodedByProtobuf()) << "took the generated parser";
  EXPECT_TRUE(r_decoded.has_compression);
  EXPECT_EQ(1u, r_decoded.compression.codec);
  EXPECT_EQ(4096u, r_decoded.compression.uncompressed_size);
}

// The compression fields' bytes as docs/wire-format.md lists them.
TEST(HeaderCodecTest, CompressionBytesAreTheDocumentedOnes) {
  RequestHeaderFields h;
  h.call_id = 1;
  h.required_feature_flags = {COMPRESSION};
  h.has_compression = true;
  h.compression.codec = 2;  // zstd
  h.compression.uncompressed_size = 65536;
  EXPECT_EQ(std::string("\x08\x01\x28\x08\xc0\x02\x02\xc8\x02\x80\x80\x04", 12), Encode(h));
  ResponseHeaderFields r;
  r.call_id = 1;
  r.has_compression = true;
  r.compression.codec = 1;  // lz4
  r.compression.uncompressed_size = 300;
  EXPECT_EQ(std::string("\x08\x01\x30\x01\x38\xac\x02", 7), Encode(r));
}

// Like the trace context: one compression field without the other is none.
TEST(HeaderCodecTest, CompressionMissingAFieldDecodesAsNone) {
  for (int present = 0; present < 3; present++) {
    RequestHeader pb;
    pb.set_call_id(1);
    if (present & 1) pb.set_compression(1);
    if (present & 2) pb.set_uncompressed_size(100);
    RequestHeaderFields decoded;
    ASSERT_TRUE(DecodeHeader(Slice(pb.SerializeAsString()), &decoded)) << present;
    EXPECT_FALSE(decoded.has_compression) << present;
    ResponseHeader rpb;
    rpb.set_call_id(1);
    if (present & 1) rpb.set_compression(1);
    if (present & 2) rpb.set_uncompressed_size(100);
    ResponseHeaderFields rdecoded;
    ASSERT_TRUE(DecodeHeader(Slice(rpb.SerializeAsString()), &rdecoded)) << present;
    EXPECT_FALSE(rdecoded.has_compression) << present;
  }
}

}  // namespace
}  // namespace rrpc::rpc
