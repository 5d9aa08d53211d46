#include "rpc/rdma/bootstrap/gid_choice.h"

#include <ifaddrs.h>
#include <net/if.h>
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

Result<GidEntry> ChooseGid(const std::vector<GidEntry>& table, const Sockaddr& local,
                           uint32_t local_ifindex) {
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
  // v1 link-local; entries of the bootstrap's netdev before all others; the first entry of the
  // best rank.
  auto rank = [local_ifindex](const GidEntry& e) {
    if (e.type == GidType::kIb || GidIsZero(e.gid)) return 99;
    const int v1 = e.type == GidType::kRoceV1 ? 1 : 0;
    const int other_netdev = local_ifindex != 0 && e.ndev_ifindex != local_ifindex ? 10 : 0;
    if (GidIsLinkLocal(e.gid)) return other_netdev + 4 + v1;
    return other_netdev + 2 * v1 + (GidIsIpv4Mapped(e.gid) ? 0 : 1);
  };
  const GidEntry* best = nullptr;
  for (const GidEntry& e : table) {
    if (rank(e) < 99 && (best == nullptr || rank(e) < rank(*best))) best = &e;
  }
  return *best;
}

GidEntry ConnectionGid(const PortInfo& port, const Sockaddr& local, uint32_t local_ifindex) {
  GidEntry fallback;
  fallback.index = port.gid_index;
  fallback.gid = port.gid;
  fallback.type = port.gid_type;
  if (port.gid_pinned) return fallback;
  Result<GidEntry> e = ChooseGid(port.gid_table, local, local_ifindex);
  return e.ok() ? *e : fallback;
}

bool TableHoldsAddress(const std::vector<GidEntry>& table, const Sockaddr& local) {
  Gid mine{};
  if (!GidOfAddress(local, &mine)) return false;
  for (const GidEntry& e : table) {
    if (e.type == GidType::kRoceV2 && e.gid == mine) return true;
  }
  return false;
}

uint32_t LocalInterfaceIndex(const Sockaddr& local) {
  Gid mine{};
  if (!GidOfAddress(local, &mine)) return 0;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return 0;
  uint32_t index = 0;
  for (ifaddrs* i = list; i != nullptr && index == 0; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != local.family()) continue;
    Gid theirs{};
    const socklen_t len =
        i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (!GidOfAddress(Sockaddr::FromRaw(i->ifa_addr, len), &theirs) || theirs != mine) continue;
    index = if_nametoindex(i->ifa_name);
  }
  freeifaddrs(list);
  return index;
}

Result<size_t> ChoosePort(const std::vector<PortCandidate>& ports, const Sockaddr& local,
                          uint32_t local_ifindex) {
  std::string tried;
  size_t first = ports.size(), on_netdev = ports.size();
  for (size_t i = 0; i < ports.size(); ++i) {
    const PortCandidate& p = ports[i];
    const std::string name = p.device + " port " + std::to_string(p.port);
    if (!p.active) {
      tried += name + ": not active; ";
      continue;
    }
    if (!ChooseGid(p.table, Sockaddr()).ok()) {
      tried += name + ": no usable GID; ";
      continue;
    }
    if (TableHoldsAddress(p.table, local)) return i;
    if (first == ports.size()) first = i;
    if (local_ifindex != 0 && on_netdev == ports.size()) {
      for (const GidEntry& e : p.table) {
        if (e.ndev_ifindex == local_ifindex) on_netdev = i;
      }
    }
  }
  if (on_netdev < ports.size()) return on_netdev;
  if (first < ports.size()) return first;
  if (ports.empty()) return Status::NotFound("no RDMA port");
  return Status::NotFound("no active RDMA port with a usable GID", tried);
}

}  // namespace rrpc::rdma
