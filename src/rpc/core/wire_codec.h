// The frame codec: turns a header and a body into the bytes of one frame and back. Pure
// functions, thread-safe. Layout (docs/wire-format.md):
//   [4-byte big-endian length of the rest][varint32 n][n header bytes][varint32 m][m body bytes]
//   [sidecars...]
#pragma once

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>

#include "rpc/core/header_codec.h"
#include "rpc/transport/frame_format.h"
#include "rrpc/util/block.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// Serializes one frame's head (length prefix, header, body) into a new exactly-sized block. The
// length prefix counts `sidecar_bytes` more, which the caller sends right after the head.
// Fails (InvalidArgument) when the frame would exceed `max_frame_size`.
Result<BlockSlice> SerializeFrameHead(const google::protobuf::MessageLite& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size);

// The same with a call's or a response's header (header_codec.h): the call path's, without
// building a protobuf message. The client's calls come as parts (their remote method encoded
// once per method); the fields' form is for tests and tools.
// A call's or a response's head goes into `buffer` when it fits in `capacity` bytes: the result's
// block is then null (borrowed bytes, which the caller keeps alive and unchanged until they are
// sent).
Result<BlockSlice> SerializeFrameHead(const RequestHeaderParts& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size,
                                      uint8_t* buffer = nullptr, size_t capacity = 0);
Result<BlockSlice> SerializeFrameHead(const RequestHeaderFields& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size);
Result<BlockSlice> SerializeFrameHead(const ResponseHeaderFields& header,
                                      const google::protobuf::MessageLite& body,
                                      size_t sidecar_bytes, size_t max_frame_size,
                                      uint8_t* buffer = nullptr, size_t capacity = 0);
// The same with a body serialized already (`body`'s bytes are copied into the head): a
// compressed body.
Result<BlockSlice> SerializeFrameHead(const RequestHeaderParts& header, Slice body,
                                      size_t sidecar_bytes, size_t max_frame_size,
                                      uint8_t* buffer = nullptr, size_t capacity = 0);
Result<BlockSlice> SerializeFrameHead(const ResponseHeaderFields& header, Slice body,
                                      size_t sidecar_bytes, size_t max_frame_size,
                                      uint8_t* buffer = nullptr, size_t capacity = 0);
// The head without the body's bytes (length prefix, header, the body's length): the caller sends
// the `body_size` bytes of a body serialized already right after it, then its sidecars, without
// copying them into the head (a stream message's compressed or plain body).
Result<BlockSlice> SerializeFrameHeadBeforeBody(const RequestHeaderParts& header, size_t body_size,
                                                size_t sidecar_bytes, size_t max_frame_size);
Result<BlockSlice> SerializeFrameHeadBeforeBody(const ResponseHeaderFields& header,
                                                size_t body_size, size_t sidecar_bytes,
                                                size_t max_frame_size);

// Splits a frame (the bytes after its length prefix) into its header, body and the tail after the
// body (sidecars). Corruption when the varints or lengths are malformed or the header does not
// parse. Does not parse the body: that needs the method's message type.
Status ParseFrame(Slice frame, google::protobuf::MessageLite* header, Slice* body, Slice* tail);
// The same with a call's or a response's header (header_codec.h); the same frames parse, with
// the same fields.
Status ParseFrame(Slice frame, RequestHeaderFields* header, Slice* body, Slice* tail);
Status ParseFrame(Slice frame, ResponseHeaderFields* header, Slice* body, Slice* tail);

// Parses `bytes` into `message`; false when they do not parse or leave a required field unset.
// Unlike ParseFromArray, never logs: protobuf writes an ERROR line for every message missing a
// required field, which let a peer flood the log with one line per bad request.
bool ParseMessageQuietly(Slice bytes, google::protobuf::MessageLite* message);

// Cuts `tail` into sidecars at `offsets` (from a header's sidecar_offsets). Corruption when the
// first offset is not 0, the offsets decrease or fall outside the tail, or there are bytes after
// the body but no offsets: every byte of a frame belongs somewhere (wire-format.md, section 2).
// `out` gets one slice per offset.
// The error of a malformed sidecar layout (out of line: the call path never builds it).
Status BadSidecarLayout(size_t tail_size, int num_offsets, uint32_t first_offset);

template <typename Offsets, typename Out>
Status SplitSidecars(Slice tail, const Offsets& offsets, Out* out) {
  const int n = static_cast<int>(offsets.size());
  if (n == 0) {
    return tail.empty() ? Status::OK() : BadSidecarLayout(tail.size(), 0, 0);
  }
  if (offsets[0] != 0) return BadSidecarLayout(tail.size(), n, offsets[0]);
  for (int i = 0; i < n; i++) {
    uint32_t begin = offsets[i];
    uint32_t end = (i + 1 < n) ? offsets[i + 1] : static_cast<uint32_t>(tail.size());
    if (begin > end || end > tail.size()) {
      return Status::Corruption("bad sidecar offsets in frame");
    }
    out->push_back(tail.sub(begin, end - begin));
  }
  return Status::OK();
}

}  // namespace rrpc::rpc
