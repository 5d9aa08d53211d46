// The call and response headers of a frame (RequestHeader, ResponseHeader in rpc_header.proto),
// encoded and decoded by hand on the call path. Pure functions, thread-safe.
//
// Why not protobuf: per call, building, sizing, serializing and parsing the two generated
// header messages cost more than the rest of a small call's own work, mostly string
// assignments of the method names (copied into the header on the client, out of the frame on the
// server) and the generic parser's setup. The fields are few and fixed, so:
//  - encoding writes the bytes protobuf would write for the same fields (fields in number order,
//    repeated fields unpacked), so the wire does not change (header_codec-test checks it byte for
//    byte against the generated serializer);
//  - decoding takes the common layout (the one the encoder writes: each field at most once, in
//    number order) in one bounds-checked pass, with the method names pointing into the frame;
//    the trace fields are read there too when all four come in number order, and so are
//    feature flags (unpacked), the compression fields (both, in number order) and the priority;
//    anything else (other field order, repeats, packed offsets or flags, request ids,
//    unknown fields, long varints) goes to the generated parser, so every header protobuf accepts
//    is accepted with the same meaning and every one it refuses is refused (frame_codec-fuzz
//    compares the two on every input).
// RequestHeader's fields are listed once, in request_header_table.h: the codec takes its tags and
// its fallback from that list, and the list's tests hold the codec and the list to the .proto.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// A RequestIdPB's fields (exactly-once; docs/exactly-once.md). Decoded, client_id points into
// the bytes decoded like the names below.
struct RequestIdFields {
  Slice client_id;
  uint64_t seq_no = 0;
  uint64_t first_incomplete_seq_no = 0;
  uint32_t attempt_no = 0;
};

// The trace context fields of a RequestHeader (10-13; docs/tracing.md), as they are on the wire:
// not checked for validity (a zero id is the receiver's business).
struct TraceFields {
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  uint64_t parent_span_id = 0;
  uint32_t trace_flags = 0;
};

// The compression fields of a header (RequestHeader 40-41, ResponseHeader 6-7;
// docs/wire-format.md), as they are on the wire: the codec is not checked here.
struct CompressionFields {
  uint32_t codec = 0;  // a rrpc::rpc::Compression value
  uint32_t uncompressed_size = 0;
};

// A RequestHeader's fields. Decoded names point into the bytes decoded (or, for a header that
// took the generated parser, into a per-thread message that the next decode on this thread
// replaces): valid as long as those bytes, and on the decoding thread until its next decode.
struct RequestHeaderFields {
  int32_t call_id = 0;
  bool has_remote_method = false;
  Slice service_name;
  Slice method_name;
  bool has_timeout_millis = false;
  uint32_t timeout_millis = 0;
  std::vector<uint32_t> sidecar_offsets;
  std::vector<uint32_t> required_feature_flags;  // RpcFeatureFlag values, known or not
  bool has_request_id = false;
  RequestIdFields request_id;
  // All four trace fields present. A header with only some of them has none (has_trace false,
  // and `trace` is not read): docs/wire-format.md ignores a partial trace context. Encoded, all
  // four are written.
  bool has_trace = false;
  TraceFields trace;
  // Streams (docs/streams.md): StreamFrameFlag bits and granted bytes; 0 when absent (the
  // encoder writes neither when 0).
  uint32_t stream_flags = 0;
  uint32_t stream_credit = 0;
  // A stream's codec (opening frames only; a Compression value, 0: none). Decoded by the
  // generated parser (rare).
  uint32_t stream_compression = 0;
  // Both compression fields present (a header with one of them has none, as for the trace).
  bool has_compression = false;
  CompressionFields compression;
  // The caller's priority class as on the wire (1 foreground, 2 background; 0: absent).
  uint32_t priority = 0;
  // Decoded: false when the header has none of the fields after required_feature_flags (request
  // id, trace context, stream fields, compression, priority), which are then all absent; true
  // when some may be there. A plain call's reader passes them all with one test. The encoder does
  // not read it.
  bool may_have_optional = true;

  // Keeps the vectors' capacity (a per-thread instance allocates nothing after its first use).
  void Clear();
};

// A ResponseHeader's fields.
struct ResponseHeaderFields {
  int32_t call_id = 0;
  bool is_error = false;
  std::vector<uint32_t> sidecar_offsets;
  uint32_t stream_flags = 0;  // as in RequestHeaderFields
  uint32_t stream_credit = 0;
  bool has_compression = false;  // both compression fields present
  CompressionFields compression;

  void Clear();
};

// The fields of a RequestHeader after required_feature_flags, none of which a plain unary call
// carries (a trace context, a request id, a stream's fields, compression, a priority): they sit
// behind one pointer of RequestHeaderParts, so such a call pays one test for all of them where its
// header is sized and one where it is written. Points at the caller's fields, as the parts do.
struct RequestHeaderOptionalParts {
  const TraceFields* trace = nullptr;           // nullptr: no trace context
  const RequestIdFields* request_id = nullptr;  // nullptr: untracked call
  uint32_t stream_flags = 0;                    // 0: not a stream frame
  uint32_t stream_credit = 0;
  uint32_t stream_compression = 0;                 // 0: none (not a stream's opening frame)
  const CompressionFields* compression = nullptr;  // nullptr: the body is not compressed
  uint32_t priority = 0;                           // 0: the method's class
};

