#include "rpc/rdma/bootstrap/rdma_upgrade.h"

#include <algorithm>
#include <cerrno>
#include <random>
#include <utility>

#include "rpc/rdma/async_events.h"
#include "rpc/rdma/bootstrap/gid_choice.h"
#include "rrpc/rpc/rpc_header.pb.h"

namespace rrpc::rdma {
namespace {

// The smallest receive buffer worth a connection: a message header and some payload.
constexpr uint32_t kMinPeerBuffer = 256;

BootstrapBackend BackendOf(RdmaBackend b) {
  return b == RdmaBackend::kSoft ? BootstrapBackend::kSoft : BootstrapBackend::kVerbs;
}

// A create that fails with EIO or ENODEV means the device is gone (mlx5 after a fatal error, a
// NIC removed), whether or not anyone read its fatal event: in an idle process no connection
// watches the async fd. Its owner (the factory) then drops it and reopens it after its backoff,
// instead of failing every later connection as `resources`.
Status NoteCreateFailure(const RdmaDevice& device, const Status& s) {
  if (s.posix_code() == EIO || s.posix_code() == ENODEV) {
    AsyncEventRouter::DeviceFailed(device.context.get());
  }
  return s;
}

}  // namespace

FallbackReason RdmaUpgrade::OpenDevice() {
  if (device_ != nullptr) return FallbackReason::kNone;
  if (device_failed_) return FallbackReason::kNoDevice;  // counted when it failed
  Result<std::shared_ptr<RdmaDevice>> dev = factory_->Device(local_);
  if (!dev.ok()) {
    device_failed_ = true;
    factory_->CountFallback(FallbackReason::kNoDevice, dev.status());
    return FallbackReason::kNoDevice;
  }
  // This connection's GID: the port's entry of the bootstrap socket's address (else of its
  // netdev, looked up only where the table says which netdev each entry is on). The port as
  // last read: its GID table and LID follow their change events.
  const PortInfo port = (*dev)->context->port();
  if (!port.active) {
    device_failed_ = true;
    factory_->CountFallback(
        FallbackReason::kNoDevice,
        Status::NetworkError("the RDMA port is down: connections stay on TCP until it is up"));
    return FallbackReason::kNoDevice;
  }
  device_ = std::move(dev).value();
  uint32_t ifindex = 0;
  if (local_.family() != 0 && !port.gid_pinned && !TableHoldsAddress(port.gid_table, local_) &&
      std::any_of(port.gid_table.begin(), port.gid_table.end(),
                  [](const GidEntry& e) { return e.ndev_ifindex != 0; })) {
    ifindex = LocalInterfaceIndex(local_);
  }
  gid_ = ConnectionGid(port, local_, ifindex);
  return FallbackReason::kNone;
}

FallbackReason RdmaUpgrade::ReserveSrq() {
  if (srq_ != nullptr) return FallbackReason::kNone;   // reserved by Prepare
  if (srq_failed_) return FallbackReason::kResources;  // counted when it failed
  const RdmaOptions& o = factory_->options();
  Result<std::shared_ptr<SrqContext>> srq = factory_->SrqForThisThread(device_);
  if (!srq.ok()) {
    srq_failed_ = true;
    factory_->CountFallback(FallbackReason::kResources, NoteCreateFailure(*device_, srq.status()));
    return FallbackReason::kResources;
  }
  if (!(*srq)->ReserveInitial(o.srq.initial_credits)) {
    srq_failed_ = true;
    factory_->CountFallback(FallbackReason::kResources,
                            Status::ServiceUnavailable("the reactor's SRQ pool is at its cap "
                                                       "(rdma_srq_max_memory)"));
    return FallbackReason::kResources;
  }
  srq_ = std::move(srq).value();
  srq_grant_ = o.srq.initial_credits;
  return FallbackReason::kNone;
}

FallbackReason RdmaUpgrade::MakeEndpoint() {
  const RdmaOptions& o = factory_->options();
  Result<std::unique_ptr<RdmaEndpoint>> ep = Status::IllegalState("no endpoint");
  if (prepared_ != nullptr) {
    ep = std::move(prepared_->endpoint);  // made on the setup thread (SRQ reserved by Prepare)
  } else if (o.use_srq && !o.transport.busy_poll) {
    // SRQ mode: the reactor's SRQ, with the peer's initial grant reserved in its pool.
    const FallbackReason why = ReserveSrq();
    if (why != FallbackReason::kNone) return why;
    ep = RdmaEndpoint::CreateShared(device_->context.get(), device_->pd.get(), o.endpoint,
                                    srq_.get());
  } else {
    ep = RdmaEndpoint::Create(device_->context.get(), device_->pd.get(), o.endpoint);
  }
  if (ep.ok()) (*ep)->UseGid(gid_);  // a prepared one has it already
  if (ep.ok() && srq_ != nullptr) srq_->Expect((*ep)->qp()->qp_num());
  if (!ep.ok()) {
    DropEndpoint();
    factory_->CountFallback(FallbackReason::kResources, NoteCreateFailure(*device_, ep.status()));
    return FallbackReason::kResources;
  }
  endpoint_ = std::move(ep).value();
  return FallbackReason::kNone;
}

FallbackReason RdmaUpgrade::CheckOffer(Status* detail) {
  if (peer_.backend != BackendOf(factory_->options().backend)) {
    *detail = Status::NotSupported("the client uses the other RDMA backend");
    return FallbackReason::kIncompatible;
  }
  const GidType ours = gid_.type;
  if (peer_.gid_type != ours) {
    *detail = Status::NotSupported(std::string("the client's GID is ") +
                                   GidTypeName(peer_.gid_type) + ", ours " + GidTypeName(ours) +
                                   ": choose GIDs of one type on both sides "
                                   "(--rdma_gid_index, docs/rdma.md)");
    return FallbackReason::kGidType;
  }
  if (peer_.buffer_size < kMinPeerBuffer || peer_.credits < 3) {
    *detail = Status::InvalidArgument("client's receive buffers too small or too few");
    return FallbackReason::kIncompatible;
  }
  return FallbackReason::kNone;
}

std::vector<int> RdmaUpgrade::Features() const {
  if (!server_side_ && !factory_->options().probe_path) return {};
  return {rpc::RDMA_PROBE_REPLY};
}

void RdmaUpgrade::PeerFeatures(const std::vector<int>& features) {
  peer_probe_reply_ =
      std::find(features.begin(), features.end(), rpc::RDMA_PROBE_REPLY) != features.end();
}

Result<std::unique_ptr<PathProbe>> RdmaUpgrade::MakeServerProbe(RdmaDevice* device, bool answer) {
  ProbeResponder* responder = nullptr;
  if (answer) {
    RRPC_ASSIGN_OR_RETURN(responder, device->probe_responder());
  }
  return PathProbe::Create(device->context.get(), device->pd.get(), responder);
}

bool RdmaUpgrade::Prepare(Slice offer, std::function<void()> ready) {
  SetupThread* setup_thread = factory_->setup_thread();
  if (setup_thread == nullptr) return false;
  const RdmaOptions& o = factory_->options();
  // Where the step would fall back before making anything, nothing is prepared: the step then
  // falls back (and counts why) as without Prepare.
  std::shared_ptr<const BootstrapMessage> peer;
  bool make_probe;
  if (server_side_) {
    if (!DecodeBootstrap(offer, &peer_).ok() || peer_.fallback) return false;
    if (OpenDevice() != FallbackReason::kNone) return false;
    Status detail;
    if (CheckOffer(&detail) != FallbackReason::kNone) return false;
    peer = std::make_shared<const BootstrapMessage>(peer_);
    make_probe = peer_.probe_qp != 0;
  } else {
    if (o.probe_path && remote_.family() != 0 && factory_->PathKnownDead(remote_)) return false;
    if (OpenDevice() != FallbackReason::kNone) return false;
    make_probe = o.probe_path;
  }
  // The reactor's SRQ context (made on this reactor's first connection, here) and the grant are
  // reserved on this thread; the job makes and connects the queue pair.
  if (o.use_srq && !o.transport.busy_poll && ReserveSrq() != FallbackReason::kNone) {
    return false;  // counted; the step falls back
  }
  auto setup = std::make_shared<Setup>();
  setup->device = device_;
  setup->srq = srq_;
  // The job may outlive the factory (transports hold the setup thread): it holds what it uses.
  const bool queued = setup_thread->Submit([setup, eo = o.endpoint, gid = gid_, peer, make_probe,
                                            answer = peer_probe_reply_, ready]() mutable {
    RunSetup(setup.get(), eo, gid, peer.get(), make_probe, answer);
    setup.reset();  // the last reference when the connection has gone: its endpoint goes here
    ready();
  });
  if (!queued) return false;  // the queue is full: this connection sets up on its reactor
  prepared_ = std::move(setup);
  return true;
}

void RdmaUpgrade::RunSetup(Setup* s, const EndpointOptions& o, const GidEntry& gid,
                           const BootstrapMessage* peer, bool make_probe, bool answer_probe) {
  Context* ctx = s->device->context.get();
  ProtectionDomain* pd = s->device->pd.get();
  s->endpoint = s->srq != nullptr ? RdmaEndpoint::CreateShared(ctx, pd, o, s->srq.get())
                                  : RdmaEndpoint::Create(ctx, pd, o);
  if (!s->endpoint.ok()) return;
  RdmaEndpoint* ep = s->endpoint->get();
  ep->UseGid(gid);
  if (peer != nullptr) s->connect = ep->Connect(peer->qp, peer->path_mtu);
  if (!make_probe || !s->connect.ok()) return;
  s->probe =
      peer != nullptr ? MakeServerProbe(s->device.get(), answer_probe) : PathProbe::Create(ctx, pd);
  if (s->probe.ok() && peer != nullptr) {
    s->probe_connect =
        (*s->probe)->Connect(ep->ConnectParams(peer->qp, peer->path_mtu), peer->probe_qp);
  }
}

RdmaUpgrade::Setup::~Setup() {
  if (hand_back && endpoint.ok() && *endpoint != nullptr) {
    srq->DiscardSoon(std::move(*endpoint), share);
  }
}

void RdmaUpgrade::DropEndpoint() {
  prepared_.reset();  // a job still running finishes without this upgrade
  if (accepting_ != nullptr) {
    // The endpoint is lent to PrepareAccept's job. Toward a server awaiting our confirmation,
    // which sends nothing to its QP, the job destroys it on the setup thread when it ends: as for
    // a QP never connected, the reactor's CQs hold nothing of it. Otherwise its QP stays known
    // to the context, and the Setup hands it back to this reactor with the peer's grant.
    if (accepting_->hand_back) {
      accepting_->share = std::exchange(srq_grant_, 0);
    } else if (srq_ != nullptr) {
      srq_->Forget(accepting_qp_);
    }
    accepting_.reset();
    accepting_qp_ = 0;
  }
  probe_.reset();
  // Never connected: destroyed now; connected (the peer may have sent already): retired, and
  // destroyed once drained.
  if (srq_ != nullptr && endpoint_ != nullptr) srq_->Discard(std::move(endpoint_), 0);
  endpoint_.reset();
  if (srq_ != nullptr) srq_->Release(srq_grant_);
  srq_.reset();
  srq_grant_ = 0;
}

BootstrapMessage RdmaUpgrade::LocalMessage() const {
  BootstrapMessage m;
  m.backend = BackendOf(factory_->options().backend);
  m.qp = endpoint_->address();
  m.gid_type = endpoint_->gid().type;
  m.path_mtu = endpoint_->port().active_mtu;
  m.buffer_size = endpoint_->options().buffer_size;
  m.srq = srq_ != nullptr;
  m.credits = srq_ != nullptr ? srq_grant_ : endpoint_->options().receive_buffers;
  m.send_queue_depth = endpoint_->send_queue_depth();
  m.inline_cap = endpoint_->inline_cap();
  m.nonce = nonce_;
  m.probe_qp = probe_ != nullptr ? probe_->qp_num() : 0;
  return m;
}

std::string RdmaUpgrade::Fallback(FallbackReason reason, const Status& detail) {
  if (!detail.ok()) factory_->CountFallback(reason, detail);
  DropEndpoint();
  BootstrapMessage m;
  m.fallback = true;
  m.reason = reason;
  m.backend = BackendOf(factory_->options().backend);
  m.nonce = nonce_;
  return EncodeBootstrap(m);
}

std::string RdmaUpgrade::Offer() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  nonce_ = rng();
  const RdmaOptions& o = factory_->options();
  if (o.probe_path && remote_.family() != 0 && factory_->PathKnownDead(remote_)) {
    return Fallback(FallbackReason::kPath,
                    Status::NetworkError("an RDMA path probe to " + remote_.ToString() +
                                         " failed: its connections stay on TCP"));
  }
  FallbackReason why = OpenDevice();
  if (why == FallbackReason::kNone) why = MakeEndpoint();
  if (why == FallbackReason::kNone && o.probe_path) {
    Result<std::unique_ptr<PathProbe>> probe =
        prepared_ != nullptr ? std::move(prepared_->probe)
                             : PathProbe::Create(device_->context.get(), device_->pd.get());
    if (!probe.ok()) {
      factory_->CountFallback(FallbackReason::kResources,
                              NoteCreateFailure(*device_, probe.status()));
      why = FallbackReason::kResources;
    } else {
      probe_ = std::move(probe).value();
    }
  }
  prepared_.reset();
  if (why != FallbackReason::kNone) return Fallback(why, Status::OK());  // counted already
  return EncodeBootstrap(LocalMessage());
}

