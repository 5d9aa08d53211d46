// How frames are delimited on every transport: each frame starts with its length (not counting
// these 4 bytes), big-endian. docs/wire-format.md section 3 describes what follows.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rrpc::rpc {

inline constexpr size_t kFrameLengthSize = 4;

inline void EncodeBigEndian32(uint8_t* out, uint32_t v) {
  out[0] = static_cast<uint8_t>(v >> 24);
  out[1] = static_cast<uint8_t>(v >> 16);
  out[2] = static_cast<uint8_t>(v >> 8);
  out[3] = static_cast<uint8_t>(v);
}
inline uint32_t DecodeBigEndian32(const uint8_t* in) {
  return (uint32_t{in[0]} << 24) | (uint32_t{in[1]} << 16) | (uint32_t{in[2]} << 8) | in[3];
}

}  // namespace rrpc::rpc
