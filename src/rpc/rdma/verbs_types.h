// The plain values of rrpc's narrow verbs interface (verbs.h): scatter-gather entries, work
// requests, work completions, queue-pair addresses and async events. Modelled on RC verbs, with
// only what the RDMA transport uses. Plain data: copy freely.
#pragma once

#include <array>
#include <cstdint>

#include "rrpc/util/status.h"

namespace rrpc::rdma {

// One contiguous piece of registered memory. `lkey` names the MemoryRegion that covers it.
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

struct SendWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
  bool signaled = true;      // false: completes without a work completion (still holds its slot)
  bool inline_data = false;  // the bytes are copied at post time; no lkey needed; <= inline cap
  bool has_imm = false;      // 32 bits of immediate data travel with the message
  uint32_t imm = 0;
};

struct RecvWr {
  uint64_t wr_id = 0;
  const Sge* sg_list = nullptr;
  int num_sge = 0;
};

enum class WcStatus : uint8_t {
  kSuccess,
  kLocalLengthError,      // the message did not fit the receive buffer (receiver side)
  kLocalProtectionError,  // an SGE outside the memory region its lkey names
  kFlushed,               // the queue pair was in ERR: the request never ran
  kRnrRetryExceeded,      // the peer had no receive posted, rnr_retry times over
  kRetryExceeded,         // the peer went away (its device or process)
  kRemoteInvalidRequest,  // the peer refused the message (its QP in ERR, or too long for it)
  kGeneralError,
};
const char* WcStatusName(WcStatus status);

enum class WcOpcode : uint8_t { kSend, kRecv };

struct WorkCompletion {
  uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  uint32_t byte_len = 0;  // receives: bytes placed
  uint32_t qp_num = 0;    // the local queue pair (demultiplexes a CQ shared by several)
  bool has_imm = false;
  uint32_t imm = 0;
};

using Gid = std::array<uint8_t, 16>;

// A GID table entry's type (verbs' ibv_gid_entry::gid_type, sysfs gid_attrs/types). Both ends of
// a RoCE connection must use the same: a RoCE v2 QP ignores v1 frames and the reverse.
enum class GidType : uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };
const char* GidTypeName(GidType type);

struct GidEntry {
  int index = 0;
  Gid gid{};
  GidType type = GidType::kIb;
  // The interface index of the netdev the entry belongs to (ibv_gid_entry::ndev_ifindex); 0
  // when unknown (no netdev, or a library without ibv_query_gid_ex).
  uint32_t ndev_ifindex = 0;
};

// What a peer learns about a queue pair (the RDMA bootstrap carries it) to connect to it.
struct QpAddress {
  uint32_t qp_num = 0;
  uint16_t lid = 0;
  Gid gid{};
  uint32_t psn = 0;  // first packet sequence number the QP sends
};

// How to connect a queue pair to its peer (INIT -> RTR -> RTS).
struct QpConnectParams {
  QpAddress remote;
  uint32_t local_psn = 0;
  uint32_t path_mtu = 1024;  // bytes: 256, 512, 1024, 2048 or 4096
  uint8_t rnr_retry = 0;     // 7: retry forever (as in IB); tests run with 0
  uint8_t retry_cnt = 7;
  uint8_t min_rnr_timer = 1;  // IB encoding; the software backend waits ~0.1 ms per step
  uint8_t timeout = 14;       // IB encoding: 4.096 us * 2^timeout
  int gid_index = 0;
  int port = 1;
  // Route with a global header (GRH): always on RoCE; on InfiniBand only across subnets
  // (NeedsGlobalRoute, rdma_endpoint.h).
  bool global = true;
  uint8_t traffic_class = 0;  // in the GRH (global routes only)
  // In the GRH (global routes only), 20 bits. On RoCE v2 it chooses the UDP source port, which
  // ECMP and LAG hash (mlx5; 0: the port comes from the two QP numbers instead). A connection's
  // data QPs and its path probes carry one label (ConnectionFlowLabel), so they take one path.
  uint32_t flow_label = 0;
  uint8_t service_level = 0;  // 0..15
};

inline constexpr uint32_t kFlowLabelMask = 0xFFFFF;

// The kernel's rdma_calc_flow_label: the label mlx5 derives for a RoCE v2 QP pair connected
// without one (either order of the QP numbers gives the same; may be 0).
inline uint32_t CalcFlowLabel(uint32_t qpn_a, uint32_t qpn_b) {
  uint64_t v = uint64_t{qpn_a} * qpn_b;
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<uint32_t>(v) & kFlowLabelMask;
}

// The flow label of the connection between data queue pairs `a` and `b`, which its path probes
// carry too: CalcFlowLabel, so a data QP takes the UDP source port it would take unlabelled;
// never 0 (0 means "no label").
inline uint32_t ConnectionFlowLabel(uint32_t a, uint32_t b) {
  const uint32_t label = CalcFlowLabel(a, b);
  return label != 0 ? label : 1;
}

// Whether a queue pair may use service level `sl` on its port: 0..15 on InfiniBand; 0..7 on RoCE
// (Ethernet), where the SL is the frames' 802.1p priority and mlx5 keeps only its low three bits
// (SL 8 would be sent as priority 0). InvalidArgument otherwise. Both backends' Connect check it.
Status CheckServiceLevel(uint8_t sl, bool ethernet);
// InvalidArgument for a flow label above 20 bits. Both backends' Connect check it.
Status CheckFlowLabel(uint32_t flow_label);
// InvalidArgument for a local ACK timeout outside 1..31 (the QP attribute's 5 bits; 0 is
// "infinite" to a NIC, which would never find a dead path). Both backends' Connect check it.
Status CheckAckTimeout(uint8_t timeout);

struct QpCaps {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;  // ignored with an SRQ
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;  // asked for at creation; QueuePair::caps() says what was granted
};

enum class QpState : uint8_t { kReset, kInit, kRtr, kRts, kError };
const char* QpStateName(QpState state);

enum class AsyncEventType : uint8_t {
  kQpFatal,           // the QP went to ERR on its own (fatal, request or access error)
  kQpLastWqeReached,  // a QP on an SRQ is in ERR and will take no more receives from it
  kCqError,           // a completion queue overflowed
  kSrqLimitReached,   // posted receives fell below the armed limit (the limit is then disarmed)
  kSrqError,          // the SRQ is lost
  kPortActive,        // the port came up (again)
  kPortError,         // the port went down: nothing leaves it until kPortActive
  kGidChange,         // the port's GID table changed (an address came or went)
  kLidChange,         // the port's LID changed (InfiniBand: the subnet manager gave a new one)
  kDeviceFatal,
  kOther,
};

// As verbs delivers them: a QP or SRQ event names its object only through the context pointer
// its creator set (QpInitAttr::context, ProtectionDomain::CreateSrq's `context`; nullptr when
// none was set), a CQ event through the CompletionQueue itself.
struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kOther;
  uint32_t qp_num = 0;      // QP events
  void* context = nullptr;  // QP and SRQ events: the creator's pointer; kCqError: the queue
};

}  // namespace rrpc::rdma
