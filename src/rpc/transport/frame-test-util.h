// Test support: a frame's bytes as they travel, for tests of the transports and of anything that
// reads a connection's byte stream.
#pragma once

#include <cstdint>
#include <string>

#include "rpc/transport/frame_format.h"

namespace rrpc::rpc {

// A frame whose content (after the length prefix) is `content`, taken verbatim.
inline std::string RawFrame(const std::string& content) {
  uint8_t prefix[kFrameLengthSize];
  EncodeBigEndian32(prefix, static_cast<uint32_t>(content.size()));
  return std::string(reinterpret_cast<const char*>(prefix), sizeof(prefix)) + content;
}

}  // namespace rrpc::rpc
