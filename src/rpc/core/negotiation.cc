#include "rpc/core/negotiation.h"

#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "rpc/core/constants.h"
#include "rpc/core/messenger_security.h"
#include "rpc/core/wire_codec.h"
#include "rpc/transport/tls_transport.h"

namespace rrpc::rpc {

namespace {
constexpr size_t kNoLimit = std::numeric_limits<uint32_t>::max();
}

BlockSlice BuildClientHello(const std::string& client_name, const std::string& auth_token,
                            bool offer_upgrade, bool offer_cancellation,
                            const std::vector<int>& upgrade_features) {
  RequestHeader header;
  header.set_call_id(kNegotiateCallId);
  NegotiatePB negotiate;
  negotiate.set_step(NegotiatePB::NEGOTIATE);
  negotiate.add_supported_features(SIDECARS);
  negotiate.add_supported_features(EXACTLY_ONCE);  // answered by servers that track results
  negotiate.add_supported_features(TRACE_CONTEXT);
  negotiate.add_supported_features(STREAMS);
  negotiate.add_supported_features(COMPRESSION);
  if (offer_upgrade) {
    negotiate.add_supported_features(TRANSPORT_UPGRADE);
    for (int f : upgrade_features) negotiate.add_supported_features(static_cast<RpcFeatureFlag>(f));
  }
  if (offer_cancellation) negotiate.add_supported_features(CANCELLATION);
  negotiate.set_client_name(client_name);
  if (!auth_token.empty()) negotiate.set_auth_token(auth_token);
  BlockSlice frame = SerializeFrameHead(header, negotiate, 0, kNoLimit).value();
  // One block for preamble + frame, so both leave in one write.
  BlockRef block = Block::Allocate(kPreambleSize + frame.slice.size());
  uint8_t* p = block->data();
  memcpy(p, kMagic, sizeof(kMagic));
  p[4] = kWireVersion;
  p[5] = 0;  // flags, none defined yet
  memcpy(p + kPreambleSize, frame.slice.data(), frame.slice.size());
  Slice bytes(block->data(), block->capacity());
  return BlockSlice{std::move(block), bytes};
}

BlockSlice BuildBootstrapFrame(Slice message, bool from_server) {
  using google::protobuf::io::CodedOutputStream;
  std::string header_bytes;
  if (from_server) {
    ResponseHeader header;
    header.set_call_id(kBootstrapCallId);
    header.SerializeToString(&header_bytes);
  } else {
    RequestHeader header;
    header.set_call_id(kBootstrapCallId);
    header.SerializeToString(&header_bytes);
  }
  const uint32_t hlen = static_cast<uint32_t>(header_bytes.size());
  const uint32_t mlen = static_cast<uint32_t>(message.size());
  const size_t rest =
      CodedOutputStream::VarintSize32(hlen) + hlen + CodedOutputStream::VarintSize32(mlen) + mlen;
  BlockRef block = Block::Allocate(kFrameLengthSize + rest);
  uint8_t* p = block->data();
  EncodeBigEndian32(p, static_cast<uint32_t>(rest));
  p = CodedOutputStream::WriteVarint32ToArray(hlen, p + kFrameLengthSize);
  memcpy(p, header_bytes.data(), hlen);
  p = CodedOutputStream::WriteVarint32ToArray(mlen, p + hlen);
  memcpy(p, message.data(), mlen);
  Slice bytes(block->data(), block->capacity());
  return BlockSlice{std::move(block), bytes};
}

Status ParseBootstrapFrame(Slice frame, bool from_server, Slice* message) {
  Slice tail;
  int32_t call_id;
  if (from_server) {
    ResponseHeader header;
    RRPC_RETURN_NOT_OK(ParseFrame(frame, &header, message, &tail));
    call_id = header.call_id();
  } else {
    RequestHeader header;
    RRPC_RETURN_NOT_OK(ParseFrame(frame, &header, message, &tail));
    call_id = header.call_id();
  }
  if (call_id != kBootstrapCallId) {
    return Status::InvalidArgument("expected the transport bootstrap frame, got call id " +
                                   std::to_string(call_id));
  }
  return Status::OK();
}

Status CheckPreamble(Slice preamble) {
  if (preamble.size() != kPreambleSize) {
    return Status::InvalidArgument("preamble of " + std::to_string(preamble.size()) + " bytes");
  }
  if (memcmp(preamble.data(), kMagic, sizeof(kMagic)) != 0) {
    return Status::InvalidArgument("connection does not start with the rrpc preamble");
  }
  if (preamble.data()[4] != kWireVersion) {
    return Status::NotSupported("unsupported rrpc wire version " +
                                std::to_string(preamble.data()[4]));
  }
  return Status::OK();
}

BlockSlice BuildServerReply(const NegotiatePB& request, const Status& error,
                            ErrorStatusPB::RpcErrorCodePB code, const NegotiatedPeer* peer,
                            bool upgrade, const std::vector<int>& upgrade_features) {
  ResponseHeader header;
  header.set_call_id(kNegotiateCallId);
  if (!error.ok()) {
    header.set_is_error(true);
    ErrorStatusPB pb;
    pb.set_message(error.message());
    pb.set_code(code);
    return SerializeFrameHead(header, pb, 0, kNoLimit).value();
  }
  NegotiatePB reply;
  reply.set_step(NegotiatePB::NEGOTIATE);
  for (int f : request.supported_features()) {
    if (f == SIDECARS) reply.add_supported_features(SIDECARS);
    if (f == CANCELLATION) reply.add_supported_features(CANCELLATION);
    if (f == TRACE_CONTEXT) reply.add_supported_features(TRACE_CONTEXT);
    if (f == STREAMS) reply.add_supported_features(STREAMS);
    if (f == COMPRESSION) reply.add_supported_features(COMPRESSION);
  }
  if (peer != nullptr && std::find(peer->features.begin(), peer->features.end(), EXACTLY_ONCE) !=
                             peer->features.end()) {
    reply.add_supported_features(EXACTLY_ONCE);
  }
  if (peer != nullptr && peer->identity.encrypted) reply.add_supported_features(TLS);
  if (peer != nullptr && !peer->identity.user.empty()) {
    reply.set_authenticated_user(peer->identity.user);
  }
  if (upgrade) {
    reply.add_supported_features(TRANSPORT_UPGRADE);
    for (int f : upgrade_features) reply.add_supported_features(static_cast<RpcFeatureFlag>(f));
  }
  return SerializeFrameHead(header, reply, 0, kNoLimit).value();
}

Status ParseClientNegotiation(Slice frame, NegotiatePB* request) {
  RequestHeader header;
  Slice body, tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame, &header, &body, &tail));
  if (header.call_id() != kNegotiateCallId) {
    return Status::InvalidArgument("expected a negotiation frame, got call id " +
                                   std::to_string(header.call_id()));
  }
  if (!ParseMessageQuietly(body, request) || request->step() != NegotiatePB::NEGOTIATE) {
    return Status::Corruption("negotiation request does not parse");
  }
  return Status::OK();
}

