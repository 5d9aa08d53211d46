// RdmaUpgrade: one connection's side of the RDMA bootstrap (the TransportUpgrade of
// transport.h). The client makes its endpoint and offers its address; the server checks the
// offer, makes and connects its own endpoint and answers; the client checks the answer (its
// nonce, the backend) and connects. When the client offered a path probe, the server waits for
// its confirmation (follow, or stay on TCP when the probe or the connect failed) before it
// moves. Where either side can't or won't, both stay on TCP and the reason is counted. The one
// case that can't fall back (the server moved on and the client can't follow, e.g. a wrong
// nonce) closes the connection: never half-upgraded.
// The connection's reactor thread.
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/rdma/path_probe.h"
#include "rrpc/rpc/rdma/rdma_factory.h"
#include "rrpc/util/sockaddr.h"

namespace rrpc::rdma {

class RdmaUpgrade final : public rpc::TransportUpgrade {
 public:
  // `remote`: the peer (unset when unknown: no path is remembered for it). `local`: the address
  // the bootstrap socket is bound to, which chooses the connection's GID (unset: the port's
  // default).
  RdmaUpgrade(RdmaTransportFactory* factory, bool server_side, const Sockaddr& remote,
              const Sockaddr& local = Sockaddr())
      : factory_(factory), server_side_(server_side), remote_(remote), local_(local) {}
  ~RdmaUpgrade() override { DropEndpoint(); }

  std::string Offer() override;
  std::string Answer(Slice offer) override;
  Status Accept(Slice answer) override;
  std::string Confirmation() override { return confirmation_; }
  bool AwaitsConfirmation() const override { return awaits_confirmation_; }
  Status Confirm(Slice confirmation) override;
  void PeerDeclined() override;
  bool agreed() const override { return agreed_; }
  Result<std::unique_ptr<rpc::Transport>> Upgrade(rpc::DetachedStream stream) override;

 private:
  // Opens the device, then makes the endpoint; on failure counts the fallback and returns its
  // reason.
  FallbackReason OpenDevice();
  FallbackReason MakeEndpoint();
  BootstrapMessage LocalMessage() const;
  std::string Fallback(FallbackReason reason, const Status& detail);
  // Gives up the endpoint (and the path probe) and, in SRQ mode, the initial grant reserved
  // for the peer.
  void DropEndpoint();
  // Client, after connecting: the path probe's round trip (path_probe.h). OK without a probe.
  Status ProbePath();
  // Client, when the server awaits a confirmation: the checks of its answer and the probe
  // failed with `reason`; both sides stay on TCP.
  Status StayOnTcp(FallbackReason reason, const Status& detail);

  RdmaTransportFactory* const factory_;
  const bool server_side_;
  const Sockaddr remote_;
  const Sockaddr local_;
  GidEntry gid_;  // this connection's (OpenDevice)
  std::shared_ptr<RdmaDevice> device_;
  std::unique_ptr<RdmaEndpoint> endpoint_;
  std::unique_ptr<PathProbe> probe_;  // declared after endpoint_: goes first
  std::shared_ptr<SrqContext> srq_;   // SRQ mode: this reactor's
  uint32_t srq_grant_ = 0;            // reserved in srq_ for the peer
  BootstrapMessage peer_;
  uint64_t nonce_ = 0;
  bool agreed_ = false;
  // Server: the client offered a probe, so its confirmation decides (docs/wire-format.md).
  bool awaits_confirmation_ = false;
  // Client: what Confirmation() returns (empty: the server awaits none).
  std::string confirmation_;
};

}  // namespace rrpc::rdma
