#include "rpc/rdma/bootstrap/bootstrap.h"

#include <cstring>

namespace rrpc::rdma {
namespace {

void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}
void Put64(uint8_t* p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v >> 32));
  Put32(p + 4, static_cast<uint32_t>(v));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>((p[0] << 8) | p[1]); }
uint32_t Get32(const uint8_t* p) { return (uint32_t{Get16(p)} << 16) | Get16(p + 2); }
uint64_t Get64(const uint8_t* p) { return (uint64_t{Get32(p)} << 32) | Get32(p + 4); }

constexpr uint8_t kFlagFallback = 1;
constexpr uint8_t kFlagSrq = 2;

}  // namespace

const char* FallbackReasonName(FallbackReason reason) {
  switch (reason) {
    case FallbackReason::kNone:
      return "none";
    case FallbackReason::kDisabled:
      return "disabled";
    case FallbackReason::kNoDevice:
      return "no_device";
    case FallbackReason::kResources:
      return "resources";
    case FallbackReason::kBadMessage:
      return "bad_message";
    case FallbackReason::kIncompatible:
      return "incompatible";
    case FallbackReason::kNonce:
      return "nonce";
    case FallbackReason::kConnect:
      return "connect";
    case FallbackReason::kPath:
      return "path";
    case FallbackReason::kGidType:
      return "gid_type";
  }
  return "unknown";
}

std::string EncodeBootstrap(const BootstrapMessage& m) {
  uint8_t b[kBootstrapSize] = {};
  b[0] = m.version;
  b[1] = static_cast<uint8_t>((m.fallback ? kFlagFallback : 0) | (m.srq ? kFlagSrq : 0));
  Put16(b + 2, static_cast<uint16_t>(m.reason));
  Put32(b + 4, m.qp.qp_num);
  Put16(b + 8, m.qp.lid);
  b[10] = static_cast<uint8_t>(m.backend);
  b[11] = static_cast<uint8_t>(m.gid_type);
  memcpy(b + 12, m.qp.gid.data(), 16);
  Put32(b + 28, m.qp.psn);
  Put32(b + 32, m.path_mtu);
  Put32(b + 36, m.buffer_size);
  Put32(b + 40, m.credits);
  Put32(b + 44, m.send_queue_depth);
  Put32(b + 48, m.inline_cap);
  Put64(b + 52, m.nonce);
  Put32(b + 60, m.probe_qp);
  return std::string(reinterpret_cast<const char*>(b), sizeof(b));
}

Status DecodeBootstrap(Slice bytes, BootstrapMessage* m) {
  if (bytes.size() < 1) return Status::Corruption("empty RDMA bootstrap message");
  const uint8_t* b = bytes.data();
  if (b[0] != kBootstrapVersion) {
    return Status::NotSupported("RDMA bootstrap version " + std::to_string(b[0]));
  }
  if (bytes.size() != kBootstrapSize) {
    return Status::Corruption("RDMA bootstrap message of " + std::to_string(bytes.size()) +
                              " bytes, version 1 has 64");
  }
  // Version 1 defines every bit: anything else is a broken or foreign peer, refused rather than
  // half understood (and so every accepted message encodes back to the same bytes).
  if ((b[1] & ~(kFlagFallback | kFlagSrq)) != 0) {
    return Status::Corruption("RDMA bootstrap message with unknown flags " + std::to_string(b[1]));
  }
  if (Get16(b + 2) > static_cast<uint16_t>(FallbackReason::kGidType)) {
    return Status::Corruption("RDMA bootstrap message with unknown fallback reason " +
                              std::to_string(Get16(b + 2)));
  }
  if (b[10] > static_cast<uint8_t>(BootstrapBackend::kSoft)) {
    return Status::Corruption("RDMA bootstrap message with unknown backend " +
                              std::to_string(b[10]));
  }
  if (b[11] > static_cast<uint8_t>(GidType::kRoceV2)) {
    return Status::Corruption("RDMA bootstrap message with unknown GID type " +
                              std::to_string(b[11]));
  }
  m->version = b[0];
  m->fallback = (b[1] & kFlagFallback) != 0;
  m->srq = (b[1] & kFlagSrq) != 0;
  m->reason = static_cast<FallbackReason>(Get16(b + 2));
  m->qp.qp_num = Get32(b + 4);
  m->qp.lid = Get16(b + 8);
  m->backend = static_cast<BootstrapBackend>(b[10]);
  m->gid_type = static_cast<GidType>(b[11]);
  memcpy(m->qp.gid.data(), b + 12, 16);
  m->qp.psn = Get32(b + 28);
  m->path_mtu = Get32(b + 32);
  m->buffer_size = Get32(b + 36);
  m->credits = Get32(b + 40);
  m->send_queue_depth = Get32(b + 44);
  m->inline_cap = Get32(b + 48);
  m->nonce = Get64(b + 52);
  m->probe_qp = Get32(b + 60);
  return Status::OK();
}

}  // namespace rrpc::rdma