Status ParseServerReply(Slice frame, NegotiatePB* reply) {
  ResponseHeader header;
  Slice body, tail;
  RRPC_RETURN_NOT_OK(ParseFrame(frame, &header, &body, &tail));
  if (header.call_id() != kNegotiateCallId) {
    return Status::Corruption("expected the server's negotiation reply");
  }
  if (header.is_error()) {
    ErrorStatusPB error;
    if (!ParseMessageQuietly(body, &error)) {
      return Status::Corruption("negotiation error does not parse");
    }
    if (error.code() == ErrorStatusPB::ERROR_SERVER_TOO_BUSY) {
      // At its connection limit or out of descriptors: worth trying again later.
      return Status::ServiceUnavailable("server refused the connection", error.message());
    }
    return Status::NetworkError("server refused the connection", error.message());
  }
  if (!ParseMessageQuietly(body, reply)) {
    return Status::Corruption("negotiation reply does not parse");
  }
  return Status::OK();
}

// ---- Server side.

Result<ServerNegotiation::Next> ServerNegotiation::OnPreamble(Slice preamble) {
  const bool encrypted = host_->transport_security().encrypted;
  if (!encrypted && !preamble.empty() && preamble.data()[0] == kTlsHandshakeRecordType) {
    if (security_ != nullptr && security_->TlsAccepted()) return Next::kStartTls;
    // A TLS client reads an alert better than an rrpc error frame.
    BlockRef alert = Block::Allocate(sizeof(kTlsHandshakeFailureAlert));
    memcpy(alert->data(), kTlsHandshakeFailureAlert, sizeof(kTlsHandshakeFailureAlert));
    Slice bytes(alert->data(), sizeof(kTlsHandshakeFailureAlert));
    host_->SendConnectionBytes(BlockSlice{std::move(alert), bytes});
    return Status::NotSupported(
        "TLS ClientHello refused: this server does not accept TLS",
        security_ == nullptr ? "no certificate" : security_->EncryptionPolicyText());
  }
  Status s = CheckPreamble(preamble);
  if (!s.ok()) {
    Refuse(s, s.IsNotSupported() ? ErrorStatusPB::FATAL_VERSION_MISMATCH
                                 : ErrorStatusPB::FATAL_INVALID_FRAME);
    return s;
  }
  if (!encrypted && security_ != nullptr && !security_->PlaintextAllowedFrom(host_->remote())) {
    s = Status::NotSupported("this server requires TLS (" + security_->EncryptionPolicyText() +
                             "): plaintext connection refused");
    Refuse(s, ErrorStatusPB::FATAL_UNAUTHORIZED);
    return s;
  }
  return Next::kFrames;
}