std::string RdmaUpgrade::Answer(Slice offer) {
  Status s = DecodeBootstrap(offer, &peer_);
  if (!s.ok()) return Fallback(FallbackReason::kBadMessage, s);
  nonce_ = peer_.nonce;  // echoed: the answer belongs to this connection's offer
  if (peer_.fallback) {
    return Fallback(
        peer_.reason == FallbackReason::kNone ? FallbackReason::kDisabled : peer_.reason,
        Status::NotSupported("the client can't use RDMA"));
  }
  FallbackReason why = OpenDevice();
  if (why != FallbackReason::kNone) return Fallback(why, Status::OK());  // counted
  why = CheckOffer(&s);
  if (why != FallbackReason::kNone) return Fallback(why, s);
  // Prepared (the same offer): made and connected on the setup thread; taken here.
  const std::shared_ptr<Setup> prepared = prepared_;
  why = MakeEndpoint();
  prepared_.reset();
  if (why != FallbackReason::kNone) return Fallback(why, Status::OK());
  s = prepared != nullptr ? prepared->connect : endpoint_->Connect(peer_.qp, peer_.path_mtu);
  if (!s.ok()) return Fallback(FallbackReason::kConnect, s);
  if (peer_.probe_qp != 0) {
    // The client's probe (its option, whatever ours) sends to ours, which answers when the
    // client asked (RDMA_PROBE_REPLY), then the client confirms: this side moves only then, and
    // keeps its probe (its receive posted) until it does.
    Result<std::unique_ptr<PathProbe>> probe =
        prepared != nullptr ? std::move(prepared->probe)
                            : MakeServerProbe(device_.get(), peer_probe_reply_);
    if (!probe.ok()) {
      return Fallback(FallbackReason::kResources, NoteCreateFailure(*device_, probe.status()));
    }
    probe_ = std::move(probe).value();
    s = prepared != nullptr
            ? prepared->probe_connect
            : probe_->Connect(endpoint_->ConnectParams(peer_.qp, peer_.path_mtu), peer_.probe_qp);
    if (!s.ok()) return Fallback(FallbackReason::kConnect, s);
    awaits_confirmation_ = true;
    return EncodeBootstrap(LocalMessage());
  }
  agreed_ = true;
  return EncodeBootstrap(LocalMessage());
}

