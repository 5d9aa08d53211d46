#include "rpc/core/wire_codec.h"

#include <google/protobuf/io/coded_stream.h>

#include <cstring>
#include <string>
#include <type_traits>

#include "rpc/core/constants.h"

namespace rrpc::rpc {

using google::protobuf::io::CodedOutputStream;

namespace {

// A body is a message (serialized into the frame) or bytes serialized already (a compressed body).
inline size_t BodySize(const google::protobuf::MessageLite& body) { return body.ByteSizeLong(); }
inline size_t BodySize(Slice body) { return body.size(); }
inline uint8_t* WriteBody(const google::protobuf::MessageLite& body, uint8_t* p) {
  return body.SerializeWithCachedSizesToArray(p);
}
inline uint8_t* WriteBody(Slice body, uint8_t* p) {
  memcpy(p, body.data(), body.size());
  return p + body.size();
}
// A body the caller sends after the head itself: counted, not written.
struct BodyAfterHead {
  size_t size;
};
inline size_t BodySize(BodyAfterHead body) { return body.size; }
inline uint8_t* WriteBody(BodyAfterHead, uint8_t* p) { return p; }

// Writes a frame head whose header is `header_size` bytes, written by `write_header`: into
// `buffer` when it fits in `capacity` bytes, else into a new exactly-sized block. Inlined into
// each caller, so that the header's size and writer fold into it.
template <typename WriteHeader, typename Body>
[[gnu::always_inline]] inline Result<BlockSlice> SerializeFrameHeadWith(
    size_t header_size, const WriteHeader& write_header, const Body& body, size_t sidecar_bytes,
    size_t max_frame_size, uint8_t* buffer = nullptr, size_t capacity = 0) {
  const size_t body_size = BodySize(body);
  const size_t head_size =
      CodedOutputStream::VarintSize32(static_cast<uint32_t>(header_size)) + header_size +
      CodedOutputStream::VarintSize32(static_cast<uint32_t>(body_size)) + body_size;
  const size_t frame_size = head_size + sidecar_bytes;
  if (frame_size > max_frame_size) {
    return Status::InvalidArgument("message of " + std::to_string(frame_size) +
                                   " bytes exceeds the maximum of " +
                                   std::to_string(max_frame_size));
  }
  constexpr bool kBodyInHead = !std::is_same_v<Body, BodyAfterHead>;
  const size_t total = kFrameLengthSize + head_size - (kBodyInHead ? 0 : body_size);
  BlockRef block;
  uint8_t* const start = total <= capacity ? buffer : (block = Block::Allocate(total))->data();
  uint8_t* p = start;
  EncodeBigEndian32(p, static_cast<uint32_t>(frame_size));
  p += kFrameLengthSize;
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(header_size), p);
  uint8_t* const header_end = write_header(p);
  DCHECK_EQ(header_end, p + header_size);
  p = CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(body_size), header_end);
  p = WriteBody(body, p);
  DCHECK_EQ(p, start + total);
  return BlockSlice{std::move(block), Slice(start, total)};
}

}  // namespace

Result<BlockSlice> SerializeFrameHead(const google::protobuf::MessageLite& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size) {
  return SerializeFrameHeadWith(
      header.ByteSizeLong(), [&](uint8_t* p) { return header.SerializeWithCachedSizesToArray(p); },
      body, sidecar_bytes, max_frame_size);
}

Result<BlockSlice> SerializeFrameHead(const RequestHeaderParts& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size, uint8_t* buffer,
                                      size_t capacity) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); }, body, sidecar_bytes,
      max_frame_size, buffer, capacity);
}

Result<BlockSlice> SerializeFrameHead(const RequestHeaderParts& header, Slice body,
                                      size_t sidecar_bytes, size_t max_frame_size, uint8_t* buffer,
                                      size_t capacity) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); }, body, sidecar_bytes,
      max_frame_size, buffer, capacity);
}

Result<BlockSlice> SerializeFrameHead(const ResponseHeaderFields& header, Slice body,
                                      size_t sidecar_bytes, size_t max_frame_size, uint8_t* buffer,
                                      size_t capacity) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); }, body, sidecar_bytes,
      max_frame_size, buffer, capacity);
}

Result<BlockSlice> SerializeFrameHeadBeforeBody(const RequestHeaderParts& header, size_t body_size,
                                                size_t sidecar_bytes, size_t max_frame_size) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); },
      BodyAfterHead{body_size}, sidecar_bytes, max_frame_size);
}

Result<BlockSlice> SerializeFrameHeadBeforeBody(const ResponseHeaderFields& header,
                                                size_t body_size, size_t sidecar_bytes,
                                                size_t max_frame_size) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); },
      BodyAfterHead{body_size}, sidecar_bytes, max_frame_size);
}

