#include "rrpc/rpc/trace_context.h"

#include <atomic>
#include <random>

namespace rrpc::rpc {

namespace {

// splitmix64: a fast generator, seeded per thread from the OS's entropy; the ids need to be
// unlikely to collide, not unpredictable.
uint64_t NextRandom() {
  thread_local uint64_t state = [] {
    std::random_device rd;
    static std::atomic<uint64_t> thread_counter{0};
    return (static_cast<uint64_t>(rd()) << 32 | rd()) ^
           (thread_counter.fetch_add(1, std::memory_order_relaxed) * 0x9e3779b97f4a7c15ULL);
  }();
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

int HexValue(char c, bool allow_upper) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (allow_upper && c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `hex` (at most 16 digits) as a number; false on any other character.
bool ParseHex64(std::string_view hex, bool allow_upper, uint64_t* out) {
  uint64_t v = 0;
  for (char c : hex) {
    const int d = HexValue(c, allow_upper);
    if (d < 0) return false;
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

void AppendHex(uint64_t v, int digits, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  for (int i = digits - 1; i >= 0; i--) out->push_back(kDigits[(v >> (4 * i)) & 0xf]);
}

}  // namespace

uint64_t NewSpanId() {
  uint64_t id;
  do {
    id = NextRandom();
  } while (id == 0);
  return id;
}

TraceContext TraceContext::NewRoot(bool sampled) {
  TraceContext tc;
  do {
    tc.trace_id_high = NextRandom();
    tc.trace_id_low = NextRandom();
  } while ((tc.trace_id_high | tc.trace_id_low) == 0);
  tc.span_id = NewSpanId();
  tc.flags = sampled ? kSampled : 0;
  return tc;
}

Result<TraceContext> TraceContext::FromTraceparent(std::string_view s) {
  // version "-" trace-id "-" parent-id "-" trace-flags: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55.
  constexpr size_t kLength = 55;
  if (s.size() < kLength) {
    return Status::InvalidArgument("traceparent too short: want 55 characters, got " +
                                   std::to_string(s.size()));
  }
  uint64_t version;
  if (!ParseHex64(s.substr(0, 2), false, &version)) {
    return Status::InvalidArgument("traceparent version is not two lowercase hex digits");
  }
  if (version == 0xff) return Status::InvalidArgument("traceparent version ff is invalid");
  if (version == 0 && s.size() != kLength) {
    return Status::InvalidArgument("traceparent version 00 must be 55 characters, got " +
                                   std::to_string(s.size()));
  }
  if (s.size() > kLength && s[kLength] != '-') {
    return Status::InvalidArgument("traceparent has trailing characters after its flags");
  }
  if (s[2] != '-' || s[35] != '-' || s[52] != '-') {
    return Status::InvalidArgument("traceparent fields are not separated by '-'");
  }
  TraceContext tc;
  uint64_t flags;
  if (!ParseHex64(s.substr(3, 16), false, &tc.trace_id_high) ||
      !ParseHex64(s.substr(19, 16), false, &tc.trace_id_low)) {
    return Status::InvalidArgument("traceparent trace-id is not 32 lowercase hex digits");
  }
  if (!ParseHex64(s.substr(36, 16), false, &tc.span_id)) {
    return Status::InvalidArgument("traceparent parent-id is not 16 lowercase hex digits");
  }
  if (!ParseHex64(s.substr(53, 2), false, &flags)) {
    return Status::InvalidArgument("traceparent trace-flags is not two lowercase hex digits");
  }
  if ((tc.trace_id_high | tc.trace_id_low) == 0) {
    return Status::InvalidArgument("traceparent trace-id is all zeros");
  }
  if (tc.span_id == 0) return Status::InvalidArgument("traceparent parent-id is all zeros");
  tc.flags = static_cast<uint8_t>(flags);
  return tc;
}

std::string TraceContext::ToTraceparent() const {
  std::string out = "00-";
  out.reserve(55);
  AppendHex(trace_id_high, 16, &out);
  AppendHex(trace_id_low, 16, &out);
  out.push_back('-');
  AppendHex(span_id, 16, &out);
  out.push_back('-');
  AppendHex(flags, 2, &out);
  return out;
}

std::string TraceContext::TraceIdHex() const { return FormatTraceId(trace_id_high, trace_id_low); }

Status ParseTraceId(std::string_view hex, uint64_t* high, uint64_t* low) {
  if (hex.size() != 32 || !ParseHex64(hex.substr(0, 16), true, high) ||
      !ParseHex64(hex.substr(16), true, low)) {
    return Status::InvalidArgument("a trace id is 32 hex digits");
  }
  if ((*high | *low) == 0) return Status::InvalidArgument("trace id is all zeros");
  return Status::OK();
}

std::string FormatTraceId(uint64_t high, uint64_t low) {
  std::string out;
  out.reserve(32);
  AppendHex(high, 16, &out);
  AppendHex(low, 16, &out);
  return out;
}

std::string FormatSpanId(uint64_t span_id) {
  std::string out;
  out.reserve(16);
  AppendHex(span_id, 16, &out);
  return out;
}

}  // namespace rrpc::rpc