Status RdmaUpgrade::Confirm(Slice confirmation) {
  awaits_confirmation_ = false;
  probe_.reset();  // the client's probe message came or is gone for good
  BootstrapMessage m;
  Status s = DecodeBootstrap(confirmation, &m);
  if (s.ok() && m.nonce != nonce_) {
    s = Status::Corruption("RDMA bootstrap confirmation carries another connection's nonce");
  }
  if (!s.ok()) {
    factory_->CountFallback(FallbackReason::kBadMessage, s);
    DropEndpoint();
    return s.CloneAndPrepend("RDMA bootstrap confirmation");
  }
  if (m.fallback) {
    // The client stays on TCP (its probe or its connect failed): so does this side.
    factory_->CountFallback(
        m.reason == FallbackReason::kNone ? FallbackReason::kDisabled : m.reason,
        Status::NotSupported("the client stays on TCP"));
    DropEndpoint();
    return Status::OK();
  }
  agreed_ = true;
  return Status::OK();
}

FallbackReason RdmaUpgrade::CheckAnswer(const BootstrapMessage& peer, Status* detail) const {
  if (peer.backend != BackendOf(factory_->options().backend) || peer.buffer_size < kMinPeerBuffer ||
      peer.credits < 3) {
    *detail = Status::NotSupported("RDMA bootstrap answer with parameters this side can't use");
    return FallbackReason::kIncompatible;
  }
  if (peer.gid_type != endpoint_->gid().type) {
    *detail = Status::NotSupported("RDMA bootstrap answer with a GID of another type");
    return FallbackReason::kGidType;
  }
  return FallbackReason::kNone;
}

