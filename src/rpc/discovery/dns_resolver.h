// The dns:// resolvers, on c-ares:
//   dns:///name:port                 A and AAAA records of name, each with port
//   dns://server:53/name:port        the same, asking that DNS server (host:port) only
//   dns+srv:///_service._proto.name  SRV records, then A/AAAA of each target, with its port
// The set is resolved again at the shortest record TTL (at least min_refresh, at most
// refresh_interval). A failed lookup (timeout, no such name, no address) gives an error update
// and is retried with backoff; the receiver keeps its last good set.
//
// Thread safety: as Resolver. Lookups run on the resolver's own thread, which also runs the
// listener (the first set comes from there too, as soon as it is known).
#pragma once

#include <memory>
#include <string>

#include "rrpc/rpc/discovery/resolver.h"
#include "rrpc/util/monotime.h"

namespace rrpc::rpc {

struct DnsResolverOptions {
  // Longest time between two lookups of a name whose records live longer.
  MonoDelta refresh_interval = MonoDelta::FromSeconds(30);
  // Shortest time between two lookups, whatever the TTL says (0-TTL records).
  MonoDelta min_refresh = MonoDelta::FromSeconds(1);
  // One DNS query's timeout (c-ares retries it twice per server).
  MonoDelta query_timeout = MonoDelta::FromSeconds(2);
};

// `target` is the whole target, `rest` what follows "dns://" or "dns+srv://" (the authority, a
// '/', the name), `srv` whether SRV records are looked up. InvalidArgument when malformed.
Result<std::unique_ptr<Resolver>> NewDnsResolver(const std::string& target, const std::string& rest,
                                                 bool srv, DnsResolverOptions options = {});

}  // namespace rrpc::rpc
