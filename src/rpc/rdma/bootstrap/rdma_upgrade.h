// RdmaUpgrade: one connection's side of the RDMA bootstrap (the TransportUpgrade of
// transport.h). The client makes its endpoint and offers its address; the server checks the
// offer, makes and connects its own endpoint and answers; the client checks the answer (its
// nonce, the backend) and connects. When the client offered a path probe, the server waits for
// its confirmation (follow, or stay on TCP when the probe or the connect failed) before it
// moves. Where either side can't or won't, both stay on TCP and the reason is counted. The one
// case that can't fall back (the server moved on and the client can't follow, e.g. a wrong
// nonce) closes the connection: never half-upgraded.
// The connection's reactor thread; Prepare hands the control-path verbs of Offer (client) or
// Answer (server), and PrepareAccept those of Accept (client: RTR/RTS, the path probe's connect
// and round trip), to the factory's setup thread (setup_thread.h) first, when it has one.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "rpc/rdma/bootstrap/path_probe.h"
#include "rpc/rdma/rdma_factory.h"
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

  bool Prepare(Slice offer, std::function<void()> ready) override;
  bool PrepareAccept(Slice answer, std::function<void()> ready) override;
  // RDMA_PROBE_REPLY: a client with probe_path asks for the server probe's answer; a server
  // always gives it.
  std::vector<int> Features() const override;
  void PeerFeatures(const std::vector<int>& features) override;
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
  // What the setup thread makes for Prepare, or connects for PrepareAccept (the endpoint and
  // probe lent by this upgrade); the job and this upgrade share it, and whichever lets go last
  // destroys it: on the setup thread when the connection closed first (its endpoint never
  // connected; or, server side, connected to a client that has not learned its address; or,
  // client side, connected to a server that sends nothing to it: nothing of it is in any CQ but
  // its own). The exception is `hand_back`. Declared first, the device and the SRQ context go
  // last.
  struct Setup {
    // Client, SRQ mode, lent toward a server that awaits no confirmation: that server may send to
    // the QP once connected, into the reactor's CQs, so an endpoint not taken back by Accept goes
    // back to the SRQ context's reactor (SrqContext::DiscardSoon) with the peer's grant (`share`,
    // set by DropEndpoint), whichever thread lets go last.
    ~Setup();
    bool hand_back = false;
    uint32_t share = 0;
    std::shared_ptr<RdmaDevice> device;
    std::shared_ptr<SrqContext> srq;
    Result<std::unique_ptr<RdmaEndpoint>> endpoint = Status::IllegalState("not made");
    // Server: the endpoint connected to the client's QP; client (PrepareAccept): to the server's.
    Status connect;
    Result<std::unique_ptr<PathProbe>> probe = std::unique_ptr<PathProbe>();
    // Server: the probe connected to the client's. Client: the probe's connect and round trip.
    Status probe_connect;
  };
  // The setup thread's job: fills `setup` with an endpoint on `gid` (the client's offer `peer`
  // for a server, else null) and, when `make_probe`, a path probe (server: answering the
  // client's when `answer_probe`).
  static void RunSetup(Setup* setup, const EndpointOptions& options, const GidEntry& gid,
                       const BootstrapMessage* peer, bool make_probe, bool answer_probe);
  // PrepareAccept's job: connects the lent endpoint to the server's QP (`peer`, its answer) and,
  // when the setup holds a probe, the probe to the server's and its round trip (awaiting the
  // server's answer when `await_answer`).
  static void RunConnect(Setup* setup, const BootstrapMessage& peer, MonoDelta probe_timeout,
                         bool await_answer);
  // Server: the probe answering the client's (`answer`), or only receiving its message.
  static Result<std::unique_ptr<PathProbe>> MakeServerProbe(RdmaDevice* device, bool answer);
  // Client: why the server's answer (decoded into `peer`, not a fallback) carries parameters this
  // side can't use; kNone when it can.
  FallbackReason CheckAnswer(const BootstrapMessage& peer, Status* detail) const;
  // Opens the device (once: a failure is counted and remembered), then makes the endpoint; on
  // failure counts the fallback and returns its reason. MakeEndpoint takes the prepared one when
  // there is one.
  FallbackReason OpenDevice();
  FallbackReason MakeEndpoint();
  // SRQ mode: the reactor's SRQ context, with the peer's initial grant reserved in it.
  FallbackReason ReserveSrq();
  // Server: why the client's offer (decoded into peer_) can't be followed; kNone when it can.
  FallbackReason CheckOffer(Status* detail);
  BootstrapMessage LocalMessage() const;
  std::string Fallback(FallbackReason reason, const Status& detail);
  // Gives up the endpoint (and the path probe) and, in SRQ mode, the initial grant reserved
  // for the peer.
  void DropEndpoint();
  // Client, after connecting: the path probe's connect and round trip (path_probe.h). OK without
  // a probe (null) or when the server made none. Any thread: touches only `probe`.
  static Status ProbePath(PathProbe* probe, const QpConnectParams& params, uint32_t peer_probe_qp,
                          MonoDelta timeout, bool await_answer);
  // Client, when the server awaits a confirmation: the checks of its answer and the probe
  // failed with `reason`; both sides stay on TCP.
  Status StayOnTcp(FallbackReason reason, const Status& detail);

  RdmaTransportFactory* const factory_;
  const bool server_side_;
  const Sockaddr remote_;
  const Sockaddr local_;
  GidEntry gid_;  // this connection's (OpenDevice)
  std::shared_ptr<RdmaDevice> device_;
  bool device_failed_ = false;       // OpenDevice failed (counted)
  bool srq_failed_ = false;          // ReserveSrq failed (counted)
  std::shared_ptr<Setup> prepared_;  // Prepare's, until the step takes it
  // PrepareAccept's, holding endpoint_ and probe_ until Accept takes them back; accepting_qp_
  // is the endpoint's QP number meanwhile (SRQ mode: forgotten by the context if we go first,
  // unless the Setup hands it back).
  std::shared_ptr<Setup> accepting_;
  uint32_t accepting_qp_ = 0;
  std::unique_ptr<RdmaEndpoint> endpoint_;
  std::unique_ptr<PathProbe> probe_;  // declared after endpoint_: goes first
  std::shared_ptr<SrqContext> srq_;   // SRQ mode: this reactor's
  uint32_t srq_grant_ = 0;            // reserved in srq_ for the peer
  BootstrapMessage peer_;
  uint64_t nonce_ = 0;
  bool agreed_ = false;
  // Server: the client offered a probe, so its confirmation decides (docs/wire-format.md).
  bool awaits_confirmation_ = false;
  // The peer listed RDMA_PROBE_REPLY (PeerFeatures): a server's probe answers the client's
  // message; a client awaits that answer (when this side listed it too).
  bool peer_probe_reply_ = false;
  // Client: what Confirmation() returns (empty: the server awaits none).
  std::string confirmation_;
};

}  // namespace rrpc::rdma
