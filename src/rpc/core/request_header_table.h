// The fields of RequestHeader (include/rrpc/rpc/rpc_header.proto), listed once: name, number,
// type, label, and how the call path's form of the header (RequestHeaderFields, header_codec.h)
// holds each. Everything that handles the header's fields reads them from here or is checked
// against this list:
//  - the hand-written codec (header_codec.cc) takes its field tags from it;
//  - the decoder's fallback (a header the fast path leaves to the generated parser) copies the
//    fields listed here, in this order;
//  - request_header_table-test compares the list with the .proto's descriptor (every field, the
//    same number, type and label) and round-trips every field through the fast path and the
//    fallback, byte for byte against protobuf;
//  - frame_codec-fuzz compares the two decoders on every input through this list.
// Adding a field to RequestHeader: its row here (and its member in RequestHeaderFields), its
// bytes in the codec (a static_assert on this list's length in header_codec.cc names the places);
// the tests above fail until all agree with the .proto. Constant data and pure functions: any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "rpc/core/header_codec.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rpc {

// A field's type as the .proto declares it.
enum class HeaderFieldType : uint8_t { kInt32, kUint32, kFixed64, kMessage };
enum class HeaderFieldLabel : uint8_t { kRequired, kOptional, kRepeated };
// Fields that mean something only together: a header with some but not all of a group's fields
// has none of them (docs/wire-format.md, section 5, for the trace context and compression).
enum class HeaderFieldGroup : uint8_t { kNone, kTraceContext, kCompression };

struct RequestHeaderField {
  std::string_view name;  // as in the .proto
  int number;
  HeaderFieldType type;
  HeaderFieldLabel label;
  HeaderFieldGroup group;
  // Copies the field from a parsed RequestHeader into `out` (cleared before the first field);
  // returns whether `pb` has it. A group's presence flag is the caller's (FieldsFromProto).
  bool (*copy_from_proto)(const RequestHeader& pb, RequestHeaderFields* out);
};

// In field-number order, as the codec writes them.
inline constexpr RequestHeaderField kRequestHeaderFields[] = {
    {"call_id", 1, HeaderFieldType::kInt32, HeaderFieldLabel::kRequired, HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->call_id = pb.call_id();
       return pb.has_call_id();
     }},
    {"remote_method", 2, HeaderFieldType::kMessage, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->has_remote_method = pb.has_remote_method();
       if (pb.has_remote_method()) {
         out->service_name = Slice(pb.remote_method().service_name());
         out->method_name = Slice(pb.remote_method().method_name());
       }
       return pb.has_remote_method();
     }},
    {"timeout_millis", 3, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->has_timeout_millis = pb.has_timeout_millis();
       out->timeout_millis = pb.timeout_millis();
       return pb.has_timeout_millis();
     }},
    {"sidecar_offsets", 4, HeaderFieldType::kUint32, HeaderFieldLabel::kRepeated,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->sidecar_offsets.assign(pb.sidecar_offsets().begin(), pb.sidecar_offsets().end());
       return pb.sidecar_offsets_size() > 0;
     }},
    {"required_feature_flags", 5, HeaderFieldType::kUint32, HeaderFieldLabel::kRepeated,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->required_feature_flags.assign(pb.required_feature_flags().begin(),
                                          pb.required_feature_flags().end());
       return pb.required_feature_flags_size() > 0;
     }},
    {"trace_id_high", 10, HeaderFieldType::kFixed64, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kTraceContext,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->trace.trace_id_high = pb.trace_id_high();
       return pb.has_trace_id_high();
     }},
    {"trace_id_low", 11, HeaderFieldType::kFixed64, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kTraceContext,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->trace.trace_id_low = pb.trace_id_low();
       return pb.has_trace_id_low();
     }},
    {"parent_span_id", 12, HeaderFieldType::kFixed64, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kTraceContext,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->trace.parent_span_id = pb.parent_span_id();
       return pb.has_parent_span_id();
     }},
    {"trace_flags", 13, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kTraceContext,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->trace.trace_flags = pb.trace_flags();
       return pb.has_trace_flags();
     }},
    {"request_id", 20, HeaderFieldType::kMessage, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->has_request_id = pb.has_request_id();
       if (pb.has_request_id()) {
         const RequestIdPB& id = pb.request_id();
         out->request_id.client_id = Slice(id.client_id());
         out->request_id.seq_no = id.seq_no();
         out->request_id.first_incomplete_seq_no = id.first_incomplete_seq_no();
         out->request_id.attempt_no = id.attempt_no();
       }
       return pb.has_request_id();
     }},
    {"stream_flags", 30, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->stream_flags = pb.stream_flags();
       return pb.has_stream_flags();
     }},
    {"stream_credit", 31, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->stream_credit = pb.stream_credit();
       return pb.has_stream_credit();
     }},
    {"stream_compression", 32, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->stream_compression = pb.stream_compression();
       return pb.has_stream_compression();
     }},
    {"compression", 40, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kCompression,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->compression.codec = pb.compression();
       return pb.has_compression();
     }},
    {"uncompressed_size", 41, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional,
     HeaderFieldGroup::kCompression,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->compression.uncompressed_size = pb.uncompressed_size();
       return pb.has_uncompressed_size();
     }},
    {"priority", 50, HeaderFieldType::kUint32, HeaderFieldLabel::kOptional, HeaderFieldGroup::kNone,
     [](const RequestHeader& pb, RequestHeaderFields* out) {
       out->priority = pb.priority();
       return pb.has_priority();
     }},
};

