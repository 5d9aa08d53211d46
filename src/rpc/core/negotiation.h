// Negotiation: what happens on a new connection between its first byte and its first call
// (docs/wire-format.md, sections 1 and 4). The server checks the preamble and answers the
// client's NegotiatePB; the client sends the preamble and its NegotiatePB and reads the reply.
// Each side is a small state machine that a Connection owns while it negotiates and drives from
// its reactor thread (bytes in through OnPreamble/OnFrame, bytes out through the host), so no
// thread ever blocks on a handshake; the connection bounds the whole by negotiation_timeout.
// This is where the steps that change a connection live: TLS (the server tells a ClientHello
// from the preamble by the first bytes), authentication, the RDMA bootstrap
// (NegotiationHost::UpgradeTransport hands the stream to a new transport).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "rpc/core/constants.h"
#include "rpc/transport/transport.h"
#include "rrpc/rpc/authorization.h"
#include "rrpc/rpc/rpc_header.pb.h"
#include "rrpc/util/block.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {

// The connection, as its negotiation sees it. Reactor thread.
class NegotiationHost {
 public:
  virtual const Sockaddr& remote() const = 0;
  // Queues connection-level bytes (preamble, negotiation frames) and writes them now.
  virtual void SendConnectionBytes(BlockSlice bytes) = 0;
  // What the connection's transport allows (e.g. whether calls may follow the hello).
  virtual TransportCapabilities transport_capabilities() const = 0;
  // Whether the transport is encrypted and whose certificate it verified.
  virtual TransportSecurity transport_security() const = 0;
  // The transport upgrade this side offers or accepts after negotiating, nullptr for none.
  virtual std::unique_ptr<TransportUpgrade> NewTransportUpgrade() = 0;
  // What an upgrade's Prepare calls when its work is done (any thread, once): has the reactor
  // call the negotiation's Resume() while the connection still negotiates, and does nothing
  // after. nullptr (the default): upgrades run their steps on the reactor unprepared.
  virtual std::function<void()> NegotiationResumer() { return nullptr; }

 protected:
  ~NegotiationHost() = default;
};

// What both sides agreed on; the open connection keeps it.
struct NegotiatedPeer {
  std::vector<RpcFeatureFlag> features;  // supported by both sides
  std::string client_name;               // server side: what the client called itself
  // Server side: who the client is (certificate or token) and whether it came over TLS. Client
  // side: the user the server says we authenticated as.
  CallerIdentity identity;
  // Set when both sides agreed to continue over another transport (the RDMA bootstrap): the
  // connection hands its stream to it (Connection::UpgradeTransport) as it opens.
  std::unique_ptr<TransportUpgrade> upgrade;
};

class MessengerSecurity;

// Server side: preamble, then the client's negotiation request.
class ServerNegotiation {
 public:
  // `security`: the messenger's; nullptr allows plaintext and no authentication.
  // `tracks_results`: the messenger keeps results of tracked calls, so it accepts EXACTLY_ONCE.
  ServerNegotiation(NegotiationHost* host, const MessengerSecurity* security,
                    bool tracks_results = false)
      : host_(host), security_(security), tracks_results_(tracks_results) {}

  enum class Next {
    kFrames,    // a good rrpc preamble: the negotiation request follows
    kStartTls,  // a TLS ClientHello: the connection switches to TLS (the preamble bytes are the
                // ClientHello's first) and expects the preamble again inside it
  };
  // The connection's first kPreambleSize bytes (and again inside TLS). On error the refusal has
  // been sent; the connection must close.
  Result<Next> OnPreamble(Slice preamble);
  // A frame before the connection is open: true when negotiation is done (the connection
  // opens; the reply has been sent), false when more frames are needed. On error the refusal
  // has been sent; the connection must close.
  Result<bool> OnFrame(Slice frame);
  // The upgrade's Prepare is done (NegotiationHost::NegotiationResumer): sends the reply and the
  // answer held for it. As OnFrame.
  Result<bool> Resume();
  NegotiatedPeer& peer() { return peer_; }

 private:
  // Sends the reply (and the upgrade's answer to `offer`, when the client made one), unless the
  // upgrade prepares first (then Resume sends them). true when negotiation is done; false when
  // the upgrade prepares or awaits the client's confirmation.
  bool Reply(const NegotiatePB& request, const Slice* offer);
  // The reply and the answer, `upgrade` prepared (or needing no preparation).
  bool Finish(const NegotiatePB& request, const Slice* offer,
              std::unique_ptr<TransportUpgrade> upgrade);
  // Answers with an ErrorStatusPB carrying `code` and `error`'s message.
  void Refuse(const Status& error, ErrorStatusPB::RpcErrorCodePB code);
  // Who the client is, from its certificate or token; an error (refused already) when it does
  // not meet rpc_authentication.
  Status Authenticate(const NegotiatePB& request);

