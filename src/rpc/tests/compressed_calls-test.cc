// Compressed calls end to end (docs/compression.md): a call that asks for a codec sends its body
// compressed once its server accepted COMPRESSION, and gets its answer compressed the same way;
// small or incompressible bodies go as they are; a peer without the feature sees plain frames;
// and a compressed request that states a size above the limits, or does not decompress to what
// it states, is refused for that call only, with memory bounded (decompression bombs). Streams
// compress their messages with the codec the client names at the open.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <thread>

#include "rpc/core/compression.h"
#include "rpc/core/messenger_internals.h"
#include "rpc/observe/rpc_metrics.h"
#include "rpc/testing/raw-socket-test-util.h"
#include "rpc/testing/rpc-test-util.h"
#include "rpc/testing/test-stream-service.h"

namespace rrpc::rpc {
namespace {

// Text like a kv store's values.
std::string TextLike(size_t n) {
  static const char* kWords[] = {"user",    "order",  "status",   "shipped", "pending",  "region",
                                 "eu-west", "amount", "currency", "EUR",     "customer", "id"};
  std::mt19937 rng(3);
  std::string s;
  while (s.size() < n) {
    s += kWords[rng() % 12];
    s += rng() % 4 == 0 ? ",\"" : " ";
  }
  s.resize(n);
  return s;
}

std::string Noise(size_t n) {
  std::mt19937 rng(5);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

MessengerMetrics* Metrics(const std::shared_ptr<Messenger>& m) {
  return MessengerInternals::metrics(*m);
}

class CompressedCallsTest : public RpcTestBase {
 protected:
  // Echoes `data` with `codec` set on the controller (kNone: leaves it unset).
  Status Echo(const std::string& data, Compression codec = Compression::kNone) {
    rtest::EchoRequestPB req;
    req.set_data(data);
    rtest::EchoResponsePB resp;
    RpcController ctl;
    ctl.set_timeout(MonoDelta::FromSeconds(60));
    if (codec != Compression::kNone) ctl.set_compression(codec);
    Status s = proxy_->Echo(req, &resp, &ctl);
    if (s.ok() && resp.data() != data) return Status::Corruption("wrong echo");
    return s;
  }
  void SetUp() override {
    StartServer();
    MessengerOptions client;
    client.compression.codec = Compression::kZstd;
    StartClient(client);
    proxy_ = std::make_unique<rtest::EchoServiceProxy>(client_, server_addr_);
  }
  std::unique_ptr<rtest::EchoServiceProxy> proxy_;
};

TEST_F(CompressedCallsTest, ZstdSendsTextInAThirdOfTheBytesBothWays) {
  const std::string text = TextLike(64 << 10);
  // The first call learns that the server accepts COMPRESSION; the ones after compress.
  ASSERT_TRUE(Echo(text).ok());
  const int64_t sent_before = Metrics(client_)->sent_bytes->value();
  const int64_t received_before = Metrics(client_)->received_bytes->value();
  for (int i = 0; i < 4; i++) ASSERT_TRUE(Echo(text).ok());
  const int64_t sent = Metrics(client_)->sent_bytes->value() - sent_before;
  const int64_t received = Metrics(client_)->received_bytes->value() - received_before;
  EXPECT_LT(sent * 3, 4 * static_cast<int64_t>(text.size())) << sent;
  EXPECT_LT(received * 3, 4 * static_cast<int64_t>(text.size())) << received;
  // Counted both sides: the client compressed 4 requests and decompressed 4 responses.
  EXPECT_GE(Metrics(client_)->compress_input_bytes->value(), 4 * static_cast<int64_t>(text.size()));
  EXPECT_LT(Metrics(client_)->compress_output_bytes->value() * 3,
            Metrics(client_)->compress_input_bytes->value());
  EXPECT_GT(Metrics(client_)->decompress_output_bytes->value(), 0);
  EXPECT_EQ(4, Metrics(server_)->decompress_output_bytes->value() /
                   static_cast<int64_t>(text.size() + 4));
  EXPECT_GT(Metrics(server_)->compress_time_ns->value(), 0);
  EXPECT_EQ(0, Metrics(server_)->decompress_refused->value());
}

TEST_F(CompressedCallsTest, IncompressibleBodiesGoAsTheyAreAndCountAsSkipped) {
  const std::string noise = Noise(64 << 10);
  for (int i = 0; i < 3; i++) ASSERT_TRUE(Echo(noise, Compression::kLz4).ok());
  EXPECT_GE(Metrics(client_)->compress_skipped->value(), 2);
  EXPECT_EQ(0, Metrics(server_)->decompress_input_bytes->value());
}

TEST_F(CompressedCallsTest, BodiesBelowTheThresholdAreNotCompressed) {
  const std::string text = TextLike(1000);  // below the default 1 KiB
  for (int i = 0; i < 3; i++) ASSERT_TRUE(Echo(text).ok());
  EXPECT_EQ(0, Metrics(client_)->compress_input_bytes->value());
  EXPECT_EQ(0, Metrics(server_)->decompress_input_bytes->value());
}

TEST_F(CompressedCallsTest, TheControllerOverridesTheMessengerDefault) {
  const std::string text = TextLike(16 << 10);
  ASSERT_TRUE(Echo(text).ok());  // learns the server's COMPRESSION
  rtest::EchoRequestPB req;
  req.set_data(text);
  rtest::EchoResponsePB resp;
  RpcController ctl;
  ctl.set_compression(Compression::kNone);  // explicitly none: the messenger's zstd is not used
  const int64_t before = Metrics(server_)->decompress_input_bytes->value();
  ASSERT_TRUE(proxy_->Echo(req, &resp, &ctl).ok());
  EXPECT_EQ(before, Metrics(server_)->decompress_input_bytes->value());
  ctl.Reset();
  ctl.set_compression(Compression::kLz4);
  ASSERT_TRUE(proxy_->Echo(req, &resp, &ctl).ok());
  EXPECT_GT(Metrics(server_)->decompress_input_bytes->value(), before);
  EXPECT_EQ(text, resp.data());
}

// ---- A raw client: the bytes of docs/wire-format.md, and refusals.

// A frame of `header` and a body given as bytes (a compressed one).
std::string FrameWithBodyBytes(const RequestHeader& header, const std::string& bytes) {
  std::string body_field;
  google::protobuf::io::StringOutputStream out(&body_field);
  {
    google::protobuf::io::CodedOutputStream coded(&out);
    const std::string h = header.SerializeAsString();
    coded.WriteVarint32(static_cast<uint32_t>(h.size()));
    coded.WriteString(h);
    coded.WriteVarint32(static_cast<uint32_t>(bytes.size()));
    coded.WriteString(bytes);
  }
  std::string frame(4, '\0');
  EncodeBigEndian32(reinterpret_cast<uint8_t*>(frame.data()),
                    static_cast<uint32_t>(body_field.size()));
  return frame + body_field;
}

// A compressed Echo request frame: `data` compressed with `codec`, the header stating
// `claimed_size` (the real size when 0).
std::string CompressedEchoFrame(int32_t call_id, const std::string& data, Compression codec,
                                uint32_t claimed_size = 0, uint32_t codec_on_wire = 0) {
  rtest::EchoRequestPB req;
  req.set_data(data);
  const std::string plain = req.SerializeAsString();
  const BlockSlice compressed = Compress(Slice(plain), codec, 0).value().value_or(BlockSlice{});
  EXPECT_NE(nullptr, compressed.block.get());
  RequestHeader header;
  header.set_call_id(call_id);
  header.mutable_remote_method()->set_service_name("rrpc.rtest.EchoService");
  header.mutable_remote_method()->set_method_name("Echo");
  header.add_required_feature_flags(COMPRESSION);
  header.set_compression(codec_on_wire != 0 ? codec_on_wire : static_cast<uint32_t>(codec));
  header.set_uncompressed_size(claimed_size != 0 ? claimed_size
                                                 : static_cast<uint32_t>(plain.size()));
  return FrameWithBodyBytes(header, compressed.slice.ToString());
}

class RawCompressedCallsTest : public RpcTestBase {
 protected:
  void SetUp() override {
    MessengerOptions server;
    server.max_message_size = 8 << 20;
    StartServer(server);
  }
  // Sends `frame`; the answer's header and body.
  void Call(RawConnection* conn, const std::string& frame, ResponseHeader* header,
            std::string* body) {
    ASSERT_TRUE(conn->Write(frame).ok());
    ASSERT_TRUE(conn->ReadParsedFrame(header, body).ok());
  }
  // Expects `header`/`body` to be ERROR_INVALID_REQUEST whose message has `text`.
  static void ExpectInvalidRequest(const ResponseHeader& header, const std::string& body,
                                   const std::string& text) {
    ASSERT_TRUE(header.is_error());
    ErrorStatusPB error;
    ASSERT_TRUE(error.ParseFromString(body));
    EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, error.code());
    EXPECT_NE(std::string::npos, error.message().find(text)) << error.message();
  }
  // A plain Echo on `conn` still works (the connection stayed).
  void ExpectConnectionServes(RawConnection* conn, int32_t call_id) {
    rtest::EchoRequestPB req;
    req.set_data("still here");
    ResponseHeader header;
    std::string body;
    Call(conn, CallFrame(call_id, "rrpc.rtest.EchoService", "Echo", req), &header, &body);
    EXPECT_EQ(call_id, header.call_id());
    EXPECT_FALSE(header.is_error());
  }
};

TEST_F(RawCompressedCallsTest, ServerAcceptsCompressionAndAnswersWithTheRequestsCodec) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Write(BuildClientHello("raw", "", false, true).slice.ToString()).ok());
  std::string frame;
  ASSERT_TRUE(conn.ReadFrame(&frame).ok());
  NegotiatePB reply;
  ASSERT_TRUE(ParseServerReply(Slice(frame), &reply).ok());
  bool listed = false;
  for (int f : reply.supported_features()) listed |= f == COMPRESSION;
  EXPECT_TRUE(listed);
  const std::string text = TextLike(32 << 10);
  for (Compression codec : {Compression::kLz4, Compression::kZstd}) {
    ResponseHeader header;
    std::string body;
    Call(&conn, CompressedEchoFrame(1, text, codec), &header, &body);
    ASSERT_FALSE(header.is_error()) << body;
    ASSERT_TRUE(header.has_compression());
    EXPECT_EQ(static_cast<uint32_t>(codec), header.compression());
    auto plain = Decompress(Slice(body), codec, header.uncompressed_size(), 1 << 20);
    ASSERT_TRUE(plain.ok()) << plain.status().ToString();
    rtest::EchoResponsePB resp;
    ASSERT_TRUE(resp.ParseFromArray(plain->slice.data(), static_cast<int>(plain->slice.size())));
    EXPECT_EQ(text, resp.data());
  }
  // A plain request gets a plain answer.
  rtest::EchoRequestPB req;
  req.set_data(text);
  ResponseHeader header;
  std::string body;
  Call(&conn, CallFrame(3, "rrpc.rtest.EchoService", "Echo", req), &header, &body);
  EXPECT_FALSE(header.has_compression());
}