Result<BlockSlice> SerializeFrameHead(const RequestHeaderFields& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size) {
  std::string remote_method;
  RequestHeaderOptionalParts optional;
  const RequestHeaderParts parts = PartsOf(header, &remote_method, &optional);
  return SerializeFrameHead(parts, body, sidecar_bytes, max_frame_size);
}

Result<BlockSlice> SerializeFrameHead(const ResponseHeaderFields& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size, uint8_t* buffer,
                                      size_t capacity) {
  return SerializeFrameHeadWith(
      EncodedSize(header), [&](uint8_t* p) { return EncodeTo(header, p); }, body, sidecar_bytes,
      max_frame_size, buffer, capacity);
}

namespace {
// Reads a varint32 length and the bytes it announces from the front of `in`. Decoded by hand: a
// CodedInputStream costs more to set up than the few bytes it would read here. At most 5 bytes,
// as a 32-bit length needs.
bool ReadDelimited(Slice* in, Slice* out) {
  const uint8_t* p = in->data();
  const uint8_t* const end = p + in->size();
  if (p != end && *p < 0x80) {  // a length below 128 (a header, a small body): one byte
    const size_t short_len = *p;
    if (short_len > in->size() - 1) return false;
    *out = in->sub(1, short_len);
    in->remove_prefix(1 + short_len);
    return true;
  }
  uint32_t len = 0;
  for (int shift = 0;; shift += 7) {
    if (p == end || shift > 28) return false;
    const uint8_t byte = *p++;
    len |= static_cast<uint32_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) break;
  }
  const size_t varint_size = static_cast<size_t>(p - in->data());
  if (len > in->size() - varint_size) return false;
  *out = in->sub(varint_size, len);
  in->remove_prefix(varint_size + len);
  return true;
}
}  // namespace

Status BadSidecarLayout(size_t tail_size, int num_offsets, uint32_t first_offset) {
  if (num_offsets == 0) {
    return Status::Corruption("frame has " + std::to_string(tail_size) +
                              " bytes after the body but no sidecar offsets");
  }
  return Status::Corruption("first sidecar offset is " + std::to_string(first_offset) + ", not 0");
}

bool ParseMessageQuietly(Slice bytes, google::protobuf::MessageLite* message) {
  return message->ParsePartialFromArray(bytes.data(), static_cast<int>(bytes.size())) &&
         message->IsInitialized();
}

namespace {
// ParseFrame for any header type: `parse_header` turns the header's bytes into it.
template <typename ParseHeader>
Status ParseFrameWith(Slice frame, const ParseHeader& parse_header, Slice* body, Slice* tail) {
  Slice header_bytes;
  if (!ReadDelimited(&frame, &header_bytes)) {
    return Status::Corruption("frame header length is malformed or exceeds the frame");
  }
  RRPC_RETURN_NOT_OK(parse_header(header_bytes));
  if (!ReadDelimited(&frame, body)) {
    return Status::Corruption("frame body length is malformed or exceeds the frame");
  }
  *tail = frame;
  return Status::OK();
}
}  // namespace

Status ParseFrame(Slice frame, google::protobuf::MessageLite* header, Slice* body, Slice* tail) {
  return ParseFrameWith(
      frame,
      [header](Slice bytes) {
        if (ParseMessageQuietly(bytes, header)) return Status::OK();
        return Status::Corruption("frame header does not parse",
                                  header->InitializationErrorString());
      },
      body, tail);
}

template <typename Fields>
Status ParseFrameWithFields(Slice frame, Fields* header, Slice* body, Slice* tail) {
  // A small call's frame: header and body lengths of one byte each, read here in one pass (the
  // general path's two reads and their Slice bookkeeping are skipped). Same checks, same result.
  const uint8_t* const p = frame.data();
  const size_t size = frame.size();
  if (size >= 2 && p[0] < 0x80) {
    const size_t header_len = p[0];
    const size_t body_at = 1 + header_len + 1;  // after the header and the body's length byte
    if (body_at <= size && p[body_at - 1] < 0x80) {
      const size_t body_len = p[body_at - 1];
      if (body_len <= size - body_at) {
        if (!DecodeHeader(Slice(p + 1, header_len), header)) {
          return Status::Corruption("frame header does not parse");
        }
        *body = Slice(p + body_at, body_len);
        *tail = Slice(p + body_at + body_len, size - body_at - body_len);
        return Status::OK();
      }
    }
  }
  return ParseFrameWith(
      frame,
      [header](Slice bytes) {
        if (DecodeHeader(bytes, header)) return Status::OK();
        return Status::Corruption("frame header does not parse");
      },
      body, tail);
}

Status ParseFrame(Slice frame, RequestHeaderFields* header, Slice* body, Slice* tail) {
  return ParseFrameWithFields(frame, header, body, tail);
}

Status ParseFrame(Slice frame, ResponseHeaderFields* header, Slice* body, Slice* tail) {
  return ParseFrameWithFields(frame, header, body, tail);
}

}  // namespace rrpc::rpc
