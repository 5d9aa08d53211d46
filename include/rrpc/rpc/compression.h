// Per-message compression of call bodies (docs/compression.md): which codec a call asks for, and
// the messenger's defaults. Plain values, no threads involved.
//
//   controller.set_compression(rrpc::rpc::Compression::kZstd);   // this call
//   options.compression.codec = rrpc::rpc::Compression::kLz4;    // every call of a messenger
//
// A body is compressed only on a connection whose server accepted the COMPRESSION feature, only
// when it has at least `min_bytes`, and only when the result is smaller (else it goes as it is).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace rrpc::rpc {

// The codecs. The values are the wire's (RequestHeader.compression, docs/wire-format.md).
enum class Compression : uint8_t {
  kNone = 0,
  kLz4 = 1,   // LZ4 block format: fast, modest ratio
  kZstd = 2,  // Zstandard frame format: better ratio, slower
};

// "none", "lz4", "zstd".
std::string_view CompressionName(Compression codec);
// The codec named `name` (as CompressionName writes it); false for any other name.
bool ParseCompressionName(std::string_view name, Compression* codec);

// A messenger's compression settings (MessengerOptions::compression).
struct CompressionOptions {
  // Codec of calls that set none themselves (RpcController::set_compression) and whose method
  // has no (rrpc.compression) option.
  Compression codec = Compression::kNone;
  // Bodies smaller than this go uncompressed: compressing a small body costs more time than its
  // bytes cost on the wire. Applies to requests (client) and responses (server).
  size_t min_bytes = 1024;
  // Zstandard's level (1 fastest .. 19); lz4 has none.
  int zstd_level = 1;
};

}  // namespace rrpc::rpc