TEST_F(RawCompressedCallsTest, AClaimAboveTheMessageLimitIsRefusedBeforeItInflates) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  // 16 MiB of zeros: a few KiB compressed. Stated as it is: above the server's 8 MiB limit.
  const std::string zeros(16 << 20, '\0');
  for (Compression codec : {Compression::kLz4, Compression::kZstd}) {
    const std::string bomb = CompressedEchoFrame(1, zeros, codec);
    EXPECT_LT(bomb.size(), size_t{512} << 10);
    ResponseHeader header;
    std::string body;
    Call(&conn, bomb, &header, &body);
    ExpectInvalidRequest(header, body, "above the limit");
    // Stated as 4 KiB: it inflates past that, and is refused there.
    Call(&conn, CompressedEchoFrame(2, zeros, codec, 4096), &header, &body);
    ExpectInvalidRequest(header, body, "inflates past its stated size");
    ExpectConnectionServes(&conn, 3);
  }
  // The server never held more than a frame and the limit.
  EXPECT_LT(Metrics(server_)->inbound_memory_peak_bytes->value(), int64_t{9} << 20);
  EXPECT_EQ(4, Metrics(server_)->decompress_refused->value());
}

TEST_F(RawCompressedCallsTest, DataShortOfItsStatedSizeOrAnUnknownCodecIsRefused) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  const std::string text = TextLike(16 << 10);
  ResponseHeader header;
  std::string body;
  Call(&conn, CompressedEchoFrame(1, text, Compression::kZstd, 20000), &header, &body);
  ExpectInvalidRequest(header, body, "decompresses to");
  Call(&conn, CompressedEchoFrame(2, text, Compression::kZstd, 0, 9), &header, &body);
  ExpectInvalidRequest(header, body, "unknown codec");
  ExpectConnectionServes(&conn, 3);
}

