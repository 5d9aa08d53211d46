// The RDMA bootstrap message both sides exchange over TCP right after the rrpc negotiation
// (docs/wire-format.md, "RDMA bootstrap", gives it byte by byte): what each needs to connect its
// queue pair (and its path probe) to the other's, or a fallback mark with the reason. Version 1
// is 64 bytes,
// big-endian. Pure functions: thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "rpc/rdma/verbs_types.h"
#include "rrpc/util/slice.h"
#include "rrpc/util/status.h"

namespace rrpc::rdma {

inline constexpr uint8_t kBootstrapVersion = 1;
inline constexpr size_t kBootstrapSize = 64;

// Why a connection stays on TCP. The names are the metric ids (rrpc_rdma_fallbacks_total).
enum class FallbackReason : uint16_t {
  kNone = 0,
  kDisabled = 1,      // this side or the peer has RDMA off
  kNoDevice = 2,      // no usable device (no library, no device, no active port)
  kResources = 3,     // registering memory or creating the queue pair failed
  kBadMessage = 4,    // the peer's bootstrap did not parse, or an unknown version
  kIncompatible = 5,  // different backends, or parameters one side can't use
  kNonce = 6,         // the answer is not for this connection's offer
  kConnect = 7,       // moving the queue pair to RTR/RTS failed
  kPath = 8,          // the path probe's message did not cross (path_probe.h); remembered per peer
  kGidType = 9,       // the GIDs are of different types (RoCE v1 and v2): no frame would cross
};
const char* FallbackReasonName(FallbackReason reason);

enum class BootstrapBackend : uint8_t { kVerbs = 0, kSoft = 1 };

struct BootstrapMessage {
  uint8_t version = kBootstrapVersion;
  bool fallback = false;  // this side won't upgrade; `reason` says why, the rest is zero
  bool srq = false;       // receives come from a shared receive queue (issue 13)
  FallbackReason reason = FallbackReason::kNone;
  BootstrapBackend backend = BootstrapBackend::kSoft;
  QpAddress qp;                     // qp_num, lid, gid, psn
  GidType gid_type = GidType::kIb;  // of qp.gid
  uint32_t path_mtu = 0;            // bytes
  uint32_t buffer_size = 0;         // bytes of each receive buffer: the largest message it takes
  uint32_t credits = 0;             // receive buffers posted for the peer: its initial credits
  uint32_t send_queue_depth = 0;
  uint32_t inline_cap = 0;  // the inline cap this side's device granted
  uint64_t nonce = 0;       // client: fresh per connection; server: echoes the client's
  // The path probe's QP number (path_probe.h; same LID, GID and PSN as `qp`); 0: this side
  // makes no probe, and the client then follows the server without one.
  uint32_t probe_qp = 0;
};

std::string EncodeBootstrap(const BootstrapMessage& m);
// NotSupported for another version; Corruption for a version-1 message that is not exactly 64
// bytes or sets a bit version 1 does not define (unknown flag, reason or backend, a reserved
// byte, a GID type above 2). What it accepts, EncodeBootstrap gives back byte for byte.
Status DecodeBootstrap(Slice bytes, BootstrapMessage* m);

}  // namespace rrpc::rdma
