// Sidecars from bytes an application holds, and back. A sidecar travels after a call's protobuf
// body without being serialized or copied on the way (RpcController::AddOutboundSidecar on a
// client, RpcContext::AddOutboundSidecar in a handler); these helpers are for the common case of
// bytes already in a std::string or a buffer. Thread-safe (pure functions).
//
//   ctl.AddOutboundSidecar(rrpc::SidecarFromBytes(payload));   // copies `payload` once
//   ...
//   std::string got = rrpc::SidecarToString(ctl.inbound_sidecar(0));
//
// To send bytes with no copy at all, write them into a Block yourself:
//   rrpc::BlockRef block = rrpc::Block::Allocate(n);   // fill block->data()[0, n)
//   ctl.AddOutboundSidecar(rrpc::BlockSlice{block, rrpc::Slice(block->data(), n)});
#pragma once

#include <string>

#include "rrpc/util/block.h"
#include "rrpc/util/slice.h"

namespace rrpc {

// A new Block holding a copy of `bytes`, as a sidecar that keeps its block alive (the caller may
// free `bytes` at once).
BlockSlice SidecarFromBytes(Slice bytes);

// A received sidecar's bytes as a string (a copy: valid after the controller or context is gone).
inline std::string SidecarToString(Slice sidecar) { return sidecar.ToString(); }

}  // namespace rrpc
