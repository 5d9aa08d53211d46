#include "rpc/core/header_codec.h"

#include <atomic>
#include <cstring>
#include <iterator>

#include "rpc/core/request_header_table.h"
#include "rpc/core/wire_codec.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {

namespace {

// Protobuf wire tags (field number << 3 | wire type) of the header fields, one byte each; the
// request header's from its field list (request_header_table.h).
constexpr uint8_t kTagVarint1 = 1 << 3 | 0;  // call_id (both headers)
static_assert(kTagVarint1 == OneByteTag("call_id"));
constexpr uint8_t kTagRequestRemoteMethod = OneByteTag("remote_method");
constexpr uint8_t kTagRequestTimeout = OneByteTag("timeout_millis");
constexpr uint8_t kTagRequestSidecarOffset = OneByteTag("sidecar_offsets");
constexpr uint8_t kTagRequestFeature = OneByteTag("required_feature_flags");
constexpr uint8_t kTagTraceIdHigh = OneByteTag("trace_id_high");
constexpr uint8_t kTagTraceIdLow = OneByteTag("trace_id_low");
constexpr uint8_t kTagParentSpanId = OneByteTag("parent_span_id");
constexpr uint8_t kTagTraceFlags = OneByteTag("trace_flags");
// request_id (field 20, length-delimited): a two-byte tag.
constexpr uint32_t kRequestIdTag = WireTag(RequestHeaderFieldNamed("request_id"));
static_assert(kRequestIdTag >= 0x80 && kRequestIdTag < 0x4000);
constexpr uint8_t kTagRequestId[2] = {static_cast<uint8_t>((kRequestIdTag & 0x7f) | 0x80),
                                      static_cast<uint8_t>(kRequestIdTag >> 7)};
// The stream fields (30, 31): two-byte tags.
constexpr uint32_t kStreamFlagsTag = WireTag(RequestHeaderFieldNamed("stream_flags"));
constexpr uint32_t kStreamCreditTag = WireTag(RequestHeaderFieldNamed("stream_credit"));
static_assert(kStreamFlagsTag >= 0x80 && kStreamCreditTag < 0x4000);
constexpr uint8_t kTagStreamFlags[2] = {static_cast<uint8_t>((kStreamFlagsTag & 0x7f) | 0x80),
                                        static_cast<uint8_t>(kStreamFlagsTag >> 7)};
constexpr uint8_t kTagStreamCredit[2] = {static_cast<uint8_t>((kStreamCreditTag & 0x7f) | 0x80),
                                         static_cast<uint8_t>(kStreamCreditTag >> 7)};
// compression and uncompressed_size (fields 40, 41, varints): two-byte tags.
constexpr uint32_t kCompressionTag = WireTag(RequestHeaderFieldNamed("compression"));
constexpr uint32_t kUncompressedSizeTag = WireTag(RequestHeaderFieldNamed("uncompressed_size"));
static_assert(kCompressionTag >= 0x80 && kUncompressedSizeTag < 0x4000);
constexpr uint8_t kTagCompression[2] = {static_cast<uint8_t>((kCompressionTag & 0x7f) | 0x80),
                                        static_cast<uint8_t>(kCompressionTag >> 7)};
constexpr uint8_t kTagUncompressedSize[2] = {
    static_cast<uint8_t>((kUncompressedSizeTag & 0x7f) | 0x80),
    static_cast<uint8_t>(kUncompressedSizeTag >> 7)};
// stream_compression (32) and priority (50): two-byte tags.
constexpr uint32_t kStreamCompressionTag = WireTag(RequestHeaderFieldNamed("stream_compression"));
constexpr uint32_t kPriorityTag = WireTag(RequestHeaderFieldNamed("priority"));
static_assert(kStreamCompressionTag >= 0x80 && kPriorityTag < 0x4000);
constexpr uint8_t kTagStreamCompression[2] = {
    static_cast<uint8_t>((kStreamCompressionTag & 0x7f) | 0x80),
    static_cast<uint8_t>(kStreamCompressionTag >> 7)};
constexpr uint8_t kTagPriority[2] = {static_cast<uint8_t>((kPriorityTag & 0x7f) | 0x80),
                                     static_cast<uint8_t>(kPriorityTag >> 7)};
// A new RequestHeader field: write it in EncodeTo and EncodedSize (field-number order), read it in
// DecodeFast or leave it to the fallback, then count it here. request_header_table-test checks
// each field's bytes against protobuf's.
static_assert(std::size(kRequestHeaderFields) == 16, "a RequestHeader field the codec lacks");
constexpr uint8_t kTagClientId = 1 << 3 | 2;  // in RequestIdPB
constexpr uint8_t kTagSeqNo = 2 << 3 | 0;
constexpr uint8_t kTagFirstIncomplete = 3 << 3 | 0;
constexpr uint8_t kTagAttemptNo = 4 << 3 | 0;
constexpr uint8_t kTagServiceName = 1 << 3 | 2;  // in RemoteMethodPB
constexpr uint8_t kTagMethodName = 2 << 3 | 2;
constexpr uint8_t kTagResponseIsError = 2 << 3 | 0;
constexpr uint8_t kTagResponseSidecarOffset = 3 << 3 | 0;
constexpr uint8_t kTagResponseStreamFlags = 4 << 3 | 0;
constexpr uint8_t kTagResponseStreamCredit = 5 << 3 | 0;
constexpr uint8_t kTagResponseCompression = 6 << 3 | 0;
constexpr uint8_t kTagResponseUncompressedSize = 7 << 3 | 0;

using header_codec_internal::Int32Wire;
using header_codec_internal::VarintSize;

// Unrolled up to three bytes: a call's id and timeout (a minute is 60,000 ms) take two or three,
// and a loop costs more than the unrolled form for those.
inline uint8_t* WriteVarint(uint64_t v, uint8_t* p) {
  if (v < 0x80) {  // the common case of a header's fields: one byte
    *p = static_cast<uint8_t>(v);
    return p + 1;
  }
  if (v < (1u << 14)) {
    p[0] = static_cast<uint8_t>(v | 0x80);
    p[1] = static_cast<uint8_t>(v >> 7);
    return p + 2;
  }
  if (v < (1u << 21)) {
    p[0] = static_cast<uint8_t>(v | 0x80);
    p[1] = static_cast<uint8_t>((v >> 7) | 0x80);
    p[2] = static_cast<uint8_t>(v >> 14);
    return p + 3;
  }
  do {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  } while (v >= 0x80);
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// Protobuf's fixed64: 8 bytes, little-endian.
inline uint8_t* WriteFixed64(uint64_t v, uint8_t* p) {
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  memcpy(p, &v, 8);
  return p + 8;
}
inline uint64_t ReadFixed64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  if constexpr (__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__) v = __builtin_bswap64(v);
  return v;
}

size_t LengthDelimitedSize(size_t len) { return 1 + VarintSize(len) + len; }

// Copies a name of a header. Names are short (a method, a service): up to 32 bytes they are
// copied by two overlapping 16-byte moves (or two 8-byte, or two 4-byte), which costs a few
// instructions, less than a call to memcpy.
inline void CopyShort(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n >= 16 && n <= 32) {
    uint8_t a[16], b[16];
    memcpy(a, src, 16);
    memcpy(b, src + n - 16, 16);
    memcpy(dst, a, 16);
    memcpy(dst + n - 16, b, 16);
  } else if (n >= 8 && n < 16) {
    uint64_t a, b;
    memcpy(&a, src, 8);
    memcpy(&b, src + n - 8, 8);
    memcpy(dst, &a, 8);
    memcpy(dst + n - 8, &b, 8);
  } else if (n >= 4 && n < 8) {
    uint32_t a, b;
    memcpy(&a, src, 4);
    memcpy(&b, src + n - 4, 4);
    memcpy(dst, &a, 4);
    memcpy(dst + n - 4, &b, 4);
  } else if (n != 0) {
    memcpy(dst, src, n);
  }
}

