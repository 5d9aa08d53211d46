#include "rrpc/rpc/rdma/gid_choice.h"

#include <netinet/in.h>

#include <cstring>

namespace rrpc::rdma {

bool GidIsZero(const Gid& gid) {
  for (uint8_t b : gid) {
    if (b != 0) return false;
  }
  return true;
}

bool GidIsLinkLocal(const Gid& gid) { return gid[0] == 0xfe && (gid[1] & 0xc0) == 0x80; }

bool GidIsIpv4Mapped(const Gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(gid.data(), kPrefix, sizeof(kPrefix)) == 0;
}

bool GidOfAddress(const Sockaddr& address, Gid* gid) {
  if (address.family() == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(address.addr());
    gid->fill(0);
    (*gid)[10] = 0xff;
    (*gid)[11] = 0xff;
    memcpy(gid->data() + 12, &in->sin_addr, 4);
    return true;
  }
  if (address.family() == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(address.addr());
    memcpy(gid->data(), &in6->sin6_addr, 16);
    return true;
  }
  return false;
}

Result<GidEntry> ChooseGid(const std::vector<GidEntry>& table, const Sockaddr& local) {
  const GidEntry* first_ib = nullptr;
  for (const GidEntry& e : table) {
    if (e.type == GidType::kIb && !GidIsZero(e.gid)) {
      first_ib = &e;
      break;
    }
  }
  bool roce = false;
  for (const GidEntry& e : table) roce |= e.type != GidType::kIb && !GidIsZero(e.gid);
  if (!roce) {
    if (first_ib != nullptr) return *first_ib;
    return Status::NotFound("the port's GID table has no usable entry");
  }
  Gid mine{};
  if (GidOfAddress(local, &mine)) {
    for (const GidEntry& e : table) {
      if (e.type == GidType::kRoceV2 && e.gid == mine) return e;
    }
  }
  // Ranked: v2 IPv4-mapped, v2 other global, v1 IPv4-mapped, v1 other global, v2 link-local,
  // v1 link-local; the first entry of the best rank.
  auto rank = [](const GidEntry& e) {
    if (e.type == GidType::kIb || GidIsZero(e.gid)) return 99;
    const int v1 = e.type == GidType::kRoceV1 ? 1 : 0;
    if (GidIsLinkLocal(e.gid)) return 4 + v1;
    return 2 * v1 + (GidIsIpv4Mapped(e.gid) ? 0 : 1);
  };
  const GidEntry* best = nullptr;
  for (const GidEntry& e : table) {
    if (rank(e) < 99 && (best == nullptr || rank(e) < rank(*best))) best = &e;
  }
  return *best;
}

}  // namespace rrpc::rdma