Status ServerNegotiation::Authenticate(const NegotiatePB& request) {
  const TransportSecurity transport = host_->transport_security();
  CallerIdentity& id = peer_.identity;
  id.encrypted = transport.encrypted;
  const SecurityPolicy policy =
      security_ != nullptr ? security_->authentication() : SecurityPolicy::kDisabled;
  Status s;
  if (policy != SecurityPolicy::kDisabled && !transport.peer_user.empty()) {
    id.user = transport.peer_user;
    id.method = AuthMethod::kCertificate;
  } else if (request.has_auth_token() && policy != SecurityPolicy::kDisabled) {
    std::shared_ptr<const security::TokenKey> key = security_->token_key();
    if (!transport.encrypted) {
      s = Status::NotSupported("authentication token sent without TLS: refused");
    } else if (key == nullptr) {
      s = Status::NotSupported("this server accepts no authentication tokens (no token key)");
    } else {
      Result<security::TokenClaims> claims =
          key->Verify(request.auth_token(), security::UnixSecondsNow());
      if (!claims.ok()) {
        s = Status::NotSupported("invalid authentication token", claims.status().message());
      } else {
        id.user = claims->user;
        id.method = AuthMethod::kToken;
      }
    }
  }
  if (s.ok() && id.user.empty() && policy == SecurityPolicy::kRequired) {
    s = Status::NotSupported(
        "this server requires authentication (rpc_authentication=required): present a client "
        "certificate signed by its CA, or a token");
  }
  if (!s.ok()) Refuse(s, ErrorStatusPB::FATAL_UNAUTHORIZED);
  return s;
}