TEST_F(CompressedCallsTest, AClaimAboveTheInboundMemoryLimitIsRefused) {
  server_->Shutdown();
  MessengerOptions options;
  options.inbound_memory_per_connection = 1 << 20;
  StartServer(options);
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  const std::string zeros(4 << 20, '\0');
  ASSERT_TRUE(conn.Write(CompressedEchoFrame(1, zeros, Compression::kLz4)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  ASSERT_TRUE(header.is_error());
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(body));
  EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, error.code());
  EXPECT_NE(std::string::npos, error.message().find("inbound memory")) << error.message();
}

// A server that does not list COMPRESSION (an older one) gets plain frames from a client that
// wants zstd, call after call.
TEST(CompressionPeerTest, AServerWithoutCompressionGetsPlainCalls) {
  RawListener listener;
  ASSERT_TRUE(listener.status().ok());
  Status server_status;
  int compressed_frames = 0;
  const std::string text = TextLike(32 << 10);
  std::thread server([&] {
    Result<Socket> sock = listener.Accept();
    if (!sock.ok()) {
      server_status = sock.status();
      return;
    }
    RawConnection conn(std::move(sock).value());
    std::string frame;
    NegotiatePB request;
    server_status = conn.ReadBytes(kPreambleSize, &frame);
    if (server_status.ok()) server_status = conn.ReadFrame(&frame);
    if (server_status.ok()) server_status = ParseClientNegotiation(Slice(frame), &request);
    if (!server_status.ok()) return;
    NegotiatePB old;
    old.set_step(request.step());
    old.add_supported_features(SIDECARS);
    server_status = conn.Write(BuildServerReply(old, Status::OK(), {}).slice.ToString());
    for (int i = 0; i < 3 && server_status.ok(); i++) {
      RequestHeader header;
      std::string body;
      server_status = conn.ReadParsedFrame(&header, &body);
      if (!server_status.ok()) return;
      if (header.has_compression() || header.required_feature_flags_size() > 0) {
        compressed_frames++;
      }
      rtest::EchoRequestPB req;
      rtest::EchoResponsePB resp;
      if (!req.ParseFromString(body)) {
        server_status = Status::Corruption("request does not parse");
        return;
      }
      resp.set_data(req.data());
      ResponseHeader rh;
      rh.set_call_id(header.call_id());
      server_status = conn.Write(FrameBytes(rh, resp));
    }
  });
  MessengerOptions options;
  options.compression.codec = Compression::kZstd;
  options.name = "client";
  auto client = MessengerBuilder(options).Build();
  ASSERT_TRUE(client.ok());
  rtest::EchoServiceProxy proxy(client.value(), listener.addr());
  for (int i = 0; i < 3; i++) EXPECT_TRUE(EchoOnce(proxy, text).ok());
  server.join();
  client.value()->Shutdown();
  EXPECT_TRUE(server_status.ok()) << server_status.ToString();
  EXPECT_EQ(0, compressed_frames);
}

