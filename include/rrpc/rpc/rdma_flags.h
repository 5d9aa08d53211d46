// RDMA settings from command-line flags (rdma_flags.cc), for binaries: servers built on
// ServerBase (ServerBaseOptions::FromFlags reads them), their clients and tools. Libraries take
// RdmaOptions (rrpc/rpc/rdma.h); only binaries read flags.
#pragma once

#include <optional>
#include <string>

#include "rrpc/rpc/rdma.h"
#include "rrpc/util/status.h"

namespace rrpc::rpc {
struct MessengerOptions;
}  // namespace rrpc::rpc

namespace rrpc::rdma {

// --rdma_backend, --rdma_device, --rdma_port, --rdma_gid_index, --rdma_use_srq, ...
// InvalidArgument on a bad value.
Result<RdmaOptions> RdmaOptionsFromFlags();

// The same when --rdma is set; nullopt (TCP only) when it is not.
Result<std::optional<RdmaOptions>> RdmaOptionsIfEnabledFromFlags();

// A client tool's messenger (kv-cli, kv-bench, rrpc-cli): with --rdma, sets
// options->transport_factory to an RDMA one, or, when the backend finds no device
// (ProbeRdmaDevice), leaves it on TCP after one line on stderr naming `who` and why.
// InvalidArgument on a bad flag value. The thread parsing flags, once.
Status UseRdmaFromFlags(const std::string& who, rpc::MessengerOptions* options);

}  // namespace rrpc::rdma