Result<bool> ServerNegotiation::OnFrame(Slice frame) {
  if (preparing_ != nullptr) {
    // The client sends nothing between its offer and the server's answer.
    return Status::Corruption("a frame from the client while its upgrade offer is prepared");
  }
  if (awaiting_confirmation_ != nullptr) {  // the client's confirmation of the upgrade
    Slice confirmation;
    Status s = ParseBootstrapFrame(frame, /*from_server=*/false, &confirmation);
    std::unique_ptr<TransportUpgrade> upgrade = std::move(awaiting_confirmation_);
    if (s.ok()) s = upgrade->Confirm(confirmation);
    // The reply has gone: a bad confirmation closes the connection without another.
    if (!s.ok()) return s;
    if (upgrade->agreed()) peer_.upgrade = std::move(upgrade);
    return true;
  }
  if (awaiting_offer_ != nullptr) {  // the client's bootstrap frame, right behind its request
    Slice offer;
    Status s = ParseBootstrapFrame(frame, /*from_server=*/false, &offer);
    if (!s.ok()) {
      Refuse(s, ErrorStatusPB::FATAL_INVALID_FRAME);
      return s;
    }
    std::unique_ptr<NegotiatePB> request = std::move(awaiting_offer_);
    return Reply(*request, &offer);
  }
  auto request = std::make_unique<NegotiatePB>();
  Status s = ParseClientNegotiation(frame, request.get());
  if (!s.ok()) {
    Refuse(s, ErrorStatusPB::FATAL_INVALID_FRAME);
    return s;
  }
  bool offers_upgrade = false;
  for (int f : request->supported_features()) {
    if (f == SIDECARS) peer_.features.push_back(SIDECARS);
    if (f == CANCELLATION) peer_.features.push_back(CANCELLATION);
    if (f == TRACE_CONTEXT) peer_.features.push_back(TRACE_CONTEXT);
    if (f == STREAMS) peer_.features.push_back(STREAMS);
    if (f == EXACTLY_ONCE && tracks_results_) peer_.features.push_back(EXACTLY_ONCE);
    if (f == COMPRESSION) peer_.features.push_back(COMPRESSION);
    if (f == TRANSPORT_UPGRADE) offers_upgrade = true;
  }
  peer_.client_name = request->client_name();
  RRPC_RETURN_NOT_OK(Authenticate(*request));
  if (offers_upgrade) {
    awaiting_offer_ = std::move(request);
    return false;
  }
  return Reply(*request, nullptr);
}

bool ServerNegotiation::Reply(const NegotiatePB& request, const Slice* offer) {
  // A server without an upgrade still reads the client's offer, and declines it by leaving the
  // feature out of its reply: the client then stays on TCP too.
  std::unique_ptr<TransportUpgrade> upgrade = offer ? host_->NewTransportUpgrade() : nullptr;
  if (upgrade != nullptr) {
    upgrade->PeerFeatures(
        std::vector<int>(request.supported_features().begin(), request.supported_features().end()));
    std::function<void()> resume = host_->NegotiationResumer();
    if (resume != nullptr && upgrade->Prepare(*offer, std::move(resume))) {
      preparing_ = std::make_unique<Preparing>();
      preparing_->request = std::make_unique<NegotiatePB>(request);
      preparing_->offer = offer->ToString();
      preparing_->upgrade = std::move(upgrade);
      return false;
    }
  }
  return Finish(request, offer, std::move(upgrade));
}

Result<bool> ServerNegotiation::Resume() {
  if (preparing_ == nullptr) return Status::IllegalState("no upgrade being prepared");
  std::unique_ptr<Preparing> p = std::move(preparing_);
  const Slice offer(p->offer);
  return Finish(*p->request, &offer, std::move(p->upgrade));
}

bool ServerNegotiation::Finish(const NegotiatePB& request, const Slice* offer,
                               std::unique_ptr<TransportUpgrade> upgrade) {
  std::vector<int> echoed;  // the upgrade's features the client listed
  if (upgrade != nullptr) {
    for (int f : upgrade->Features()) {
      if (std::find(request.supported_features().begin(), request.supported_features().end(), f) !=
          request.supported_features().end()) {
        echoed.push_back(f);
      }
    }
  }
  host_->SendConnectionBytes(
      BuildServerReply(request, Status::OK(), {}, &peer_, upgrade != nullptr, echoed));
  if (upgrade == nullptr) return true;
  std::string answer = upgrade->Answer(*offer);
  host_->SendConnectionBytes(BuildBootstrapFrame(answer, /*from_server=*/true));
  if (upgrade->AwaitsConfirmation()) {
    awaiting_confirmation_ = std::move(upgrade);
    return false;
  }
  if (upgrade->agreed()) peer_.upgrade = std::move(upgrade);
  return true;
}

void ServerNegotiation::Refuse(const Status& error, ErrorStatusPB::RpcErrorCodePB code) {
  host_->SendConnectionBytes(BuildServerReply(NegotiatePB(), error, code));
}

// ---- Client side.