// ---- Streams: the client names the stream's codec at the open (RequestHeader field 32), and
// both sides compress their message bodies with it.

class CompressedStreamsTest : public RpcTestBase {
 protected:
  void SetUp() override {
    extra_services_.push_back(std::make_unique<TestStreamService>());
    StartServer();
    StartClient();
  }
  // A Double stream with `codec`, after one message went there and back: its connection is
  // negotiated and both sides know the other reads compressed frames.
  ClientStream<rtest::NumberPB, rtest::NumberPB> OpenDouble(Compression codec) {
    StreamOptions options;
    options.compression = codec;
    auto stream = rtest::StreamServiceProxy(client_, server_addr_).Double(options);
    rtest::NumberPB n;
    n.set_n(0);
    EXPECT_TRUE(stream.Write(n).ok());
    Result<bool> got = stream.Read(&n);
    EXPECT_TRUE(got.ok() && *got) << got.status().ToString();
    return stream;
  }
  // Sends `count` messages carrying `payload` through `stream` and checks each answer.
  static void RoundTrips(ClientStream<rtest::NumberPB, rtest::NumberPB>* stream,
                         const std::string& payload, int count) {
    rtest::NumberPB n, back;
    for (int i = 1; i <= count; i++) {
      n.set_n(i);
      n.set_payload(payload);
      ASSERT_TRUE(stream->Write(n).ok());
      Result<bool> got = stream->Read(&back);
      ASSERT_TRUE(got.ok() && *got) << got.status().ToString();
      ASSERT_EQ(2 * i, back.n());
      ASSERT_EQ(payload, back.payload());
    }
  }
};

