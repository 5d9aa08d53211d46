// MessengerOptions from command-line flags, for binaries (rpc-bench, servers). Libraries take
// MessengerOptions directly; only program edges read flags.
//
//   MessengerOptions opts = MessengerOptionsFromFlags("kv-server");
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/messenger_options.h"

namespace rrpc::rpc {

// The options, with every --rpc_* flag applied over the defaults. A file a flag names that cannot
// be read (authorization, token) ends the program with a message saying which.
MessengerOptions MessengerOptionsFromFlags(std::string name);
// Just the security flags (security_flags.cc: --rpc_certificate_file, --rpc_encryption...), for
// client binaries that build their messenger options another way.
SecurityOptions SecurityOptionsFromFlags();
// The --rpc_authorization_file policy; nullptr when the flag is empty.
std::shared_ptr<const Authorizer> AuthorizerFromFlags();

}  // namespace rrpc::rpc