bool RdmaUpgrade::PrepareAccept(Slice answer, std::function<void()> ready) {
  SetupThread* setup_thread = factory_->setup_thread();
  if (setup_thread == nullptr || endpoint_ == nullptr) return false;
  // Where Accept stops before connecting (a fallback, a bad or unusable answer), nothing is
  // prepared: Accept decides on the reactor, with no verb to run.
  BootstrapMessage peer;
  Status detail;
  if (!DecodeBootstrap(answer, &peer).ok() || peer.fallback || peer.nonce != nonce_ ||
      CheckAnswer(peer, &detail) != FallbackReason::kNone) {
    return false;
  }
  const bool confirm = probe_ != nullptr && peer.probe_qp != 0;
  auto setup = std::make_shared<Setup>();
  // SRQ mode: a server awaiting no confirmation has moved to RDMA and may send to our QP once it
  // is connected, into the reactor's shared CQs: were the connection to close meanwhile, the
  // reactor retires the endpoint (hand_back), the job does not destroy it.
  setup->hand_back = srq_ != nullptr && !confirm;
  setup->device = device_;
  setup->srq = srq_;
  const uint32_t qp_num = endpoint_->qp()->qp_num();
  setup->endpoint = std::move(endpoint_);
  if (confirm) setup->probe = std::move(probe_);
  // As Prepare's job: holds what it uses, and destroys the endpoint and probe (or hands the
  // endpoint back) when the connection has gone.
  const bool queued =
      setup_thread->Submit([setup, peer, timeout = factory_->options().probe_timeout,
                            await = peer_probe_reply_, ready]() mutable {
        RunConnect(setup.get(), peer, timeout, await);
        setup.reset();
        ready();
      });
  if (!queued) {  // the queue is full: Accept connects on the reactor
    endpoint_ = std::move(setup->endpoint).value();
    if (confirm) probe_ = std::move(setup->probe).value();
    return false;
  }
  accepting_ = std::move(setup);
  accepting_qp_ = qp_num;
  return true;
}