TEST_F(CompressedStreamsTest, ZstdStreamSendsTextInAThirdOfTheBytesBothWays) {
  auto stream = OpenDouble(Compression::kZstd);
  const std::string text = TextLike(32 << 10);
  const int64_t sent_before = Metrics(client_)->sent_bytes->value();
  const int64_t received_before = Metrics(client_)->received_bytes->value();
  ASSERT_NO_FATAL_FAILURE(RoundTrips(&stream, text, 8));
  const int64_t sent = Metrics(client_)->sent_bytes->value() - sent_before;
  const int64_t received = Metrics(client_)->received_bytes->value() - received_before;
  stream.CloseWrites();
  ASSERT_TRUE(stream.Finish().ok());
  EXPECT_LT(sent * 3, int64_t{8} * static_cast<int64_t>(text.size())) << sent;
  EXPECT_LT(received * 3, int64_t{8} * static_cast<int64_t>(text.size())) << received;
  EXPECT_GE(Metrics(server_)->decompress_output_bytes->value(), int64_t{8} << 15);
  EXPECT_GE(Metrics(client_)->decompress_output_bytes->value(), int64_t{8} << 15);
}

TEST_F(CompressedStreamsTest, IncompressibleMessagesGoAsTheyAreAndCountAsSkipped) {
  auto stream = OpenDouble(Compression::kLz4);
  const int64_t client_skipped = Metrics(client_)->compress_skipped->value();
  const int64_t server_skipped = Metrics(server_)->compress_skipped->value();
  ASSERT_NO_FATAL_FAILURE(RoundTrips(&stream, Noise(16 << 10), 4));
  stream.CloseWrites();
  ASSERT_TRUE(stream.Finish().ok());
  EXPECT_EQ(4, Metrics(client_)->compress_skipped->value() - client_skipped);
  EXPECT_EQ(4, Metrics(server_)->compress_skipped->value() - server_skipped);
  EXPECT_EQ(0, Metrics(server_)->decompress_input_bytes->value());
}

TEST_F(CompressedStreamsTest, AStreamWithoutACodecSendsPlainMessages) {
  auto stream = OpenDouble(Compression::kNone);
  ASSERT_NO_FATAL_FAILURE(RoundTrips(&stream, TextLike(32 << 10), 4));
  stream.CloseWrites();
  ASSERT_TRUE(stream.Finish().ok());
  EXPECT_EQ(0, Metrics(client_)->compress_input_bytes->value());
  EXPECT_EQ(0, Metrics(server_)->compress_input_bytes->value());
}

