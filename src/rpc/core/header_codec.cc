#include "rpc/core/header_codec.h"

#include <cstring>

#include "rpc/core/wire_codec.h"
#include "rpc/rpc_header.pb.h"

namespace rrpc::rpc {

namespace {

// Protobuf wire tags (field number << 3 | wire type) of the header fields, one byte each.
constexpr uint8_t kTagVarint1 = 1 << 3 | 0;  // call_id (both headers)
constexpr uint8_t kTagRequestRemoteMethod = 2 << 3 | 2;
constexpr uint8_t kTagRequestTimeout = 3 << 3 | 0;
constexpr uint8_t kTagRequestSidecarOffset = 4 << 3 | 0;
constexpr uint8_t kTagRequestFeature = 5 << 3 | 0;
constexpr uint8_t kTagServiceName = 1 << 3 | 2;  // in RemoteMethodPB
constexpr uint8_t kTagMethodName = 2 << 3 | 2;
constexpr uint8_t kTagResponseIsError = 2 << 3 | 0;
constexpr uint8_t kTagResponseSidecarOffset = 3 << 3 | 0;

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

uint8_t* WriteVarint(uint64_t v, uint8_t* p) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

// int32 and enum fields: protobuf sign-extends negatives to 64 bits (10 bytes).
uint64_t Int32Wire(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }

size_t LengthDelimitedSize(size_t len) { return 1 + VarintSize(len) + len; }

uint8_t* WriteLengthDelimited(uint8_t tag, Slice bytes, uint8_t* p) {
  *p++ = tag;
  p = WriteVarint(bytes.size(), p);
  if (!bytes.empty()) memcpy(p, bytes.data(), bytes.size());
  return p + bytes.size();
}

// The fast path's varint: at most 5 bytes and a value that fits in 32 bits, so it means exactly
// what protobuf's 32-bit reading of it means. Anything longer is left to the generated parser.
bool ReadSmallVarintLoop(const uint8_t** p, const uint8_t* end, uint32_t* out) {
  const uint8_t* q = *p;
  uint32_t v = 0;
  for (int shift = 0; shift < 35; shift += 7) {
    if (q == end) return false;
    const uint8_t byte = *q++;
    if (shift == 28 && byte >= 0x10) return false;  // bits beyond 32, or a longer varint
    v |= static_cast<uint32_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) {
      *p = q;
      *out = v;
      return true;
    }
  }
  return false;
}

// The same, with the one- and two-byte varints of a header (tags' values, lengths, call ids
// below 16,384, timeouts below 16 s) read without the loop: about half the decoding's
// instructions went to the loop's shift and bound checks (callgrind, echo-cost).
inline bool ReadSmallVarint(const uint8_t** p, const uint8_t* end, uint32_t* out) {
  const uint8_t* q = *p;
  const size_t avail = static_cast<size_t>(end - q);
  if (avail >= 1 && q[0] < 0x80) {
    *out = q[0];
    *p = q + 1;
    return true;
  }
  if (avail >= 2 && q[1] < 0x80) {  // q[0] >= 0x80 here
    *out = (q[0] & 0x7fu) | static_cast<uint32_t>(q[1]) << 7;
    *p = q + 2;
    return true;
  }
  return ReadSmallVarintLoop(p, end, out);
}

// A length-delimited field's bytes (after its tag), bounds-checked against `end`.
inline bool ReadBytes(const uint8_t** p, const uint8_t* end, Slice* out) {
  uint32_t len;
  if (!ReadSmallVarint(p, end, &len)) return false;
  if (len > static_cast<size_t>(end - *p)) return false;
  *out = Slice(*p, len);
  *p += len;
  return true;
}

bool ParseRemoteMethodFast(Slice bytes, RequestHeaderFields* header) {
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  if (p == end || *p++ != kTagServiceName) return false;
  if (!ReadBytes(&p, end, &header->service_name)) return false;
  if (p == end || *p++ != kTagMethodName) return false;
  if (!ReadBytes(&p, end, &header->method_name)) return false;
  return p == end;
}

bool ParseWithProtobuf(Slice bytes, RequestHeaderFields* header) {
  thread_local RequestHeader pb;  // its strings keep their capacity; the names point into it
  if (!ParseMessageQuietly(bytes, &pb)) return false;
  header->Clear();
  header->call_id = pb.call_id();
  header->has_remote_method = pb.has_remote_method();
  if (pb.has_remote_method()) {
    header->service_name = Slice(pb.remote_method().service_name());
    header->method_name = Slice(pb.remote_method().method_name());
  }
  header->has_timeout_millis = pb.has_timeout_millis();
  header->timeout_millis = pb.timeout_millis();
  header->sidecar_offsets.assign(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end());
  header->required_feature_flags.assign(pb.required_feature_flags().begin(),
                                        pb.required_feature_flags().end());
  return true;
}

bool ParseWithProtobuf(Slice bytes, ResponseHeaderFields* header) {
  ResponseHeader pb;
  if (!ParseMessageQuietly(bytes, &pb)) return false;
  header->Clear();
  header->call_id = pb.call_id();
  header->is_error = pb.is_error();
  header->sidecar_offsets.assign(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end());
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
}

void ResponseHeaderFields::Clear() {
  call_id = 0;
  is_error = false;
  sidecar_offsets.clear();
}

size_t EncodedSize(const RequestHeaderFields& h) {
  size_t n = 1 + VarintSize(Int32Wire(h.call_id));
  if (h.has_remote_method) {
    n += LengthDelimitedSize(LengthDelimitedSize(h.service_name.size()) +
                             LengthDelimitedSize(h.method_name.size()));
  }
  if (h.has_timeout_millis) n += 1 + VarintSize(h.timeout_millis);
  for (uint32_t offset : h.sidecar_offsets) n += 1 + VarintSize(offset);
  for (int flag : h.required_feature_flags) n += 1 + VarintSize(Int32Wire(flag));
  return n;
}

uint8_t* EncodeTo(const RequestHeaderFields& h, uint8_t* p) {
  *p++ = kTagVarint1;
  p = WriteVarint(Int32Wire(h.call_id), p);
  if (h.has_remote_method) {
    *p++ = kTagRequestRemoteMethod;
    p = WriteVarint(
        LengthDelimitedSize(h.service_name.size()) + LengthDelimitedSize(h.method_name.size()), p);
    p = WriteLengthDelimited(kTagServiceName, h.service_name, p);
    p = WriteLengthDelimited(kTagMethodName, h.method_name, p);
  }
  if (h.has_timeout_millis) {
    *p++ = kTagRequestTimeout;
    p = WriteVarint(h.timeout_millis, p);
  }
  for (uint32_t offset : h.sidecar_offsets) {
    *p++ = kTagRequestSidecarOffset;
    p = WriteVarint(offset, p);
  }
  for (int flag : h.required_feature_flags) {
    *p++ = kTagRequestFeature;
    p = WriteVarint(Int32Wire(flag), p);
  }
  return p;
}

size_t EncodedSize(const ResponseHeaderFields& h) {
  size_t n = 1 + VarintSize(Int32Wire(h.call_id));
  if (h.is_error) n += 2;
  for (uint32_t offset : h.sidecar_offsets) n += 1 + VarintSize(offset);
  return n;
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
  return p;
}

bool DecodeHeaderFastPathOnly(Slice bytes, RequestHeaderFields* h) {
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  h->Clear();
  uint32_t v;
  if (p == end || *p++ != kTagVarint1 || !ReadSmallVarint(&p, end, &v)) return false;
  h->call_id = static_cast<int32_t>(v);
  if (p != end && *p == kTagRequestRemoteMethod) {
    p++;
    Slice remote_method;
    if (!ReadBytes(&p, end, &remote_method) || !ParseRemoteMethodFast(remote_method, h)) {
      return false;
    }
    h->has_remote_method = true;
  }
  if (p != end && *p == kTagRequestTimeout) {
    p++;
    if (!ReadSmallVarint(&p, end, &h->timeout_millis)) return false;
    h->has_timeout_millis = true;
  }
  while (p != end && *p == kTagRequestSidecarOffset) {
    p++;
    if (!ReadSmallVarint(&p, end, &v)) return false;
    h->sidecar_offsets.push_back(v);
  }
  return p == end;
}

bool DecodeHeaderFastPathOnly(Slice bytes, ResponseHeaderFields* h) {
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  h->Clear();
  uint32_t v;
  if (p == end || *p++ != kTagVarint1 || !ReadSmallVarint(&p, end, &v)) return false;
  h->call_id = static_cast<int32_t>(v);
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
  return p == end;
}

bool DecodeHeader(Slice bytes, RequestHeaderFields* header) {
  return DecodeHeaderFastPathOnly(bytes, header) || ParseWithProtobuf(bytes, header);
}

bool DecodeHeader(Slice bytes, ResponseHeaderFields* header) {
  return DecodeHeaderFastPathOnly(bytes, header) || ParseWithProtobuf(bytes, header);
}

}  // namespace rrpc::rpc