bool ClientNegotiation::Start() {
  // A token is a bearer secret: it never travels in plaintext.
  const bool encrypted = host_->transport_security().encrypted;
  upgrade_ = host_->NewTransportUpgrade();
  host_->SendConnectionBytes(
      BuildClientHello(client_name_, encrypted ? auth_token_ : "", upgrade_ != nullptr,
                       /*offer_cancellation=*/true,
                       upgrade_ != nullptr ? upgrade_->Features() : std::vector<int>()));
  if (upgrade_ != nullptr) {
    std::function<void()> resume = host_->NegotiationResumer();
    if (resume != nullptr && upgrade_->Prepare(Slice(), std::move(resume))) {
      preparing_ = true;  // the server waits for the offer; Resume sends it
    } else {
      host_->SendConnectionBytes(BuildBootstrapFrame(upgrade_->Offer(), /*from_server=*/false));
    }
    return false;  // calls wait: the answer decides which transport carries them
  }
  return host_->transport_capabilities().calls_may_follow_hello;
}

Result<bool> ClientNegotiation::Resume() {
  if (upgrade_ == nullptr) return Status::IllegalState("no upgrade being prepared");
  if (answer_prepared_) {
    answer_prepared_ = false;
    const std::string answer = std::move(accepting_);
    accepting_.clear();
    return FinishAccept(answer);
  }
  if (!preparing_) return Status::IllegalState("no offer being prepared");
  preparing_ = false;
  host_->SendConnectionBytes(BuildBootstrapFrame(upgrade_->Offer(), /*from_server=*/false));
  return false;
}

Result<bool> ClientNegotiation::FinishAccept(Slice answer) {
  RRPC_RETURN_NOT_OK(upgrade_->Accept(answer));
  const std::string confirmation = upgrade_->Confirmation();
  if (!confirmation.empty()) {
    // Written before the connection opens: it leaves over TCP ahead of anything the upgraded
    // transport sends.
    host_->SendConnectionBytes(BuildBootstrapFrame(confirmation, /*from_server=*/false));
  }
  if (upgrade_->agreed()) peer_.upgrade = std::move(upgrade_);
  upgrade_.reset();
  return true;
}

Result<bool> ClientNegotiation::OnFrame(Slice frame) {
  if (answer_prepared_) {
    // The server sends nothing on TCP between its answer and the client's confirmation (or,
    // asking for none, ever again).
    return Status::Corruption("a frame from the server while its upgrade answer is accepted");
  }
  if (awaiting_answer_) {
    Slice answer;
    RRPC_RETURN_NOT_OK(ParseBootstrapFrame(frame, /*from_server=*/true, &answer));
    awaiting_answer_ = false;
    // Calls keep waiting (the connection is not open) until the answer is accepted.
    std::function<void()> resume = host_->NegotiationResumer();
    if (resume != nullptr && upgrade_->PrepareAccept(answer, std::move(resume))) {
      accepting_ = answer.ToString();
      answer_prepared_ = true;
      return false;
    }
    return FinishAccept(answer);
  }
  NegotiatePB reply;
  RRPC_RETURN_NOT_OK(ParseServerReply(frame, &reply));
  if (preparing_) {
    // A server answers after the offer (it reads the offer first), unless it refused (above).
    return Status::Corruption("the server replied before the client's upgrade offer");
  }
  bool server_upgrades = false;
  for (int f : reply.supported_features()) {
    if (f == SIDECARS) peer_.features.push_back(SIDECARS);
    if (f == CANCELLATION) peer_.features.push_back(CANCELLATION);
    if (f == TRACE_CONTEXT) peer_.features.push_back(TRACE_CONTEXT);
    if (f == STREAMS) peer_.features.push_back(STREAMS);
    if (f == EXACTLY_ONCE) peer_.features.push_back(EXACTLY_ONCE);
    if (f == COMPRESSION) peer_.features.push_back(COMPRESSION);
    if (f == TRANSPORT_UPGRADE) server_upgrades = true;
  }
  if (upgrade_ != nullptr) {
    if (server_upgrades) {
      upgrade_->PeerFeatures(
          std::vector<int>(reply.supported_features().begin(), reply.supported_features().end()));
      awaiting_answer_ = true;
      return false;
    }
    upgrade_->PeerDeclined();
    upgrade_.reset();
  }
  peer_.identity.user = reply.authenticated_user();
  peer_.identity.encrypted = host_->transport_security().encrypted;
  return true;
}

}  // namespace rrpc::rpc