void RdmaUpgrade::RunConnect(Setup* s, const BootstrapMessage& peer, MonoDelta probe_timeout,
                             bool await_answer) {
  RdmaEndpoint* ep = s->endpoint->get();
  s->connect = ep->Connect(peer.qp, peer.path_mtu);
  if (!s->connect.ok()) return;
  s->probe_connect = ProbePath(s->probe->get(), ep->ConnectParams(peer.qp, peer.path_mtu),
                               peer.probe_qp, probe_timeout, await_answer);
}

Status RdmaUpgrade::Accept(Slice answer) {
  // Prepared (PrepareAccept, the same answer): the endpoint and the probe come back, connected
  // and probed on the setup thread.
  const std::shared_ptr<Setup> connected = std::move(accepting_);
  accepting_qp_ = 0;
  if (connected != nullptr) {
    endpoint_ = std::move(connected->endpoint).value();
    std::unique_ptr<PathProbe> probe = std::move(connected->probe).value();
    if (probe != nullptr) probe_ = std::move(probe);
  }
  Status s = DecodeBootstrap(answer, &peer_);
  if (s.ok() && peer_.fallback) {
    // Both stay on TCP. Counted here only when the reason is the server's own (the client
    // counted its own in OpenDevice/MakeEndpoint).
    if (endpoint_ != nullptr) {
      factory_->CountFallback(
          peer_.reason == FallbackReason::kNone ? FallbackReason::kDisabled : peer_.reason,
          Status::NotSupported("the server can't use RDMA"));
    }
    DropEndpoint();
    return Status::OK();
  }
  if (endpoint_ == nullptr) {
    // We offered a fallback; a server answering otherwise breaks the protocol.
    return Status::Corruption("RDMA bootstrap: the server upgrades after a fallback offer");
  }
  // A server that answered our probe waits for our confirmation: whatever stops us following
  // after a well-formed answer keeps both sides on TCP. Otherwise the server has moved to RDMA,
  // and anything that stops us following closes the connection instead of leaving it
  // half-upgraded.
  const bool confirm = s.ok() && peer_.nonce == nonce_ && probe_ != nullptr && peer_.probe_qp != 0;
  Status fail;
  if (!s.ok()) {
    fail = s;
  } else if (peer_.nonce != nonce_) {
    fail = Status::Corruption("RDMA bootstrap answer carries another connection's nonce");
  } else if (const FallbackReason why = CheckAnswer(peer_, &fail); why != FallbackReason::kNone) {
    if (confirm) return StayOnTcp(why, fail);
  } else {
    fail = connected != nullptr ? connected->connect : endpoint_->Connect(peer_.qp, peer_.path_mtu);
    if (!fail.ok() && confirm) return StayOnTcp(FallbackReason::kConnect, fail);
    if (fail.ok()) {
      fail = connected != nullptr
                 ? connected->probe_connect
                 : ProbePath(probe_.get(), endpoint_->ConnectParams(peer_.qp, peer_.path_mtu),
                             peer_.probe_qp, factory_->options().probe_timeout, peer_probe_reply_);
      probe_.reset();
      if (!fail.ok()) {
        // This connection and the next ones to this server stay on TCP.
        if (remote_.family() != 0) factory_->RememberDeadPath(remote_);
        return StayOnTcp(FallbackReason::kPath, fail);
      }
    }
  }
  if (!fail.ok()) {
    factory_->CountFallback(!s.ok()                 ? FallbackReason::kBadMessage
                            : peer_.nonce != nonce_ ? FallbackReason::kNonce
                                                    : FallbackReason::kConnect,
                            fail);
    DropEndpoint();
    return fail.CloneAndPrepend("RDMA bootstrap");
  }
  if (confirm) {
    BootstrapMessage follow;
    follow.backend = BackendOf(factory_->options().backend);
    follow.nonce = nonce_;
    confirmation_ = EncodeBootstrap(follow);
  }
  agreed_ = true;
  return Status::OK();
}