// Raw frames: what a server does with a stream codec it does not know, and with a compressed
// message that states more than it may take.
class RawCompressedStreamsTest : public RpcTestBase {
 protected:
  void SetUp() override {
    extra_services_.push_back(std::make_unique<TestStreamService>());
    MessengerOptions server;
    server.max_message_size = 8 << 20;
    StartServer(server);
  }
  // The frame opening a Double stream with `codec` on the wire.
  static std::string OpenDoubleFrame(int32_t call_id, uint32_t codec) {
    RequestHeader header;
    header.set_call_id(call_id);
    header.mutable_remote_method()->set_service_name("rrpc.rtest.StreamService");
    header.mutable_remote_method()->set_method_name("Double");
    header.add_required_feature_flags(STREAMS);
    header.set_stream_flags(STREAM_OPEN);
    header.set_stream_compression(codec);
    return FrameBytes(header, StreamEmptyPB());
  }
};

TEST_F(RawCompressedStreamsTest, AnUnknownStreamCodecIsRefusedForThatStreamOnly) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  ASSERT_TRUE(conn.Write(OpenDoubleFrame(1, 9)).ok());
  ResponseHeader header;
  std::string body;
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(1, header.call_id());
  ASSERT_TRUE(header.is_error());
  ErrorStatusPB error;
  ASSERT_TRUE(error.ParseFromString(body));
  EXPECT_EQ(ErrorStatusPB::ERROR_INVALID_REQUEST, error.code());
  EXPECT_NE(std::string::npos, error.message().find("codec unknown")) << error.message();
  // The connection serves on.
  rtest::EchoRequestPB req;
  req.set_data("still here");
  ASSERT_TRUE(conn.Write(CallFrame(3, "rrpc.rtest.EchoService", "Echo", req)).ok());
  ASSERT_TRUE(conn.ReadParsedFrame(&header, &body).ok());
  EXPECT_EQ(3, header.call_id());
  EXPECT_FALSE(header.is_error());
}

// 16 MiB of zeros in a few KiB, stated as such: above the server's 8 MiB frame limit. The server
// closes the connection (a protocol error) without inflating it.
TEST_F(RawCompressedStreamsTest, AMessageStatingMoreThanTheLimitClosesTheConnection) {
  RawConnection conn(server_addr_);
  ASSERT_TRUE(conn.ok());
  ASSERT_TRUE(conn.Negotiate().ok());
  ASSERT_TRUE(conn.Write(OpenDoubleFrame(1, static_cast<uint32_t>(Compression::kLz4))).ok());
  rtest::NumberPB n;
  n.set_n(1);
  n.set_payload(std::string(16 << 20, '\0'));
  const std::string plain = n.SerializeAsString();
  const BlockSlice compressed =
      Compress(Slice(plain), Compression::kLz4, 0).value().value_or(BlockSlice{});
  ASSERT_NE(nullptr, compressed.block.get());
  ASSERT_LT(compressed.slice.size(), size_t{512} << 10);
  RequestHeader header;
  header.set_call_id(1);
  header.set_stream_flags(STREAM_MESSAGE);
  header.set_compression(static_cast<uint32_t>(Compression::kLz4));
  header.set_uncompressed_size(static_cast<uint32_t>(plain.size()));
  ASSERT_TRUE(conn.Write(FrameWithBodyBytes(header, compressed.slice.ToString())).ok());
  // Whatever the server sent before (a credit frame), the connection then ends.
  std::string frame;
  Status read;
  for (int i = 0; i < 16 && read.ok(); i++) read = conn.ReadFrame(&frame);
  EXPECT_FALSE(read.ok());
  ASSERT_TRUE(WaitForCondition([&] { return Metrics(server_)->decompress_refused->value() == 1; }));
  EXPECT_LT(Metrics(server_)->inbound_memory_peak_bytes->value(), int64_t{1} << 20);
}

}  // namespace
}  // namespace rrpc::rpc
