// PathProbe: a throwaway RC queue pair that proves, before a connection leaves TCP, that RDMA
// messages cross the path to the peer (docs/rdma.md, "The path probe"). A path can let queue
// pairs reach RTR/RTS and still carry nothing (UDP 4791 filtered, a RoCE v1/v2 mismatch, an MTU
// the fabric drops): the connection would then commit to RDMA and fail as the QP's retries run
// out, again on every reconnect. The server makes a probe with one receive posted and puts its
// QP number into its bootstrap answer; the client's probe, whose number went into the offer,
// sends it one message of a path MTU and waits for the acknowledgement (its work completion)
// before the client follows the server to RDMA. Each probe has its own CQ and memory, so the
// connection's queues (private or the reactor's SRQ) see nothing of it.
// One thread at a time: the connection's reactor, or a setup thread while the connection's
// upgrade lends it there (RdmaUpgrade: made; client side, connected and its round trip).
#pragma once

#include <memory>
#include <vector>

#include "rpc/rdma/verbs.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {

class PathProbe {
 public:
  // The largest message a probe sends (a path MTU: 4096 at most).
  static constexpr uint32_t kMaxBytes = 4096;

  // The QP ends in INIT; `receiver` (the server) posts its one receive.
  static Result<std::unique_ptr<PathProbe>> Create(Context* ctx, ProtectionDomain* pd,
                                                   bool receiver);
  ~PathProbe();

  // This probe's QP number, for the bootstrap message (it shares the connection's LID, GID and
  // first PSN).
  uint32_t qp_num() const { return qp_->qp_num(); }
  // RTR/RTS towards the peer's probe: `params` are the connection's (RdmaEndpoint::
  // ConnectParams: path, PSNs), the remote QP number replaced by the peer probe's.
  Status Connect(QpConnectParams params, uint32_t remote_qp_num);
  // Client: sends one message of `bytes` (<= kMaxBytes) and waits for its completion until
  // `timeout` passes. OK when the peer's device acknowledged it; NetworkError otherwise (the
  // completion's status, or the wait ran out: the QP then goes to ERR).
  Status RoundTrip(uint32_t bytes, MonoDelta timeout);

 private:
  PathProbe() = default;

  // Destroyed in reverse: the QP before its CQ and memory.
  std::vector<uint8_t> buffer_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
};

}  // namespace rrpc::rdma