// The same for a call's pre-encoded remote method (a tag and a length more than its two names):
// up to 64 bytes by two overlapping 32-byte moves.
inline void CopyUpTo64(uint8_t* dst, const uint8_t* src, size_t n) {
  if (n <= 32) {
    CopyShort(dst, src, n);
  } else if (n <= 64) {
    uint8_t a[32], b[32];
    memcpy(a, src, 32);
    memcpy(b, src + n - 32, 32);
    memcpy(dst, a, 32);
    memcpy(dst + n - 32, b, 32);
  } else {
    memcpy(dst, src, n);
  }
}

inline uint8_t* WriteLengthDelimited(uint8_t tag, Slice bytes, uint8_t* p) {
  *p++ = tag;
  p = WriteVarint(bytes.size(), p);
  CopyShort(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

// The fast path's varint: at most 5 bytes and a value that fits in 32 bits, so it means exactly
// what protobuf's 32-bit reading of it means. Anything longer is left to the generated parser.
// Unrolled: a header's varints are one to three bytes (call ids, lengths, a timeout of a minute
// in milliseconds), and a loop's shift and bound checks cost about as much as the rest of the
// decoding.
[[gnu::always_inline]] inline bool ReadSmallVarint(const uint8_t** p, const uint8_t* end,
                                                   uint32_t* out) {
  const uint8_t* q = *p;
  const size_t avail = static_cast<size_t>(end - q);
  if (avail == 0) return false;
  uint32_t v = q[0];
  if (v < 0x80) {
    *out = v;
    *p = q + 1;
    return true;
  }
  if (avail < 2) return false;
  v = (v & 0x7f) | static_cast<uint32_t>(q[1]) << 7;
  if (q[1] < 0x80) {
    *out = v;
    *p = q + 2;
    return true;
  }
  if (avail < 3) return false;
  v = (v & 0x3fff) | static_cast<uint32_t>(q[2]) << 14;
  if (q[2] < 0x80) {
    *out = v;
    *p = q + 3;
    return true;
  }
  if (avail < 4) return false;
  v = (v & 0x1fffff) | static_cast<uint32_t>(q[3]) << 21;
  if (q[3] < 0x80) {
    *out = v;
    *p = q + 4;
    return true;
  }
  // The fifth byte may carry only the top 4 bits of 32, and must end the varint.
  if (avail < 5 || q[4] >= 0x10) return false;
  *out = (v & 0xfffffff) | static_cast<uint32_t>(q[4]) << 28;
  *p = q + 5;
  return true;
}

// A length-delimited field's bytes (after its tag), bounds-checked against `end`.
[[gnu::always_inline]] inline bool ReadBytes(const uint8_t** p, const uint8_t* end, Slice* out) {
  uint32_t len;
  if (!ReadSmallVarint(p, end, &len)) return false;
  if (len > static_cast<size_t>(end - *p)) return false;
  *out = Slice(*p, len);
  *p += len;
  return true;
}

bool ParseWithProtobuf(Slice bytes, RequestHeaderFields* header) {
  thread_local RequestHeader pb;  // its strings keep their capacity; the names point into it
  if (!ParseMessageQuietly(bytes, &pb)) return false;
  FieldsFromProto(pb, header);
  return true;
}

bool ParseWithProtobuf(Slice bytes, ResponseHeaderFields* header) {
  ResponseHeader pb;
  if (!ParseMessageQuietly(bytes, &pb)) return false;
  header->Clear();
  header->call_id = pb.call_id();
  header->is_error = pb.is_error();
  header->sidecar_offsets.assign(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end());
  header->stream_flags = pb.stream_flags();
  header->stream_credit = pb.stream_credit();
  // Both compression fields or none (as a request header's groups).
  header->has_compression = pb.has_compression() && pb.has_uncompressed_size();
  if (header->has_compression) {
    header->compression.codec = pb.compression();
    header->compression.uncompressed_size = pb.uncompressed_size();
  }
  return true;
}

}  // namespace

void RequestHeaderFields::Clear() {
  call_id = 0;
  has_remote_method = false;
  service_name = Slice();
  method_name = Slice();
  has_timeout_millis = false;
  timeout_millis = 0;
  sidecar_offsets.clear();
  required_feature_flags.clear();
  has_request_id = false;
  request_id = RequestIdFields();
  has_trace = false;
  trace = TraceFields();
  stream_flags = 0;
  stream_credit = 0;
  stream_compression = 0;
  has_compression = false;
  compression = CompressionFields();
  priority = 0;
  may_have_optional = true;
}

void ResponseHeaderFields::Clear() {
  call_id = 0;
  is_error = false;
  sidecar_offsets.clear();
  stream_flags = 0;
  stream_credit = 0;
  has_compression = false;
  compression = CompressionFields();
}

std::string EncodeRemoteMethod(Slice service_name, Slice method_name) {
  const size_t inner =
      LengthDelimitedSize(service_name.size()) + LengthDelimitedSize(method_name.size());
  std::string out(LengthDelimitedSize(inner), '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(out.data());
  *p++ = kTagRequestRemoteMethod;
  p = WriteVarint(inner, p);
  p = WriteLengthDelimited(kTagServiceName, service_name, p);
  p = WriteLengthDelimited(kTagMethodName, method_name, p);
  DCHECK_EQ(p, reinterpret_cast<uint8_t*>(out.data()) + out.size());
  return out;
}

namespace {
size_t RequestIdBodySize(const RequestIdFields& id) {
  return LengthDelimitedSize(id.client_id.size()) + 1 + VarintSize(id.seq_no) + 1 +
         VarintSize(id.first_incomplete_seq_no) + 1 + VarintSize(id.attempt_no);
}
}  // namespace

size_t EncodedRequestIdSize(const RequestIdFields& id) {
  const size_t body = RequestIdBodySize(id);
  return sizeof(kTagRequestId) + VarintSize(body) + body;
}

uint8_t* EncodeTo(const RequestHeaderParts& h, uint8_t* p) {
  *p++ = kTagVarint1;
  p = WriteVarint(Int32Wire(h.call_id), p);
  CopyUpTo64(p, h.remote_method.data(), h.remote_method.size());
  p += h.remote_method.size();
  if (h.has_timeout_millis) {
    *p++ = kTagRequestTimeout;
    p = WriteVarint(h.timeout_millis, p);
  }
  for (size_t i = 0; i < h.num_sidecar_offsets; i++) {
    *p++ = kTagRequestSidecarOffset;
    p = WriteVarint(h.sidecar_offsets[i], p);
  }
  for (size_t i = 0; i < h.num_required_feature_flags; i++) {
    *p++ = kTagRequestFeature;
    p = WriteVarint(h.required_feature_flags[i], p);
  }
  if (h.optional != nullptr) p = EncodeTo(*h.optional, p);
  return p;
}

size_t EncodedSize(const RequestHeaderOptionalParts& h) {
  size_t n = 0;
  if (h.trace != nullptr) n += EncodedTraceSize(*h.trace);
  if (h.request_id != nullptr) n += EncodedRequestIdSize(*h.request_id);
  if (h.stream_flags != 0) n += 2 + VarintSize(h.stream_flags);  // two-byte tags
  if (h.stream_credit != 0) n += 2 + VarintSize(h.stream_credit);
  if (h.stream_compression != 0) n += 2 + VarintSize(h.stream_compression);
  if (h.compression != nullptr) n += EncodedRequestCompressionSize(*h.compression);
  if (h.priority != 0) n += 2 + VarintSize(h.priority);
  return n;
}

uint8_t* EncodeTo(const RequestHeaderOptionalParts& h, uint8_t* p) {
  if (h.trace != nullptr) {
    *p++ = kTagTraceIdHigh;
    p = WriteFixed64(h.trace->trace_id_high, p);
    *p++ = kTagTraceIdLow;
    p = WriteFixed64(h.trace->trace_id_low, p);
    *p++ = kTagParentSpanId;
    p = WriteFixed64(h.trace->parent_span_id, p);
    *p++ = kTagTraceFlags;
    p = WriteVarint(h.trace->trace_flags, p);
  }
  if (h.request_id != nullptr) {
    const RequestIdFields& id = *h.request_id;
    *p++ = kTagRequestId[0];
    *p++ = kTagRequestId[1];
    p = WriteVarint(RequestIdBodySize(id), p);
    *p++ = kTagClientId;
    p = WriteVarint(id.client_id.size(), p);
    memcpy(p, id.client_id.data(), id.client_id.size());
    p += id.client_id.size();
    *p++ = kTagSeqNo;
    p = WriteVarint(id.seq_no, p);
    *p++ = kTagFirstIncomplete;
    p = WriteVarint(id.first_incomplete_seq_no, p);
    *p++ = kTagAttemptNo;
    p = WriteVarint(id.attempt_no, p);
  }
  if (h.stream_flags != 0) {
    *p++ = kTagStreamFlags[0];
    *p++ = kTagStreamFlags[1];
    p = WriteVarint(h.stream_flags, p);
  }
  if (h.stream_credit != 0) {
    *p++ = kTagStreamCredit[0];
    *p++ = kTagStreamCredit[1];
    p = WriteVarint(h.stream_credit, p);
  }
  if (h.stream_compression != 0) {
    *p++ = kTagStreamCompression[0];
    *p++ = kTagStreamCompression[1];
    p = WriteVarint(h.stream_compression, p);
  }
  if (h.compression != nullptr) {
    *p++ = kTagCompression[0];
    *p++ = kTagCompression[1];
    p = WriteVarint(h.compression->codec, p);
    *p++ = kTagUncompressedSize[0];
    *p++ = kTagUncompressedSize[1];
    p = WriteVarint(h.compression->uncompressed_size, p);
  }
  if (h.priority != 0) {
    *p++ = kTagPriority[0];
    *p++ = kTagPriority[1];
    p = WriteVarint(h.priority, p);
  }
  return p;
}

RequestHeaderParts PartsOf(const RequestHeaderFields& h, std::string* remote_method,
                           RequestHeaderOptionalParts* optional) {
  if (h.has_remote_method) *remote_method = EncodeRemoteMethod(h.service_name, h.method_name);
  RequestHeaderParts parts;
  parts.call_id = h.call_id;
  parts.remote_method = Slice(*remote_method);
  parts.has_timeout_millis = h.has_timeout_millis;
  parts.timeout_millis = h.timeout_millis;
  parts.sidecar_offsets = h.sidecar_offsets.data();
  parts.num_sidecar_offsets = h.sidecar_offsets.size();
  parts.required_feature_flags = h.required_feature_flags.data();
  parts.num_required_feature_flags = h.required_feature_flags.size();
  *optional = RequestHeaderOptionalParts();
  optional->request_id = h.has_request_id ? &h.request_id : nullptr;
  optional->trace = h.has_trace ? &h.trace : nullptr;
  optional->stream_flags = h.stream_flags;
  optional->stream_credit = h.stream_credit;
  optional->stream_compression = h.stream_compression;
  optional->compression = h.has_compression ? &h.compression : nullptr;
  optional->priority = h.priority;
  parts.optional = optional;
  return parts;
}

size_t EncodedSize(const RequestHeaderFields& h) {
  std::string remote_method;
  RequestHeaderOptionalParts optional;
  return EncodedSize(PartsOf(h, &remote_method, &optional));
}

uint8_t* EncodeTo(const RequestHeaderFields& h, uint8_t* p) {
  std::string remote_method;
  RequestHeaderOptionalParts optional;
  return EncodeTo(PartsOf(h, &remote_method, &optional), p);
}

uint8_t* EncodeTo(const ResponseHeaderFields& h, uint8_t* p) {
  *p++ = kTagVarint1;
  p = WriteVarint(Int32Wire(h.call_id), p);
  if (h.is_error) {
    *p++ = kTagResponseIsError;
    *p++ = 1;
  }
  for (uint32_t offset : h.sidecar_offsets) {
    *p++ = kTagResponseSidecarOffset;
    p = WriteVarint(offset, p);
  }
  if (h.stream_flags != 0) {
    *p++ = kTagResponseStreamFlags;
    p = WriteVarint(h.stream_flags, p);
  }
  if (h.stream_credit != 0) {
    *p++ = kTagResponseStreamCredit;
    p = WriteVarint(h.stream_credit, p);
  }
  if (h.has_compression) {
    *p++ = kTagResponseCompression;
    p = WriteVarint(h.compression.codec, p);
    *p++ = kTagResponseUncompressedSize;
    p = WriteVarint(h.compression.uncompressed_size, p);
  }
  return p;
}

namespace {

// What may follow the stream fields as the encoder writes it, ending the header: the compression
// fields (both, in number order), then the priority. `p` is at the first tag. Out of line: most
// calls carry neither. A stream's codec (32) is left to the generated parser.
[[gnu::noinline]] bool DecodeTailFast(const uint8_t* p, const uint8_t* end,
                                      RequestHeaderFields* h) {
  if (end - p >= 3 && p[0] == kTagCompression[0] && p[1] == kTagCompression[1]) {
    p += 2;
    if (!ReadSmallVarint(&p, end, &h->compression.codec)) return false;
    if (end - p < 3 || p[0] != kTagUncompressedSize[0] || p[1] != kTagUncompressedSize[1]) {
      return false;
    }
    p += 2;
    if (!ReadSmallVarint(&p, end, &h->compression.uncompressed_size)) return false;
    h->has_compression = true;
  }
  if (end - p >= 3 && p[0] == kTagPriority[0] && p[1] == kTagPriority[1]) {
    p += 2;
    if (!ReadSmallVarint(&p, end, &h->priority)) return false;
  }
  return p == end;
}

// The trace fields as the encoder writes them (all four, in number order); `p` is at the first
// one's tag. Returns the end of what it read, nullptr when they are not in that layout. Out of
// line: most calls carry none.
[[gnu::noinline]] const uint8_t* DecodeTraceFast(const uint8_t* p, const uint8_t* end,
                                                 RequestHeaderFields* h) {
  constexpr size_t kFixedPart = 3 * (1 + 8) + 1;  // three fixed64 fields and the flags' tag
  if (static_cast<size_t>(end - p) < kFixedPart + 1) return nullptr;
  if (p[9] != kTagTraceIdLow || p[18] != kTagParentSpanId || p[27] != kTagTraceFlags) {
    return nullptr;
  }
  h->trace.trace_id_high = ReadFixed64(p + 1);
  h->trace.trace_id_low = ReadFixed64(p + 10);
  h->trace.parent_span_id = ReadFixed64(p + 19);
  p += kFixedPart;
  if (!ReadSmallVarint(&p, end, &h->trace.trace_flags)) return nullptr;
  h->has_trace = true;
  return p;
}

// The fast paths, inlined into both their public wrappers (a call and its register saves cost
// about as much as decoding a field). Each sets every field of `h` when it returns true.
[[gnu::always_inline]] inline bool DecodeFast(Slice bytes, RequestHeaderFields* h) {
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  uint32_t v;
  if (p == end || *p++ != kTagVarint1 || !ReadSmallVarint(&p, end, &v)) return false;
  h->call_id = static_cast<int32_t>(v);
  h->sidecar_offsets.clear();
  h->required_feature_flags.clear();
  h->has_request_id = false;  // a header with one takes the generated parser
  h->has_trace = false;
  h->stream_flags = 0;
  h->stream_credit = 0;
  h->stream_compression = 0;  // a header with one takes the generated parser
  h->has_compression = false;
  h->priority = 0;
  if (p != end && *p == kTagRequestRemoteMethod) {
    p++;
    uint32_t len;
    if (!ReadSmallVarint(&p, end, &len) || len > static_cast<size_t>(end - p)) return false;
    // RemoteMethodPB: service_name, then method_name, nothing else.
    const uint8_t* const method_end = p + len;
    if (p == method_end || *p++ != kTagServiceName) return false;
    if (!ReadBytes(&p, method_end, &h->service_name)) return false;
    if (p == method_end || *p++ != kTagMethodName) return false;
    if (!ReadBytes(&p, method_end, &h->method_name)) return false;
    if (p != method_end) return false;
    h->has_remote_method = true;
  } else {
    h->has_remote_method = false;
    h->service_name = Slice();
    h->method_name = Slice();
  }
  if (p != end && *p == kTagRequestTimeout) {
    p++;
    if (!ReadSmallVarint(&p, end, &h->timeout_millis)) return false;
    h->has_timeout_millis = true;
  } else {
    h->has_timeout_millis = false;
    h->timeout_millis = 0;
  }
  while (p != end && *p == kTagRequestSidecarOffset) {
    p++;
    if (!ReadSmallVarint(&p, end, &v)) return false;
    h->sidecar_offsets.push_back(v);
  }
  while (p != end && *p == kTagRequestFeature) {
    p++;
    if (!ReadSmallVarint(&p, end, &v)) return false;
    h->required_feature_flags.push_back(v);
  }
  if (p == end) {  // a plain call's header ends here
    h->may_have_optional = false;
    return true;
  }
  h->may_have_optional = true;
  if (*p == kTagTraceIdHigh && (p = DecodeTraceFast(p, end, h)) == nullptr) {
    return false;
  }
  // The stream fields (30, 31).
  if (end - p >= 2 && p[0] == kTagStreamFlags[0] && p[1] == kTagStreamFlags[1]) {
    p += 2;
    if (!ReadSmallVarint(&p, end, &h->stream_flags)) return false;
  }
  if (end - p >= 2 && p[0] == kTagStreamCredit[0] && p[1] == kTagStreamCredit[1]) {
    p += 2;
    if (!ReadSmallVarint(&p, end, &h->stream_credit)) return false;
  }
  if (p != end) return DecodeTailFast(p, end, h);
  return true;
}

[[gnu::always_inline]] inline bool DecodeFast(Slice bytes, ResponseHeaderFields* h) {
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  uint32_t v;
  if (p == end || *p++ != kTagVarint1 || !ReadSmallVarint(&p, end, &v)) return false;
  h->call_id = static_cast<int32_t>(v);
  h->sidecar_offsets.clear();
  h->is_error = false;
  if (p != end && *p == kTagResponseIsError) {
    p++;
    if (p == end || *p > 1) return false;  // protobuf reads any varint as a bool: leave it that
    h->is_error = *p++ == 1;
  }
  while (p != end && *p == kTagResponseSidecarOffset) {
    p++;
    if (!ReadSmallVarint(&p, end, &v)) return false;
    h->sidecar_offsets.push_back(v);
  }
  h->stream_flags = 0;
  h->stream_credit = 0;
  if (p != end && *p == kTagResponseStreamFlags) {
    p++;
    if (!ReadSmallVarint(&p, end, &h->stream_flags)) return false;
  }
  if (p != end && *p == kTagResponseStreamCredit) {
    p++;
    if (!ReadSmallVarint(&p, end, &h->stream_credit)) return false;
  }
  h->has_compression = false;
  if (p != end && *p == kTagResponseCompression) {
    p++;
    if (!ReadSmallVarint(&p, end, &h->compression.codec)) return false;
    if (p == end || *p++ != kTagResponseUncompressedSize) return false;
    if (!ReadSmallVarint(&p, end, &h->compression.uncompressed_size)) return false;
    h->has_compression = true;
  }
  return p == end;
}

std::atomic<uint64_t> headers_decoded_by_protobuf{0};

}  // namespace

bool DecodeHeader(Slice bytes, RequestHeaderFields* header) {
  if (DecodeFast(bytes, header)) return true;
  headers_decoded_by_protobuf.fetch_add(1, std::memory_order_relaxed);
  return ParseWithProtobuf(bytes, header);
}

bool DecodeHeader(Slice bytes, ResponseHeaderFields* header) {
  if (DecodeFast(bytes, header)) return true;
  headers_decoded_by_protobuf.fetch_add(1, std::memory_order_relaxed);
  return ParseWithProtobuf(bytes, header);
}

uint64_t HeadersDecodedByProtobuf() {
  return headers_decoded_by_protobuf.load(std::memory_order_relaxed);
}

}  // namespace rrpc::rpc
