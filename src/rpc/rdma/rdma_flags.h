// RDMA settings from command-line flags, for binaries (rpc-bench, servers built on ServerBase).
// Libraries take RdmaOptions (rdma_factory.h); only binaries read flags.
#pragma once

#include "rpc/rdma/rdma_factory.h"

namespace rrpc::rdma {

// --rdma_backend, --rdma_device, --rdma_port, --rdma_gid_index, --rdma_inline, ...
// InvalidArgument on a bad value.
Result<RdmaOptions> RdmaOptionsFromFlags();

}  // namespace rrpc::rdma
