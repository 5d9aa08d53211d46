// DeliverFrames: the one loop by which a byte-stream transport (TCP, TLS) hands what its
// FrameReader holds to the connection. Shared so the order of delivery (preamble first, then
// frames), the handling of a bad frame and the stop conditions stay the same on every transport.
// Runs on the connection's reactor thread, like the transport that calls it.
#pragma once

#include <cstddef>
#include <utility>

#include "rpc/transport/frame_reader.h"
#include "rpc/transport/transport.h"

namespace rrpc::rpc {

// Delivers, in order: the connection preamble if one is still expected (`*preamble_bytes` is its
// size, set to 0 once delivered), then each complete frame. Stops when the buffered bytes run out,
// after reporting a bad frame as a protocol error, or as soon as `delivering()` turns false (a host
// callback closed the transport or handed its stream over) or a callback expects another preamble.
template <typename StillDelivering>
void DeliverFrames(FrameReader* reader, size_t* preamble_bytes, TransportHost* host,
                   StillDelivering delivering) {
  if (*preamble_bytes > 0) {
    Slice preamble;
    if (!reader->NextRaw(*preamble_bytes, &preamble)) return;
    *preamble_bytes = 0;
    host->OnPreamble(preamble);
  }
  BlockSlice frame;
  while (delivering() && *preamble_bytes == 0) {
    Result<bool> next = reader->NextFrame(&frame);
    if (!next.ok()) {
      host->OnProtocolError(next.status());
      return;
    }
    if (!*next) return;
    host->OnFrame(std::move(frame));
  }
}

}  // namespace rrpc::rpc
