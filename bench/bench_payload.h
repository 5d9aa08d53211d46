// The bytes rpc-bench sends and the rule that says which bytes must come back, so every response
// is checked for size and content.
//
// A client fills a request buffer once with its stream's pattern (FillPattern; each slot or
// connection has its own stream) and, per call, stamps the call's sequence number over the first
// bytes (StampSequence), so a response delivered to the wrong call fails the check. The server
// answers with the request repeated or cut to the wanted size (BuildEcho), a plain copy when the
// sizes match; CheckEcho verifies that against the request the client still holds.
//
// Pure functions: any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::bench {

// Writes `len` bytes of stream `stream`'s pattern to dst.
void FillPattern(uint64_t stream, char* dst, size_t len);

// Writes `len` bytes of text like a key-value store's values (words of a small vocabulary, as
// JSON-ish records), stream `stream`'s: what compression is for (--payload_kind=text).
void FillText(uint64_t stream, char* dst, size_t len);

// Overwrites the first min(8, len) bytes of dst with `seq`, little-endian.
void StampSequence(uint64_t seq, char* dst, size_t len);

// Server side: dst[i] = request[i % request.size()] for i < len; a fixed pattern when the request
// is empty.
void BuildEcho(Slice request, char* dst, size_t len);

// Client side: OK when `response` is exactly BuildEcho(request, expected_len). Otherwise
// Corruption naming `what` ("payload", "sidecar") and the size or first wrong byte.
Status CheckEcho(Slice request, Slice response, size_t expected_len, const char* what);

}  // namespace rrpc::bench