// A RequestHeader as the client's call path encodes it: the remote method comes encoded already
// (EncodeRemoteMethod, once per method a proxy calls), so a call copies the names' bytes in one
// piece instead of measuring and writing each. Points at the caller's bytes, which must outlive
// the encoding.
struct RequestHeaderParts {
  int32_t call_id = 0;
  Slice remote_method;  // EncodeRemoteMethod()'s bytes; empty: no remote_method field
  bool has_timeout_millis = false;
  uint32_t timeout_millis = 0;
  const uint32_t* sidecar_offsets = nullptr;
  size_t num_sidecar_offsets = 0;
  const uint32_t* required_feature_flags = nullptr;
  size_t num_required_feature_flags = 0;
  const RequestHeaderOptionalParts* optional = nullptr;  // nullptr: none of those fields
};

// The header's remote_method field (its tag, length and RemoteMethodPB), as it sits in every call
// to that method.
std::string EncodeRemoteMethod(Slice service_name, Slice method_name);

// The parts of `header`, its remote method encoded into `*remote_method` and its optional fields
// in `*optional` (the parts point at both): one encoder serves both forms.
RequestHeaderParts PartsOf(const RequestHeaderFields& header, std::string* remote_method,
                           RequestHeaderOptionalParts* optional);

namespace header_codec_internal {
// Bytes of `v` as a varint: 1 + (index of its highest set bit) / 7, without a loop.
inline size_t VarintSize(uint64_t v) {
  const int bits = 64 - __builtin_clzll(v | 1);
  return static_cast<size_t>((bits * 9 + 64) / 64);
}
// int32 fields: protobuf sign-extends negatives to 64 bits (10 bytes).
inline uint64_t Int32Wire(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }
}  // namespace header_codec_internal

// Exact size of the encoding, and the encoding itself (`out` has EncodedSize() bytes; returns the
// end of what was written). The size inline: it is a few additions per call.
// Bytes of a request_id field (tag, length and RequestIdPB).
size_t EncodedRequestIdSize(const RequestIdFields& id);
// Bytes of the four trace fields.
inline size_t EncodedTraceSize(const TraceFields& trace) {
  return 3 * (1 + 8) + 1 + header_codec_internal::VarintSize(trace.trace_flags);
}

// Bytes of RequestHeader's two compression fields (two-byte tags).
inline size_t EncodedRequestCompressionSize(const CompressionFields& c) {
  return 2 + header_codec_internal::VarintSize(c.codec) + 2 +
         header_codec_internal::VarintSize(c.uncompressed_size);
}

// The optional fields alone (out of line: a plain call does not get here).
size_t EncodedSize(const RequestHeaderOptionalParts& optional);
uint8_t* EncodeTo(const RequestHeaderOptionalParts& optional, uint8_t* out);
inline size_t EncodedSize(const RequestHeaderParts& h) {
  using header_codec_internal::Int32Wire;
  using header_codec_internal::VarintSize;
  size_t n = 1 + VarintSize(Int32Wire(h.call_id)) + h.remote_method.size();
  if (h.has_timeout_millis) n += 1 + VarintSize(h.timeout_millis);
  for (size_t i = 0; i < h.num_sidecar_offsets; i++) n += 1 + VarintSize(h.sidecar_offsets[i]);
  for (size_t i = 0; i < h.num_required_feature_flags; i++) {
    n += 1 + VarintSize(h.required_feature_flags[i]);
  }
  if (h.optional != nullptr) n += EncodedSize(*h.optional);
  return n;
}
uint8_t* EncodeTo(const RequestHeaderParts& header, uint8_t* out);
size_t EncodedSize(const RequestHeaderFields& header);
uint8_t* EncodeTo(const RequestHeaderFields& header, uint8_t* out);
inline size_t EncodedSize(const ResponseHeaderFields& h) {
  using header_codec_internal::Int32Wire;
  using header_codec_internal::VarintSize;
  size_t n = 1 + VarintSize(Int32Wire(h.call_id));
  if (h.is_error) n += 2;
  for (uint32_t offset : h.sidecar_offsets) n += 1 + VarintSize(offset);
  if (h.stream_flags != 0) n += 1 + VarintSize(h.stream_flags);
  if (h.stream_credit != 0) n += 1 + VarintSize(h.stream_credit);
  if (h.has_compression) {
    n += 2 + VarintSize(h.compression.codec) + VarintSize(h.compression.uncompressed_size);
  }
  return n;
}
uint8_t* EncodeTo(const ResponseHeaderFields& header, uint8_t* out);

// Decodes a header's bytes. False when protobuf would refuse them (malformed, or a required field
// missing); `*header` is then unspecified.
bool DecodeHeader(Slice bytes, RequestHeaderFields* header);
bool DecodeHeader(Slice bytes, ResponseHeaderFields* header);

// Headers DecodeHeader() handed to the generated parser (a layout the fast path does not take,
// or bytes it refuses) since the process started, over all threads. A peer whose headers keep
// landing there (another implementation's field order) costs more per call; tests check with it
// that the headers rrpc writes take the fast path. Any thread.
uint64_t HeadersDecodedByProtobuf();

}  // namespace rrpc::rpc
