// The list:// resolver: a fixed set of addresses, given in the target itself.
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/discovery/resolver.h"

namespace rrpc::rpc {

// `target` is the whole target ("list://a:1,b:2"), `list` what follows "list://". Fails with
// InvalidArgument on an empty list or an entry that is not host:port. Host names are resolved
// (getaddrinfo, first address) at Start; one that does not resolve gives an error update.
Result<std::unique_ptr<Resolver>> NewListResolver(const std::string& target,
                                                  const std::string& list);

}  // namespace rrpc::rpc
