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
// Pure functions: thread-safe.
#pragma once

#include <vector>

#include "rrpc/rpc/rdma/verbs_types.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rdma {

bool GidIsZero(const Gid& gid);
bool GidIsLinkLocal(const Gid& gid);
bool GidIsIpv4Mapped(const Gid& gid);
// The GID an address maps to (IPv4-mapped for IPv4); false for another family.
bool GidOfAddress(const Sockaddr& address, Gid* gid);

// `local`: the address the connection's bootstrap socket is bound to, or an unset Sockaddr
// (family 0) when unknown. NotFound when the table has no usable (non-zero) entry.
Result<GidEntry> ChooseGid(const std::vector<GidEntry>& table, const Sockaddr& local);

}  // namespace rrpc::rdma