// The row named `name`; a name not listed fails to compile where a constant is needed.
constexpr const RequestHeaderField& RequestHeaderFieldNamed(std::string_view name) {
  for (const RequestHeaderField& f : kRequestHeaderFields) {
    if (f.name == name) return f;
  }
  throw "no such RequestHeader field";  // in a constant expression: a compile error
}

// The protobuf wire tag of a field (number << 3 | wire type).
constexpr uint32_t WireTag(const RequestHeaderField& f) {
  const uint32_t wire_type = f.type == HeaderFieldType::kFixed64   ? 1
                             : f.type == HeaderFieldType::kMessage ? 2
                                                                   : 0;
  return static_cast<uint32_t>(f.number) << 3 | wire_type;
}

// The tag of the field named `name` as one byte: fields 1-15. A field numbered higher does not
// compile here.
constexpr uint8_t OneByteTag(std::string_view name) {
  const uint32_t tag = WireTag(RequestHeaderFieldNamed(name));
  if (tag >= 0x80) throw "tag takes more than one byte";
  return static_cast<uint8_t>(tag);
}

// How many fields `group` has.
constexpr int FieldsInGroup(HeaderFieldGroup group) {
  int n = 0;
  for (const RequestHeaderField& f : kRequestHeaderFields) n += f.group == group ? 1 : 0;
  return n;
}

// `pb` as the call path's fields, row by row (the names point into `pb`): the decoder's fallback,
// and what the fuzzer holds the fast path to. A partial group (trace context, compression) is
// none.
inline void FieldsFromProto(const RequestHeader& pb, RequestHeaderFields* out) {
  out->Clear();
  int trace_fields = 0;
  int compression_fields = 0;
  for (const RequestHeaderField& f : kRequestHeaderFields) {
    const bool present = f.copy_from_proto(pb, out);
    if (f.group == HeaderFieldGroup::kTraceContext && present) trace_fields++;
    if (f.group == HeaderFieldGroup::kCompression && present) compression_fields++;
  }
  out->has_trace = trace_fields == FieldsInGroup(HeaderFieldGroup::kTraceContext);
  if (!out->has_trace) out->trace = TraceFields();
  out->has_compression = compression_fields == FieldsInGroup(HeaderFieldGroup::kCompression);
  if (!out->has_compression) out->compression = CompressionFields();
}

}  // namespace rrpc::rpc
