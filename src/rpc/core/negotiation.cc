#include "rpc/core/negotiation.h"

#include <cstring>
#include <limits>

#include "rpc/core/constants.h"
#include "rpc/core/wire_codec.h"

namespace rrpc::rpc {

namespace {
constexpr size_t kNoLimit = std::numeric_limits<uint32_t>::max();
}

BlockSlice BuildClientHello(const std::string& client_name) {
  RequestHeader header;
  header.set_call_id(kNegotiateCallId);
  NegotiatePB negotiate;
  negotiate.set_step(NegotiatePB::NEGOTIATE);
  negotiate.add_supported_features(SIDECARS);
  negotiate.set_client_name(client_name);
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
                            ErrorStatusPB::RpcErrorCodePB code) {
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

Status ServerNegotiation::OnPreamble(Slice preamble) {
  Status s = CheckPreamble(preamble);
  if (!s.ok()) {
    Refuse(s, s.IsNotSupported() ? ErrorStatusPB::FATAL_VERSION_MISMATCH
                                 : ErrorStatusPB::FATAL_INVALID_FRAME);
  }
  return s;
}

Result<bool> ServerNegotiation::OnFrame(Slice frame) {
  NegotiatePB request;
  Status s = ParseClientNegotiation(frame, &request);
  if (!s.ok()) {
    Refuse(s, ErrorStatusPB::FATAL_INVALID_FRAME);
    return s;
  }
  for (int f : request.supported_features()) {
    if (f == SIDECARS) peer_.features.push_back(SIDECARS);
  }
  peer_.client_name = request.client_name();
  host_->SendConnectionBytes(BuildServerReply(request, Status::OK(), {}));
  return true;
}

void ServerNegotiation::Refuse(const Status& error, ErrorStatusPB::RpcErrorCodePB code) {
  host_->SendConnectionBytes(BuildServerReply(NegotiatePB(), error, code));
}

// ---- Client side.

bool ClientNegotiation::Start() {
  host_->SendConnectionBytes(BuildClientHello(client_name_));
  return host_->transport_capabilities().calls_may_follow_hello;
}

Result<bool> ClientNegotiation::OnFrame(Slice frame) {
  NegotiatePB reply;
  RRPC_RETURN_NOT_OK(ParseServerReply(frame, &reply));
  for (int f : reply.supported_features()) {
    if (f == SIDECARS) peer_.features.push_back(SIDECARS);
  }
  return true;
}

}  // namespace rrpc::rpc
