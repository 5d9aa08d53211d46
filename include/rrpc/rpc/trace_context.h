// TraceContext: the W3C trace context (traceparent) one call carries: which trace it belongs to,
// the span that made it, and whether the trace is sampled. docs/tracing.md says what is
// propagated and how. A plain value: any thread may copy and read one.
//
// A gateway passes its traceparent through:
//   Result<TraceContext> tc = TraceContext::FromTraceparent(http_header_value);
//   if (tc.ok()) controller.set_trace_context(*tc);
// A handler passes its call's context on to its downstream calls:
//   context->InheritTraceContext(&downstream_controller);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "rrpc/util/status.h"

namespace rrpc::rpc {

struct TraceContext {
  // traceparent's trace-flags bit 0: the caller records this trace (and asks callees to).
  static constexpr uint8_t kSampled = 0x01;

  // The 16-byte trace id, as two big-endian halves (the first 16 hex digits are the high half).
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  // The span this context stands for: on a controller, the caller's span (the server's span's
  // parent); in a handler's RpcContext, the server's own span for the call.
  uint64_t span_id = 0;
  uint8_t flags = 0;

  // A context is valid with a non-zero trace id and span id (W3C: all zeros is invalid). The
  // default-constructed one is invalid and means "no trace context".
  bool valid() const { return (trace_id_high | trace_id_low) != 0 && span_id != 0; }
  bool sampled() const { return (flags & kSampled) != 0; }

  // A new trace: random trace id and span id.
  static TraceContext NewRoot(bool sampled);

  // Parses a traceparent header value ("00-<32 hex>-<16 hex>-<2 hex>"), strictly: lowercase hex,
  // the exact length for version 00, version ff refused, no zero trace or span id; a later
  // version is read by its first four fields when a '-' or the end follows them (W3C's rule for
  // versions it does not know). InvalidArgument saying what is wrong otherwise.
  static Result<TraceContext> FromTraceparent(std::string_view traceparent);
  // "00-<trace id>-<span id>-<flags>"; meaningful only when valid().
  std::string ToTraceparent() const;
  // The 32 lowercase hex digits of the trace id.
  std::string TraceIdHex() const;
};

// A random span id, never 0. Any thread (a per-thread generator; no lock, no allocation).
uint64_t NewSpanId();

// The 32 hex digits of a trace id (upper or lower case) into its halves; InvalidArgument when
// `hex` is not exactly 32 hex digits or is all zeros.
Status ParseTraceId(std::string_view hex, uint64_t* high, uint64_t* low);
// Lowercase hex of a trace id (32 digits) and of a span id (16 digits).
std::string FormatTraceId(uint64_t high, uint64_t low);
std::string FormatSpanId(uint64_t span_id);

}  // namespace rrpc::rpc
