// Which entry of a port's GID table a connection uses (docs/rdma.md, "Running on real
// hardware", GIDs). A RoCE port's table holds, per IP address of its netdev, one RoCE v1 and one
// RoCE v2 entry, and mlx5 lists the IPv6 link-local ones first: "the first v2 entry" is then
// the link-local one, which routes nowhere beyond the L2 segment, and index 0 is RoCE v1. So:
//  - InfiniBand (every entry of type kIb): the first non-zero entry (its link-local prefix is
//    the subnet's, as IB GIDs are);
//  - RoCE: a v2 entry holding the local address (IPv4-mapped ::ffff:a.b.c.d, or the IPv6
//    address itself) when one is given; else the first v2 entry that is neither zero nor
//    link-local (fe80::/10), IPv4-mapped ones first; then the same for v1; link-local entries
//    only when nothing else is there (v2 before v1).
// Each connection chooses again by its bootstrap socket's local address (ConnectionGid), so a
// port with several addresses uses, per connection, the one its TCP bootstrap went over; and
// the device's port is chosen at open among all devices and ports (ChoosePort).
// Pure functions (but LocalInterfaceIndex, which reads the host's interfaces): thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rpc/rdma/verbs.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rdma {

bool GidIsZero(const Gid& gid);
bool GidIsLinkLocal(const Gid& gid);
bool GidIsIpv4Mapped(const Gid& gid);
// The GID an address maps to (IPv4-mapped for IPv4); false for another family.
bool GidOfAddress(const Sockaddr& address, Gid* gid);

// `local`: the address the connection's bootstrap socket is bound to, or an unset Sockaddr
// (family 0) when unknown. `local_ifindex`: the interface that address is on (0: unknown); when
// no entry holds the address itself, the entries of that netdev (GidEntry::ndev_ifindex) are
// ranked first. NotFound when the table has no usable (non-zero) entry.
Result<GidEntry> ChooseGid(const std::vector<GidEntry>& table, const Sockaddr& local,
                           uint32_t local_ifindex = 0);

// The GID one connection uses on `port`: the pinned entry when the user set one
// (PortInfo::gid_pinned); else ChooseGid on the port's table; else the port's default.
GidEntry ConnectionGid(const PortInfo& port, const Sockaddr& local, uint32_t local_ifindex = 0);

// Whether `table` holds a RoCE v2 entry of `local`'s address (then the interface need not be
// looked up: ChooseGid takes that entry).
bool TableHoldsAddress(const std::vector<GidEntry>& table, const Sockaddr& local);

// The interface `local`'s address is assigned to (getifaddrs, if_nametoindex); 0 when none is
// or the address is unset. Reads the host's interfaces: a few tens of microseconds.
uint32_t LocalInterfaceIndex(const Sockaddr& local);

// A port as the device scan sees it (every device, every port).
struct PortCandidate {
  std::string device;
  int port = 1;
  bool active = false;          // IBV_PORT_ACTIVE
  std::vector<GidEntry> table;  // its non-zero GID entries
};
// Which candidate to open: an ACTIVE port with a usable GID, preferring one holding `local`'s
// address (a v2 entry of it), then one on `local_ifindex`'s netdev, then the first. NotFound,
// listing what each port was (DOWN, no GID), when none qualifies.
Result<size_t> ChoosePort(const std::vector<PortCandidate>& ports, const Sockaddr& local,
                          uint32_t local_ifindex = 0);

}  // namespace rrpc::rdma