Status RdmaUpgrade::StayOnTcp(FallbackReason reason, const Status& detail) {
  factory_->CountFallback(reason, detail);
  confirmation_ = Fallback(reason, Status::OK());  // counted above; drops the endpoint
  return Status::OK();
}

Status RdmaUpgrade::ProbePath(PathProbe* probe, const QpConnectParams& params,
                              uint32_t peer_probe_qp, MonoDelta timeout, bool await_answer) {
  if (probe == nullptr || peer_probe_qp == 0) return Status::OK();  // the server makes none
  Status s = probe->Connect(params, peer_probe_qp);
  if (s.ok()) s = probe->RoundTrip(params.path_mtu, timeout, await_answer);
  return s;
}

void RdmaUpgrade::PeerDeclined() {
  if (endpoint_ != nullptr) {
    factory_->CountFallback(FallbackReason::kDisabled,
                            Status::NotSupported("the server has RDMA off"));
  }
  DropEndpoint();
}

Result<std::unique_ptr<rpc::Transport>> RdmaUpgrade::Upgrade(rpc::DetachedStream stream) {
  if (!agreed_ || endpoint_ == nullptr) return Status::IllegalState("no RDMA upgrade agreed");
  if (!stream.unread.empty()) {
    return Status::Corruption("bytes on TCP after the RDMA bootstrap");
  }
  RdmaTransportOptions topts = factory_->options().transport;
  topts.backend = factory_->options().backend == RdmaBackend::kSoft ? "soft" : "verbs";
  topts.copy_side = server_side_ ? CopySide::kServer : CopySide::kClient;
  factory_->CountUpgrade();
  SrqBinding binding{std::move(srq_), srq_grant_};
  srq_grant_ = 0;  // the transport owns the grant now
  RdmaMetrics metrics;
  std::shared_ptr<void> keep_alive = factory_->KeepAlive(device_, &metrics);
  return std::unique_ptr<rpc::Transport>(
      new RdmaTransport(std::move(endpoint_), std::move(stream.socket), peer_.credits,
                        peer_.buffer_size, topts, metrics, std::move(keep_alive),
                        std::move(binding), peer_.srq, factory_->shared_setup_thread()));
}

}  // namespace rrpc::rdma