  NegotiationHost* const host_;
  const MessengerSecurity* const security_;
  const bool tracks_results_;
  NegotiatedPeer peer_;
  // The request, kept while the client's bootstrap frame is still to come.
  std::unique_ptr<NegotiatePB> awaiting_offer_;
  // The upgrade, kept while the client's confirmation (a third bootstrap frame) is to come.
  std::unique_ptr<TransportUpgrade> awaiting_confirmation_;
  // The request, the client's offer and the upgrade, kept while the upgrade prepares.
  struct Preparing {
    std::unique_ptr<NegotiatePB> request;
    std::string offer;
    std::unique_ptr<TransportUpgrade> upgrade;
  };
  std::unique_ptr<Preparing> preparing_;
};

// Client side: sends the preamble and the request, then reads the server's reply.
class ClientNegotiation {
 public:
  // `auth_token`: sent when not empty and the transport is encrypted (never in plaintext).
  ClientNegotiation(NegotiationHost* host, std::string client_name, std::string auth_token)
      : host_(host), client_name_(std::move(client_name)), auth_token_(std::move(auth_token)) {}

  // The transport is connected: sends the preamble and the negotiation request. Returns whether
  // calls may be sent right behind them (nothing the reply says can change how they travel) or
  // must wait for the reply.
  bool Start();
  // A frame before the connection is open: true when negotiation is done, false when more
  // frames are needed, an error (the server's refusal, or a bad reply) to close.
  Result<bool> OnFrame(Slice frame);
  // The upgrade's Prepare is done: sends its offer; or its PrepareAccept is done: accepts the
  // server's answer (and sends the confirmation). As OnFrame.
  Result<bool> Resume();
  NegotiatedPeer& peer() { return peer_; }

 private:
  // Accepts the server's bootstrap answer (the upgrade prepared for it, or needing no
  // preparation) and sends the confirmation it asks for. true: negotiation is done.
  Result<bool> FinishAccept(Slice answer);

  NegotiationHost* const host_;
  const std::string client_name_;
  const std::string auth_token_;
  NegotiatedPeer peer_;
  std::unique_ptr<TransportUpgrade> upgrade_;  // offered, until answered
  bool awaiting_answer_ = false;               // the reply came; the bootstrap answer is next
  bool preparing_ = false;                     // the offer waits for the upgrade's Prepare
  // The server's answer, kept while the upgrade's PrepareAccept runs (calls wait meanwhile).
  std::string accepting_;
  bool answer_prepared_ = false;  // accepting_ holds the answer, Resume accepts it
};

// The wire messages, for the state machines above and for tests that speak the protocol by hand.
// The client's first bytes: preamble then a framed NegotiatePB request (with a token when not
// empty; offering a transport upgrade when asked; offering CANCELLATION unless told not to, as a
// client older than it would).
// `upgrade_features`: the upgrade's own (TransportUpgrade::Features), listed with it.
BlockSlice BuildClientHello(const std::string& client_name, const std::string& auth_token = "",
                            bool offer_upgrade = false, bool offer_cancellation = true,
                            const std::vector<int>& upgrade_features = {});
// A bootstrap frame (call id kBootstrapCallId) carrying `message` as its raw body; a request
// header from the client, a response header from the server.
BlockSlice BuildBootstrapFrame(Slice message, bool from_server);
// The raw body of a bootstrap frame.
Status ParseBootstrapFrame(Slice frame, bool from_server, Slice* message);
// Checks the preamble bytes; InvalidArgument (bad magic) or NotSupported (bad version).
Status CheckPreamble(Slice preamble);
// The server's framed answer to the client's NegotiatePB; an ErrorStatusPB when `error` is set.
// `upgrade`: the server accepts the client's transport upgrade (its bootstrap answer follows);
// `upgrade_features`: the upgrade's features the client listed (echoed with it).
BlockSlice BuildServerReply(const NegotiatePB& request, const Status& error,
                            ErrorStatusPB::RpcErrorCodePB code,
                            const NegotiatedPeer* peer = nullptr, bool upgrade = false,
                            const std::vector<int>& upgrade_features = {});
// Server: parses the client's negotiation frame.
Status ParseClientNegotiation(Slice frame, NegotiatePB* request);
// Client: parses the server's reply; the server's error as a status.
Status ParseServerReply(Slice frame, NegotiatePB* reply);

}  // namespace rrpc::rpc
