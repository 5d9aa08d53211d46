// MessengerOptions from command-line flags, for binaries (rpc-bench, servers). Libraries take
// MessengerOptions directly; only program edges read flags.
//
//   MessengerOptions opts = MessengerOptionsFromFlags("kv-server");
#pragma once

#include <string>

#include "rpc/messenger_options.h"

namespace rrpc::rpc {

// The options, with every --rpc_* flag applied over the defaults.
MessengerOptions MessengerOptionsFromFlags(std::string name);

}  // namespace rrpc::rpc
