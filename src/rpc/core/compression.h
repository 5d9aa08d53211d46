// The compression codecs of message bodies, as calls and streams use them: one call compresses a
// body, one decompresses it within a limit. Pure functions; any thread (each thread keeps its own
// zstd contexts).
//
// Decompression is bounded before it allocates: the sender states the uncompressed size, the
// receiver refuses a size above its limit, allocates exactly that much, and refuses data that
// does not decompress to exactly that size. A small frame claiming gigabytes (a decompression
// bomb) costs nothing; one that inflates past its claim stops at the claim.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "rrpc/rpc/compression.h"
#include "rrpc/util/block.h"
#include "rrpc/util/monotime.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// Whether `wire_value` (a header's compression field) names a codec this build decodes.
bool IsKnownCompression(uint32_t wire_value);

// `in` compressed with `codec`, or nullopt when it is not worth it: codec kNone, `in` shorter
// than `min_bytes`, or the result would not be smaller than `in` by at least 1/32 of it (the
// header fields the compression adds cost bytes too). From 8 KiB on, the first 1 KiB is tried
// first and must shrink as much, so incompressible data costs a fraction of a full attempt (data
// whose head does not compress but whose rest would is sent as it is). `zstd_level` for kZstd.
// An error only when the codec library fails.
Result<std::optional<BlockSlice>> Compress(Slice in, Compression codec, size_t min_bytes,
                                           int zstd_level = 1);

// `in` decompressed with `codec` into a new block of exactly `claimed_size` bytes. Refuses
// (InvalidArgument) a claim above `limit` before allocating anything, and (Corruption) data
// that is malformed or decompresses to any other size. `codec` must not be kNone.
Result<BlockSlice> Decompress(Slice in, Compression codec, size_t claimed_size, size_t limit);

}  // namespace rrpc::rpc
