// How the software backend models a host's RDMA ports (SoftDeviceOptions::devices): the scan
// that picks the port a device opens on, the GID entries of a port's IP addresses, and the
// routes from those address GIDs to the device holding them (the device's own GIDs carry its
// socket's name; an address GID does not, so devices of this process register theirs here).
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "rpc/rdma/verbs_types.h"
#include "rrpc/rpc/rdma.h"
#include "rrpc/util/sockaddr.h"
#include "rrpc/util/status.h"

namespace rrpc::rdma::soft {

// The port a software device opens on.
struct SoftPortChoice {
  std::string device;
  int port = 1;
  std::vector<std::string> addresses;
};

// Scans options.devices as the libibverbs backend scans a host (gid_choice.h, ChoosePort): an
// ACTIVE port, the one holding `local`'s address first. With no devices listed: options.name,
// port 1, no addresses. NotFound (saying what each port was) when no port is ACTIVE.
Result<SoftPortChoice> ChooseSoftPort(const SoftDeviceOptions& options, const Sockaddr& local);

// Appends a RoCE v1 and a RoCE v2 entry per address (IPv4-mapped for IPv4), indexed after the
// table's last entry. InvalidArgument for an address that does not parse.
Status AppendAddressGids(const std::vector<std::string>& addresses, std::vector<GidEntry>* table);

// The address GIDs of `table` (neither link-local nor `own`) route to the device whose own GID
// is `own`, until ReleaseAddressGids(own). AlreadyPresent when another live device holds one.
Status ClaimAddressGids(const std::vector<GidEntry>& table, const Gid& own);
void ReleaseAddressGids(const Gid& own);
// The own GID of the device holding address GID `gid`; false when none does.
bool RouteOfAddressGid(const Gid& gid, Gid* own);

}  // namespace rrpc::rdma::soft
