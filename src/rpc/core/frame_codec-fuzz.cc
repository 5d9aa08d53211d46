// Fuzz target: the byte stream of a connection through FrameReader (cutting frames, relocating
// partial ones) and each frame through the codec (ParseFrame, SplitSidecars) as both a request
// and a response. Checks, beyond "no crash": the frames FrameReader yields are exactly those a
// plain reading of the whole input finds, whatever the chunking of the reads and however long
// earlier frames are held; every header that parses serializes back to a frame that parses to
// the same header; the call path's header codec (header_codec.h) parses exactly the frames the
// generated parser parses, to the same fields, and encodes them as protobuf does.
//
// Input: byte 0 picks the read block size, byte 1 seeds the sizes of the reads (and which of them
// are scatter reads, ReadSpace()), the rest is the stream. Run with build-support/fuzz.sh; ctest
// replays fuzz-corpus/frame_codec-fuzz/.
#include <google/protobuf/stubs/logging.h>
#include <sys/uio.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "rpc/core/header_codec.h"
#include "rpc/core/request_header_table.h"
#include "rpc/core/wire_codec.h"
#include "rpc/transport/frame_format.h"
#include "rpc/transport/frame_reader.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "util/fuzz_check.h"

namespace rrpc::rpc {
namespace {

constexpr size_t kMaxFrame = 4096;

// What a frame must be, read straight from the contiguous input.
struct ExpectedStream {
  std::vector<std::string> frames;
  bool bad = false;  // a zero or oversized length prefix ends the stream
};

ExpectedStream ReadPlainly(const uint8_t* data, size_t size) {
  ExpectedStream out;
  size_t pos = 0;
  while (size - pos >= kFrameLengthSize) {
    const uint32_t length = DecodeBigEndian32(data + pos);
    if (length == 0 || length > kMaxFrame) {
      out.bad = true;
      break;
    }
    if (size - pos - kFrameLengthSize < length) break;
    out.frames.emplace_back(reinterpret_cast<const char*>(data + pos + kFrameLengthSize), length);
    pos += kFrameLengthSize + length;
  }
  return out;
}

// Parses `frame` with a header of type Header; when it parses, serializes the header back and
// checks that the new frame parses to the same header, body and sidecar count.
template <typename Header>
void CheckCodec(const BlockSlice& frame) {
  Header header;
  Slice body, tail;
  if (!ParseFrame(frame.slice, &header, &body, &tail).ok()) return;
  RRPC_FUZZ_CHECK(body.size() + tail.size() <= frame.slice.size());
  std::vector<Slice> sidecars;
  if (SplitSidecars(tail, header.sidecar_offsets(), &sidecars).ok()) {
    size_t total = 0;
    for (const Slice& s : sidecars) total += s.size();
    RRPC_FUZZ_CHECK(total <= tail.size());
    RRPC_FUZZ_CHECK(sidecars.size() == static_cast<size_t>(header.sidecar_offsets_size()));
  }
  ErrorStatusPB empty_body;
  Result<BlockSlice> again = SerializeFrameHead(header, empty_body, 0, 1u << 30);
  RRPC_FUZZ_CHECK(again.ok());
  Slice content = again->slice;
  RRPC_FUZZ_CHECK(DecodeBigEndian32(content.data()) == content.size() - kFrameLengthSize);
  content.remove_prefix(kFrameLengthSize);
  Header reparsed;
  Slice body2, tail2;
  RRPC_FUZZ_CHECK(ParseFrame(content, &reparsed, &body2, &tail2).ok());
  RRPC_FUZZ_CHECK(reparsed.SerializeAsString() == header.SerializeAsString());
  RRPC_FUZZ_CHECK(body2.empty() && tail2.empty());
}

// The call path's header codec (header_codec.h) against the generated parser: the same frames
// parse, to the same fields, with the same body and tail; what it decodes it encodes back to
// bytes that decode to the same fields (through the fast path, unless it holds what only the
// generated parser reads). Request headers are compared through their field list
// (request_header_table.h): two are the same when they encode to the same bytes, and the fields
// protobuf parsed are copied row by row.
std::string EncodedBytes(const RequestHeaderFields& h) {
  std::string bytes(EncodedSize(h), '\0');
  EncodeTo(h, reinterpret_cast<uint8_t*>(bytes.data()));
  return bytes;
}
bool SameFields(const RequestHeaderFields& a, const RequestHeaderFields& b) {
  return EncodedBytes(a) == EncodedBytes(b);
}
bool SameAsProto(const RequestHeaderFields& f, const RequestHeader& pb) {
  RequestHeaderFields expected;
  FieldsFromProto(pb, &expected);
  return SameFields(f, expected);
}
bool SameCompression(bool has_a, const CompressionFields& a, bool has_b,
                     const CompressionFields& b) {
  return has_a == has_b &&
         (!has_a || (a.codec == b.codec && a.uncompressed_size == b.uncompressed_size));
}
bool SameFields(const ResponseHeaderFields& a, const ResponseHeaderFields& b) {
  return a.call_id == b.call_id && a.is_error == b.is_error &&
         a.sidecar_offsets == b.sidecar_offsets &&
         SameCompression(a.has_compression, a.compression, b.has_compression, b.compression);
}
bool SameAsProto(const ResponseHeaderFields& f, const ResponseHeader& pb) {
  // Both compression fields or none (header_codec.h).
  const bool has_compression = pb.has_compression() && pb.has_uncompressed_size();
  CompressionFields c;
  c.codec = pb.compression();
  c.uncompressed_size = pb.uncompressed_size();
  return f.call_id == pb.call_id() && f.is_error == pb.is_error() &&
         f.sidecar_offsets ==
             std::vector<uint32_t>(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end()) &&
         SameCompression(f.has_compression, f.compression, has_compression, c);
}
// What only the generated parser reads: request ids, negative call ids (ten-byte varints;
// connection-level frames only) and a stream's codec (field 32, opening frames only).
bool NeedsFallback(const RequestHeaderFields& f) {
  return f.has_request_id || f.call_id < 0 || f.stream_compression != 0;
}
bool NeedsFallback(const ResponseHeaderFields& f) { return f.call_id < 0; }
// A request header decoded as having no optional fields has none (header_codec.h).
bool OptionalFieldsAsSaid(const RequestHeaderFields& f) {
  return f.may_have_optional ||
         (!f.has_request_id && !f.has_trace && f.stream_flags == 0 && f.stream_credit == 0 &&
          f.stream_compression == 0 && !f.has_compression && f.priority == 0);
}
bool OptionalFieldsAsSaid(const ResponseHeaderFields&) { return true; }

template <typename Fields, typename Proto>
void CheckHeaderCodec(const BlockSlice& frame) {
  Proto pb;
  Fields fields;
  Slice body, tail, body2, tail2;
  const bool pb_ok = ParseFrame(frame.slice, &pb, &body, &tail).ok();
  const bool fields_ok = ParseFrame(frame.slice, &fields, &body2, &tail2).ok();
  RRPC_FUZZ_CHECK(pb_ok == fields_ok);
  if (!pb_ok) return;
  RRPC_FUZZ_CHECK(body == body2 && tail == tail2);
  RRPC_FUZZ_CHECK(SameAsProto(fields, pb));
  RRPC_FUZZ_CHECK(OptionalFieldsAsSaid(fields));
  std::string bytes(EncodedSize(fields), '\0');
  uint8_t* begin = reinterpret_cast<uint8_t*>(bytes.data());
  RRPC_FUZZ_CHECK(EncodeTo(fields, begin) == begin + bytes.size());
  Fields again;
  const uint64_t slow_before = HeadersDecodedByProtobuf();
  RRPC_FUZZ_CHECK(DecodeHeader(Slice(bytes), &again));
  // What the encoder writes takes the fast path unless its fields need the generated parser.
  RRPC_FUZZ_CHECK(NeedsFallback(fields) || HeadersDecodedByProtobuf() == slow_before);
  RRPC_FUZZ_CHECK(SameFields(fields, again));
  RRPC_FUZZ_CHECK(OptionalFieldsAsSaid(again));
}

}  // namespace
}  // namespace rrpc::rpc

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);  // every unparsable header would log a line
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rrpc::rpc;
  using rrpc::BlockSlice;
  if (size < 2) return 0;
  const size_t block_size = 8 + data[0] * 4;  // 8 .. 1028: many relocations, some large frames
  uint32_t chunk_seed = data[1] | 1u;
  data += 2;
  size -= 2;
  const ExpectedStream expected = ReadPlainly(data, size);

  FrameReader reader(kMaxFrame, block_size);
  std::deque<BlockSlice> held;  // frames kept alive a while, as queued calls do
  size_t frames = 0;
  bool bad = false;
  size_t pos = 0;
  while (pos < size && !bad) {
    chunk_seed = chunk_seed * 1103515245u + 12345u;
    const size_t chunk = size_t{1} + (chunk_seed >> 16) % 300;
    if (chunk_seed & 0x100) {
      // A scatter read as TcpTransport makes it: the offered regions filled in order.
      iovec iov[2];
      const int parts = reader.ReadSpace(iov);
      RRPC_FUZZ_CHECK(parts == 1 || parts == 2);
      RRPC_FUZZ_CHECK(iov[0].iov_len > 0);
      RRPC_FUZZ_CHECK(parts == 1 || iov[1].iov_len == kFrameLengthSize);
      size_t n = 0;
      for (int i = 0; i < parts; i++) {
        const size_t take = std::min({iov[i].iov_len, size - pos, chunk - n});
        memcpy(iov[i].iov_base, data + pos, take);
        pos += take;
        n += take;
      }
      reader.Commit(n);
    } else {
      uint8_t* dst = reader.writable_data();
      const size_t room = reader.writable_size();
      RRPC_FUZZ_CHECK(room > 0);
      const size_t n = std::min({room, size - pos, chunk});
      memcpy(dst, data + pos, n);
      reader.Commit(n);
      pos += n;
    }
    while (true) {
      BlockSlice frame;
      rrpc::Result<bool> next = reader.NextFrame(&frame);
      if (!next.ok()) {
        bad = true;
        break;
      }
      if (!*next) break;
      RRPC_FUZZ_CHECK(frames < expected.frames.size());
      RRPC_FUZZ_CHECK(frame.slice.ToString() == expected.frames[frames]);
      frames++;
      CheckCodec<RequestHeader>(frame);
      CheckCodec<ResponseHeader>(frame);
      CheckHeaderCodec<RequestHeaderFields, RequestHeader>(frame);
      CheckHeaderCodec<ResponseHeaderFields, ResponseHeader>(frame);
      held.push_back(std::move(frame));
      if (held.size() > (chunk_seed & 3)) held.pop_front();
    }
  }
  RRPC_FUZZ_CHECK(frames == expected.frames.size());
  RRPC_FUZZ_CHECK(bad == expected.bad);
  return 0;
}
