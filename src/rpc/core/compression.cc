#include "rpc/core/compression.h"

#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <limits>
#include <string>

namespace rrpc::rpc {

std::string_view CompressionName(Compression codec) {
  switch (codec) {
    case Compression::kNone:
      return "none";
    case Compression::kLz4:
      return "lz4";
    case Compression::kZstd:
      return "zstd";
  }
  return "unknown";
}

bool ParseCompressionName(std::string_view name, Compression* codec) {
  for (Compression c : {Compression::kNone, Compression::kLz4, Compression::kZstd}) {
    if (name == CompressionName(c)) {
      *codec = c;
      return true;
    }
  }
  return false;
}

bool IsKnownCompression(uint32_t wire_value) {
  return wire_value == static_cast<uint32_t>(Compression::kLz4) ||
         wire_value == static_cast<uint32_t>(Compression::kZstd);
}

namespace {

constexpr size_t kProbeBytes = 1024;

// One compression and one decompression context per thread, made on first use: a context costs
// hundreds of KiB to set up, which a call must not pay.
struct ZstdContexts {
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
  ~ZstdContexts() {
    ZSTD_freeCCtx(cctx);
    ZSTD_freeDCtx(dctx);
  }
};
ZstdContexts& ThreadZstd() {
  thread_local ZstdContexts contexts;
  return contexts;
}

}  // namespace

Result<std::optional<BlockSlice>> Compress(Slice in, Compression codec, size_t min_bytes,
                                           int zstd_level) {
  if (codec == Compression::kNone || in.size() < min_bytes || in.empty()) {
    return std::optional<BlockSlice>();
  }
  // The output must save at least 1/32 of the input: capacity below that, and a codec that does
  // not fit gives up (both stop early rather than write a result that is thrown away).
  const size_t capacity = in.size() - 1 - in.size() / 32;
  if (capacity == 0 || in.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return std::optional<BlockSlice>();
  }
  // A large body is probed first: its first kProbeBytes must shrink as much, or the whole is not
  // tried (incompressible data, the common case of a skip, then costs a quarter or less of a
  // full attempt).
  if (in.size() >= 8 * kProbeBytes) {
    Result<std::optional<BlockSlice>> probe =
        Compress(in.sub(0, kProbeBytes), codec, kProbeBytes, zstd_level);
    if (!probe.ok() || !probe.value().has_value()) return probe;
  }
  BlockRef block = Block::Allocate(capacity);
  size_t out_size = 0;
  switch (codec) {
    case Compression::kLz4: {
      const int n = LZ4_compress_default(in.char_data(), reinterpret_cast<char*>(block->data()),
                                         static_cast<int>(in.size()), static_cast<int>(capacity));
      if (n <= 0) return std::optional<BlockSlice>();  // did not fit: not worth it
      out_size = static_cast<size_t>(n);
      break;
    }
    case Compression::kZstd: {
      ZstdContexts& z = ThreadZstd();
      if (z.cctx == nullptr && (z.cctx = ZSTD_createCCtx()) == nullptr) {
        return Status::RuntimeError("zstd: cannot make a compression context");
      }
      const size_t n =
          ZSTD_compressCCtx(z.cctx, block->data(), capacity, in.data(), in.size(), zstd_level);
      if (ZSTD_isError(n)) {
        if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall) {
          return std::optional<BlockSlice>();
        }
        return Status::RuntimeError("zstd compression failed", ZSTD_getErrorName(n));
      }
      out_size = n;
      break;
    }
    default:
      return Status::InvalidArgument("unknown compression codec",
                                     std::to_string(static_cast<int>(codec)));
  }
  const Slice out(block->data(), out_size);
  return std::optional<BlockSlice>(BlockSlice{std::move(block), out});
}

Result<BlockSlice> Decompress(Slice in, Compression codec, size_t claimed_size, size_t limit) {
  if (claimed_size > limit) {
    return Status::InvalidArgument("compressed message claims " + std::to_string(claimed_size) +
                                   " bytes uncompressed, above the limit of " +
                                   std::to_string(limit));
  }
  if (claimed_size > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return Status::InvalidArgument("compressed message claims " + std::to_string(claimed_size) +
                                   " bytes uncompressed, more than a codec can produce");
  }
  BlockRef block = Block::Allocate(claimed_size == 0 ? 1 : claimed_size);
  size_t out_size = 0;
  switch (codec) {
    case Compression::kLz4: {
      if (in.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
        return Status::Corruption("lz4 data too large");
      }
      // Writes at most claimed_size bytes whatever the input says.
      const int n =
          LZ4_decompress_safe(in.char_data(), reinterpret_cast<char*>(block->data()),
                              static_cast<int>(in.size()), static_cast<int>(claimed_size));
      if (n < 0) {
        return Status::Corruption("lz4 data is malformed or inflates past its stated size of " +
                                  std::to_string(claimed_size) + " bytes");
      }
      out_size = static_cast<size_t>(n);
      break;
    }
    case Compression::kZstd: {
      ZstdContexts& z = ThreadZstd();
      if (z.dctx == nullptr && (z.dctx = ZSTD_createDCtx()) == nullptr) {
        return Status::RuntimeError("zstd: cannot make a decompression context");
      }
      // Writes at most claimed_size bytes; a frame whose content is larger fails.
      const size_t n =
          ZSTD_decompressDCtx(z.dctx, block->data(), claimed_size, in.data(), in.size());
      if (ZSTD_isError(n)) {
        return Status::Corruption("zstd data is malformed or inflates past its stated size of " +
                                      std::to_string(claimed_size) + " bytes",
                                  ZSTD_getErrorName(n));
      }
      out_size = n;
      break;
    }
    default:
      return Status::InvalidArgument("unknown compression codec",
                                     std::to_string(static_cast<int>(codec)));
  }
  if (out_size != claimed_size) {
    return Status::Corruption("compressed message decompresses to " + std::to_string(out_size) +
                              " bytes, not the " + std::to_string(claimed_size) + " it states");
  }
  const Slice out(block->data(), out_size);
  return BlockSlice{std::move(block), out};
}

}  // namespace rrpc::rpc
