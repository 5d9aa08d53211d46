// PathProbe: a throwaway RC queue pair that proves, before a connection leaves TCP, that RDMA
// messages cross the path to the peer (docs/rdma.md, "The path probe"). A path can let queue
// pairs reach RTR/RTS and still carry nothing (UDP 4791 filtered, a RoCE v1/v2 mismatch, an MTU
// the fabric drops, in one direction or both): the connection would then commit to RDMA and fail
// as the QP's retries run out, again on every reconnect. The server makes a probe with one
// receive posted and puts its QP number into its bootstrap answer; the client's probe, whose
// number went into the offer, sends it one message of a path MTU and waits for the
// acknowledgement (its work completion) and, when the server answers probes (RDMA_PROBE_REPLY),
// for the server's message of the same size (probe_responder.h), before the client follows the
// server to RDMA. Each probe has its own CQ and memory, so the connection's queues (private or
// the reactor's SRQ) see nothing of it.
// One thread at a time: the connection's reactor, or a setup thread while the connection's
// upgrade lends it there (RdmaUpgrade: made; client side, connected and its round trip); an
// answering probe's Answer runs on its responder's thread, from Connect until it is destroyed.
#pragma once

#include <memory>
#include <vector>

#include "rpc/rdma/verbs.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rdma {

class ProbeResponder;

class PathProbe {
 public:
  // The largest message a probe sends (a path MTU: 4096 at most).
  static constexpr uint32_t kMaxBytes = 4096;

  // The QP ends in INIT with its one receive posted. `responder` (a server answering the
  // client's probe; null otherwise): its CQ signals the responder's channel, and once connected
  // it answers the client's message with one of the same size. The responder outlives it.
  static Result<std::unique_ptr<PathProbe>> Create(Context* ctx, ProtectionDomain* pd,
                                                   ProbeResponder* responder = nullptr);
  ~PathProbe();

  // This probe's QP number, for the bootstrap message (it shares the connection's LID, GID and
  // first PSN).
  uint32_t qp_num() const { return qp_->qp_num(); }
  // RTR/RTS towards the peer's probe: `params` are the connection's (RdmaEndpoint::
  // ConnectParams: path, PSNs), the remote QP number replaced by the peer probe's. An answering
  // probe is then watched by its responder.
  Status Connect(QpConnectParams params, uint32_t remote_qp_num);
  // Client: sends one message of `bytes` (<= kMaxBytes) and waits until `timeout` passes for its
  // completion and, when `await_answer`, for the server's answer of as many bytes. OK when the
  // peer's device acknowledged it (and the answer came); NetworkError otherwise (a completion's
  // status, or the wait ran out: the QP then goes to ERR).
  Status RoundTrip(uint32_t bytes, MonoDelta timeout, bool await_answer);
  // Server, on its responder's thread when its CQ signals: answers a received message with one
  // of its size. Sends at most once; its own completion is never read.
  void Answer();

 private:
  PathProbe() = default;

  // The receive fills the first half of the buffer; sends go from the second.
  uint8_t* send_bytes() { return buffer_.data() + kMaxBytes; }

  // Destroyed in reverse: the QP before its CQ and memory (with a responder, the QP and CQ
  // under its lock, in the destructor).
  std::vector<uint8_t> buffer_;
  std::unique_ptr<MemoryRegion> mr_;
  std::unique_ptr<CompletionQueue> cq_;
  std::unique_ptr<QueuePair> qp_;
  ProbeResponder* responder_ = nullptr;
  bool watched_ = false;   // by responder_, from Connect
  bool answered_ = false;  // responder's thread only
};

}  // namespace rrpc::rdma
