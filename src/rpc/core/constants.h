// Wire-level constants shared by the client and server sides. docs/wire-format.md explains them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace rrpc::rpc {

// Connection preamble: the client's first bytes, "RRPC" then a version byte and a flags byte.
inline constexpr uint8_t kMagic[4] = {'R', 'R', 'P', 'C'};
inline constexpr uint8_t kWireVersion = 1;
inline constexpr size_t kPreambleSize = 6;

// Call ids below zero are connection-level frames, never calls.
inline constexpr int32_t kNegotiateCallId = -2;
inline constexpr int32_t kControlCallId = -3;
// The transport-upgrade bootstrap (RDMA) right after negotiation: its body is the raw message.
inline constexpr int32_t kBootstrapCallId = -4;

}  // namespace rrpc::rpc
