// Fuzz target: Decompress on arbitrary bytes with an arbitrary stated size, as a peer's
// compressed body arrives. Checks, beyond "no crash": a stated size above the limit is refused
// before anything is decoded; what decompresses has exactly the stated size; and the input
// compressed by Compress decompresses back to itself.
//
// Input: byte 0 picks the codec (lz4 or zstd), bytes 1-4 the stated size (little-endian), the
// rest is the compressed data. Run with build-support/fuzz.sh; ctest replays
// fuzz-corpus/compression-fuzz/.
#include <cstdint>
#include <cstring>

#include "rpc/core/compression.h"
#include "util/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rrpc::rpc;
  if (size < 5) return 0;
  const Compression codec = (data[0] & 1) != 0 ? Compression::kZstd : Compression::kLz4;
  uint32_t claimed;
  memcpy(&claimed, data + 1, 4);
  const rrpc::Slice in(data + 5, size - 5);
  constexpr size_t kLimit = 1 << 20;
  rrpc::Result<rrpc::BlockSlice> out = Decompress(in, codec, claimed, kLimit);
  if (claimed > kLimit) RRPC_FUZZ_CHECK(!out.ok() && out.status().IsInvalidArgument());
  if (out.ok()) RRPC_FUZZ_CHECK(out.value().slice.size() == claimed);

  auto compressed = Compress(in, codec, 0);
  RRPC_FUZZ_CHECK(compressed.ok());
  if (compressed.value().has_value()) {
    const rrpc::Slice c = compressed.value()->slice;
    RRPC_FUZZ_CHECK(c.size() < in.size());
    rrpc::Result<rrpc::BlockSlice> back = Decompress(c, codec, in.size(), in.size());
    RRPC_FUZZ_CHECK(back.ok());
    RRPC_FUZZ_CHECK(back.value().slice.size() == in.size() &&
                    memcmp(back.value().slice.data(), in.data(), in.size()) == 0);
  }
  return 0;
}
