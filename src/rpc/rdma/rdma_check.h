// rdma-check: what a user with an RDMA NIC runs first (rpc-bench --mode=rdma-check). It lists
// the devices, ports, states, GIDs with their types and MTUs libibverbs sees, the locked-memory
// limit against what a connection pins, then opens the device the options select and sends one
// message between two of its queue pairs (a loopback round trip). Without a device it says so
// plainly. With the software backend only the limit and the loopback apply.
// Any thread; blocks for the loopback (bounded).
#pragma once

#include <string>

#include "rpc/rdma/rdma_factory.h"

namespace rrpc::rdma {

struct RdmaCheckResult {
  bool ok = false;     // the loopback round trip worked
  std::string report;  // for people, one finding per line
};

RdmaCheckResult RunRdmaCheck(const RdmaOptions& options);

}  // namespace rrpc::rdma
